package node

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/queue"
)

// Pulls: the daemon side of a policy with a Puller (steal), as docs/sim.md
// states the contract ("the daemon's contract").
//
// When an app slot frees with nothing waiting locally (the queue's
// OnIdleSlot), or, with PullRules.OnGossip, when a gossip entry showing a
// peer's head is installed while a slot is idle and no pull is in flight,
// the pull goroutine holds the free slot (queue.TryHold: it counts as busy
// in the gossiped load) and calls the Puller on the view, Self's load not
// counting the held slot, with a fresh seed. Each named peer is asked in
// order with Transfer.Pull (pullTimeout each); on a hit the peer's request
// arrives on Forward carrying the pull's ID and takes the held slot
// (proxy.admitTransferred); after the last miss, or when the request does
// not arrive within arriveTimeout, the slot is released (to a local request
// that arrived meanwhile) and nothing is retried until the next trigger.
//
// Overtake (PullRules.Overtake): a slot that frees while requests wait
// locally is held (queue.SetOvertake) and the Puller decides on a view
// whose Self counts them: it names only peers whose head is older than
// the local head by the policy's margin; if none, the slot goes to the
// local head at once.
//
// Bounds: one pull per held slot, so at most m at once; at most
// policy.MaxPullAttempts peers asked per pull. A peer that dies mid-pull
// loses nothing: it never handed the request (error or miss), or the
// request's origin still owns it and answers its client (a refused or
// failed Forward puts it back or fails it there, as for any transfer).
//
// Concurrency: triggers only poke a channel; one goroutine (runPulls)
// starts pulls, each running in its own goroutine with its hold.

const (
	// pullTimeout bounds one Transfer.Pull call.
	pullTimeout = 500 * time.Millisecond
	// arriveTimeout bounds the wait for a pulled request after a hit.
	arriveTimeout = 5 * time.Second
)

// pulls is a node's pulls in flight.
type pulls struct {
	freed, gossip chan struct{} // triggers, buffered(1)
	next          atomic.Uint64 // last pull ID
	inFlight      atomic.Int64

	mu    sync.Mutex
	holds map[uint64]*queue.Hold // by pull ID, while the pull runs
}

func newPulls() *pulls {
	p := &pulls{freed: make(chan struct{}, 1), gossip: make(chan struct{}, 1), holds: map[uint64]*queue.Hold{}}
	p.next.Store(rand.Uint64() >> 1) // IDs never repeat across restarts in practice
	return p
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// hold is the slot held for pull id, or nil when that pull is over.
func (p *pulls) hold(id uint64) *queue.Hold {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holds[id]
}

// pulling reports whether the policy in force pulls.
func (n *Node) pulling() (policy.Policy, bool) {
	st := n.pol.Load()
	return st.p, st.p.Kind == policy.KindTransfer && st.p.Puller != nil
}

// headAge is what the node gossips as its head: the queue's, under a
// pulling policy (others never read it).
func (n *Node) headAge() time.Duration {
	if _, ok := n.pulling(); !ok || n.q == nil {
		return 0
	}
	return n.q.HeadAge()
}

// startPulling wires the triggers and starts runPulls.
func (n *Node) startPulling() {
	n.pl = newPulls()
	n.h.SetPullHolds(n.pl.hold)
	n.q.OnIdleSlot(func() { poke(n.pl.freed) })
	n.cl.OnHead(func() { poke(n.pl.gossip) })
	n.pullsWired.Store(true)
	n.syncOvertake()
	n.q.OnHeadChange(func() { // head news: tell the peers now
		if p, ok := n.pulling(); ok && p.Pull.GossipOnChange {
			n.cl.SendNow()
		}
	})
	go n.runPulls()
}

// runPulls starts pulls on triggers until the node stops.
func (n *Node) runPulls() {
	for {
		select {
		case <-n.stopRun:
			return
		case <-n.pl.freed:
			n.startPulls(false)
		case <-n.pl.gossip:
			n.startPulls(true)
		}
	}
}

// startPulls holds each free slot and starts a pull for it, while the
// Puller names peers. onGossip: the trigger was a gossiped head, which
// pulls only with PullRules.OnGossip, with no pull in flight and (under
// direct gossip) when policy.GossipPull says so.
func (n *Node) startPulls(onGossip bool) {
	p, ok := n.pulling()
	if !ok || n.draining.Load() || !n.readiness.ready() {
		return
	}
	if onGossip && (!p.Pull.OnGossip || n.pl.inFlight.Load() > 0) {
		return
	}
	st := n.pol.Load()
	for range n.q.Concurrency() {
		h := n.q.TryHold()
		if h == nil {
			return
		}
		v := n.planView(st)
		if v.Self < 0 {
			h.Release()
			return
		}
		// Self's load does not count the slot just held.
		v.Nodes[v.Self].Load = max(v.Nodes[v.Self].Load-1, 0)
		seed := rand.Uint64()
		if onGossip && n.cfg.Cluster.Mechanism != cluster.MechanismPiggyback && !policy.GossipPull(v, p.Pull.GossipPullers, seed) {
			h.Release()
			return
		}
		ids := p.Puller.Pull(n.pullView(v), seed)
		if len(ids) == 0 {
			h.Release()
			return
		}
		n.startPull(h, v, ids)
		if onGossip {
			return // one pull per gossiped head
		}
	}
}

// syncOvertake registers overtake with the queue only while the policy in
// force overtakes, so that under any other policy a completion with
// requests waiting grants the next one directly (no hold, no extra lock).
// A registration left stale by a concurrent switch is still correct:
// overtake releases the hold when the policy does not overtake.
func (n *Node) syncOvertake() {
	if !n.pullsWired.Load() {
		return // not pulling (a dispatcher, or before start)
	}
	if p, ok := n.pulling(); ok && p.Pull.Overtake {
		n.q.SetOvertake(n.overtake)
		return
	}
	n.q.SetOvertake(nil)
}

// overtake is the queue's overtake function (PullRules.Overtake): a slot
// freed while requests wait locally is held; the Puller, on a view whose
// Self counts the waiting requests (so it names only peers whose head is
// older than the local head by the policy's margin), decides whether the
// slot waits for a peer's request. Otherwise it goes to the local head at
// once. It runs in the goroutine that called Done.
func (n *Node) overtake(h *queue.Hold) {
	p, ok := n.pulling()
	if !ok || !p.Pull.Overtake || n.draining.Load() || !n.readiness.ready() {
		h.Release()
		return
	}
	v := n.planView(n.pol.Load())
	if v.Self < 0 {
		h.Release()
		return
	}
	ids := p.Puller.Pull(n.pullView(v), rand.Uint64())
	if len(ids) == 0 {
		h.Release()
		return
	}
	n.startPull(h, v, ids)
}

// pullView is the view the Puller reads: under --load-index work, each
// head's age grows by its node's predicted work (policy.WorkPullView), so
// a free slot pulls from the node whose head would otherwise wait longest
// behind heavy requests, as in the simulator.
func (n *Node) pullView(v policy.View) policy.View {
	var index policy.LoadIndex
	if n.cost != nil {
		index = n.cost.index
	}
	return pullViewFor(index, v)
}

// pullViewFor is pullView for a given load index.
func pullViewFor(index policy.LoadIndex, v policy.View) policy.View {
	if index != policy.IndexWork {
		return v
	}
	return policy.WorkPullView(v)
}

// startPull registers a pull into hold h asking the peers ids of v (at
// most policy.MaxPullAttempts) and runs it in its own goroutine.
func (n *Node) startPull(h *queue.Hold, v policy.View, ids []int) {
	names := make([]string, 0, min(len(ids), policy.MaxPullAttempts))
	for _, id := range ids[:min(len(ids), policy.MaxPullAttempts)] {
		names = append(names, v.Nodes[id].Name)
	}
	id := n.pl.next.Add(1)
	n.pl.mu.Lock()
	n.pl.holds[id] = h
	n.pl.mu.Unlock()
	n.pl.inFlight.Add(1)
	go n.pull(h, id, names)
}

// pull runs one pull of this node's (see pullJob) and forgets it after.
func (n *Node) pull(h *queue.Hold, id uint64, peers []string) {
	defer func() {
		n.pl.mu.Lock()
		delete(n.pl.holds, id)
		n.pl.mu.Unlock()
		n.pl.inFlight.Add(-1)
	}()
	pullJob{
		hold: h, id: id, peers: peers, from: n.cfg.NodeName,
		addr: n.GRPCAddr, client: n.tc, record: n.m.Pulled,
		arrive: arriveTimeout, stop: n.stopRun, log: n.log,
	}.run()
	// run releases the hold before it returns, so it has ended: from the
	// hold to its end, not run's return (a late answer to an earlier ask
	// may have filled it while run was asking the next peer).
	if d, used, ended := h.HeldFor(); ended {
		n.m.PullIdle(d, used)
	}
}

// pullClient is the Transfer.Pull call (transfer.Client).
type pullClient interface {
	Pull(ctx context.Context, addr, from string, pullID uint64) (found bool, err error)
}

// pullJob is one pull: the slot it holds, its ID, and the peers to ask.
type pullJob struct {
	hold   *queue.Hold
	id     uint64
	peers  []string
	from   string                      // this node's name
	addr   func(string) (string, bool) // a peer's gRPC address
	client pullClient                  // asks a peer
	record func(metrics.PullResult)    // counts each call
	arrive time.Duration               // the wait for a hit's request
	stop   <-chan struct{}             // the node stops
	log    interface{ Debug(string, ...any) }
}

// run asks the peers in order for their head until one hands it over,
// then waits (at most j.arrive) for that request to take the held slot.
// Whatever happens the slot is released at the end unless a pulled request
// took it (a miss, an error, a request that never came: a local arrival
// gets it).
func (j pullJob) run() {
	defer j.hold.Release() // a no-op when the pulled request took the slot
	for _, peer := range j.peers {
		select {
		case <-j.hold.Done(): // a late answer to an earlier attempt took it
			return
		case <-j.stop:
			return
		default:
		}
		addr, ok := j.addr(peer)
		if !ok {
			j.record(metrics.PullError)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), pullTimeout)
		found, err := j.client.Pull(ctx, addr, j.from, j.id)
		cancel()
		switch {
		case err != nil:
			j.record(metrics.PullError)
			j.log.Debug("pull failed", "peer", peer, "err", err)
			continue
		case !found:
			j.record(metrics.PullMiss)
			continue
		}
		j.record(metrics.PullHit)
		t := time.NewTimer(j.arrive)
		defer t.Stop()
		select {
		case <-j.hold.Done():
		case <-t.C:
			j.log.Debug("pulled request did not arrive", "peer", peer, "pull", j.id)
		case <-j.stop:
		}
		return
	}
}
