package policy

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// LoadIndex is what a node's load is measured in (swd --load-index).
type LoadIndex int

const (
	// IndexCount is the paper's load index: requests waiting plus in
	// service (NodeLoad.Load).
	IndexCount LoadIndex = iota
	// IndexWork is predicted work (NodeLoad.Work): the predicted cost of
	// every waiting request plus the predicted remaining time of those in
	// service (internal/cost). Planners run on WorkView through PlanWork;
	// steal's Puller on WorkPullView.
	IndexWork
)

var loadIndexNames = []string{"count", "work"}

func (x LoadIndex) String() string {
	if x >= 0 && int(x) < len(loadIndexNames) {
		return loadIndexNames[x]
	}
	return fmt.Sprintf("LoadIndex(%d)", int(x))
}

// ParseLoadIndex is the inverse of LoadIndex.String.
func ParseLoadIndex(s string) (LoadIndex, error) {
	if i := slices.Index(loadIndexNames, s); i >= 0 {
		return LoadIndex(i), nil
	}
	return 0, fmt.Errorf("unknown load index %q (known: %s)", s, strings.Join(loadIndexNames, ", "))
}

// WorkQuantum is the unit a work view counts in: a node's Load in
// WorkView(v) is its predicted work in whole quanta, rounded up.
const WorkQuantum = time.Millisecond

// WorkView is v as a count planner should see it to balance work instead
// of requests: every node's Load becomes its predicted work in WorkQuanta
// (rounded up), and Self's Concurrency is set so that Self's Waiting() is
// the work of its movable waiting requests (the sum of v.Costs, rounded
// down; what is in service, and what may not move, never counts as
// movable). Everything else is kept.
//
// A known peer that shows requests but no work (a node that does not
// compute it) is counted as its requests times Self's mean predicted cost
// per request, so a cluster where some node runs --load-index count still
// plans on a sensible scale.
//
// It returns a copy; v is not modified.
func WorkView(v View) View {
	out := View{Self: v.Self, Nodes: slices.Clone(v.Nodes), Costs: v.Costs}
	if !validSelf(v) {
		return out
	}
	self := v.Nodes[v.Self]
	perRequest := WorkQuantum
	if self.Load > 0 && self.Work > 0 {
		perRequest = max(self.Work/time.Duration(self.Load), WorkQuantum)
	}
	for i := range out.Nodes {
		nl := &out.Nodes[i]
		w := nl.Work
		if w <= 0 && nl.Load > 0 {
			w = time.Duration(nl.Load) * perRequest
		}
		nl.Load = quantaUp(w)
	}
	var movable time.Duration
	for _, c := range v.Costs {
		movable += max(c, 0)
	}
	mq := int(movable / WorkQuantum)
	s := &out.Nodes[v.Self]
	// Waiting() is Load - max(Concurrency, 1): keep at least one quantum
	// of Load for that 1 so the movable work is never cut.
	s.Load = max(s.Load, mq+1)
	s.Concurrency = s.Load - mq
	return out
}

func quantaUp(w time.Duration) int {
	if w <= 0 {
		return 0
	}
	return int((w + WorkQuantum - 1) / WorkQuantum)
}

// PlanWork is a count Planner run on work: pl plans on WorkView(v), so each
// of its moves carries an amount of work (Count quanta), and PlanWork turns
// that work into whole requests of v.Costs. The rule (docs/algorithms.md,
// "The work load index"):
//
//   - lay Self's movable requests end to end in hand-off order (from the
//     tail of its queue), and the planner's moves end to end in the order
//     it returned them (nearest target first);
//   - TakeWork over the moves' total decides how many requests move: a
//     request moves when the work before it plus half its own cost is less
//     than the total (rounding to the nearest whole request), and the first
//     that does not ends the run (a hand-off takes a contiguous run from
//     the tail);
//   - each moving request goes to the target whose share of the total
//     covers its midpoint.
//
// A heavy request therefore moves when the planned work as a whole has room
// for it, even if no single target's share does (several nearly idle nodes
// each a little under the mean), and lands on the target the planner had
// planned most of that work for.
//
// The result satisfies the Planner contract on v (counts of requests, each
// target once, at most len(v.Costs) in all, never a request in service).
func PlanWork(pl Planner, v View) []Move {
	if !validSelf(v) || len(v.Costs) == 0 {
		return nil
	}
	moves := pl.Plan(WorkView(v))
	var total time.Duration
	for _, mv := range moves {
		total += time.Duration(max(mv.Count, 0)) * WorkQuantum
	}
	take := TakeWork(v.Costs, total)
	var out []Move
	var pos, bound time.Duration // work laid out so far; end of move k's share
	k := -1
	for _, c := range v.Costs[:take] {
		mid := pos + c/2
		for mid >= bound && k+1 < len(moves) {
			k++
			bound += time.Duration(max(moves[k].Count, 0)) * WorkQuantum
		}
		if n := len(out); n > 0 && out[n-1].To == moves[k].To {
			out[n-1].Count++
		} else {
			out = append(out, Move{From: moves[k].From, To: moves[k].To, Count: 1})
		}
		pos += c
	}
	return out
}

// TakeWork is how many requests of costs (in hand-off order: from the tail
// of the queue) an amount of work budget takes: walking them in order, it
// takes each request whose cost is less than twice the budget still left,
// and stops at the first that is not (or when nothing is left). Taking a
// request of cost c when r is left brings the work moved closer to the
// budget exactly when c < 2r, so the amount rounds to the nearest whole
// request; it stops rather than skips because a hand-off takes a
// contiguous run from the tail.
func TakeWork(costs []time.Duration, budget time.Duration) int {
	left := budget
	for k, c := range costs {
		if left <= 0 || c >= 2*left {
			return k
		}
		left -= c
	}
	return len(costs)
}

// WorkPullView is v as steal's Puller should see it under the work load
// index. When Self has a free slot (an idle slot asking for work), every
// node that shows a head (HeadAge > 0) gets HeadAge + Work instead: the age
// of its oldest movable request plus the work it holds, so the peers whose
// queues will still take longest are asked first, not only those whose
// head waited longest. When Self has no free slot (an overtake: a slot
// freed while requests wait locally) the view is left as it is, and
// overtaking still compares head ages as under count: comparing work there
// made nodes with light requests waiting pull heavy ones ahead of them
// (docs/sim.md, "The work load index"). It returns a copy; v is not
// modified.
func WorkPullView(v View) View {
	out := View{Self: v.Self, Nodes: slices.Clone(v.Nodes), Costs: v.Costs}
	if !validSelf(v) || v.Nodes[v.Self].FreeSlots() == 0 {
		return out
	}
	for i := range out.Nodes {
		if nl := &out.Nodes[i]; nl.HeadAge > 0 {
			nl.HeadAge += max(nl.Work, 0)
		}
	}
	return out
}

// WorkMove is a Move with the predicted work it carries.
type WorkMove struct {
	Move
	// WorkMs is the predicted cost of the moved requests, in ms.
	WorkMs float64 `json:"work_ms"`
}

// WorkClusterPlan is PlanCluster's result under the work load index: the
// moves, each node's requests after them and its predicted work after them.
type WorkClusterPlan struct {
	Transfers   []WorkMove `json:"transfers"`
	After       []int      `json:"after"`
	AfterWorkMs []float64  `json:"after_work_ms"`
}

// MaxPlanRequests bounds the requests PlanClusterWork takes in all.
const MaxPlanRequests = 1 << 16

// PlanClusterWork is PlanCluster under the work load index, for `swdctl plan
// --costs`: node i holds len(costs[i]) requests whose predicted costs are
// costs[i], in queue order (head first); the first m of them are in service
// (just started: each counts its whole cost) and never move, the rest wait
// and may move. Every node runs PlanWork(pl) at once on that exact view
// (every entry known, Work the sum of its costs, Costs its waiting
// requests from the tail), and each move takes its requests from the tail
// of its sender's queue, as HandOff does. It errors when m < 1, a cost is
// negative or there are more than MaxPlanRequests requests.
func PlanClusterWork(pl Planner, costs [][]time.Duration, m int) (WorkClusterPlan, error) {
	if m < 1 {
		return WorkClusterPlan{}, fmt.Errorf("concurrency must be at least 1, got %d", m)
	}
	nodes := make([]NodeLoad, len(costs))
	total := 0
	for i, cs := range costs {
		total += len(cs)
		if total > MaxPlanRequests {
			return WorkClusterPlan{}, fmt.Errorf("more than %d requests", MaxPlanRequests)
		}
		var w time.Duration
		for k, c := range cs {
			if c < 0 {
				return WorkClusterPlan{}, fmt.Errorf("cost %d of node %d is negative (%s)", k, i, c)
			}
			w += c
		}
		nodes[i] = NodeLoad{Name: fmt.Sprintf("node-%d", i), Load: len(cs), Concurrency: m, Known: true, Work: w}
	}
	out := WorkClusterPlan{Transfers: []WorkMove{}, After: make([]int, len(costs)), AfterWorkMs: make([]float64, len(costs))}
	work := make([]time.Duration, len(costs))
	for i := range nodes {
		out.After[i], work[i] = nodes[i].Load, nodes[i].Work
	}
	for i, cs := range costs {
		var tail []time.Duration // waiting requests, tail first
		for k := len(cs) - 1; k >= m; k-- {
			tail = append(tail, cs[k])
		}
		for _, mv := range PlanWork(pl, View{Self: i, Nodes: nodes, Costs: tail}) {
			var w time.Duration
			for _, c := range tail[:mv.Count] {
				w += c
			}
			tail = tail[mv.Count:]
			out.Transfers = append(out.Transfers, WorkMove{Move: mv, WorkMs: ms(w)})
			out.After[mv.From] -= mv.Count
			out.After[mv.To] += mv.Count
			work[mv.From] -= w
			work[mv.To] += w
		}
	}
	for i, w := range work {
		out.AfterWorkMs[i] = ms(w)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
