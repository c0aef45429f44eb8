package policy

import (
	"fmt"
	"slices"
	"time"
)

// ClusterPlan is what every node would move if all ran a transfer policy at
// once on the same exact view: the moves and the loads after them.
type ClusterPlan struct {
	Transfers []Move `json:"transfers"`
	After     []int  `json:"after"`
	// HeldBack counts the moves the transfer-cost rule kept home
	// (PlanClusterCost only).
	HeldBack int `json:"held_back,omitempty"`
}

// PlanCluster runs planner for every node of an exact view (every entry
// known, all with concurrency m) and aggregates the result. It is what
// `swdctl plan` prints and what tests check invariants on.
func PlanCluster(pl Planner, loads []int, m int) (ClusterPlan, error) {
	if m < 1 {
		return ClusterPlan{}, fmt.Errorf("concurrency must be at least 1, got %d", m)
	}
	nodes := make([]NodeLoad, len(loads))
	for i, l := range loads {
		if l < 0 {
			return ClusterPlan{}, fmt.Errorf("load of node %d is negative (%d)", i, l)
		}
		nodes[i] = NodeLoad{Name: fmt.Sprintf("node-%d", i), Load: l, Concurrency: m, Known: true}
	}
	out := ClusterPlan{Transfers: []Move{}, After: make([]int, len(loads))}
	copy(out.After, loads)
	for i := range nodes {
		for _, mv := range pl.Plan(View{Self: i, Nodes: nodes}) {
			out.Transfers = append(out.Transfers, mv)
			out.After[mv.From] -= mv.Count
			out.After[mv.To] += mv.Count
		}
	}
	return out, nil
}

// PullAsk is one pull of a PullPlan: a free slot of node Node asks the
// peers Ask in order; From is the peer it got a request from, -1 when every
// asked peer had nothing movable left (or Ask is empty).
type PullAsk struct {
	Node int   `json:"node"`
	Ask  []int `json:"ask"`
	From int   `json:"from"`
}

// PullPlan is what every free slot of an exact view would pull if all
// pulled at once: each slot's ask list, the requests moved, how many asks
// missed, and the loads after.
type PullPlan struct {
	Pulls     []PullAsk `json:"pulls"`
	Transfers []Move    `json:"transfers"`
	Misses    int       `json:"misses"`
	After     []int     `json:"after"`
}

// PullCluster is the cluster-wide what-if of a Puller, for `swdctl plan`:
// on an exact view (every entry known and fresh, all nodes with
// concurrency m, loads[i] requests held by node i and heads[i] the age of
// its oldest waiting request, 0 when it has none), every free slot (m -
// loads[i] of them on node i) calls pu.Pull at the same moment on that
// same view, as concurrent pulls do. The seed of node i's k-th free slot
// is derived from seed, i and k. The pulls are then resolved one at a time
// in ring order, slot by slot: each takes one request from the first peer
// on its list that still has a waiting request, and every peer asked
// before it counts a miss. Every waiting request counts as movable (none
// has moved yet). It errors when m < 1, the slices differ in length, a
// load or head is negative, or a node shows a head with nothing waiting.
func PullCluster(pu Puller, loads []int, heads []time.Duration, m int, seed uint64) (PullPlan, error) {
	if m < 1 {
		return PullPlan{}, fmt.Errorf("concurrency must be at least 1, got %d", m)
	}
	if len(heads) != len(loads) {
		return PullPlan{}, fmt.Errorf("need one head age per load, got %d for %d loads", len(heads), len(loads))
	}
	nodes := make([]NodeLoad, len(loads))
	left := make([]int, len(loads))
	for i, l := range loads {
		switch {
		case l < 0:
			return PullPlan{}, fmt.Errorf("load of node %d is negative (%d)", i, l)
		case heads[i] < 0:
			return PullPlan{}, fmt.Errorf("head age of node %d is negative (%s)", i, heads[i])
		case heads[i] > 0 && l <= m:
			return PullPlan{}, fmt.Errorf("node %d shows a head (%s) but has nothing waiting (load %d, m %d)", i, heads[i], l, m)
		}
		nodes[i] = NodeLoad{Name: fmt.Sprintf("node-%d", i), Load: l, Concurrency: m, Known: true, HeadAge: heads[i]}
		if heads[i] > 0 {
			left[i] = l - m
		}
	}
	out := PullPlan{Pulls: []PullAsk{}, Transfers: []Move{}, After: slices.Clone(loads)}
	if out.After == nil {
		out.After = []int{}
	}
	for i := range nodes {
		for k := range nodes[i].FreeSlots() {
			ask := pu.Pull(View{Self: i, Nodes: nodes}, mixSeed(seed, uint64(i), uint64(k)))
			pa := PullAsk{Node: i, Ask: slices.Clone(ask), From: -1}
			if pa.Ask == nil {
				pa.Ask = []int{}
			}
			for _, j := range ask {
				if j < 0 || j >= len(nodes) || j == i {
					return PullPlan{}, fmt.Errorf("puller asked node %d for node %d of %d", j, i, len(nodes))
				}
				if left[j] > 0 {
					left[j]--
					pa.From = j
					out.After[j]--
					out.After[i]++
					out.Transfers = append(out.Transfers, Move{From: j, To: i, Count: 1})
					break
				}
				out.Misses++
			}
			out.Pulls = append(out.Pulls, pa)
		}
	}
	return out, nil
}

// mixSeed derives a decision's seed from a base seed and indices
// (SplitMix64's finaliser over their combination).
func mixSeed(seed uint64, xs ...uint64) uint64 {
	z := seed
	for _, x := range xs {
		z += 0x9e3779b97f4a7c15 ^ x*0xbf58476d1ce4e5b9
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
	}
	return z
}
