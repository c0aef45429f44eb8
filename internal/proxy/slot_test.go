package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// stubbornApp ignores disconnects, as most real apps do: every request
// works for its full time whatever happens to its connection. It records
// the most requests it ever had at once.
type stubbornApp struct {
	work     time.Duration
	now, top atomic.Int64
	done     atomic.Int64
}

func (a *stubbornApp) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := a.now.Add(1)
	for {
		top := a.top.Load()
		if n <= top || a.top.CompareAndSwap(top, n) {
			break
		}
	}
	time.Sleep(a.work) // ignores the request's context on purpose
	a.now.Add(-1)
	a.done.Add(1)
	_, _ = w.Write([]byte("done"))
}

// A client that leaves while the app works on its request does not free
// the app slot: the next request reaches the app only when the app's answer
// has ended, so the app never has more than m requests, over HTTP/1 and
// over h2c with streams reset at once (rapid reset). Issue 17, item 1.
func TestClientLeavingKeepsAppSlot(t *testing.T) {
	cases := []struct {
		name string
		h2c  bool // HTTP/2 with prior knowledge: a leaving client resets its stream
	}{
		// HTTP/1.1: the client closes its connection after 30 ms.
		{"http1 disconnect", false},
		// h2c: the client resets each stream after 30 ms on one connection.
		{"h2c rapid reset", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			const m, clients = 2, 16
			app := &stubbornApp{work: 150 * time.Millisecond}
			appSrv := httptest.NewServer(app)
			t.Cleanup(appSrv.Close)
			q, err := queue.New(queue.Config{Concurrency: m, Limit: 100, Timeout: 3 * waitLimit})
			require.NoError(t, err)
			cfg := DefaultConfig()
			cfg.NodeName = "node-a"
			cfg.App = appSrv.URL
			h, err := New(cfg, q, nil, peerMap{}, nil)
			require.NoError(t, err)
			front := httptest.NewUnstartedServer(h)
			var protos http.Protocols
			protos.SetHTTP1(true)
			protos.SetUnencryptedHTTP2(true)
			front.Config.Protocols = &protos
			front.Start()
			t.Cleanup(front.Close)

			tr := &http.Transport{}
			if tc.h2c {
				var p http.Protocols
				p.SetUnencryptedHTTP2(true)
				tr.Protocols = &p
			}
			t.Cleanup(tr.CloseIdleConnections)
			c := &http.Client{Transport: tr}
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
					defer cancel()
					resp, err := c.Do(newReq(t, ctx, http.MethodGet, front.URL, "/work", "", nil))
					if err == nil {
						_ = resp.Body.Close()
					}
				}()
			}
			wg.Wait()
			// Every request that reached the app finishes, and the queue
			// empties: nobody waits for anything any more.
			eventually(t, func() bool { return q.InFlight() == 0 && q.Waiting() == 0 && app.now.Load() == 0 },
				"the queue never emptied (in flight %d, waiting %d)", q.InFlight(), q.Waiting())
			assert.LessOrEqual(t, app.top.Load(), int64(m), "the app had more than m requests at once")
			assert.Positive(t, app.done.Load(), "no request reached the app")
		})
	}
}

// An app that ignores a request whose client left and never answers it
// gets its connection closed after AbandonAfter, which frees the slot for
// the next request.
func TestAbandonAfterFreesSlot(t *testing.T) {
	block := make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/never" {
			<-block // ignores the request's context
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(app.Close)
	t.Cleanup(func() { close(block) })
	q, err := queue.New(queue.Config{Concurrency: 1, Limit: 10, Timeout: 3 * waitLimit})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.NodeName, cfg.App, cfg.AbandonAfter = "node-a", app.URL, 100*time.Millisecond
	h, err := New(cfg, q, nil, peerMap{}, nil)
	require.NoError(t, err)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	c := newHTTPClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	gone := goDo(c, newReq(t, ctx, http.MethodGet, front.URL, "/never", "", nil))
	eventually(t, func() bool { return q.InFlight() == 1 }, "the request never reached the app")
	cancel()
	require.Error(t, await(t, gone).err)
	// The slot is still the app's until the abandon timer closes its
	// connection; then the next request is served.
	res := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, front.URL, "/x", "", nil)))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
}

// After a client left and its app connection was half-closed, the app's
// connections are still sound: every later request is answered 200 (a
// half-closed connection is never reused for another request).
func TestHalfClosedConnectionNotReused(t *testing.T) {
	app := &stubbornApp{work: 50 * time.Millisecond}
	appSrv := httptest.NewServer(app)
	t.Cleanup(appSrv.Close)
	q, err := queue.New(queue.Config{Concurrency: 1, Limit: 100, Timeout: 3 * waitLimit})
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.NodeName, cfg.App = "node-a", appSrv.URL
	h, err := New(cfg, q, nil, peerMap{}, nil)
	require.NoError(t, err)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	c := newHTTPClient(t)
	for i := range 10 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_, _ = c.Do(newReq(t, ctx, http.MethodGet, front.URL, "/leave", "", nil))
		cancel()
		res := await(t, goDo(c, newReq(t, context.Background(), http.MethodPost, front.URL, "/stay", "", strings.NewReader("body"))))
		require.NoError(t, res.err, "round %d", i)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode, "round %d: %s", i, res.body)
	}
}
