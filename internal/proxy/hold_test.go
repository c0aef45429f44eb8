package proxy

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// serveTransfer starts a Transfer gRPC server named name in front of
// backend on 127.0.0.1 and returns its address.
func serveTransfer(t *testing.T, name string, backend transfer.Backend) string {
	t.Helper()
	cfg := transfer.DefaultServerConfig()
	cfg.NodeName = name
	srv, err := transfer.NewServer(cfg, backend, members{"dispatcher": true})
	require.NoError(t, err)
	return fakePeer(t, srv)
}

// countingNode serves each request for a short random time and records
// the most requests it ever served at once, and the dispatcher's FIFO
// length seen while serving (proof that a backlog was held).
type countingNode struct {
	held func() int

	mu       sync.Mutex
	rng      *rand.Rand
	now, max int
	served   int
	maxHeld  int
}

func (c *countingNode) ServeTransferred(w http.ResponseWriter, r *http.Request, in transfer.Inbound) error {
	c.mu.Lock()
	c.now++
	c.max = max(c.max, c.now)
	c.maxHeld = max(c.maxHeld, c.held())
	d := time.Duration(1+c.rng.IntN(3)) * time.Millisecond
	c.mu.Unlock()
	time.Sleep(d) // the request's service time, not a wait for correctness
	c.mu.Lock()
	c.now--
	c.served++
	c.mu.Unlock()
	_, _ = fmt.Fprint(w, "ok")
	return nil
}

// holdRig is a dispatcher whose backends, their m and whether the policy
// holds can change while it serves. It holds strictly (cq's Holder without
// its lookahead: HAProxy's maxconn queue), which is what the mechanism
// tests check; setHolder swaps in another Holder.
type holdRig struct {
	d     *Dispatcher
	front *httptest.Server

	mu       sync.Mutex
	backends []Backend
	hold     bool
	holder   policy.Holder
}

func newHoldRig(t *testing.T, backends []Backend, mutate func(*DispatcherConfig)) *holdRig {
	t.Helper()
	rig := &holdRig{backends: backends, hold: true, holder: policy.FreeSlotAhead(0)}
	fwd, err := transfer.NewClient(transfer.DefaultClientConfig())
	require.NoError(t, err)
	t.Cleanup(func() { _ = fwd.Close() })
	cfg := DefaultDispatcherConfig()
	cfg.NodeName = "dispatcher"
	if mutate != nil {
		mutate(&cfg)
	}
	cq, err := policy.Lookup("cq")
	require.NoError(t, err)
	ct, err := policy.Lookup("ct")
	require.NoError(t, err)
	rig.d, err = NewDispatcher(cfg, fwd, func() []Backend {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		return slices.Clone(rig.backends)
	}, func() policy.Picker {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		if rig.hold {
			return cq.Picker
		}
		return ct.Picker
	}, nil)
	require.NoError(t, err)
	rig.d.HoldWith(func() policy.Holder {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		if rig.hold {
			return rig.holder
		}
		return nil
	})
	rig.front = httptest.NewServer(rig.d)
	t.Cleanup(rig.front.Close)
	return rig
}

func (rig *holdRig) setBackends(bs []Backend) {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	rig.backends = bs
}

func (rig *holdRig) setHolder(h policy.Holder) {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	rig.holder = h
}

func (rig *holdRig) setHold(on bool) {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	rig.hold = on
}

// gatedBackends starts gated nodes n0..n(k-1) with m = ms[i].
func gatedBackends(t *testing.T, ms ...int) ([]*gatedNode, []Backend) {
	t.Helper()
	var nodes []*gatedNode
	var bs []Backend
	for i, m := range ms {
		g := newGatedNode(t, fmt.Sprintf("n%d", i))
		nodes = append(nodes, g)
		bs = append(bs, Backend{Name: g.name, GRPCAddr: g.addr, Concurrency: m})
	}
	return nodes, bs
}

// TestHoldNeverExceedsM: under concurrent load far above the cluster's
// slots, cq never has more requests at a node than its m (counted by the
// node itself), fills every node's m, holds a backlog meanwhile, and
// answers every request.
func TestHoldNeverExceedsM(t *testing.T) {
	tests := []struct {
		name string
		ms   []int // each node's m
	}{
		// One slot per node: the HAProxy maxconn 1 set-up.
		{"m=1 x3", []int{1, 1, 1}},
		// Unequal m: each node is held to its own.
		{"m=2,1,3", []int{2, 1, 3}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*countingNode
			var bs []Backend
			var rig *holdRig
			for i, m := range tc.ms {
				c := &countingNode{rng: rand.New(rand.NewPCG(uint64(i), 7)), held: func() int { return rig.d.Held() }}
				nodes = append(nodes, c)
				name := fmt.Sprintf("n%d", i)
				bs = append(bs, Backend{Name: name, GRPCAddr: serveTransfer(t, name, c), Concurrency: m})
			}
			rig = newHoldRig(t, bs, nil)
			slots := 0
			for _, m := range tc.ms {
				slots += m
			}
			client := newHTTPClient(t)
			const perClient = 25
			clients := 4 * slots
			var wg sync.WaitGroup
			errs := make(chan error, clients*perClient)
			for k := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range perClient {
						req, err := http.NewRequest(http.MethodGet, rig.front.URL+"/", nil)
						if err != nil {
							errs <- err
							return
						}
						req.Header.Set("X-Request-Id", fmt.Sprintf("c%d-%d", k, j))
						resp, err := client.Do(req)
						if err != nil {
							errs <- err
							continue
						}
						_ = resp.Body.Close()
						if resp.StatusCode != http.StatusOK {
							errs <- fmt.Errorf("status %d", resp.StatusCode)
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				assert.NoError(t, err)
			}
			total, maxHeld := 0, 0
			for i, c := range nodes {
				c.mu.Lock()
				assert.LessOrEqual(t, c.max, tc.ms[i], "n%d served %d at once, m is %d", i, c.max, tc.ms[i])
				total += c.served
				maxHeld = max(maxHeld, c.maxHeld)
				c.mu.Unlock()
			}
			assert.Equal(t, clients*perClient, total, "every request served once")
			assert.Positive(t, maxHeld, "the dispatcher never held a backlog: the test did not load it")
			eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 && rig.d.Held() == 0 },
				"counts not released: %v, held %d", rig.d.Outstanding(), rig.d.Held())
		})
	}
}

// TestHoldFIFO: requests waiting for a busy node go to it in arrival
// order, each the moment the previous one completes, and never earlier.
func TestHoldFIFO(t *testing.T) {
	nodes, bs := gatedBackends(t, 1)
	n0 := nodes[0]
	rig := newHoldRig(t, bs, nil)
	c := newHTTPClient(t)
	ids := []string{"r0", "r1", "r2", "r3", "r4"}
	results := map[string]<-chan result{}
	for k, id := range ids {
		results[id] = goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil))
		if k == 0 {
			eventually(t, func() bool { return n0.has(id) }, "%s not placed on the idle node", id)
		} else {
			eventually(t, func() bool { return rig.d.Held() == k }, "%s not held (held %d)", id, rig.d.Held())
		}
	}
	for k, id := range ids {
		// Only the requests up to id have reached the node: the others wait.
		for _, later := range ids[k+1:] {
			assert.False(t, n0.has(later), "%s reached n0 while %s was in service", later, id)
		}
		assert.Equal(t, map[string]int{"n0": 1}, rig.d.Outstanding())
		n0.open(id)
		res := await(t, results[id])
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode)
		assert.Equal(t, "n0 "+id, string(res.body))
		if k+1 < len(ids) {
			next := ids[k+1]
			eventually(t, func() bool { return n0.has(next) }, "%s not placed when %s completed", next, id)
		}
	}
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts %v", rig.d.Outstanding())
}

// TestHoldAhead: the registered cq sends a request ahead to a busy node
// once its FIFO is deep (policy.CQAhead per node; one node here), one per
// slot at most: the dispatcher tells the Holder its FIFO's depth.
func TestHoldAhead(t *testing.T) {
	nodes, bs := gatedBackends(t, 1)
	n0 := nodes[0]
	rig := newHoldRig(t, bs, nil)
	cq, err := policy.Lookup("cq")
	require.NoError(t, err)
	rig.setHolder(cq.Holder)
	require.GreaterOrEqual(t, policy.CQAhead, 1, "the steps below need a lookahead")
	c := newHTTPClient(t)
	var ids []string
	results := map[string]<-chan result{}
	send := func() {
		id := fmt.Sprintf("r%d", len(ids))
		ids = append(ids, id)
		results[id] = goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil))
	}
	send() // r0 takes the free slot
	eventually(t, func() bool { return n0.has("r0") }, "r0 not placed on the idle node")
	for depth := 1; depth < policy.CQAhead; depth++ { // held: the FIFO is shallow
		send()
		eventually(t, func() bool { return rig.d.Held() == depth }, "not %d held", depth)
		assert.Equal(t, map[string]int{"n0": 1}, rig.d.Outstanding(), "a request went ahead with %d held", depth)
	}
	send() // CQAhead waiting: deep, the head (r1) goes ahead
	eventually(t, func() bool { return n0.has("r1") }, "r1 not sent ahead with a deep FIFO")
	assert.Equal(t, policy.CQAhead-1, rig.d.Held(), "the others stay held")
	assert.Equal(t, map[string]int{"n0": 2}, rig.d.Outstanding())
	send() // CQAhead waiting again, but n0 already has one ahead per slot
	eventually(t, func() bool { return rig.d.Held() == policy.CQAhead }, "the last request not held")
	assert.Equal(t, map[string]int{"n0": 2}, rig.d.Outstanding(), "more than one request per slot went ahead")
	for _, id := range ids {
		n0.open(id)
		res := await(t, results[id])
		require.NoError(t, res.err)
		assert.Equal(t, "n0 "+id, string(res.body))
	}
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts %v", rig.d.Outstanding())
}

// TestHoldRejects: what a holding dispatcher answers when it cannot hold
// or place a request.
func TestHoldRejects(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*DispatcherConfig)
		nodes   bool // one busy gated node with m=1, else no node at all
		wantErr string
	}{
		// One in service, one held: a third finds the FIFO full (--queue-limit 1).
		{"queue full", func(c *DispatcherConfig) { c.HoldLimit = 1 }, true, "queue full"},
		// A held request waits at most --queue-timeout from its arrival.
		{"queue timeout", func(c *DispatcherConfig) { c.HoldTimeout = 100 * time.Millisecond }, true, "queue timeout"},
		// No node up at all: nothing to wait for, refused at once.
		{"no node", nil, false, "no backend"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes []*gatedNode
			var bs []Backend
			if tc.nodes {
				nodes, bs = gatedBackends(t, 1)
			}
			rig := newHoldRig(t, bs, tc.mutate)
			c := newHTTPClient(t)
			var busy []<-chan result
			if tc.nodes {
				busy = append(busy, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "busy", nil)))
				eventually(t, func() bool { return nodes[0].has("busy") }, "busy not placed")
				if tc.name == "queue full" {
					busy = append(busy, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "held", nil)))
					eventually(t, func() bool { return rig.d.Held() == 1 }, "held not held")
				}
			}
			res := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "x", nil)))
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusServiceUnavailable, res.resp.StatusCode)
			assert.Equal(t, "1", res.resp.Header.Get("Retry-After"))
			assert.Contains(t, res.resp.Header.Get("X-Swd-Error"), tc.wantErr)
			if tc.nodes {
				assert.False(t, nodes[0].has("x"), "the refused request reached the node")
				nodes[0].open("busy")
				nodes[0].open("held")
			}
			for _, ch := range busy {
				r := await(t, ch)
				require.NoError(t, r.err)
				assert.Equal(t, http.StatusOK, r.resp.StatusCode)
			}
			eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 && rig.d.Held() == 0 },
				"counts %v, held %d", rig.d.Outstanding(), rig.d.Held())
		})
	}
}

// TestHoldClientGone: a held request whose client leaves is taken out of
// the FIFO; the next one takes the slot, and the gone one never reaches
// a node.
func TestHoldClientGone(t *testing.T) {
	nodes, bs := gatedBackends(t, 1)
	n0 := nodes[0]
	rig := newHoldRig(t, bs, nil)
	c := newHTTPClient(t)
	r0 := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r0", nil))
	eventually(t, func() bool { return n0.has("r0") }, "r0 not placed")
	ctx, cancel := context.WithCancel(context.Background())
	gone := goDo(c, newReq(t, ctx, http.MethodGet, rig.front.URL, "/", "gone", nil))
	eventually(t, func() bool { return rig.d.Held() == 1 }, "gone not held")
	r2 := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r2", nil))
	eventually(t, func() bool { return rig.d.Held() == 2 }, "r2 not held")

	cancel()
	assert.True(t, errors.Is(await(t, gone).err, context.Canceled))
	eventually(t, func() bool { return rig.d.Held() == 1 }, "the gone request stayed in the FIFO (held %d)", rig.d.Held())
	n0.open("r0")
	require.NoError(t, await(t, r0).err)
	eventually(t, func() bool { return n0.has("r2") }, "r2 not placed after r0")
	assert.False(t, n0.has("gone"), "the gone request reached the node")
	n0.open("r2")
	res := await(t, r2)
	require.NoError(t, res.err)
	assert.Equal(t, "n0 r2", string(res.body))
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 && rig.d.Held() == 0 },
		"counts %v, held %d", rig.d.Outstanding(), rig.d.Held())
}

// TestHoldNodeDown: a node that is not up has no slots: held requests wait
// for a free slot on an up node, and a node coming up takes the head at
// once, without any arrival or completion.
func TestHoldNodeDown(t *testing.T) {
	nodes, bs := gatedBackends(t, 1, 2)
	n0, n1 := nodes[0], nodes[1]
	rig := newHoldRig(t, bs[:1], nil) // n1 (m=2, idle) is down
	c := newHTTPClient(t)
	r0 := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r0", nil))
	eventually(t, func() bool { return n0.has("r0") }, "r0 not placed")
	var chans []<-chan result
	for k, id := range []string{"r1", "r2", "r3"} { // one at a time: FIFO order r1, r2, r3
		chans = append(chans, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil)))
		eventually(t, func() bool { return rig.d.Held() == k+1 }, "%s not held (held %d)", id, rig.d.Held())
	}
	r1, r2, r3 := chans[0], chans[1], chans[2]
	for _, id := range []string{"r1", "r2", "r3"} {
		assert.False(t, n1.has(id), "%s reached n1, which is down", id)
	}

	rig.setBackends(bs) // n1 comes up: its two slots take the two oldest
	eventually(t, func() bool { return n1.has("r1") && n1.has("r2") }, "n1's slots not used when it came up")
	assert.Equal(t, 1, rig.d.Held())
	assert.Equal(t, map[string]int{"n0": 1, "n1": 2}, rig.d.Outstanding())
	assert.False(t, n0.has("r3") || n1.has("r3"), "r3 placed beyond the nodes' m")

	for _, id := range []string{"r1", "r2"} {
		n1.open(id)
	}
	eventually(t, func() bool { return n1.has("r3") }, "r3 not placed when n1 freed")
	n1.open("r3")
	n0.open("r0")
	for _, ch := range []<-chan result{r0, r1, r2, r3} {
		res := await(t, ch)
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	}
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts %v", rig.d.Outstanding())
}

// TestHoldPolicySwitch: switching away from cq loses no held request:
// the FIFO drains through the Picker (ct, which ignores m); switching back
// holds new arrivals again, counting the requests ct sent beyond m.
func TestHoldPolicySwitch(t *testing.T) {
	nodes, bs := gatedBackends(t, 1)
	n0 := nodes[0]
	rig := newHoldRig(t, bs, nil)
	c := newHTTPClient(t)
	ids := []string{"r0", "r1", "r2"}
	var chans []<-chan result
	for k, id := range ids {
		chans = append(chans, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", id, nil)))
		if k == 0 {
			eventually(t, func() bool { return n0.has(id) }, "r0 not placed")
		}
	}
	eventually(t, func() bool { return rig.d.Held() == 2 }, "not held (held %d)", rig.d.Held())

	rig.setHold(false) // to ct
	eventually(t, func() bool { return n0.has("r1") && n0.has("r2") }, "held requests not drained through the Picker")
	assert.Equal(t, 0, rig.d.Held())
	assert.Equal(t, map[string]int{"n0": 3}, rig.d.Outstanding())

	rig.setHold(true) // back to cq: n0 has 3 outstanding, m=1
	chans = append(chans, goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r3", nil)))
	eventually(t, func() bool { return rig.d.Held() == 1 }, "r3 not held")
	ids = append(ids, "r3")
	for k, id := range ids[:3] {
		assert.False(t, n0.has("r3"), "r3 placed with %d outstanding on n0 (m=1)", 3-k)
		n0.open(id)
		require.NoError(t, await(t, chans[k]).err)
	}
	eventually(t, func() bool { return n0.has("r3") }, "r3 not placed once n0 freed")
	n0.open("r3")
	res := await(t, chans[3])
	require.NoError(t, res.err)
	assert.Equal(t, "n0 r3", string(res.body))
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 }, "counts %v", rig.d.Outstanding())
}

// refusingNode refuses every request it is sent (its queue is full): it
// never takes one.
type refusingNode struct {
	mu   sync.Mutex
	seen []string
}

func (n *refusingNode) ServeTransferred(_ http.ResponseWriter, r *http.Request, _ transfer.Inbound) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seen = append(n.seen, r.Header.Get("X-Request-Id"))
	return swderr.ErrQueueFull
}

func (n *refusingNode) saw(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.seen, id)
}

// TestHoldRefused: a request a node refuses goes back to the head of the
// FIFO with that node left out for it; it is placed on another node when
// that one has a free slot, never beyond its m.
func TestHoldRefused(t *testing.T) {
	ref := &refusingNode{}
	nodes, bs := gatedBackends(t, 1)
	n1 := nodes[0]
	bs = append([]Backend{{Name: "full", GRPCAddr: serveTransfer(t, "full", ref), Concurrency: 1}}, bs...)
	rig := newHoldRig(t, bs, nil)
	c := newHTTPClient(t)
	r0 := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r0", nil))
	eventually(t, func() bool { return n1.has("r0") }, "r0 not placed on n0")
	// r1: "full" has a free slot by the counts, refuses; n0 is busy: held.
	r1 := goDo(c, newReq(t, context.Background(), http.MethodGet, rig.front.URL, "/", "r1", nil))
	eventually(t, func() bool { return ref.saw("r1") && rig.d.Held() == 1 }, "r1 not refused and held again (held %d)", rig.d.Held())
	assert.False(t, n1.has("r1"), "r1 placed on n0 beyond its m")
	assert.Equal(t, map[string]int{"n0": 1}, rig.d.Outstanding(), "the refusal still counted")

	n1.open("r0")
	require.NoError(t, await(t, r0).err)
	eventually(t, func() bool { return n1.has("r1") }, "r1 not placed when n0 freed")
	n1.open("r1")
	res := await(t, r1)
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, "n0 r1", string(res.body))
	eventually(t, func() bool { return len(rig.d.Outstanding()) == 0 && rig.d.Held() == 0 },
		"counts %v, held %d", rig.d.Outstanding(), rig.d.Held())
}
