package security

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
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
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// tlsNoClientCert trusts dir's CA but presents no certificate.
func tlsNoClientCert(t *testing.T, dir string) grpc.DialOption {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b))
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS13}))
}

// tlsMixed presents certificate name from certDir while trusting caDir's CA.
func tlsMixed(t *testing.T, certDir, name, caDir string) grpc.DialOption {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(filepath.Join(certDir, name+".pem"), filepath.Join(certDir, name+"-key.pem"))
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(caDir, "ca.pem"))
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(b))
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS13,
	}))
}

// An swd with --tls-* refuses every gRPC client that does not present a
// certificate signed by its CA, on both services: Control.Status and
// Transfer.Forward fail at the handshake and the app sees nothing. A
// client with a certificate from the CA gets through.
func TestMTLSRefusesClientsWithoutValidCertificate(t *testing.T) {
	binDir(t)
	t.Parallel()
	good := certsInit(t, "node-0", "node-1", "admin")
	rogue := certsInit(t, "node-0", "node-1", "admin") // another CA, same names
	nd := oneNode(t, "node-0", tlsFlags(good, "node-0")...)
	member(t, nd, mtls(t, good, "admin"), "node-1", tlsFlags(good, "node-1")...)

	cases := []struct {
		name string
		opt  grpc.DialOption
	}{
		// no TLS at all: the server expects a TLS ClientHello
		{"plaintext client", testutil.Plaintext()},
		// TLS that trusts the right CA, but no client certificate
		{"TLS without client certificate", tlsNoClientCert(t, good)},
		// a certificate with the same name, signed by another CA
		{"certificate from another CA", mtls(t, rogue, "admin")},
		// another CA's certificate that claims to be the node itself
		{"other CA's certificate named like the node", mtls(t, rogue, "node-0")},
		// a valid certificate, but the client trusts another CA, so it
		// refuses the server (server authentication works too)
		{"client trusting another CA", tlsMixed(t, good, "admin", rogue)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := testutil.Dial(t, nd.GRPC, tc.opt)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := swdv1.NewControlClient(cc).Status(ctx, &swdv1.StatusRequest{})
			require.Error(t, err, "Control.Status must fail")
			assert.Equal(t, codes.Unavailable, status.Code(err), "handshake failure expected, got %v", err)

			_, err = forward(cc, workRequest("node-1"))
			require.Error(t, err, "Transfer.Forward must fail")
			assert.Equal(t, codes.Unavailable, status.Code(err), "handshake failure expected, got %v", err)

			_, err = pull(cc, "node-1")
			require.Error(t, err, "Transfer.Pull must fail")
			assert.Equal(t, codes.Unavailable, status.Code(err), "handshake failure expected, got %v", err)
		})
	}
	assert.Zero(t, testutil.AppStats(t, nd.App).Served, "a refused client's transfer reached the app")

	// The control: a client with a certificate from the CA gets through on
	// Control; on Transfer only with the certificate of the member it
	// sends as (node-1 here).
	cc := testutil.Dial(t, nd.GRPC, mtls(t, good, "admin"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := swdv1.NewControlClient(cc).Status(ctx, &swdv1.StatusRequest{})
	require.NoError(t, err)
	assert.Equal(t, "node-0", st.GetNode())
	_, err = forward(cc, workRequest("node-1"))
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "an operator's certificate must not send as a node: %v", err)
	_, err = pull(cc, "node-1")
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "an operator's certificate must not pull as a node: %v", err)
	r, err := pull(testutil.Dial(t, nd.GRPC, mtls(t, good, "node-1")), "node-1")
	require.NoError(t, err, "the member's own certificate pulls")
	assert.False(t, r.GetFound(), "an empty queue hands nothing over")
	a, err := forward(testutil.Dial(t, nd.GRPC, mtls(t, good, "node-1")), workRequest("node-1"))
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, a.Status)
	assert.EqualValues(t, 1, testutil.AppStats(t, nd.App).Served)
}

// A two-node cluster with mTLS (and encrypted gossip) still transfers:
// under nu, load sent to node-0 is partly served by node-1's app, over the
// nodes' mutually authenticated gRPC. swdctl with a client certificate
// works, including a cluster-wide policy switch (node-to-node Control over
// mTLS); swdctl without one is refused.
func TestMTLSClusterTransfersAndSwdctl(t *testing.T) {
	binDir(t)
	t.Parallel()
	dir := certsInit(t, "node-0", "node-1", "admin")
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	gossipKey := base64.StdEncoding.EncodeToString(key)
	args := func(name string) []string {
		return append(tlsFlags(dir, name), "--policy", "nu", "--gossip-key", gossipKey)
	}
	n0 := startSwd(t, swdOpts{Name: "node-0", App: startApp(t, "app-0"), Args: args("node-0")})
	n1 := startSwd(t, swdOpts{Name: "node-1", App: startApp(t, "app-1"), Join: n0.Gossip, Args: args("node-1")})

	// Ready when each node sees both members with a known load.
	for _, n := range []*node{n0, n1} {
		cl := swdv1.NewControlClient(testutil.Dial(t, n.GRPC, mtls(t, dir, "admin")))
		waitFor(t, n.p, n.Name+" sees the cluster", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := cl.Status(ctx, &swdv1.StatusRequest{})
			if err != nil || s.GetMembers() != 2 {
				return false
			}
			known := 0
			for _, v := range s.GetView() {
				if v.GetKnown() {
					known++
				}
			}
			return known == 2
		})
	}

	// m = 1 and 40 concurrent 50 ms requests: node-0 alone would need 2 s;
	// nu moves waiting ones to node-1.
	const n = 40
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: n}}
	codesSeen := make([]int, n)
	servedBy := make([]string, n)
	testutil.Concurrently(n, func(i int) {
		resp, err := testutil.Get(hc, "http://"+n0.HTTP+"/work?ms=50")
		if err != nil {
			return
		}
		codesSeen[i], servedBy[i] = resp.StatusCode, resp.Header.Get("X-Served-By")
	})()
	byApp := map[string]int{}
	for i := range codesSeen {
		require.Equal(t, http.StatusOK, codesSeen[i], "request %d", i)
		byApp[servedBy[i]]++
	}
	s0, s1 := testutil.AppStats(t, n0.App), testutil.AppStats(t, n1.App)
	assert.EqualValues(t, n, s0.Served+s1.Served, "every request served once: %v", byApp)
	assert.Positive(t, s1.Served, "node-1's app served nothing: no transfer over mTLS (%v)", byApp)
	assert.EqualValues(t, s1.Served, byApp["app-1"], "answers relayed from node-1")

	// swdctl with the client certificate.
	tlsArgs := []string{"--addr", n0.GRPC, "--tls-cert", filepath.Join(dir, "admin.pem"),
		"--tls-key", filepath.Join(dir, "admin-key.pem"), "--tls-ca", filepath.Join(dir, "ca.pem")}
	out, code := swdctl(t, append(tlsArgs, "-o", "json", "status")...)
	require.Zero(t, code, out)
	var st struct {
		Node    string `json:"node"`
		Members int    `json:"members"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &st), out)
	assert.Equal(t, "node-0", st.Node)
	assert.Equal(t, 2, st.Members)
	out, code = swdctl(t, append(tlsArgs, "nodes")...)
	require.Zero(t, code, out)
	assert.Contains(t, out, "node-1")
	// A cluster-wide switch: node-0 calls node-1's Control over mTLS with
	// its own node certificate.
	out, code = swdctl(t, append(tlsArgs, "policy", "set", "ll", "--cluster")...)
	require.Zero(t, code, out)
	cl1 := swdv1.NewControlClient(testutil.Dial(t, n1.GRPC, mtls(t, dir, "admin")))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p, err := cl1.GetPolicy(ctx, &swdv1.GetPolicyRequest{})
	require.NoError(t, err)
	assert.Equal(t, "ll", p.GetName(), "node-1 switched through node-0's fan-out")

	// swdctl without a certificate, or with only the CA, is refused.
	out, code = swdctl(t, "--addr", n0.GRPC, "--timeout", "2s", "status")
	assert.NotZero(t, code, "plaintext swdctl got through: %s", out)
	out, code = swdctl(t, "--addr", n0.GRPC, "--timeout", "2s", "--tls-ca", filepath.Join(dir, "ca.pem"), "status")
	assert.NotZero(t, code, "swdctl with only --tls-ca got through: %s", out)
}

// swd refuses to serve gRPC in plaintext beyond loopback unless --insecure
// is given; with --insecure (and the control token that a non-loopback port
// needs) it starts and logs a warning.
func TestPlaintextGRPCBeyondLoopback(t *testing.T) {
	binDir(t)
	t.Parallel()
	dir := certsInit(t, "node-0")
	app := startApp(t, "app-0")

	refused := []struct {
		name string
		args []string
		// every string must appear in the error, to tell the operator what to do
		want []string
	}{
		// a token, but neither TLS nor --insecure
		{"no TLS", []string{"--control-token", "t0k3n"}, []string{"--tls-cert", "--tls-key", "--tls-ca", "--insecure"}},
		// neither TLS nor a token: the token is asked for first
		{"no TLS, no token", nil, []string{"--control-token"}},
		// only part of the TLS flags
		{"incomplete TLS", []string{"--control-token", "t0k3n", "--tls-cert", filepath.Join(dir, "node-0.pem")},
			[]string{"--tls-cert", "--tls-key", "--tls-ca"}},
		// --insecure does not waive the control token
		{"--insecure without token", []string{"--insecure"}, []string{"--control-token"}},
	}
	for _, tc := range refused {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			n, args := swdArgs(t, swdOpts{Name: "node-0", App: app, GRPCHost: "0.0.0.0", Args: tc.args})
			grpcAddr := n.GRPC
			p := start(t, "swd", "swd "+tc.name, args...)
			code, ok := p.waitExit(20 * time.Second)
			require.True(t, ok, "swd kept running with a plaintext gRPC port on %s", grpcAddr)
			assert.NotZero(t, code)
			for _, w := range tc.want {
				assert.Contains(t, p.out.String(), w)
			}
		})
	}

	started := []struct {
		name string
		args []string
		dial grpc.DialOption
		warn bool
	}{
		// explicit --insecure: starts, warns, answers plaintext with the token
		{"--insecure", []string{"--insecure", "--control-token", "t0k3n"}, testutil.Plaintext(), true},
		// mTLS: starts without the plaintext warning
		{"mTLS", append(tlsFlags(dir, "node-0"), "--control-token", "t0k3n"), mtls(t, dir, "node-0"), false},
	}
	for _, tc := range started {
		t.Run("started/"+tc.name, func(t *testing.T) {
			nd := startSwd(t, swdOpts{Name: "node-0", App: app, GRPCHost: "0.0.0.0", Args: tc.args})
			_, port, err := net.SplitHostPort(nd.GRPC)
			require.NoError(t, err)
			local := "127.0.0.1:" + port
			warned := func() bool { return strings.Contains(nd.p.out.String(), "plaintext beyond loopback") }
			if tc.warn {
				waitFor(t, nd.p, "the plaintext warning", warned)
				assert.Contains(t, nd.p.out.String(), "level=WARN")
			}
			cl := swdv1.NewControlClient(testutil.Dial(t, local, tc.dial))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err = cl.Status(ctx, &swdv1.StatusRequest{})
			assert.Equal(t, codes.Unauthenticated, status.Code(err), "no token: %v", err)
			cl = swdv1.NewControlClient(testutil.Dial(t, local, tc.dial,
				grpc.WithPerRPCCredentials(auth.Bearer{Token: "t0k3n", Secure: !tc.warn})))
			_, err = cl.Status(ctx, &swdv1.StatusRequest{})
			require.NoError(t, err)
			if !tc.warn {
				assert.False(t, warned(), "warning logged although the port is mTLS")
			}
		})
	}
}
