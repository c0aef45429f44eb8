package node

import (
	"fmt"
	"time"

	"github.com/swd-project/swd/internal/flow"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/queue"
)

// Flow statistics and the transfer-cost rule (issue 22): once a second the
// node samples its metrics into a flow history (internal/flow), which
// Control.Status, /ui and the rule read; the per-peer series follow the
// membership.

// Transfer-cost modes (Config.TransferCost, --transfer-cost).
const (
	// TransferCostMeasured applies the rule with the hand-off costs this
	// node measured and its app's mean service time.
	TransferCostMeasured = "measured"
	// TransferCostOff moves what the planner says, whatever it costs.
	TransferCostOff = "off"
)

// flowInterval is how often the node samples its flows.
const flowInterval = time.Second

// movableSlack is how many movable requests beyond the planned count the
// rule may consider instead of those not worth moving.
const movableSlack = 64

func validateTransferCost(mode string) error {
	if mode != TransferCostMeasured && mode != TransferCostOff {
		return fmt.Errorf("--transfer-cost must be %q or %q, got %q", TransferCostMeasured, TransferCostOff, mode)
	}
	return nil
}

// runFlows samples the node's flows every flowInterval until the node
// stops.
func (n *Node) runFlows() {
	t := time.NewTicker(flowInterval)
	defer t.Stop()
	n.sampleFlows(time.Now())
	for {
		select {
		case <-n.stopRun:
			return
		case now := <-t.C:
			n.sampleFlows(now)
		}
	}
}

// sampleFlows keeps the per-peer series to the current members and takes
// one flow sample.
func (n *Node) sampleFlows(now time.Time) {
	if n.cl != nil {
		var peers []string
		for _, p := range n.cl.Peers() {
			if p.Name != n.cfg.NodeName {
				peers = append(peers, p.Name)
			}
		}
		n.m.SetPeers(peers)
	}
	n.flows.Tick(now, flow.Reading{Metrics: n.m.Snapshot(), Queue: n.waiting(), InFlight: n.inFlight(), Concurrency: n.Concurrency()})
}

// FlowSamples implements control.FlowSource.
func (n *Node) FlowSamples(after time.Time) []flow.Sample { return n.flows.Since(after) }

// HandoffCosts implements control.FlowSource.
func (n *Node) HandoffCosts() []flow.Cost { return n.flows.Costs() }

// transferCost is the rule's input now: the app's recent mean service time
// and the measured hand-off costs; the zero value (rule off) with
// --transfer-cost off or before anything was served here.
func (n *Node) transferCost() policy.TransferCost {
	if n.cfg.TransferCost == TransferCostOff || n.h == nil {
		return policy.TransferCost{}
	}
	return n.flows.TransferCost(n.h.MeanServiceTime())
}

// handOff carries out a planner's moves: with the transfer-cost rule, only
// the requests worth moving (policy.WorthMoving) go; without it, each move's
// count from the tail.
func (n *Node) handOff(v policy.View, moves []policy.Move) { n.handOffWith(v, moves, n.transferCost()) }

// handOffWith is handOff with the rule's input given.
func (n *Node) handOffWith(v policy.View, moves []policy.Move, c policy.TransferCost) {
	if !c.Enabled() {
		for _, mv := range moves {
			n.q.HandOff(mv.Count, v.Nodes[mv.To].Name)
		}
		return
	}
	total := 0
	for _, mv := range moves {
		total += mv.Count
	}
	if total <= 0 {
		return
	}
	ts := n.q.Movable(total + movableSlack)
	sizes := make([]int64, len(ts))
	for i, t := range ts {
		sizes[i] = t.Size
	}
	for _, h := range policy.WorthMoving(v, moves, sizes, c) {
		picked := make([]*queue.Ticket, 0, len(h.Picks))
		for _, k := range h.Picks {
			picked = append(picked, ts[k])
		}
		n.q.HandOffTickets(picked, v.Nodes[h.To].Name)
	}
}
