package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// waitLimit bounds every poll in these tests; nothing normally comes close.
const waitLimit = 10 * time.Second

// eventually polls cond until it holds or waitLimit passes.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, waitLimit, 2*time.Millisecond, append([]any{msg}, args...)...)
}

// seenReq is a request as the test application saw it.
type seenReq struct {
	Method string
	Host   string
	Path   string
	Header http.Header
	Body   []byte
}

// testApp is a node's application. It answers with X-Served-By set to its
// node's name and records every request by X-Request-Id. Paths:
//
//	/hold    blocks until release() (or the request ends)
//	/stream  writes and flushes "first", waits for release(), writes "second"
//	/cut     writes and flushes "partial", then aborts the connection
//	other    answers "<node> <method> <body length>" with trailer X-Sum
type testApp struct {
	node    string
	srv     *httptest.Server
	release chan struct{}
	once    sync.Once

	mu   sync.Mutex
	seen map[string]int
	reqs map[string]seenReq
}

func newTestApp(t *testing.T, node string) *testApp {
	t.Helper()
	a := &testApp{node: node, release: make(chan struct{}), seen: map[string]int{}, reqs: map[string]seenReq{}}
	a.srv = httptest.NewServer(a)
	t.Cleanup(a.srv.Close)  // runs last: after everything was released
	t.Cleanup(a.releaseAll) // runs before the server closes
	return a
}

func (a *testApp) releaseAll() { a.once.Do(func() { close(a.release) }) }

// count reports how often the request with id reached the app.
func (a *testApp) count(id string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen[id]
}

// total reports how many requests reached the app.
func (a *testApp) total() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for _, c := range a.seen {
		n += c
	}
	return n
}

func (a *testApp) request(id string) (seenReq, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r, ok := a.reqs[id]
	return r, ok
}

func (a *testApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get("X-Request-Id")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the body broke off: the proxy is answering
	}
	a.mu.Lock()
	a.seen[id]++
	a.reqs[id] = seenReq{Method: r.Method, Host: r.Host, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: body}
	a.mu.Unlock()
	w.Header().Set("X-Served-By", a.node)
	switch r.URL.Path {
	case "/hold":
		select {
		case <-a.release:
		case <-r.Context().Done():
			return
		}
	case "/stream":
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "first")
		http.NewResponseController(w).Flush()
		select {
		case <-a.release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "second")
		return
	case "/session":
		http.SetCookie(w, &http.Cookie{Name: "SID", Value: "s-" + id})
	case "/cut":
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}
	w.Header().Set("Trailer", "X-Sum")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "%s %s %d", a.node, r.Method, len(body))
	w.Header().Set("X-Sum", strconv.Itoa(len(body)))
}

// peerMap is a fake Peers.
type peerMap map[string]string

func (p peerMap) GRPCAddr(name string) (string, bool) {
	a, ok := p[name]
	return a, ok
}

// members is a fake transfer.MembershipChecker.
type members map[string]bool

func (m members) IsMember(name string) bool { return m[name] }

// node is one SWD node: app, queue, Handler behind an HTTP front, and a
// Transfer gRPC server with the Handler as its Backend.
type node struct {
	name     string
	app      *testApp
	q        *queue.Queue
	h        *Handler
	front    *httptest.Server
	gs       *grpc.Server
	grpcAddr string
}

type nodeOpts struct {
	queue queue.Config
	cfg   func(c *Config)
	peers Peers
	// admitter, when set, is installed before the node serves.
	admitter Admitter
}

// testQueue is a queue config with m=1, room to wait, and a timeout that
// only ends a test that went wrong.
func testQueue() queue.Config {
	return queue.Config{Concurrency: 1, Limit: 100, Timeout: 3 * waitLimit}
}

func newNode(t *testing.T, name string, o nodeOpts) *node {
	t.Helper()
	n := &node{name: name, app: newTestApp(t, name)}
	if o.queue == (queue.Config{}) {
		o.queue = testQueue()
	}
	var err error
	n.q, err = queue.New(o.queue)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.App = n.app.srv.URL
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	fwd, err := transfer.NewClient(transfer.DefaultClientConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = fwd.Close() })
	if o.peers == nil {
		o.peers = peerMap{}
	}
	n.h, err = New(cfg, n.q, fwd, o.peers, nil)
	require.NoError(t, err)
	if o.admitter != nil {
		n.h.SetAdmitter(o.admitter)
	}
	n.front = httptest.NewServer(n.h)
	t.Cleanup(n.front.Close)

	scfg := transfer.DefaultServerConfig()
	scfg.NodeName = name
	srv, err := transfer.NewServer(scfg, n.h, members{"node-a": true, "node-b": true})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	n.gs = grpc.NewServer()
	swdv1.RegisterTransferServer(n.gs, srv)
	go func() { _ = n.gs.Serve(ln) }()
	t.Cleanup(n.gs.Stop)
	n.grpcAddr = ln.Addr().String()
	t.Cleanup(n.app.releaseAll) // first of this node's cleanups
	return n
}

// pair builds node-b, then node-a with node-b as its only peer. Both apps
// are released first at cleanup, so no handler is left blocked.
func pair(t *testing.T, a, b nodeOpts) (*node, *node) {
	t.Helper()
	nb := newNode(t, "node-b", b)
	a.peers = peerMap{"node-b": nb.grpcAddr}
	na := newNode(t, "node-a", a)
	t.Cleanup(func() { na.app.releaseAll(); nb.app.releaseAll() })
	return na, nb
}

// result is a finished client request.
type result struct {
	resp *http.Response
	body []byte
	err  error
}

// newHTTPClient returns a client with its own connections.
func newHTTPClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// newReq builds a request to base with an id.
func newReq(t *testing.T, ctx context.Context, method, base, path, id string, body io.Reader) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(ctx, method, base+path, body)
	require.NoError(t, err)
	if id != "" {
		r.Header.Set("X-Request-Id", id)
	}
	return r
}

// goDo sends r in the background and reads the whole answer.
func goDo(c *http.Client, r *http.Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := c.Do(r)
		if err != nil {
			ch <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- result{resp: resp, body: b, err: err}
	}()
	return ch
}

// await waits for a background request's result.
func await(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(3 * waitLimit):
		t.Fatal("request did not finish")
		return result{}
	}
}

// hold starts a /hold request on n that occupies its only slot, and waits
// until the app has it.
func hold(t *testing.T, c *http.Client, n *node, id string) <-chan result {
	t.Helper()
	ch := goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/hold", id, nil))
	eventually(t, func() bool { return n.app.count(id) == 1 }, "holder %s never reached %s's app", id, n.name)
	return ch
}

// waiting returns the ids of the requests waiting in q, head first.
func waiting(q *queue.Queue) []string {
	var ids []string
	for _, v := range q.Snapshot() {
		ids = append(ids, v.(*pending).id)
	}
	return ids
}
