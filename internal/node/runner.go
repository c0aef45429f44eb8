package node

import (
	"sort"
	"time"

	"github.com/swd-project/swd/internal/policy"
)

// drainInterval is how often a draining node hands off waiting requests.
const drainInterval = 20 * time.Millisecond

// runPolicy runs the transfer policy every activation interval until Stop.
func (n *Node) runPolicy() {
	defer close(n.runDone)
	act := n.pol.Load().activation
	t := time.NewTicker(act)
	defer t.Stop()
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
	if n.draining.Load() {
		n.drainHandOff(v)
		return
	}
	for _, mv := range st.p.Planner.Plan(v) {
		n.q.HandOff(mv.Count, v.Nodes[mv.To].Name)
	}
}

// planView is the cluster's view with the peers this node must not
// transfer to marked unknown: those running another policy or epoch (so two
// policies never mix), and those ejected for failing transfers.
func (n *Node) planView(st *policyState) policy.View {
	v := n.cl.View()
	if v.Self < 0 {
		return v
	}
	stamps := make(map[string]int64, len(v.Nodes))
	names := make(map[string]string, len(v.Nodes))
	for _, p := range n.cl.Peers() {
		stamps[p.Name] = p.Policy.Epoch
		names[p.Name] = p.Policy.Name
	}
	for i := range v.Nodes {
		if i == v.Self || !v.Nodes[i].Known {
			continue
		}
		name := v.Nodes[i].Name
		if stamps[name] != st.epoch || names[name] != st.p.Name || !n.hlth.healthy(name) {
			v.Nodes[i].Known = false
		}
	}
	return v
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
