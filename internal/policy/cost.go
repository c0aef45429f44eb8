package policy

import (
	"fmt"
	"time"
)

// The transfer-cost rule (paper 002: hand-offs cost, more so for large
// events): a Planner says how many requests a node moves where; the rule
// says which of them are worth it. A request moves only if the wait it is
// expected to save exceeds what handing it off costs for its body size, so
// large bodies stay home unless the wait they would save is long. It is a
// filter on a Planner's moves, the same for every transfer policy, applied
// by the daemon's policy runner, `swdctl plan` and the simulator alike;
// the costs are injected (the daemon measures them, the simulator is
// configured with them), nothing here reads a clock.

// SizeCost is the hand-off cost of bodies of at most MaxBytes (and more
// than the previous entry's MaxBytes).
type SizeCost struct {
	MaxBytes int64         `json:"max_bytes"`
	Cost     time.Duration `json:"cost"`
}

// TransferCost is what the rule knows about moving requests.
type TransferCost struct {
	// Service is the mean time a request takes at the app; it turns
	// queue positions into waits. Zero (nothing measured yet) turns the
	// rule off: every planned move goes.
	Service time.Duration `json:"service"`
	// Handoff is the hand-off cost by body size, ascending by MaxBytes; a
	// body larger than every MaxBytes costs the last entry's, and an empty
	// table costs nothing. The caller fills classes it has not measured
	// (flow.Sampler.TransferCost: with the nearest smaller measured one).
	Handoff []SizeCost `json:"handoff"`
}

// Enabled reports whether the rule filters anything.
func (c TransferCost) Enabled() bool { return c.Service > 0 }

// Of returns the hand-off cost of a body of n bytes.
func (c TransferCost) Of(n int64) time.Duration {
	for _, s := range c.Handoff {
		if n <= s.MaxBytes {
			return s.Cost
		}
	}
	if k := len(c.Handoff); k > 0 {
		return c.Handoff[k-1].Cost
	}
	return 0
}

// Validate reports the first problem with c.
func (c TransferCost) Validate() error {
	if c.Service < 0 {
		return fmt.Errorf("transfer cost: service time must not be negative, got %s", c.Service)
	}
	for i, s := range c.Handoff {
		switch {
		case s.Cost < 0:
			return fmt.Errorf("transfer cost: hand-off cost of bodies up to %d bytes is negative (%s)", s.MaxBytes, s.Cost)
		case s.MaxBytes < 0:
			return fmt.Errorf("transfer cost: size bound %d is negative", s.MaxBytes)
		case i > 0 && s.MaxBytes <= c.Handoff[i-1].MaxBytes:
			return fmt.Errorf("transfer cost: size bounds must ascend, got %d after %d", s.MaxBytes, c.Handoff[i-1].MaxBytes)
		}
	}
	return nil
}

// QueueWait is the rule's estimate of how long a request waits at a node
// holding load requests (waiting and in service, the request itself not
// counted) with m app slots: it starts after load-m+1 completions, which
// come every service/m on average; nothing when a slot is free.
func QueueWait(load, m int, service time.Duration) time.Duration {
	m = max(m, 1)
	ahead := load - m + 1
	if ahead <= 0 {
		return 0
	}
	return time.Duration(int64(ahead) * int64(service) / int64(m))
}

// Handoff is which of node Self's movable requests go to node To: indices
// into the movable list given to WorthMoving (0 is the tail).
type Handoff struct {
	To    int   `json:"to"`
	Picks []int `json:"picks"`
}

// WorthMoving applies the rule to a Planner's moves for node v.Self.
// movable holds the body sizes of Self's movable waiting requests, tail
// first (what the planner's moves would take, and possibly more behind
// them). For each move in order, the requests still unpicked are tried
// from the tail; one goes to the move's target while the move has room
// (its Count) and its expected saving exceeds its hand-off cost:
//
//	saving = QueueWait(Self.Load-1-k, Self's m, Service)
//	       - QueueWait(To.Load+i, To's m, Service)
//
// for the request k places from the tail going as the i-th request of
// this round to To (requests behind it are not ahead of it; those sent to
// To before it are). One that is not worth moving stays and may still go
// to a later move's target. Nothing moves beyond the planner's counts. With
// the rule off (c.Enabled false) every move takes its Count requests from
// the tail, as the queue's HandOff does.
func WorthMoving(v View, moves []Move, movable []int64, c TransferCost) []Handoff {
	if !validSelf(v) {
		return nil
	}
	self := v.Nodes[v.Self]
	taken := make([]bool, len(movable))
	var out []Handoff
	for _, mv := range moves {
		if mv.From != v.Self || mv.To < 0 || mv.To >= len(v.Nodes) || mv.To == v.Self || mv.Count <= 0 {
			continue
		}
		to := v.Nodes[mv.To]
		h := Handoff{To: mv.To}
		for k := 0; k < len(movable) && len(h.Picks) < mv.Count; k++ {
			if taken[k] {
				continue
			}
			if c.Enabled() {
				saving := QueueWait(self.Load-1-k, self.Concurrency, c.Service) -
					QueueWait(to.Load+len(h.Picks), to.Concurrency, c.Service)
				if saving <= c.Of(movable[k]) {
					continue
				}
			}
			taken[k] = true
			h.Picks = append(h.Picks, k)
		}
		if len(h.Picks) > 0 {
			out = append(out, h)
		}
	}
	return out
}

// PlanClusterCost is PlanCluster with the transfer-cost rule: every
// node's waiting requests carry a body of body bytes, and each node's
// moves go through WorthMoving with c. HeldBack counts the requests the
// planners moved that the rule kept home. It is what `swdctl plan
// --service ... --handoff ...` prints.
func PlanClusterCost(pl Planner, loads []int, m int, body int64, c TransferCost) (ClusterPlan, error) {
	if err := c.Validate(); err != nil {
		return ClusterPlan{}, err
	}
	if body < 0 {
		return ClusterPlan{}, fmt.Errorf("body size must not be negative, got %d", body)
	}
	out, err := PlanCluster(PlannerFunc(func(View) []Move { return nil }), loads, m)
	if err != nil {
		return ClusterPlan{}, err
	}
	nodes := make([]NodeLoad, len(loads))
	for i, l := range loads {
		nodes[i] = NodeLoad{Name: fmt.Sprintf("node-%d", i), Load: l, Concurrency: m, Known: true}
	}
	for i := range nodes {
		v := View{Self: i, Nodes: nodes}
		moves := pl.Plan(v)
		movable := make([]int64, nodes[i].Waiting())
		for k := range movable {
			movable[k] = body
		}
		planned, picked := 0, 0
		for _, mv := range moves {
			planned += mv.Count
		}
		for _, h := range WorthMoving(v, moves, movable, c) {
			out.Transfers = append(out.Transfers, Move{From: i, To: h.To, Count: len(h.Picks)})
			out.After[i] -= len(h.Picks)
			out.After[h.To] += len(h.Picks)
			picked += len(h.Picks)
		}
		out.HeldBack += min(planned, len(movable)) - picked
	}
	return out, nil
}
