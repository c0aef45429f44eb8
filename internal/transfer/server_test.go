package transfer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// backendFunc is a fake transfer.Backend.
type backendFunc func(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error

func (f backendFunc) ServeTransferred(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
	return f(w, r, in)
}

// members is a fake MembershipChecker.
type members map[string]bool

func (m members) IsMember(name string) bool { return m[name] }

// testChunk is the server chunk size in these tests.
const testChunk = 1024

// startServer runs a Transfer server for backend on 127.0.0.1:0 and returns
// its address and the gRPC server (stopped at cleanup).
func startServer(t testing.TB, backend transfer.Backend, mem transfer.MembershipChecker) (string, *grpc.Server) {
	t.Helper()
	return startServerWith(t, nil, backend, mem)
}

// startServerWith is startServer with cfg changed by mutate (nil: none).
func startServerWith(t testing.TB, mutate func(*transfer.ServerConfig), backend transfer.Backend, mem transfer.MembershipChecker) (string, *grpc.Server) {
	t.Helper()
	cfg := transfer.DefaultServerConfig()
	cfg.NodeName = "node-b"
	cfg.ChunkSize = testChunk
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := transfer.NewServer(cfg, backend, mem)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	swdv1.RegisterTransferServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String(), gs
}

func newClient(t testing.TB) *transfer.Client {
	t.Helper()
	c, err := transfer.NewClient(transfer.DefaultClientConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// outbound is a valid message from member node-a.
func outbound(method, target string, body []byte) *swdv1.ForwardRequest {
	r := httptest.NewRequest(method, target, nil)
	r.Host = "client.example"
	r.RemoteAddr = "10.0.0.1:1234"
	r.Header.Set("X-Client", "c")
	return transfer.ToMessage(transfer.Outbound{
		ID: "req-1", Request: r, Body: body, Arrival: time.Unix(100, 0), From: "node-a",
	})
}

// recorder is an httptest.ResponseRecorder that records each Write's size
// and closes headCh when the head is written (so a test can act once the
// client has committed to the answer).
type recorder struct {
	*httptest.ResponseRecorder
	mu     sync.Mutex
	writes []int
	once   sync.Once
	headCh chan struct{}
}

func newRecorder() *recorder {
	return &recorder{ResponseRecorder: httptest.NewRecorder(), headCh: make(chan struct{})}
}

func (r *recorder) WriteHeader(code int) {
	r.ResponseRecorder.WriteHeader(code)
	r.once.Do(func() { close(r.headCh) })
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.writes = append(r.writes, len(p))
	r.mu.Unlock()
	return r.ResponseRecorder.Write(p)
}

func TestServerConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(c *transfer.ServerConfig)
		ok     bool
	}{
		// Defaults plus a name are valid.
		{"defaults", func(*transfer.ServerConfig) {}, true},
		// A node needs a name to report served_by.
		{"no name", func(c *transfer.ServerConfig) { c.NodeName = "" }, false},
		// At least one hop must be allowed.
		{"zero hops", func(c *transfer.ServerConfig) { c.MaxHops = 0 }, false},
		// Chunks below 512 bytes are refused.
		{"tiny chunk", func(c *transfer.ServerConfig) { c.ChunkSize = 511 }, false},
		// A streamed body needs a stall limit.
		{"no body idle timeout", func(c *transfer.ServerConfig) { c.BodyIdleTimeout = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := transfer.DefaultServerConfig()
			c.NodeName = "n"
			tc.mutate(&c)
			if tc.ok {
				assert.NoError(t, c.Validate())
			} else {
				assert.Error(t, c.Validate())
			}
		})
	}
	// Membership checks need a checker.
	c := transfer.DefaultServerConfig()
	c.NodeName = "n"
	_, err := transfer.NewServer(c, backendFunc(nil), nil)
	assert.Error(t, err)
	c.CheckMembership = false
	_, err = transfer.NewServer(c, backendFunc(nil), nil)
	assert.NoError(t, err)
	// The client needs room for a transferable body.
	_, err = transfer.NewClient(transfer.ClientConfig{MaxMessageSize: 1024})
	assert.Error(t, err)
}

func TestForwardStreamsAnswer(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 3*testChunk/16+7) // > 3 chunks, not a multiple
	var called atomic.Int32
	addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
		called.Add(1)
		// The request arrives bound to the local app only.
		if r.URL.Host != "" || r.URL.Scheme != "" || r.Host != "client.example" || r.URL.Path != "/work" ||
			r.URL.RawQuery != "ms=3" || r.Header.Get("X-Client") != "c" || in.From != "node-a" || in.Hops != 1 {
			w.WriteHeader(http.StatusTeapot)
			return nil
		}
		reqBody, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("X-App", "yes")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body[:len(body)/2])
		_, _ = w.Write(body[len(body)/2:])
		_, _ = w.Write(reqBody)
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		return nil
	}), members{"node-a": true})

	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodPost, "/work?ms=3", []byte("REQ")), rec)
	require.NoError(t, err)
	assert.Equal(t, int32(1), called.Load())
	assert.Equal(t, http.StatusCreated, res.Status)
	assert.Equal(t, "node-b", res.ServedBy)
	assert.True(t, res.HeadWritten)
	assert.Equal(t, int64(len(body)+3), res.BodyBytes)
	assert.Equal(t, int64(-1), res.ContentLength, "no Content-Length declared")

	resp := rec.Result()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, "yes", resp.Header.Get("X-App"))
	assert.Equal(t, "application/octet-stream", resp.Header.Get("Content-Type"))
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, append(append([]byte{}, body...), "REQ"...), got)
	// Both ways of declaring trailers arrive as trailers.
	assert.Equal(t, "abc", resp.Trailer.Get("X-Checksum"))
	assert.Equal(t, "late", resp.Trailer.Get("X-Late"))

	// The body came in several chunks, none larger than the chunk size.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.GreaterOrEqual(t, len(rec.writes), (len(body)+testChunk-1)/testChunk)
	for _, n := range rec.writes {
		assert.LessOrEqual(t, n, testChunk)
	}
}

// TestForwardContentLength: a declared Content-Length is reported and the
// result is complete once that many bytes were copied.
func TestForwardContentLength(t *testing.T) {
	body := bytes.Repeat([]byte("z"), 2*testChunk+1)
	addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		_, _ = w.Write(body)
		return nil
	}), members{"node-a": true})
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), rec)
	require.NoError(t, err)
	assert.Equal(t, int64(len(body)), res.ContentLength)
	assert.Equal(t, int64(len(body)), res.BodyBytes)
	assert.True(t, res.Complete())
	assert.Equal(t, body, rec.Body.Bytes())
}

// TestForwardEmptyAnswer: a backend that writes nothing answers 200 with an
// empty body.
func TestForwardEmptyAnswer(t *testing.T) {
	addr, _ := startServer(t, backendFunc(func(http.ResponseWriter, *http.Request, transfer.Inbound) error { return nil }), members{"node-a": true})
	rec := newRecorder()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), rec)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, res.Status)
	assert.True(t, res.HeadWritten)
	assert.Zero(t, rec.Body.Len())
}

// TestForwardQueueWait: the wait a backend reports before the head reaches
// the sender in the head's queue_wait_nanos; a report after the head, or
// none, is not a wait.
func TestForwardQueueWait(t *testing.T) {
	tests := []struct {
		name   string
		report func(w http.ResponseWriter)
		want   time.Duration
	}{
		// Reported before the head: carried as is.
		{"reported", func(w http.ResponseWriter) {
			w.(transfer.QueueWaitReporter).ReportQueueWait(1234567 * time.Nanosecond)
			w.WriteHeader(http.StatusOK)
		}, 1234567 * time.Nanosecond},
		// Never reported (a backend that does not queue): zero.
		{"not reported", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, 0},
		// Reported once the head has gone: too late, ignored.
		{"after the head", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			w.(transfer.QueueWaitReporter).ReportQueueWait(time.Second)
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
				tt.report(w)
				return nil
			}), members{"node-a": true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), newRecorder())
			require.NoError(t, err)
			assert.Equal(t, tt.want, res.QueueWait)
		})
	}
}

// TestForwardAuthenticatesAsNode: a client configured with the cluster's
// node key (ClientConfig.Auth) sends a node MAC with every transfer, never
// a token; a server guarding the Transfer service (auth.ServerOptions)
// runs only those, and not the control token itself. Issue 17, item 5.
func TestForwardAuthenticatesAsNode(t *testing.T) {
	cfg := transfer.DefaultServerConfig()
	cfg.NodeName = "node-b"
	srv, err := transfer.NewServer(cfg, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
		w.WriteHeader(http.StatusOK)
		return nil
	}), members{"node-a": true})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var sawToken atomic.Bool
	opts := auth.ServerOptions(auth.ServerAuth{Token: "s3cret", NodeKey: auth.DeriveNodeKey("s3cret"), Authorities: []string{ln.Addr().String()}})
	opts = append(opts, grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		for _, v := range md.Get("authorization") {
			if strings.Contains(v, "s3cret") {
				sawToken.Store(true)
			}
		}
		return h(srv, ss)
	}))
	gs := grpc.NewServer(opts...)
	swdv1.RegisterTransferServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	tests := []struct {
		name  string
		creds auth.NodeCreds
		token string // a bearer token sent with the call instead
		ok    bool
	}{
		// The cluster's node key: the transfer runs.
		{"node key", auth.NodeCreds{Key: auth.DeriveNodeKey("s3cret")}, "", true},
		// None, or another key: refused before the backend, as unauthenticated.
		{"no credentials", auth.NodeCreds{}, "", false},
		{"wrong key", auth.NodeCreds{Key: auth.DeriveNodeKey("guess")}, "", false},
		// The control token does not authorize transfers.
		{"control token", auth.NodeCreds{}, "s3cret", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ccfg := transfer.DefaultClientConfig()
			ccfg.Auth = tt.creds
			c, err := transfer.NewClient(ccfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			ctx, cancel := context.WithTimeout(auth.OutgoingContext(context.Background(), tt.token), 10*time.Second)
			defer cancel()
			// Forward and ForwardStream pass the same check.
			calls := map[string]func() (transfer.Result, error){
				"Forward": func() (transfer.Result, error) {
					return c.Forward(ctx, ln.Addr().String(), outbound(http.MethodGet, "/", nil), newRecorder())
				},
				"ForwardStream": func() (transfer.Result, error) {
					body := bytes.Repeat([]byte("x"), 300<<10)
					return c.ForwardStream(ctx, ln.Addr().String(), outbound(http.MethodPost, "/", nil), bytes.NewReader(body), int64(len(body)), newRecorder())
				},
			}
			for name, call := range calls {
				res, err := call()
				if tt.ok {
					require.NoError(t, err, name)
					assert.Equal(t, http.StatusOK, res.Status, name)
					assert.False(t, sawToken.Load(), "a transfer carried the control token")
					continue
				}
				require.Error(t, err, name)
				assert.True(t, errors.Is(err, swderr.ErrUnauthenticated), "%s: %v", name, err)
				assert.False(t, errors.Is(err, swderr.ErrRefused), "%s: an unauthenticated call is no refusal", name)
				assert.False(t, res.HeadWritten, name)
			}
		})
	}
}

func TestForwardRefused(t *testing.T) {
	tests := []struct {
		name string
		// backendErr is what the backend returns without writing.
		backendErr error
		// mutate changes the message.
		mutate func(m *swdv1.ForwardRequest)
		// wantBackend says whether the backend must be reached.
		wantBackend bool
	}{
		// The peer's queue is full: ResourceExhausted.
		{"queue full", fmt.Errorf("push: %w", swderr.ErrQueueFull), nil, true},
		// The peer is draining: FailedPrecondition.
		{"draining", swderr.ErrDraining, nil, true},
		// The peer predicts too long a wait: ResourceExhausted.
		{"overloaded", swderr.ErrOverloaded, nil, true},
		// More hops than the server's MaxHops (1): refused before the backend.
		{"hop limit", nil, func(m *swdv1.ForwardRequest) { m.Hops = 2 }, false},
		// A sender that is not a member: refused before the backend.
		{"not a member", nil, func(m *swdv1.ForwardRequest) { m.FromNode = "stranger" }, false},
		// A transfer naming the receiving node itself as its sender (a
		// standalone node is always its own member): refused before the
		// backend. Issue 17, item 8.
		{"names the receiver", nil, func(m *swdv1.ForwardRequest) { m.FromNode = "node-b" }, false},
		// The app is not ready: the backend's marked refusal. Issue 17, item 2.
		{"app not ready", swderr.ErrAppUnavailable, nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var called atomic.Int32
			addr, _ := startServer(t, backendFunc(func(http.ResponseWriter, *http.Request, transfer.Inbound) error {
				called.Add(1)
				return tc.backendErr
			}), members{"node-a": true, "node-b": true})
			m := outbound(http.MethodPost, "/x", []byte("b"))
			if tc.mutate != nil {
				tc.mutate(m)
			}
			rec := newRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := newClient(t).Forward(ctx, addr, m, rec)
			require.Error(t, err)
			assert.ErrorIs(t, err, swderr.ErrRefused)
			assert.NotErrorIs(t, err, swderr.ErrMaybeStarted)
			assert.True(t, swderr.IsRefusal(err))
			assert.False(t, res.HeadWritten)
			assert.Zero(t, res.Status)
			assert.Empty(t, rec.Header(), "nothing may reach the client on a refusal")
			assert.Zero(t, rec.Body.Len())
			assert.Equal(t, tc.wantBackend, called.Load() == 1)
		})
	}
}

// TestForwardNotRun: the peer admitted the request but it timed out in the
// peer's queue: it never ran (not maybe-started, not a refusal to put back:
// its wait is over), and the sender answers 503 for a queue timeout.
func TestForwardNotRun(t *testing.T) {
	addr, _ := startServer(t, backendFunc(func(http.ResponseWriter, *http.Request, transfer.Inbound) error {
		return swderr.ErrQueueTimeout
	}), members{"node-a": true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodPost, "/x", nil), newRecorder())
	require.Error(t, err)
	assert.ErrorIs(t, err, swderr.ErrQueueTimeout)
	assert.NotErrorIs(t, err, swderr.ErrMaybeStarted)
	assert.NotErrorIs(t, err, swderr.ErrRefused)
	assert.False(t, res.HeadWritten)
	assert.Equal(t, http.StatusServiceUnavailable, swderr.HTTPStatus(err))
}

// TestForwardFailsBeforeHead: failures before the head that are not
// refusals are maybe-started (the sender must not retry non-idempotent
// requests), and keep the peer's reason for errors.Is.
func TestForwardFailsBeforeHead(t *testing.T) {
	tests := []struct {
		name       string
		backendErr error
		mutate     func(m *swdv1.ForwardRequest)
		want       error
	}{
		// Some unknown backend failure: Internal.
		{"backend failure", errors.New("boom"), nil, nil},
		// A message the peer cannot convert: InvalidArgument.
		{"bad message", nil, func(m *swdv1.ForwardRequest) { m.Path = "http://evil/x" }, swderr.ErrBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, _ := startServer(t, backendFunc(func(http.ResponseWriter, *http.Request, transfer.Inbound) error {
				return tc.backendErr
			}), members{"node-a": true})
			m := outbound(http.MethodPost, "/x", nil)
			if tc.mutate != nil {
				tc.mutate(m)
			}
			rec := newRecorder()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := newClient(t).Forward(ctx, addr, m, rec)
			require.Error(t, err)
			assert.ErrorIs(t, err, swderr.ErrMaybeStarted)
			assert.NotErrorIs(t, err, swderr.ErrRefused)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.False(t, res.HeadWritten)
			assert.Empty(t, rec.Header())
		})
	}
}

// TestForwardUnreachablePeer: nothing listens at the address. The result is
// ErrRefused: the client waits (at most a second) for its connection to
// the peer to be up before it sends anything, so a peer it cannot connect
// to has certainly not taken the request, and it may be put back. The call
// must not hang.
func TestForwardUnreachablePeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := newRecorder()
	done := make(chan struct{})
	var res transfer.Result
	go func() {
		defer close(done)
		res, err = newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), rec)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Forward to an unreachable peer did not return after its context deadline")
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, swderr.ErrRefused)
	assert.NotErrorIs(t, err, swderr.ErrMaybeStarted)
	assert.False(t, res.HeadWritten)
	assert.Empty(t, rec.Header())
}

// TestForwardBrokenAfterHead: the backend writes the head and part of the
// body, then the stream breaks. The client must report an error with
// HeadWritten set (the answer is under way and cannot be replaced).
func TestForwardBrokenAfterHead(t *testing.T) {
	tests := []struct {
		name string
		// breakStream breaks the transfer once the head reached the client.
		breakStream func(cancel context.CancelFunc, gs *grpc.Server)
	}{
		// The sender's context ends (its client went away).
		{"client context canceled", func(cancel context.CancelFunc, _ *grpc.Server) { cancel() }},
		// The peer's gRPC server stops mid-answer.
		{"server stopped", func(_ context.CancelFunc, gs *grpc.Server) { gs.Stop() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, gs := startServer(t, backendFunc(func(w http.ResponseWriter, r *http.Request, _ transfer.Inbound) error {
				w.Header().Set("X-App", "yes")
				w.WriteHeader(http.StatusOK)
				_, _ = w.Write([]byte("partial"))
				<-r.Context().Done() // blocks until the stream breaks
				return r.Context().Err()
			}), members{"node-a": true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rec := newRecorder()
			type result struct {
				res transfer.Result
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), rec)
				done <- result{res, err}
			}()
			select {
			case <-rec.headCh:
			case <-ctx.Done():
				t.Fatal("head never reached the client")
			}
			tc.breakStream(cancel, gs)
			var got result
			select {
			case got = <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("Forward did not return after the stream broke")
			}
			require.Error(t, got.err)
			assert.True(t, got.res.HeadWritten)
			assert.Equal(t, http.StatusOK, got.res.Status)
			assert.NotErrorIs(t, got.err, swderr.ErrRefused)
		})
	}
}

// TestForwardBackendFailsAfterHead: a backend that wrote the head and then
// returns an error has produced an incomplete answer. The stream must end
// with an error status so the client sees a failure (and aborts its own
// client's response) instead of a clean end of a truncated body.
func TestForwardBackendFailsAfterHead(t *testing.T) {
	addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("partial"))
		return io.ErrUnexpectedEOF
	}), members{"node-a": true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), newRecorder())
	assert.True(t, res.HeadWritten)
	assert.Error(t, err, "a truncated answer must not be reported as complete")
}

// TestForwardOversizedHeadIsNotRefusal: the peer ran the request, but its
// answer's head is larger than the client's MaxMessageSize. gRPC reports
// that on the client as RESOURCE_EXHAUSTED, the same code a peer uses to
// refuse; the client must not call it a refusal, or the sender puts the
// request back and runs it a second time.
func TestForwardOversizedHeadIsNotRefusal(t *testing.T) {
	var ran atomic.Int32
	addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
		ran.Add(1)
		w.Header().Set("X-Big", strings.Repeat("a", 100<<10))
		w.WriteHeader(http.StatusOK)
		return nil
	}), members{"node-a": true})
	c, err := transfer.NewClient(transfer.ClientConfig{MaxMessageSize: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Forward(ctx, addr, outbound(http.MethodPost, "/", nil), newRecorder())
	require.Error(t, err)
	require.Equal(t, int32(1), ran.Load(), "the peer ran the request")
	assert.False(t, res.HeadWritten)
	assert.NotErrorIs(t, err, swderr.ErrRefused, "a request the peer ran is not refused")
	assert.ErrorIs(t, err, swderr.ErrMaybeStarted)
}

// TestForwardPeerSendsBadStatus: a head with an invalid status is a
// maybe-started failure and nothing is written to the client.
func TestForwardPeerSendsBadStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	swdv1.RegisterTransferServer(gs, rawServer(func(_ *swdv1.ForwardRequest, s swdv1.Transfer_ForwardServer) error {
		return s.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_Head{Head: &swdv1.ResponseHead{Status: 42}}})
	}))
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := newRecorder()
	res, err := newClient(t).Forward(ctx, ln.Addr().String(), outbound(http.MethodGet, "/", nil), rec)
	require.Error(t, err)
	assert.ErrorIs(t, err, swderr.ErrMaybeStarted)
	assert.False(t, res.HeadWritten)
	assert.Empty(t, rec.Header())
}

// TestForwardRawRefusalCodes: a refusal code counts as a refusal only when
// the server marked it with the RefusedKey trailer (a RESOURCE_EXHAUSTED can
// also come from the client's own gRPC library after the peer ran the
// request); everything else may have started.
func TestForwardRawRefusalCodes(t *testing.T) {
	tests := []struct {
		name    string
		code    codes.Code
		refused bool
	}{
		// Queue full, but not marked as a refusal by the server.
		{"resource exhausted", codes.ResourceExhausted, false},
		// Draining, but not marked as a refusal by the server.
		{"failed precondition", codes.FailedPrecondition, false},
		// Anything else may have started.
		{"unavailable", codes.Unavailable, false},
		{"internal", codes.Internal, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			gs := grpc.NewServer()
			swdv1.RegisterTransferServer(gs, rawServer(func(*swdv1.ForwardRequest, swdv1.Transfer_ForwardServer) error {
				return status.Error(tc.code, "peer says no")
			}))
			go func() { _ = gs.Serve(ln) }()
			t.Cleanup(gs.Stop)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = newClient(t).Forward(ctx, ln.Addr().String(), outbound(http.MethodGet, "/", nil), newRecorder())
			require.Error(t, err)
			assert.Equal(t, tc.refused, errors.Is(err, swderr.ErrRefused))
			assert.Equal(t, !tc.refused, errors.Is(err, swderr.ErrMaybeStarted))
		})
	}
}

// rawTransfer is a hand-written Transfer service.
type rawTransfer struct {
	swdv1.UnimplementedTransferServer
	f func(*swdv1.ForwardRequest, swdv1.Transfer_ForwardServer) error
}

func (s rawTransfer) Forward(m *swdv1.ForwardRequest, st swdv1.Transfer_ForwardServer) error {
	return s.f(m, st)
}

func rawServer(f func(*swdv1.ForwardRequest, swdv1.Transfer_ForwardServer) error) rawTransfer {
	return rawTransfer{f: f}
}

// TestForwardReportsAdmission: a backend that reports it queued the
// request makes the sender's Result carry when it learnt so, before the
// answer ended; one that does not, or a refusal, leaves it zero, and a
// second report or one after the head changes nothing.
func TestForwardReportsAdmission(t *testing.T) {
	tests := []struct {
		name    string
		serve   func(w http.ResponseWriter) error
		want    bool
		wantErr bool
	}{
		// Queued, then answered: admitted.
		{"admitted", func(w http.ResponseWriter) error {
			w.(transfer.AdmissionReporter).ReportAdmitted()
			w.(transfer.AdmissionReporter).ReportAdmitted() // twice: harmless
			_, err := w.Write([]byte("ok"))
			return err
		}, true, false},
		// A backend that does not queue (or an older peer): no report.
		{"not reported", func(w http.ResponseWriter) error { _, err := w.Write([]byte("ok")); return err }, false, false},
		// Reported after the head: too late, ignored.
		{"after the head", func(w http.ResponseWriter) error {
			w.WriteHeader(http.StatusOK)
			w.(transfer.AdmissionReporter).ReportAdmitted()
			return nil
		}, false, false},
		// Admitted, then timed out in the queue: the report stands and the
		// not-run marking still reaches the sender.
		{"admitted then not run", func(w http.ResponseWriter) error {
			w.(transfer.AdmissionReporter).ReportAdmitted()
			return swderr.ErrQueueTimeout
		}, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, _ *http.Request, _ transfer.Inbound) error {
				return tt.serve(w)
			}), members{"node-a": true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			before := time.Now()
			res, err := newClient(t).Forward(ctx, addr, outbound(http.MethodGet, "/", nil), newRecorder())
			if tt.wantErr {
				require.ErrorIs(t, err, swderr.ErrQueueTimeout)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, !res.Admitted.IsZero(), "admitted at %v", res.Admitted)
			if tt.want {
				assert.False(t, res.Admitted.Before(before), "admitted before the transfer began")
			}
		})
	}
}

// TestForwardThenWhole: ForwardThen calls whole once, as soon as the
// answer is known whole: at its last byte when a Content-Length is
// declared (before the stream ends: the backend below waits for whole
// before returning), at the stream's end otherwise, and never for an
// answer cut off before it was whole.
func TestForwardThenWhole(t *testing.T) {
	body := bytes.Repeat([]byte("w"), 2*testChunk+5)
	tests := []struct {
		name string
		// declare sets a Content-Length (the body's, or more than is sent)
		declare int
		// waitWhole makes the backend wait for whole before returning
		waitWhole bool
		// cut cancels the call once the head arrived
		cut bool
		// wantWhole: whole was called; wantBefore: that many bytes had
		// reached the client when it was
		wantWhole  bool
		wantBefore int
	}{
		// the last byte: before it is written, before the stream's end
		{"content length", len(body), true, false, true, 2 * testChunk},
		// no length: only the stream's end tells
		{"no content length", 0, false, false, true, len(body)},
		// cut before the declared length arrived: never whole
		{"cut short", len(body) + 10, false, true, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			released := make(chan struct{})
			addr, _ := startServer(t, backendFunc(func(w http.ResponseWriter, r *http.Request, _ transfer.Inbound) error {
				if tc.declare > 0 {
					w.Header().Set("Content-Length", fmt.Sprint(tc.declare))
				}
				_, _ = w.Write(body)
				if tc.waitWhole || tc.cut {
					select {
					case <-released:
					case <-r.Context().Done():
						return r.Context().Err()
					}
				}
				return nil
			}), members{"node-a": true})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			rec := newRecorder()
			if tc.cut {
				go func() {
					<-rec.headCh
					cancel()
				}()
			}
			calls, before := 0, -1
			_, err := newClient(t).ForwardThen(ctx, addr, outbound(http.MethodGet, "/", nil), rec, func() {
				calls++
				before = rec.Body.Len()
				close(released)
			})
			if !tc.wantWhole {
				require.Error(t, err)
				assert.Zero(t, calls, "an answer cut off is never whole")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, 1, calls)
			assert.Equal(t, tc.wantBefore, before)
			assert.Equal(t, body, rec.Body.Bytes())
		})
	}
}
