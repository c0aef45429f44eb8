package proxy

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/transfer"
)

// gatedNode is a dispatch target: a Transfer server whose backend holds
// each request (by X-Request-Id) until the test opens its gate.
type gatedNode struct {
	name string
	addr string

	mu      sync.Mutex
	gates   map[string]chan struct{}
	arrived map[string]bool
}

func (g *gatedNode) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.gates[id]
	if !ok {
		ch = make(chan struct{})
		g.gates[id] = ch
	}
	return ch
}

func (g *gatedNode) open(id string) { close(g.gate(id)) }

func (g *gatedNode) has(id string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.arrived[id]
}

func (g *gatedNode) ServeTransferred(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
	id := r.Header.Get("X-Request-Id")
	gate := g.gate(id)
	g.mu.Lock()
	g.arrived[id] = true
	g.mu.Unlock()
	if !in.Dispatched {
		w.WriteHeader(http.StatusTeapot)
		return nil
	}
	select {
	case <-gate:
	case <-r.Context().Done():
		return r.Context().Err()
	}
	w.Header().Set("X-Served-By", g.name)
	_, _ = fmt.Fprintf(w, "%s %s", g.name, id)
	return nil
}

func newGatedNode(t *testing.T, name string) *gatedNode {
	t.Helper()
	g := &gatedNode{name: name, gates: map[string]chan struct{}{}, arrived: map[string]bool{}}
	cfg := transfer.DefaultServerConfig()
	cfg.NodeName = name
	srv, err := transfer.NewServer(cfg, g, members{"dispatcher": true})
	require.NoError(t, err)
	g.addr = fakePeer(t, srv)
	return g
}

// dispatchRig is a dispatcher in front of gated nodes, recording decisions.
type dispatchRig struct {
	d     *Dispatcher
	front *httptest.Server
	nodes []*gatedNode

	mu        sync.Mutex
	decisions []DispatchDecision
}

func newDispatchRig(t *testing.T, n int, picker policy.Picker) *dispatchRig {
	t.Helper()
	rig := &dispatchRig{}
	var backends []Backend
	for i := range n {
		g := newGatedNode(t, fmt.Sprintf("n%d", i))
		rig.nodes = append(rig.nodes, g)
		backends = append(backends, Backend{Name: g.name, GRPCAddr: g.addr})
	}
	fwd, err := transfer.NewClient(transfer.DefaultClientConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = fwd.Close() })
	cfg := DefaultDispatcherConfig()
	cfg.NodeName = "dispatcher"
	rig.d, err = NewDispatcher(cfg, fwd, func() []Backend { return backends }, func() policy.Picker { return picker }, nil)
	require.NoError(t, err)
	rig.d.OnDispatch(func(dd DispatchDecision) {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		rig.decisions = append(rig.decisions, dd)
	})
	rig.front = httptest.NewServer(rig.d)
	t.Cleanup(rig.front.Close)
	return rig
}

func (rig *dispatchRig) decision(i int) DispatchDecision {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return rig.decisions[i]
}

func (rig *dispatchRig) nDecisions() int {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return len(rig.decisions)
}

// outstanding returns the dispatcher's counts in node order.
func (rig *dispatchRig) outstanding() []int {
	m := rig.d.Outstanding()
	out := make([]int, len(rig.nodes))
	for i, g := range rig.nodes {
		out[i] = m[g.name]
	}
	return out
}

// TestDispatchRoundRobin: rr sends arrivals to nodes in strict turn, even
// when another node has fewer outstanding requests.
func TestDispatchRoundRobin(t *testing.T) {
	rig := newDispatchRig(t, 3, policy.PickerFunc(policy.RoundRobin))
	c := newHTTPClient(t)
	results := map[string]<-chan result{}
	send := func(i int) {
		id := fmt.Sprintf("r%d", i)
		want := rig.nodes[i%3]
		results[id] = goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil))
		eventually(t, func() bool { return want.has(id) }, "%s did not go to %s", id, want.name)
		dd := rig.decision(i)
		assert.Equal(t, i%3, dd.Chosen, "decision %d", i)
		assert.Equal(t, []string{"n0", "n1", "n2"}, dd.Backends)
	}
	finish := func(i int) {
		id := fmt.Sprintf("r%d", i)
		rig.nodes[i%3].open(id)
		res := await(t, results[id])
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode)
		assert.Equal(t, fmt.Sprintf("n%d %s", i%3, id), string(res.body))
	}
	for i := range 3 {
		send(i)
	}
	// n1 completes its request: counts are [1,0,1], yet r3 goes to n0.
	finish(1)
	eventually(t, func() bool { return slices.Equal(rig.outstanding(), []int{1, 0, 1}) }, "counts %v", rig.outstanding())
	send(3)
	assert.Equal(t, []int{1, 0, 1}, rig.decision(3).Outstanding)
	for i := 4; i < 8; i++ {
		send(i)
	}
	for _, i := range []int{0, 2, 3, 4, 5, 6, 7} {
		finish(i)
	}
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts not released: %v", rig.d.Outstanding())
}

// TestDispatchLeastOutstanding: ct always picks a node with the fewest
// outstanding requests, sees the exact counts, and releases a count when
// its request completes. Requests are held and completed in a seeded
// random order.
func TestDispatchLeastOutstanding(t *testing.T) {
	rig := newDispatchRig(t, 3, policy.PickerFunc(policy.LeastOutstanding))
	c := newHTTPClient(t)
	rng := rand.New(rand.NewPCG(1, 2))
	type held struct {
		id   string
		node int
		ch   <-chan result
	}
	var open []held
	want := make([]int, 3) // the test's own count of held requests per node
	for i := range 40 {
		// Complete a random number of held requests first.
		for k := rng.IntN(3); k > 0 && len(open) > 0; k-- {
			j := rng.IntN(len(open))
			h := open[j]
			open = slices.Delete(open, j, j+1)
			rig.nodes[h.node].open(h.id)
			res := await(t, h.ch)
			require.NoError(t, res.err)
			assert.Equal(t, fmt.Sprintf("n%d %s", h.node, h.id), string(res.body))
			want[h.node]--
		}
		eventually(t, func() bool { return slices.Equal(rig.outstanding(), want) },
			"counts %v, want %v after completions", rig.outstanding(), want)

		id := fmt.Sprintf("c%d", i)
		ch := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil))
		eventually(t, func() bool { return rig.nDecisions() == i+1 }, "no decision for %s", id)
		dd := rig.decision(i)
		assert.Equal(t, want, dd.Outstanding, "decision %d saw inexact counts", i)
		assert.Equal(t, slices.Min(dd.Outstanding), dd.Outstanding[dd.Chosen],
			"decision %d chose n%d with %v", i, dd.Chosen, dd.Outstanding)
		eventually(t, func() bool { return rig.nodes[dd.Chosen].has(id) }, "%s did not reach n%d", id, dd.Chosen)
		want[dd.Chosen]++
		open = append(open, held{id: id, node: dd.Chosen, ch: ch})
	}
	for _, h := range open {
		rig.nodes[h.node].open(h.id)
	}
	for _, h := range open {
		require.NoError(t, await(t, h.ch).err)
	}
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts not released: %v", rig.d.Outstanding())
}

// TestDispatchErrors: the dispatcher's own refusals.
// TestDispatcherConfigValidate: a dispatcher's settings are checked whole,
// with messages naming the flag to fix.
func TestDispatcherConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *DispatcherConfig)
		wantErr string // "" for valid
	}{
		// Defaults plus a name are valid.
		{"defaults", func(*DispatcherConfig) {}, ""},
		// Bodies may be refused altogether (0: only bodiless requests).
		{"no bodies", func(c *DispatcherConfig) { c.MaxTransferBody = 0 }, ""},
		// A dispatcher has a name (its forwards' sender).
		{"no name", func(c *DispatcherConfig) { c.NodeName = "" }, "node name"},
		{"negative body limit", func(c *DispatcherConfig) { c.MaxTransferBody = -1 }, "--max-transfer-body"},
		// No forward may go unbounded: a zero timeout is refused.
		{"zero transfer timeout", func(c *DispatcherConfig) { c.TransferTimeout = 0 }, "--transfer-timeout"},
		// Retry-After advice cannot be in the past.
		{"negative retry-after", func(c *DispatcherConfig) { c.RetryAfter = -5 * time.Second }, "--retry-after"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultDispatcherConfig()
			c.NodeName = "dispatcher"
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.wantErr)
			_, nerr := NewDispatcher(c, nil, nil, nil, nil)
			assert.ErrorContains(t, nerr, tc.wantErr, "NewDispatcher validates its config")
		})
	}
}

func TestDispatchErrors(t *testing.T) {
	tests := []struct {
		name     string
		backends []Backend
		req      func(base string) *http.Request
		want     int
	}{
		{
			// No node to send to: 503.
			name: "no backends",
			req: func(base string) *http.Request {
				r, _ := http.NewRequest(http.MethodGet, base+"/", nil)
				return r
			},
			want: http.StatusServiceUnavailable,
		},
		{
			// A body the dispatcher cannot forward: 413.
			name:     "body too large",
			backends: []Backend{{Name: "n0", GRPCAddr: "127.0.0.1:1"}},
			req: func(base string) *http.Request {
				r, _ := http.NewRequest(http.MethodPost, base+"/", io.LimitReader(zeros{}, 2048))
				r.ContentLength = -1
				return r
			},
			want: http.StatusRequestEntityTooLarge,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the 413s wait out net/http's lingering close
			fwd, err := transfer.NewClient(transfer.DefaultClientConfig())
			require.NoError(t, err)
			t.Cleanup(func() { _ = fwd.Close() })
			cfg := DefaultDispatcherConfig()
			cfg.NodeName = "dispatcher"
			cfg.MaxTransferBody = 1024
			d, err := NewDispatcher(cfg, fwd, func() []Backend { return tc.backends },
				func() policy.Picker { return policy.PickerFunc(policy.RoundRobin) }, nil)
			require.NoError(t, err)
			front := httptest.NewServer(d)
			t.Cleanup(front.Close)
			res := await(t, goDo(newHTTPClient(t), tc.req(front.URL)))
			require.NoError(t, res.err)
			assert.Equal(t, tc.want, res.resp.StatusCode)
			assert.Empty(t, d.Outstanding())
		})
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
