package security

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// A forged transfer (a well-formed Transfer.Forward from a member name, as
// a holder of that member's certificate could send) that tries to
// reach another server runs only against the node's own app, or is
// rejected before it reaches any app. "evil" is a second dummyapp on this
// machine: it must see nothing. The same holds for the HTTP front: an
// absolute-form request line or a Host header naming evil is served by the
// local app.
func TestForgedTransferNamingAnotherHostStaysLocal(t *testing.T) {
	binDir(t)
	t.Parallel()
	dir := certsInit(t, "node-0", "node-1", "admin")
	evil := startApp(t, "evil")
	nd := oneNode(t, "node-0", tlsFlags(dir, "node-0")...)
	member(t, nd, mtls(t, dir, "admin"), "node-1", tlsFlags(dir, "node-1")...)
	// The forger holds a member's certificate: the strongest position
	// short of the CA key.
	cc := testutil.Dial(t, nd.GRPC, mtls(t, dir, "node-1"))

	with := func(f func(m *swdv1.ForwardRequest)) *swdv1.ForwardRequest {
		m := workRequest("node-1")
		f(m)
		return m
	}
	cases := []struct {
		name string
		msg  *swdv1.ForwardRequest
		// local: the answer must come from node-0's app (X-Served-By),
		// with this status; 0 means the transfer is rejected with
		// InvalidArgument instead.
		local int
	}{
		// an absolute URL in the path
		{"absolute http URL", with(func(m *swdv1.ForwardRequest) { m.Path = "http://" + evil + "/work" }), 0},
		// an absolute https URL in the path
		{"absolute https URL", with(func(m *swdv1.ForwardRequest) { m.Path = "https://" + evil + "/work" }), 0},
		// a network-path reference ("//host/path")
		{"network-path reference", with(func(m *swdv1.ForwardRequest) { m.Path = "//" + evil + "/work" }), 0},
		// a path without the leading slash ("host/path")
		{"no leading slash", with(func(m *swdv1.ForwardRequest) { m.Path = evil + "/work" }), 0},
		// userinfo-looking path: stays a path on the local app (404 there)
		{"@host path", with(func(m *swdv1.ForwardRequest) { m.Path = "/@" + evil + "/work" }), http.StatusNotFound},
		// backslash trick some URL parsers read as "//"
		{"backslash path", with(func(m *swdv1.ForwardRequest) { m.Path = "/\\" + evil + "/work" }), http.StatusNotFound},
		// the message's host field names evil: only the Host header changes
		{"host field", with(func(m *swdv1.ForwardRequest) { m.Host = evil }), http.StatusOK},
		// a Host entry among the headers
		{"Host header entry", with(func(m *swdv1.ForwardRequest) {
			m.Headers = append(m.Headers, &swdv1.Header{Name: "Host", Values: []string{evil}})
		}), http.StatusOK},
		// forwarding headers naming evil, and the https scheme
		{"X-Forwarded-Host and scheme", with(func(m *swdv1.ForwardRequest) {
			m.Scheme = "https"
			m.Headers = append(m.Headers, &swdv1.Header{Name: "X-Forwarded-Host", Values: []string{evil}},
				&swdv1.Header{Name: "Forwarded", Values: []string{"host=" + evil}})
		}), http.StatusOK},
		// request splitting through the query
		{"CRLF in query", with(func(m *swdv1.ForwardRequest) {
			m.RawQuery = "ms=1 HTTP/1.1\r\nHost: " + evil + "\r\n\r\nGET /work?ms=1"
		}), 0},
		// request splitting through a header value
		{"CRLF in header value", with(func(m *swdv1.ForwardRequest) {
			m.Headers = append(m.Headers, &swdv1.Header{Name: "X-A", Values: []string{"a\r\nHost: " + evil}})
		}), 0},
		// a header name that is not a token
		{"bad header name", with(func(m *swdv1.ForwardRequest) {
			m.Headers = append(m.Headers, &swdv1.Header{Name: "Host: " + evil, Values: []string{"x"}})
		}), 0},
		// a host field with a path or userinfo in it
		{"host field with path", with(func(m *swdv1.ForwardRequest) { m.Host = evil + "/work" }), 0},
		// CONNECT would make the app a tunnel to another host
		{"CONNECT", with(func(m *swdv1.ForwardRequest) { m.Method = http.MethodConnect; m.Path = "/"; m.Host = evil }), 0},
		// a method that is not a token (would split the request line)
		{"method with a space", with(func(m *swdv1.ForwardRequest) { m.Method = "GET http://" + evil + "/work" }), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := forward(cc, tc.msg)
			if tc.local == 0 {
				require.Error(t, err)
				assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.local, a.Status)
			assert.Equal(t, "app-node-0", a.Header.Get("X-Served-By"), "the answer must come from the local app")
		})
	}

	// The HTTP front: the target of a client's request is always the local app.
	front := []struct {
		name string
		req  string
	}{
		// absolute-form request line naming evil
		{"absolute-form request line", "GET http://" + evil + "/work?ms=1 HTTP/1.1\r\nHost: " + evil + "\r\n\r\n"},
		// origin-form with Host: evil
		{"Host header", "GET /work?ms=1 HTTP/1.1\r\nHost: " + evil + "\r\n\r\n"},
		// X-Forwarded-Host naming evil
		{"X-Forwarded-Host", "GET /work?ms=1 HTTP/1.1\r\nHost: x\r\nX-Forwarded-Host: " + evil + "\r\n\r\n"},
	}
	for _, tc := range front {
		t.Run("front/"+tc.name, func(t *testing.T) {
			a := rawHTTP(t, nd.HTTP, []byte(tc.req), 0)
			require.NoError(t, a.Err)
			assert.Equal(t, http.StatusOK, a.Status)
			assert.Equal(t, "app-node-0", a.Header.Get("X-Served-By"))
		})
	}
	assert.Zero(t, testutil.AppStats(t, evil).Served, "a forged request reached another server")
}

// A transfer whose sender is not a current member is refused with
// FAILED_PRECONDITION (a refusal: the sender may put the request back),
// even over mTLS with a valid certificate, and never reaches the app. So
// is one that claims more hops than allowed.
func TestForgedTransferFromNonMemberRefused(t *testing.T) {
	binDir(t)
	t.Parallel()
	dir := certsInit(t, "node-0", "admin")
	nd := oneNode(t, "node-0", tlsFlags(dir, "node-0")...)
	cc := testutil.Dial(t, nd.GRPC, mtls(t, dir, "admin"))

	cases := []struct {
		name string
		from string
		hops uint32
	}{
		// a name that never was a member
		{"unknown name", "mallory", 1},
		// the certificate's own name, which is no member either
		{"client certificate's name", "admin", 1},
		// no sender at all
		{"empty name", "", 1},
		// a member's name with trailing space (no normalisation)
		{"member name with a space", "node-0 ", 1},
		// a member's name in another case
		{"member name in upper case", "NODE-0", 1},
		// a member, but more hops than --max-hops allows (default 1)
		{"hop limit", "node-0", 2},
		// a member's name, sent with a certificate that names someone else
		{"member name with another certificate", "node-0", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := workRequest(tc.from)
			m.Hops = tc.hops
			_, err := forward(cc, m)
			require.Error(t, err)
			assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
			if tc.hops == 1 { // Pull carries no hops; the same senders are refused
				_, err = pull(cc, tc.from)
				assert.Equal(t, codes.FailedPrecondition, status.Code(err), "pull: %v", err)
			}
		})
	}
	assert.Zero(t, testutil.AppStats(t, nd.App).Served, "a refused transfer reached the app")
}

// --grpc-max-message bounds every gRPC message: a transfer larger than it
// is refused with RESOURCE_EXHAUSTED before anything reaches the app; a
// smaller one runs.
func TestGRPCMaxMessageSize(t *testing.T) {
	binDir(t)
	t.Parallel()
	nd := oneNode(t, "node-0", "--grpc-max-message", "65536")
	member(t, nd, testutil.Plaintext(), "node-1")
	cc := testutil.Dial(t, nd.GRPC, testutil.Plaintext())

	big := workRequest("node-1")
	big.Method = http.MethodPost
	big.Body = bytes.Repeat([]byte("x"), 128<<10)
	_, err := forward(cc, big)
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.True(t, strings.Contains(err.Error(), "larger than max"), "%v", err)
	s := testutil.AppStats(t, nd.App)
	assert.Zero(t, s.Served)
	assert.Zero(t, s.BodyBytes)

	small := workRequest("node-1")
	small.Method = http.MethodPost
	small.Body = bytes.Repeat([]byte("x"), 16<<10)
	a, err := forward(cc, small)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, a.Status)
	assert.EqualValues(t, 16<<10, testutil.AppStats(t, nd.App).BodyBytes)
}

// Membership is checked on every transfer, against the current members: a
// member's transfers run, and once it has left the cluster (SIGTERM: a
// graceful leave) the same transfer is refused with FAILED_PRECONDITION.
func TestTransferFromFormerMemberRefused(t *testing.T) {
	binDir(t)
	t.Parallel()
	n0 := oneNode(t, "node-0")
	n1 := startSwd(t, swdOpts{Name: "node-1", App: startApp(t, "app-node-1"), Join: n0.Gossip})
	cl := testutil.Control(t, n0.GRPC)
	members := func() int32 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s, err := cl.Status(ctx, &swdv1.StatusRequest{})
		if err != nil {
			return -1
		}
		return s.GetMembers()
	}
	waitFor(t, n0.p, "node-1 to join", func() bool { return members() == 2 })
	cc := testutil.Dial(t, n0.GRPC, testutil.Plaintext())

	a, err := forward(cc, workRequest("node-1"))
	require.NoError(t, err, "a member's transfer runs")
	assert.Equal(t, http.StatusOK, a.Status)

	n1.p.stop()
	waitFor(t, n0.p, "node-1 to leave", func() bool { return members() == 1 })
	before := testutil.AppStats(t, n0.App).Served
	_, err = forward(cc, workRequest("node-1"))
	require.Error(t, err)
	assert.Equal(t, codes.FailedPrecondition, status.Code(err), "%v", err)
	assert.Equal(t, before, testutil.AppStats(t, n0.App).Served)
}

// forwardStream sends m's head and then body by Transfer.ForwardStream and
// reads the answer's status.
func forwardStream(cc *grpc.ClientConn, m *swdv1.ForwardRequest, body []byte) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := swdv1.NewTransferClient(cc).ForwardStream(ctx)
	if err != nil {
		return 0, err
	}
	if st.Send(&swdv1.ForwardChunk{Head: m, BodySize: int64(len(body))}) == nil {
		for off := 0; off < len(body); off += transfer.StreamChunkSize {
			if st.Send(&swdv1.ForwardChunk{Body: body[off:min(off+transfer.StreamChunkSize, len(body))]}) != nil {
				break // the server ended the call: Recv says why
			}
		}
		_ = st.CloseSend()
	}
	code := 0
	for {
		part, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return code, nil
		}
		if err != nil {
			return code, err
		}
		if h := part.GetHead(); h != nil {
			code = int(h.GetStatus())
		}
	}
}

// Transfers are authenticated with the cluster's node key
// (--transfer-secret): a streamed transfer (ForwardStream, for bodies
// beyond --max-transfer-body) without it, or with another key, is refused
// as UNAUTHENTICATED exactly like Forward, before anything is read or
// reaches the app; with the key, it gets as far as the membership check.
func TestStreamedTransferNeedsNodeKey(t *testing.T) {
	binDir(t)
	t.Parallel()
	nd := oneNode(t, "node-0", "--transfer-secret", "s3cret", "--max-transfer-body", "65536")
	body := bytes.Repeat([]byte("x"), 1<<20)
	post := func(from string) *swdv1.ForwardRequest {
		m := workRequest(from)
		m.Method = http.MethodPost
		return m
	}
	cases := []struct {
		name   string
		dial   []grpc.DialOption
		stream bool
		want   codes.Code
	}{
		// Forward without credentials: the existing rule.
		{"Forward, no credentials", nil, false, codes.Unauthenticated},
		// ForwardStream without credentials: the same refusal.
		{"ForwardStream, no credentials", nil, true, codes.Unauthenticated},
		// ForwardStream with another cluster's key.
		{"ForwardStream, wrong key", []grpc.DialOption{auth.NodeCreds{Key: auth.DeriveNodeKey("guess")}.DialOption()}, true, codes.Unauthenticated},
		// With the key it is authenticated, and refused as no member.
		{"ForwardStream, node key", []grpc.DialOption{auth.NodeCreds{Key: auth.DeriveNodeKey("s3cret")}.DialOption()}, true, codes.FailedPrecondition},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cc := testutil.Dial(t, nd.GRPC, append([]grpc.DialOption{testutil.Plaintext()}, tc.dial...)...)
			var err error
			if tc.stream {
				_, err = forwardStream(cc, post("mallory"), body)
			} else {
				m := post("mallory")
				m.Body = body[:32<<10]
				_, err = forward(cc, m)
			}
			require.Error(t, err)
			assert.Equal(t, tc.want, status.Code(err), "%v", err)
		})
	}
	s := testutil.AppStats(t, nd.App)
	assert.Zero(t, s.Served, "a refused transfer reached the app")
	assert.Zero(t, s.BodyBytes)
}
