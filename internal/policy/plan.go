package policy

import "fmt"

// ClusterPlan is what every node would move if all ran a transfer policy at
// once on the same exact view: the moves and the loads after them.
type ClusterPlan struct {
	Transfers []Move `json:"transfers"`
	After     []int  `json:"after"`
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
