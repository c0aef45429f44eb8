package node

import (
	"sort"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/policy"
)

// pruneInterval is how often connections to departed members are closed.
const pruneInterval = 10 * time.Second

// pruneConns closes transfer connections to addresses no member has any
// more (members that left, or restarted on another address).
func (n *Node) pruneConns() {
	keep := map[string]bool{}
	for _, p := range n.cl.Peers() {
		if p.GRPCAddr != "" {
			keep[p.GRPCAddr] = true
		}
	}
	n.tc.Prune(keep)
}

// drainInterval is how often a draining node hands off waiting requests.
const drainInterval = 20 * time.Millisecond

// runPolicy runs the transfer policy every activation interval until Stop.
func (n *Node) runPolicy() {
	defer close(n.runDone)
	act := n.pol.Load().activation
	t := time.NewTicker(act)
	defer t.Stop()
	prune := time.NewTicker(pruneInterval)
	defer prune.Stop()
	drain := n.drainCh
	for {
		select {
		case <-n.stopRun:
			return
		case <-drain:
			// Draining: hand waiting requests off at once, then often.
			drain = nil
			act = min(act, drainInterval)
			t.Reset(act)
			n.tick()
		case <-n.policyCh:
			if a := n.pol.Load().activation; a != act && drain != nil {
				act = a
				t.Reset(act)
			}
		case <-t.C:
			n.tick()
		case <-prune.C:
			n.pruneConns()
		}
	}
}

// tick is one activation of the policy on this node.
func (n *Node) tick() {
	if n.q == nil || n.q.Waiting() == 0 {
		return // nothing could move: skip building a view
	}
	st := n.pol.Load()
	if st.p.Kind != policy.KindTransfer {
		return
	}
	v := n.planView(st)
	if v.Self < 0 {
		return
	}
	if n.draining.Load() || !n.readiness.ready() {
		// Draining, or the app is not ready: waiting requests go to
		// peers whose apps are.
		n.drainHandOff(v)
		return
	}
	n.handOff(v, n.plan(st.p.Planner, v))
}

// planView is the cluster's view with the peers this node must not
// transfer to marked unknown (see onlySamePolicy).
func (n *Node) planView(st *policyState) policy.View {
	v := n.cl.View()
	if v.Self < 0 {
		return v
	}
	stamps := make(map[string]cluster.PolicyStamp, len(v.Nodes))
	for _, p := range n.cl.Peers() {
		stamps[p.Name] = p.Policy
	}
	return onlySamePolicy(v, stamps, st.p.Name, st.epoch, n.hlth.healthy)
}

// onlySamePolicy marks unknown every peer that runs another policy or epoch
// than (name, epoch), by its last gossiped stamp, and every peer healthy
// rejects: two policies never mix (a node switched a moment earlier or
// later is simply left out until the stamps agree, at most one gossip
// interval after the switch reached both), and ejected peers get nothing.
// It copies the view's nodes; v is not modified.
func onlySamePolicy(v policy.View, stamps map[string]cluster.PolicyStamp, name string, epoch int64, healthy func(string) bool) policy.View {
	nodes := make([]policy.NodeLoad, len(v.Nodes))
	copy(nodes, v.Nodes)
	for i := range nodes {
		if i == v.Self || !nodes[i].Known {
			continue
		}
		st, ok := stamps[nodes[i].Name]
		if !ok || st.Epoch != epoch || st.Name != name || !healthy(nodes[i].Name) {
			nodes[i].Known = false
		}
	}
	return policy.View{Self: v.Self, Nodes: nodes}
}

// drainHandOff gives a draining node's waiting requests to its known peers,
// one at a time to the least loaded, counting each hand-off.
func (n *Node) drainHandOff(v policy.View) {
	type target struct {
		name string
		load int
	}
	var ts []target
	for i, nl := range v.Nodes {
		if i != v.Self && nl.Known {
			ts = append(ts, target{nl.Name, nl.Load})
		}
	}
	if len(ts) == 0 {
		return
	}
	for w := n.q.Waiting(); w > 0; w-- {
		sort.SliceStable(ts, func(i, j int) bool { return ts[i].load < ts[j].load })
		if n.q.HandOff(1, ts[0].name) == 0 {
			return
		}
		ts[0].load++
	}
}
