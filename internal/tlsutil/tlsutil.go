// Package tlsutil loads mutual-TLS credentials for SWD's gRPC port and
// creates a development CA with node certificates (`swdctl certs init`).
//
// Concurrency: functions are safe for concurrent use; returned credentials
// are immutable.
package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Load reads a certificate, its key and the cluster CA, and returns server
// credentials that require a client certificate signed by the CA, and a dial
// option that presents the certificate and trusts only the CA.
func Load(certFile, keyFile, caFile string) (credentials.TransportCredentials, grpc.DialOption, error) {
	if certFile == "" || keyFile == "" || caFile == "" {
		return nil, nil, errors.New("mTLS needs all of --tls-cert, --tls-key and --tls-ca")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("load certificate %s / key %s: %w", certFile, keyFile, err)
	}
	pool, err := loadPool(caFile)
	if err != nil {
		return nil, nil, err
	}
	server := credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	})
	client := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	}))
	return server, client, nil
}

// ClientOption returns a dial option for a client (swdctl, loadgen) with its
// own certificate, trusting caFile.
func ClientOption(certFile, keyFile, caFile string) (grpc.DialOption, error) {
	_, c, err := Load(certFile, keyFile, caFile)
	return c, err
}

func loadPool(caFile string) (*x509.CertPool, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA %s: %w", caFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA %s holds no PEM certificate", caFile)
	}
	return pool, nil
}

// InitDev writes a development CA (ca.pem, ca-key.pem) and one certificate
// per name (NAME.pem, NAME-key.pem) into dir. Every certificate is valid
// for client and server use, for the names given plus localhost,
// 127.0.0.1 and ::1, for one year. Existing files are not overwritten.
func InitDev(dir string, names []string, hosts []string) ([]string, error) {
	if len(names) == 0 {
		return nil, errors.New("certs: give at least one certificate name")
	}
	seen := map[string]bool{}
	for _, name := range names {
		switch {
		case !validName.MatchString(name) || name == "." || name == "..":
			return nil, fmt.Errorf("certs: name %q: use letters, digits, '.', '_' and '-' only", name)
		case name == "ca":
			return nil, errors.New(`certs: "ca" is the CA's own file name; choose another certificate name`)
		case seen[name]:
			return nil, fmt.Errorf("certs: name %q given twice", name)
		}
		seen[name] = true
	}
	// Check every target first, so a conflict leaves nothing half-written.
	for _, name := range append([]string{"ca"}, names...) {
		for _, p := range []string{filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")} {
			if _, err := os.Stat(p); err == nil {
				return nil, fmt.Errorf("certs: %s exists; remove it or use another directory", p)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "swd development CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	var written []string
	write := func(name string, der []byte, key *ecdsa.PrivateKey) error {
		certPath := filepath.Join(dir, name+".pem")
		keyPath := filepath.Join(dir, name+"-key.pem")
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Stat(p); err == nil {
				return fmt.Errorf("certs: %s exists; remove it or use another directory", p)
			}
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			return err
		}
		written = append(written, certPath, keyPath)
		return nil
	}
	if err := write("ca", caDER, caKey); err != nil {
		return nil, err
	}
	for _, name := range names {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.AddDate(1, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			DNSNames:     []string{name, "localhost"},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		}
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			} else {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("certs: create %s: %w", name, err)
		}
		if err := write(name, der, key); err != nil {
			return nil, err
		}
	}
	return written, nil
}

var validName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}
