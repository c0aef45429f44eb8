package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// TestTransferServedByPeer: a request waiting on node-a and handed to
// node-b is served by node-b's app; the client gets node-b's answer (status,
// headers, body, trailers) and node-a's app never sees the request.
func TestTransferServedByPeer(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")

	r := newReq(t, context.Background(), http.MethodPost, na.front.URL, "/work?ms=1", "x", strings.NewReader("payload"))
	r.Host = "front.example"
	r.Header.Set("Connection", "X-Hop")
	r.Header.Set("X-Hop", "secret")
	r.Header.Set("X-End", "1")
	x := goDo(c, r)
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued on node-a")
	require.Equal(t, 1, na.q.HandOff(1, "node-b"))

	res := await(t, x)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, "node-b", res.resp.Header.Get("X-Served-By"))
	assert.Equal(t, "node-b POST 7", string(res.body))
	assert.Equal(t, "7", res.resp.Trailer.Get("X-Sum"), "trailers survive the transfer")
	assert.Equal(t, 1, nb.app.count("x"))
	assert.Zero(t, na.app.count("x"), "node-a's app saw a transferred request")

	got, ok := nb.app.request("x")
	require.True(t, ok)
	assert.Equal(t, "front.example", got.Host)
	assert.Equal(t, "/work?ms=1", got.Path)
	assert.Equal(t, "payload", string(got.Body))
	assert.Equal(t, "127.0.0.1", got.Header.Get("X-Forwarded-For"))
	assert.Equal(t, "http", got.Header.Get("X-Forwarded-Proto"))
	assert.Equal(t, "front.example", got.Header.Get("X-Forwarded-Host"))
	assert.Equal(t, "1", got.Header.Get("X-End"))
	assert.Empty(t, got.Header.Get("X-Hop"))

	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	assert.Zero(t, na.q.Load())
	assert.Zero(t, nb.q.Load())
}

// TestTransferRefusedServedLocally: when node-b refuses, the request goes
// back into node-a's queue and node-a serves it, exactly once.
func TestTransferRefusedServedLocally(t *testing.T) {
	tests := []struct {
		name string
		// refuse makes node-b refuse transfers; it may start requests.
		refuse func(t *testing.T, c *http.Client, nb *node)
	}{
		{
			// node-b's queue is full: one in service, one waiting, limit 1.
			name: "peer queue full",
			refuse: func(t *testing.T, c *http.Client, nb *node) {
				hold(t, c, nb, "b-holder")
				goDo(c, newReq(t, context.Background(), http.MethodGet, nb.front.URL, "/", "b-waiter", nil))
				eventually(t, func() bool { return nb.q.Waiting() == 1 }, "b-waiter never queued")
			},
		},
		{
			// node-b is draining.
			name:   "peer draining",
			refuse: func(_ *testing.T, _ *http.Client, nb *node) { nb.q.Drain() },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			na, nb := pair(t, nodeOpts{}, nodeOpts{queue: queue.Config{Concurrency: 1, Limit: 1, Timeout: 3 * waitLimit}})
			c := newHTTPClient(t)
			tc.refuse(t, c, nb)
			holder := hold(t, c, na, "holder")
			x := goDo(c, newReq(t, context.Background(), http.MethodPost, na.front.URL, "/", "x", strings.NewReader("p")))
			eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued on node-a")
			require.Equal(t, 1, na.q.HandOff(1, "node-b"))

			// The refused request is back in node-a's queue.
			eventually(t, func() bool { return na.q.Waiting() == 1 }, "x not put back on node-a")
			assert.Equal(t, []string{"x"}, waiting(na.q))

			na.app.releaseAll()
			require.NoError(t, await(t, holder).err)
			res := await(t, x)
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode)
			assert.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))
			assert.Equal(t, "node-a POST 1", string(res.body))
			assert.Equal(t, 1, na.app.count("x"), "served exactly once on node-a")
			assert.Zero(t, nb.app.count("x"))
		})
	}
}

// TestTransferUnknownPeer: a hand-off to a peer with no known address is
// put back and served locally.
func TestTransferUnknownPeer(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")
	x := goDo(c, newReq(t, context.Background(), http.MethodPost, na.front.URL, "/", "x", nil))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
	require.Equal(t, 1, na.q.HandOff(1, "node-zz"))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x not put back")
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	res := await(t, x)
	require.NoError(t, res.err)
	assert.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))
	assert.Equal(t, 1, na.app.count("x"))
	assert.Zero(t, nb.app.total())
}

// TestTransferPlacement: a transferred request lands in node-b's queue by
// its original arrival time ("arrival") or at the tail ("tail").
func TestTransferPlacement(t *testing.T) {
	tests := []struct {
		placement string
		want      []string
	}{
		// x arrived on node-a before y1 and y2 arrived on node-b: ahead of them.
		{"arrival", []string{"x", "y1", "y2"}},
		// At the tail, behind everything already waiting.
		{"tail", []string{"y1", "y2", "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.placement, func(t *testing.T) {
			na, nb := pair(t, nodeOpts{}, nodeOpts{cfg: func(c *Config) { c.Placement = tc.placement }})
			c := newHTTPClient(t)
			ha := hold(t, c, na, "a-holder")
			hb := hold(t, c, nb, "b-holder")

			x := goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/", "x", nil))
			eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued on node-a")
			y1 := goDo(c, newReq(t, context.Background(), http.MethodGet, nb.front.URL, "/", "y1", nil))
			eventually(t, func() bool { return nb.q.Waiting() == 1 }, "y1 never queued on node-b")
			y2 := goDo(c, newReq(t, context.Background(), http.MethodGet, nb.front.URL, "/", "y2", nil))
			eventually(t, func() bool { return nb.q.Waiting() == 2 }, "y2 never queued on node-b")

			require.Equal(t, 1, na.q.HandOff(1, "node-b"))
			eventually(t, func() bool { return nb.q.Waiting() == 3 }, "x never reached node-b's queue")
			assert.Equal(t, tc.want, waiting(nb.q))

			nb.app.releaseAll()
			na.app.releaseAll()
			for _, ch := range []<-chan result{ha, hb, y1, y2} {
				require.NoError(t, await(t, ch).err)
			}
			res := await(t, x)
			require.NoError(t, res.err)
			assert.Equal(t, "node-b", res.resp.Header.Get("X-Served-By"))
			assert.Zero(t, na.app.count("x"))
		})
	}
}

// TestTransferFailsAfterPeerStarted: node-b's gRPC server stops while its
// app runs the transferred request. The transfer may have started: a GET
// is run again locally exactly once, a POST gets 502.
func TestTransferFailsAfterPeerStarted(t *testing.T) {
	tests := []struct {
		method     string
		wantStatus int
		wantLocal  int
	}{
		// Idempotent: put back as local-only and served by node-a.
		{http.MethodGet, http.StatusOK, 1},
		// Not idempotent: never run twice; the client gets a 502.
		{http.MethodPost, http.StatusBadGateway, 0},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			na, nb := pair(t, nodeOpts{}, nodeOpts{})
			c := newHTTPClient(t)
			holder := hold(t, c, na, "holder")
			x := goDo(c, newReq(t, context.Background(), tc.method, na.front.URL, "/hold", "x", nil))
			eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued on node-a")
			require.Equal(t, 1, na.q.HandOff(1, "node-b"))
			eventually(t, func() bool { return nb.app.count("x") == 1 }, "x never started on node-b")
			nb.gs.Stop()

			if tc.method == http.MethodGet {
				eventually(t, func() bool { return na.q.Waiting() == 1 }, "x not put back on node-a")
				assert.Zero(t, na.q.HandOff(1, "node-b"), "a re-run request is local-only")
				na.app.releaseAll()
			}
			res := await(t, x)
			require.NoError(t, res.err)
			assert.Equal(t, tc.wantStatus, res.resp.StatusCode)
			if tc.wantStatus == http.StatusOK {
				assert.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))
			} else {
				assert.NotEmpty(t, res.resp.Header.Get("X-Swd-Error"))
			}
			assert.Equal(t, tc.wantLocal, na.app.count("x"))
			assert.Equal(t, 1, nb.app.count("x"), "started once on node-b")
			na.app.releaseAll()
			require.NoError(t, await(t, holder).err)
		})
	}
}

// TestTransferAppCutOffOnPeer: node-b's app breaks off its answer
// mid-body. The client on node-a must see a broken response, as it would if
// node-a had served it (TestLocalAppCutOff), not a clean short one.
func TestTransferAppCutOffOnPeer(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")
	x := goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/cut", "x", nil))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
	require.Equal(t, 1, na.q.HandOff(1, "node-b"))
	res := await(t, x)
	assert.Equal(t, 1, nb.app.count("x"))
	require.Error(t, res.err, "got a clean %q instead of a broken response", res.body)
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
}

// TestTransferTimeoutMidAnswerAbortsClient: a transfer whose answer is
// still streaming when TransferTimeout ends must abort the client's
// response (it is incomplete), not end it cleanly. The app on node-b
// writes and flushes "first", then waits. The timeout must expire after the
// head arrived; on a machine so slow that it expires before (a 504), the
// next, longer timeout is tried.
func TestTransferTimeoutMidAnswerAbortsClient(t *testing.T) {
	for _, timeout := range []time.Duration{300 * time.Millisecond, time.Second, 4 * time.Second} {
		na, _ := pair(t, nodeOpts{cfg: func(c *Config) { c.TransferTimeout = timeout }}, nodeOpts{})
		c := newHTTPClient(t)
		holder := hold(t, c, na, "holder")
		x := goDo(c, newReq(t, context.Background(), http.MethodPost, na.front.URL, "/stream", "x", nil))
		eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
		require.Equal(t, 1, na.q.HandOff(1, "node-b"))
		res := await(t, x)
		na.app.releaseAll()
		require.NoError(t, await(t, holder).err)
		if res.err == nil && res.resp.StatusCode == http.StatusGatewayTimeout {
			continue // timed out before the head: inconclusive, try longer
		}
		require.Error(t, res.err, "got a clean, truncated %q", res.body)
		return
	}
	t.Fatal("the head never arrived within the transfer timeout")
}

// headThenFail is a Transfer service that sends a head and part of a body,
// then fails the stream.
type headThenFail struct {
	swdv1.UnimplementedTransferServer
}

func (headThenFail) Forward(_ *swdv1.ForwardRequest, s swdv1.Transfer_ForwardServer) error {
	if err := s.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_Head{Head: &swdv1.ResponseHead{Status: 200, ServedBy: "node-c"}}}); err != nil {
		return err
	}
	if err := s.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_BodyChunk{BodyChunk: []byte("part")}}); err != nil {
		return err
	}
	return status.Error(codes.Internal, "peer broke")
}

// TestTransferBrokenAfterHeadAbortsClient: a transfer whose answer breaks
// after the head aborts the client's response (the head cannot be taken
// back), and nothing is re-run.
func TestTransferBrokenAfterHeadAbortsClient(t *testing.T) {
	na := newNode(t, "node-a", nodeOpts{peers: peerMap{"node-c": fakePeer(t, headThenFail{})}})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")
	x := goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/", "x", nil))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
	require.Equal(t, 1, na.q.HandOff(1, "node-c"))
	res := await(t, x)
	require.Error(t, res.err, "client must see the answer as broken")
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	assert.Zero(t, na.app.count("x"))
}

// waitRecorder is a ResponseRecorder that takes a queue-wait report, as the
// transfer server's stream writer does.
type waitRecorder struct {
	*httptest.ResponseRecorder
	wait atomic.Int64
}

func (w *waitRecorder) ReportQueueWait(d time.Duration) { w.wait.Store(int64(d)) }

// TestServeTransferredReportsQueueWait: a transferred request reports how
// long it waited in this node's queue (it goes back to the sender in the
// answer's head): at least as long as the test kept the only slot busy
// after seeing it queued, so never zero.
func TestServeTransferredReportsQueueWait(t *testing.T) {
	nb := newNode(t, "node-b", nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, nb, "holder")

	m := transfer.ToMessage(transfer.Outbound{ID: "x", Request: httptest.NewRequest(http.MethodGet, "/", nil), Arrival: time.Now(), From: "node-a"})
	r, in, err := transfer.FromMessage(context.Background(), m)
	require.NoError(t, err)
	w := &waitRecorder{ResponseRecorder: httptest.NewRecorder()}
	done := make(chan error, 1)
	go func() { done <- nb.h.ServeTransferred(w, r, in) }()
	eventually(t, func() bool { return nb.q.Waiting() == 1 }, "x never queued on node-b")
	queued := time.Now()
	held := time.Since(queued) // x was pushed before queued and is granted after this
	nb.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * waitLimit):
		t.Fatal("ServeTransferred did not return")
	}
	assert.Equal(t, http.StatusOK, w.Code)
	assert.GreaterOrEqual(t, time.Duration(w.wait.Load()), held, "reported wait shorter than the time the slot was held")
}

// TestServeTransferredNeverPanics: with MaxHops 2 a request transferred to
// node-b may move on to node-c. If node-c's answer breaks after its head,
// node-b's ServeTransferred runs inside a gRPC handler, which does not
// recover panics: it must return an error, not panic(http.ErrAbortHandler)
// (which would crash the daemon).
func TestServeTransferredNeverPanics(t *testing.T) {
	nb := newNode(t, "node-b", nodeOpts{peers: peerMap{"node-c": fakePeer(t, headThenFail{})}, cfg: func(c *Config) { c.MaxHops = 2 }})
	c := newHTTPClient(t)
	holder := hold(t, c, nb, "holder")

	m := transfer.ToMessage(transfer.Outbound{ID: "x", Request: httptest.NewRequest(http.MethodGet, "/", nil), Arrival: time.Now(), From: "node-a"})
	r, in, err := transfer.FromMessage(context.Background(), m)
	require.NoError(t, err)
	done := make(chan any, 1)
	go func() {
		defer func() { done <- recover() }()
		_ = nb.h.ServeTransferred(httptest.NewRecorder(), r, in)
	}()
	eventually(t, func() bool { return nb.q.Waiting() == 1 }, "x never queued on node-b")
	require.Equal(t, 1, nb.q.HandOff(1, "node-c"), "a 1-hop request may move once more with MaxHops 2")
	select {
	case p := <-done:
		assert.Nil(t, p, "ServeTransferred panicked")
		if e, ok := p.(error); ok {
			assert.False(t, errors.Is(e, http.ErrAbortHandler))
		}
	case <-time.After(3 * waitLimit):
		t.Fatal("ServeTransferred did not return")
	}
	nb.app.releaseAll()
	require.NoError(t, await(t, holder).err)
}

// fakePeer serves srv as a Transfer service on a free loopback port until
// the test ends, and returns its address.
func fakePeer(t *testing.T, srv swdv1.TransferServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer()
	swdv1.RegisterTransferServer(gs, srv)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	return ln.Addr().String()
}

// canceledPeer is a Transfer service whose calls end Canceled before any
// answer, as a peer whose own call was cut does.
type canceledPeer struct {
	swdv1.UnimplementedTransferServer
}

func (canceledPeer) Forward(*swdv1.ForwardRequest, swdv1.Transfer_ForwardServer) error {
	return status.Error(codes.Canceled, "peer's call canceled")
}

// TestTransferCanceledByPeerAnswers502: a POST whose transfer a peer ended
// with Canceled (it may have started it) gets a 502 while its client still
// waits: never the empty 200 of a handler that wrote nothing, which is what
// a cancellation taken for "client gone" used to give.
func TestTransferCanceledByPeerAnswers502(t *testing.T) {
	na := newNode(t, "node-a", nodeOpts{peers: peerMap{"node-c": fakePeer(t, canceledPeer{})}})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")
	x := goDo(c, newReq(t, context.Background(), http.MethodPost, na.front.URL, "/", "x", strings.NewReader("payload")))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
	require.Equal(t, 1, na.q.HandOff(1, "node-c"))
	res := await(t, x)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusBadGateway, res.resp.StatusCode, "body %q", res.body)
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	assert.Zero(t, na.app.count("x"), "a POST that may have started elsewhere is not run again")
}

// errBody fails on its first read, as a ForwardStream body whose sender's
// call broke does.
type errBody struct{ err error }

func (b errBody) Read([]byte) (int, error) { return 0, b.err }
func (errBody) Close() error               { return nil }

// TestStreamedBodyFailureIsRefusal: a streamed transfer whose body never
// arrived whole was not run, whatever broke it, so ServeTransferred refuses
// it (the sender keeps the request), mapped to a refusal code.
func TestStreamedBodyFailureIsRefusal(t *testing.T) {
	nb := newNode(t, "node-b", nodeOpts{})
	cases := []struct {
		name string
		err  error
	}{
		// The sender's call was cut mid-body.
		{"sender gone", fmt.Errorf("%w: recv: %w", swderr.ErrClientGone, context.Canceled)},
		// The sender stopped sending (--body-idle-timeout).
		{"stall", swderr.ErrBodyTimeout},
		// Fewer bytes than announced.
		{"short", fmt.Errorf("%w: short body", swderr.ErrBadRequest)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := transfer.ToMessage(transfer.Outbound{ID: "x", Request: httptest.NewRequest(http.MethodPost, "/", nil), Arrival: time.Now(), From: "node-a"})
			r, in, err := transfer.FromMessage(context.Background(), m)
			require.NoError(t, err)
			in.Streamed = true
			r.Body, r.ContentLength = errBody{tc.err}, 10<<20
			err = nb.h.ServeTransferred(httptest.NewRecorder(), r, in)
			require.Error(t, err)
			assert.True(t, swderr.IsRefusal(swderr.ToGRPC(err)), "not a refusal: %v", err)
			assert.Zero(t, nb.app.count("x"))
		})
	}
}
