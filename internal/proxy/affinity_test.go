package proxy

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// homes is a fake Router: the key is the X-User header, a key "b..." lives
// on node-b and anything else here; X-Priority: 1 is the high class. It
// records what it tagged.
type homes struct {
	mu     sync.Mutex
	tagged map[string]int // key -> priority
}

func (h *homes) Classify(r *http.Request) (string, int) {
	k := r.Header.Get("X-User")
	p := 0
	if r.Header.Get("X-Priority") == "1" {
		p = 1
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tagged == nil {
		h.tagged = map[string]int{}
	}
	h.tagged[k] = p
	return k, p
}

func (h *homes) Place(key string) string {
	if strings.HasPrefix(key, "b") {
		return "node-b"
	}
	return ""
}

func keyedReq(t *testing.T, base, id, key string) *http.Request {
	t.Helper()
	r := newReq(t, context.Background(), http.MethodGet, base, "/", id, nil)
	if key != "" {
		r.Header.Set("X-User", key)
	}
	return r
}

// TestRouterSendsKeyedRequestsHome: a keyed request whose place is node-b
// runs there although node-a is idle; a request keyed for node-a, and an
// unkeyed one, run on node-a; node-b tags what it receives too.
func TestRouterSendsKeyedRequestsHome(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{})
	ra, rb := &homes{}, &homes{}
	na.h.SetRouter(ra)
	nb.h.SetRouter(rb)
	c := newHTTPClient(t)
	for _, tc := range []struct {
		id, key, servedBy string
	}{
		// Homed on node-b: sent there at once, over the transfer path.
		{"x", "b-user", "node-b"},
		// Homed here.
		{"y", "a-user", "node-a"},
		// No key: served where it arrived.
		{"z", "", "node-a"},
	} {
		res := await(t, goDo(c, keyedReq(t, na.front.URL, tc.id, tc.key)))
		require.NoError(t, res.err, tc.id)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode, tc.id)
		assert.Equal(t, tc.servedBy, res.resp.Header.Get("X-Served-By"), tc.id)
	}
	assert.Equal(t, 1, nb.app.count("x"))
	assert.Zero(t, na.app.count("x"))
	rb.mu.Lock()
	_, tagged := rb.tagged["b-user"]
	rb.mu.Unlock()
	assert.True(t, tagged, "the home node tags a transferred request with its key")
}

// TestRouterRefusedHomeServedHere: when the home refuses (full), the keyed
// request takes its place in node-a's queue and node-a serves it.
func TestRouterRefusedHomeServedHere(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{queue: queue.Config{Concurrency: 1, Limit: 1, Timeout: 3 * waitLimit}})
	na.h.SetRouter(&homes{})
	c := newHTTPClient(t)
	hold(t, c, nb, "b-holder")
	goDo(c, newReq(t, context.Background(), http.MethodGet, nb.front.URL, "/", "b-waiter", nil))
	eventually(t, func() bool { return nb.q.Waiting() == 1 }, "b-waiter never queued")
	res := await(t, goDo(c, keyedReq(t, na.front.URL, "x", "b-user")))
	require.NoError(t, res.err)
	assert.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))
	assert.Equal(t, 1, na.app.count("x"), "served exactly once, here")
	assert.Zero(t, nb.app.count("x"))
	nb.app.releaseAll()
}

// TestRouterTagsPriority: the ticket carries the router's key and class
// (seen through a scheduler that records them).
func TestRouterTagsPriority(t *testing.T) {
	rec := &tagRecorder{}
	q := testQueue()
	q.Scheduler = rec
	na := newNode(t, "node-a", nodeOpts{queue: q})
	na.h.SetRouter(&homes{})
	c := newHTTPClient(t)
	r := keyedReq(t, na.front.URL, "p", "a-vip")
	r.Header.Set("X-Priority", "1")
	res := await(t, goDo(c, r))
	require.NoError(t, res.err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, []string{"a-vip/1"}, rec.seen)
}

// tagRecorder is a FIFO scheduler recording each granted ticket's key and
// priority.
type tagRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (s *tagRecorder) Pick(w *queue.Waiting) *queue.Ticket { return w.Front() }
func (s *tagRecorder) Granted(t *queue.Ticket) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen = append(s.seen, t.Affinity+"/"+string(rune('0'+t.Priority)))
}
func (s *tagRecorder) Released(*queue.Ticket) {}
