package sim

import (
	"math"
	"time"

	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/policy"
)

// workState is the work load index of one run (Config.LoadIndex work), the
// model of what swd does with --load-index work:
//
//   - every node keeps, per route (workload class), SPLiT's statistic of
//     the service times of the requests it served (cost.Stat under
//     Config.Cost), and one over every route; a request entering a node's
//     queue or slot (an arrival, a moved or pulled request) is given the
//     cost that node predicts for its route then (cost.Predict), and keeps
//     it while it stays there;
//   - a node's work is the predicted cost of its waiting requests plus
//     cost.Remaining of each request in service (what internal/cost's
//     Ledger sums); gossip carries it beside the load, as the daemon's
//     entry does (wire tag 3);
//   - planners run through policy.PlanWork on views whose Costs are the
//     predicted costs of Self's movable waiting requests from the tail;
//     steal's Puller on policy.WorkPullView.
//
// A slot reserved for a pull in flight counts in the node's load (as under
// count) but adds no work: the pulled request's cost is not known before it
// arrives.
type workState struct {
	cfg    cost.Config
	routes int
	stat   []cost.Stat // stat[node*routes+route]
	all    []cost.Stat // per node, every route
	class  []int32     // per request slot: its route
	pred   []int64     // per request slot: predicted cost at its node, ns
	start  []int64     // per request slot: when its service began
	waitW  []int64     // per node: predicted cost of its waiting requests
	serve  [][]int32   // per node: the requests in service
	costs  []time.Duration
	pubW   []int64 // work of each published entry (parallel to pubL)

	// learning accuracy per route: true mean, and the worst relative
	// error of any node's statistic at the moment it reached Theta
	// samples (-1 when no node did)
	trueMean []float64
	errTheta []float64
}

func newWorkState(e *engine) *workState {
	routes := max(len(e.cfg.Workload.Classes), 1)
	w := &workState{
		cfg:      e.cfg.Cost,
		routes:   routes,
		stat:     make([]cost.Stat, e.n*routes),
		all:      make([]cost.Stat, e.n),
		waitW:    make([]int64, e.n),
		serve:    make([][]int32, e.n),
		trueMean: make([]float64, routes),
		errTheta: make([]float64, routes),
	}
	for k := range routes {
		w.errTheta[k] = -1
		w.trueMean[k] = e.cfg.Workload.MeanServiceMs() * 1e6
		if k < len(e.cfg.Workload.Classes) {
			w.trueMean[k] = e.cfg.Workload.Classes[k].MeanMs * e.cfg.Workload.Scale * 1e6
		}
	}
	return w
}

// grow keeps the per-request slices as long as the engine's.
func (w *workState) grow(slots int) {
	for len(w.pred) < slots {
		w.class = append(w.class, 0)
		w.pred = append(w.pred, 0)
		w.start = append(w.start, 0)
	}
}

// predict is node i's predicted cost of request s, which it takes now.
func (w *workState) predict(i int, s int32) {
	r := int(w.class[s])
	w.pred[s] = int64(cost.Predict(w.stat[i*w.routes+r], w.all[i], w.cfg))
}

// started: request s began service on node i at now.
func (w *workState) started(i int, s int32, now int64) {
	w.start[s] = now
	w.serve[i] = append(w.serve[i], s)
}

// finished: request s, of size size (its service time), completed on
// node i. The node learns from it.
func (w *workState) finished(i int, s int32, size int64) {
	l := w.serve[i]
	for k, x := range l {
		if x == s {
			l[k] = l[len(l)-1]
			w.serve[i] = l[:len(l)-1]
			break
		}
	}
	r := int(w.class[s])
	st := &w.stat[i*w.routes+r]
	st.Observe(time.Duration(size), w.cfg)
	w.all[i].Observe(time.Duration(size), w.cfg)
	if st.Samples() == uint64(w.cfg.Theta) {
		rel := math.Abs(float64(st.Value())-w.trueMean[r]) / w.trueMean[r]
		w.errTheta[r] = max(w.errTheta[r], rel)
	}
}

// work is node i's predicted work at now.
func (w *workState) work(i int, now int64) int64 {
	total := w.waitW[i]
	for _, s := range w.serve[i] {
		total += int64(cost.Remaining(time.Duration(w.pred[s]), time.Duration(now-w.start[s])))
	}
	return total
}

// selfCosts fills and returns the predicted costs of node i's movable
// waiting requests from the tail of its queue (View.Costs).
func (e *engine) selfCosts(i int) []time.Duration {
	w := e.work
	w.costs = w.costs[:0]
	q := &e.q[i]
	buf := q.buf[q.head:]
	for p := len(buf) - 1; p >= 0 && len(w.costs) < e.movable[i]; p-- {
		if s := buf[p]; !e.rHop[s] {
			w.costs = append(w.costs, time.Duration(w.pred[s]))
		}
	}
	return w.costs
}

// plan runs the node's Planner on v under the run's load index.
func (e *engine) plan(v policy.View) []policy.Move {
	if e.work == nil {
		return e.planner.Plan(v)
	}
	v.Costs = e.selfCosts(v.Self)
	return policy.PlanWork(e.planner, v)
}

// pull runs the node's Puller on v under the run's load index.
func (e *engine) pull(v policy.View) []int {
	if e.work != nil {
		v = policy.WorkPullView(v)
	}
	return e.puller.Pull(v, e.drng.Uint64())
}

// RouteCost is what the nodes of a work-index run learnt of one route.
type RouteCost struct {
	// Route is the workload class's name ("" for a one-route workload).
	Route string
	// TrueMs is the route's true mean size.
	TrueMs float64
	// MeanMs is the nodes' final statistics averaged over the nodes that
	// served the route; MinMs and MaxMs their extremes.
	MeanMs, MinMs, MaxMs float64
	// ErrAtTheta is the largest relative error |statistic - true| / true
	// of any node's statistic at the moment it reached Theta samples; -1
	// when no node served the route Theta times.
	ErrAtTheta float64
}

// routeCosts summarises the learnt statistics.
func (w *workState) routeCosts(e *engine) []RouteCost {
	out := make([]RouteCost, w.routes)
	for r := range out {
		rc := RouteCost{TrueMs: w.trueMean[r] / 1e6, ErrAtTheta: w.errTheta[r], MinMs: math.Inf(1), MaxMs: math.Inf(-1)}
		if r < len(e.cfg.Workload.Classes) {
			rc.Route = e.cfg.Workload.Classes[r].Name
		}
		k := 0
		for i := range e.n {
			if st := w.stat[i*w.routes+r]; st.Samples() > 0 {
				v := float64(st.Value()) / 1e6
				rc.MeanMs += v
				rc.MinMs, rc.MaxMs = min(rc.MinMs, v), max(rc.MaxMs, v)
				k++
			}
		}
		if k > 0 {
			rc.MeanMs /= float64(k)
		} else {
			rc.MinMs, rc.MaxMs = 0, 0
		}
		out[r] = rc
	}
	return out
}
