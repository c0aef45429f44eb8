package tlsutil_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/tlsutil"
)

// initDev creates a development CA and certificates for names in a new
// temporary directory.
func initDev(t *testing.T, names ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	_, err := tlsutil.InitDev(dir, names, nil)
	require.NoError(t, err)
	return dir
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	blk, rest := pem.Decode(b)
	require.NotNil(t, blk, "%s holds no PEM block", path)
	require.Empty(t, rest, "%s holds more than one PEM block", path)
	require.Equal(t, "CERTIFICATE", blk.Type)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	return c
}

func readKey(t *testing.T, path string) *ecdsa.PrivateKey {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	blk, _ := pem.Decode(b)
	require.NotNil(t, blk)
	require.Equal(t, "EC PRIVATE KEY", blk.Type)
	k, err := x509.ParseECPrivateKey(blk.Bytes)
	require.NoError(t, err)
	return k
}

// InitDev writes a CA and one certificate per name that chain to it, are
// valid for both server and client use, for the name, localhost, the
// loopback addresses and the extra hosts, for about a year; keys are
// private to the owner.
func TestInitDevWritesUsableCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	files, err := tlsutil.InitDev(dir, []string{"node-0", "admin"}, []string{"10.1.2.3", "swd.example"})
	require.NoError(t, err)
	want := []string{"ca.pem", "ca-key.pem", "node-0.pem", "node-0-key.pem", "admin.pem", "admin-key.pem"}
	require.Len(t, files, len(want))
	for i, f := range want {
		assert.Equal(t, filepath.Join(dir, f), files[i])
	}
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "certificate directory")
	for _, f := range want {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		perm := os.FileMode(0o644)
		if strings.HasSuffix(f, "-key.pem") {
			perm = 0o600
		}
		assert.Equal(t, perm, st.Mode().Perm(), "%s", f)
	}

	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	assert.True(t, ca.IsCA)
	assert.True(t, ca.BasicConstraintsValid)
	assert.NotZero(t, ca.KeyUsage&x509.KeyUsageCertSign)
	assert.True(t, readKey(t, filepath.Join(dir, "ca-key.pem")).PublicKey.Equal(ca.PublicKey), "CA key matches the CA")
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	serials := map[string]bool{ca.SerialNumber.String(): true}
	now := time.Now()
	for _, name := range []string{"node-0", "admin"} {
		c := readCert(t, filepath.Join(dir, name+".pem"))
		assert.False(t, c.IsCA, "%s must not be a CA", name)
		assert.Equal(t, name, c.Subject.CommonName)
		assert.False(t, serials[c.SerialNumber.String()], "serial numbers must differ")
		serials[c.SerialNumber.String()] = true
		assert.Equal(t, elliptic.P256(), c.PublicKey.(*ecdsa.PublicKey).Curve)
		assert.WithinDuration(t, now.AddDate(1, 0, 0), c.NotAfter, 48*time.Hour, "valid for about a year")
		assert.True(t, c.NotBefore.Before(now), "valid from now (with clock skew allowance)")
		_, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem"))
		require.NoError(t, err, "key matches certificate")
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			for _, host := range []string{name, "localhost", "127.0.0.1", "::1", "10.1.2.3", "swd.example"} {
				_, err := c.Verify(x509.VerifyOptions{Roots: roots, DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}})
				assert.NoError(t, err, "%s for %s, usage %v", name, host, usage)
			}
		}
		_, err = c.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example"})
		assert.Error(t, err, "%s must not be valid for a host it does not name", name)
	}
}

// InitDev refuses to start without names, and never overwrites a file.
func TestInitDevRefuses(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) // prepares dir
		names []string
	}{
		// nothing to create
		{"no names", nil, nil},
		// a CA already exists: it is kept, not replaced
		{"existing CA", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "ca.pem"), []byte("old"), 0o644))
		}, []string{"node-0"}},
		// a CA key already exists
		{"existing CA key", func(t *testing.T, dir string) {
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "ca-key.pem"), []byte("old"), 0o600))
		}, []string{"node-0"}},
		// the directory is a file
		{"directory is a file", func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(dir, []byte("old"), 0o644))
		}, []string{"node-0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "certs")
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			_, err := tlsutil.InitDev(dir, tc.names, nil)
			require.Error(t, err)
			if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
				for _, f := range []string{"ca.pem", "ca-key.pem"} {
					if b, rerr := os.ReadFile(filepath.Join(dir, f)); rerr == nil {
						assert.Equal(t, "old", string(b), "%s was overwritten", f)
					}
				}
			}
		})
	}
}

// A conflict on any certificate is found before anything is written, so a
// failed run leaves no half-made CA behind (which would make every later
// run fail on "ca.pem exists").
func TestInitDevConflictWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "node-1.pem"), []byte("old"), 0o644))
	_, err := tlsutil.InitDev(dir, []string{"node-0", "node-1"}, nil)
	require.Error(t, err)
	for _, f := range []string{"ca.pem", "ca-key.pem", "node-0.pem", "node-0-key.pem"} {
		assert.NoFileExists(t, filepath.Join(dir, f))
	}
}

// Certificate names become file names: names that would leave the
// directory, collide with the CA's files or with each other are refused.
func TestInitDevRejectsUnsafeNames(t *testing.T) {
	cases := []struct {
		name  string
		names []string
	}{
		// escapes the directory
		{"parent directory", []string{"../escape"}},
		// a sub-directory
		{"slash", []string{"a/b"}},
		// an empty name
		{"empty", []string{""}},
		// the CA's own file names
		{"ca", []string{"ca"}},
		// the same name twice
		{"duplicate", []string{"node-0", "node-0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "certs")
			_, err := tlsutil.InitDev(dir, tc.names, nil)
			assert.Error(t, err)
			assert.NoFileExists(t, filepath.Join(parent, "escape.pem"))
			assert.NoFileExists(t, filepath.Join(dir, "ca.pem"), "nothing is written for a bad name")
		})
	}
}

// Load needs all three files, each readable and valid, and a key that
// matches the certificate.
func TestLoadErrors(t *testing.T) {
	dir := initDev(t, "node-0", "node-1")
	p := func(f string) string { return filepath.Join(dir, f) }
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o644))
	cases := []struct {
		name           string
		cert, key, ca  string
		wantErrMessage string
	}{
		// each of the three flags missing
		{"no cert", "", p("node-0-key.pem"), p("ca.pem"), "--tls-cert"},
		{"no key", p("node-0.pem"), "", p("ca.pem"), "--tls-key"},
		{"no CA", p("node-0.pem"), p("node-0-key.pem"), "", "--tls-ca"},
		// files that do not exist
		{"missing cert file", p("nope.pem"), p("node-0-key.pem"), p("ca.pem"), "nope.pem"},
		{"missing CA file", p("node-0.pem"), p("node-0-key.pem"), p("nope.pem"), "nope.pem"},
		// another certificate's key
		{"mismatched key", p("node-0.pem"), p("node-1-key.pem"), p("ca.pem"), "node-0.pem"},
		// a CA file without a certificate
		{"CA not PEM", p("node-0.pem"), p("node-0-key.pem"), notPEM, "no PEM certificate"},
		// a key given as the CA
		{"CA is a key", p("node-0.pem"), p("node-0-key.pem"), p("ca-key.pem"), "no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tlsutil.Load(tc.cert, tc.key, tc.ca)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.wantErrMessage)
			_, err = tlsutil.ClientOption(tc.cert, tc.key, tc.ca)
			assert.Error(t, err)
		})
	}
}

// signLeaf writes a certificate signed by dir's CA, from tmpl, and returns
// a client key pair for it.
func signLeaf(t *testing.T, dir string, tmpl *x509.Certificate) tls.Certificate {
	t.Helper()
	ca := readCert(t, filepath.Join(dir, "ca.pem"))
	caKey := readKey(t, filepath.Join(dir, "ca-key.pem"))
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func tlsClient(t *testing.T, caDir string, certs []tls.Certificate, maxVersion uint16) grpc.DialOption {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b))
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: certs, RootCAs: pool, MaxVersion: maxVersion,
	}))
}

// Load's credentials make a real mutual-TLS gRPC port: only clients with a
// certificate from the CA, usable for client authentication, in its
// validity period, over TLS 1.3, get through; and clients verify the
// server against the CA.
func TestMTLSHandshake(t *testing.T) {
	dir := initDev(t, "node-0", "admin")
	other := initDev(t, "node-0", "admin")
	p := func(d, f string) string { return filepath.Join(d, f) }
	srvCreds, _, err := tlsutil.Load(p(dir, "node-0.pem"), p(dir, "node-0-key.pem"), p(dir, "ca.pem"))
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.Creds(srvCreds))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)

	opt := func(d, name string) grpc.DialOption {
		o, err := tlsutil.ClientOption(p(d, name+".pem"), p(d, name+"-key.pem"), p(d, "ca.pem"))
		require.NoError(t, err)
		return o
	}
	_, nodeOpt, err := tlsutil.Load(p(dir, "node-0.pem"), p(dir, "node-0-key.pem"), p(dir, "ca.pem"))
	require.NoError(t, err)
	admin, err := tls.LoadX509KeyPair(p(dir, "admin.pem"), p(dir, "admin-key.pem"))
	require.NoError(t, err)
	now := time.Now()
	leaf := func(usage []x509.ExtKeyUsage, from, to time.Time) *x509.Certificate {
		return &x509.Certificate{
			SerialNumber: big.NewInt(now.UnixNano()), Subject: pkix.Name{CommonName: "crafted"},
			NotBefore: from, NotAfter: to, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
		}
	}
	cases := []struct {
		name string
		opt  grpc.DialOption
		ok   bool
	}{
		// a client certificate from the CA (swdctl's way)
		{"client certificate", opt(dir, "admin"), true},
		// a node's own dial option (node to node)
		{"node dial option", nodeOpt, true},
		// no TLS
		{"plaintext", grpc.WithTransportCredentials(insecure.NewCredentials()), false},
		// TLS, no client certificate
		{"no client certificate", tlsClient(t, dir, nil, 0), false},
		// a certificate from another CA
		{"other CA's certificate", tlsClient(t, dir, []tls.Certificate{mustPair(t, p(other, "admin.pem"), p(other, "admin-key.pem"))}, 0), false},
		// a valid certificate, but the client trusts another CA: it
		// refuses the server
		{"client trusts another CA", tlsClient(t, other, []tls.Certificate{admin}, 0), false},
		// TLS 1.2 at most: the server requires 1.3
		{"TLS 1.2", tlsClient(t, dir, []tls.Certificate{admin}, tls.VersionTLS12), false},
		// signed by the CA, but for server authentication only
		{"server-only certificate", tlsClient(t, dir, []tls.Certificate{
			signLeaf(t, dir, leaf([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, now.Add(-time.Hour), now.Add(time.Hour)))}, 0), false},
		// signed by the CA, but expired
		{"expired certificate", tlsClient(t, dir, []tls.Certificate{
			signLeaf(t, dir, leaf([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, now.Add(-48*time.Hour), now.Add(-24*time.Hour)))}, 0), false},
		// signed by the CA, not valid yet
		{"not yet valid certificate", tlsClient(t, dir, []tls.Certificate{
			signLeaf(t, dir, leaf([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, now.Add(24*time.Hour), now.Add(48*time.Hour)))}, 0), false},
		// signed by the CA for client authentication: accepted
		{"crafted client certificate", tlsClient(t, dir, []tls.Certificate{
			signLeaf(t, dir, leaf([]x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, now.Add(-time.Hour), now.Add(time.Hour)))}, 0), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := grpc.NewClient(ln.Addr().String(), tc.opt)
			require.NoError(t, err)
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		})
	}
}

func mustPair(t *testing.T, cert, key string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(cert, key)
	require.NoError(t, err)
	return c
}
