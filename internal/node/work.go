package node

import (
	"fmt"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/control"
	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/route"
)

// costState is a node's cost learning and work load index (internal/cost):
// the route table, each route's learnt service time, and the requests in
// service; nil for a dispatcher.
type costState struct {
	index  policy.LoadIndex
	routes *route.Table
	table  *cost.Table
	ledger *cost.Ledger
}

// validateCosts checks the load index, cost and route settings.
func (c Config) validateCosts() error {
	if _, err := policy.ParseLoadIndex(c.LoadIndex); err != nil {
		return fmt.Errorf("--load-index: %w", err)
	}
	if err := c.Cost.Validate(); err != nil {
		return fmt.Errorf("--cost-theta, --cost-weight: %w", err)
	}
	if err := c.Routes.Validate(); err != nil {
		return fmt.Errorf("--route: %w", err)
	}
	return nil
}

// newCostState builds a node's cost learning from a validated config.
func newCostState(c Config) (*costState, error) {
	idx, err := policy.ParseLoadIndex(c.LoadIndex)
	if err != nil {
		return nil, err
	}
	rt, err := route.New(c.Routes)
	if err != nil {
		return nil, err
	}
	ct, err := cost.NewTable(c.Cost, rt.Max())
	if err != nil {
		return nil, err
	}
	return &costState{index: idx, routes: rt, table: ct, ledger: cost.NewLedger(time.Now)}, nil
}

// work is the node's predicted work now: its waiting requests' predicted
// costs plus the predicted remaining service of those in service.
func (n *Node) work() time.Duration {
	if n.q == nil || n.cost == nil {
		return 0
	}
	return n.q.WaitingCost() + n.cost.ledger.Remaining()
}

// extras is what the node gossips beyond its load and policy: its head age
// under a pulling policy (pull.go), its work under --load-index work (the
// app's readiness is set by Extras).
func (n *Node) extras() cluster.Extras {
	x := cluster.Extras{HeadAge: n.headAge()}
	if n.cost != nil && n.cost.index == policy.IndexWork {
		x.Work = n.work()
	}
	return x
}

// plan is the policy runner's plan for v: the planner's own under the
// count index; under work, the planner run on work (policy.PlanWork) with
// the costs of the requests a hand-off would take, from the tail.
func (n *Node) plan(pl policy.Planner, v policy.View) []policy.Move {
	if n.cost == nil || n.cost.index != policy.IndexWork {
		return pl.Plan(v)
	}
	v.Costs = n.q.TailCosts(n.q.Waiting())
	return policy.PlanWork(pl, v)
}

// routeStats lists what the node has learnt per route, by route ID.
func (n *Node) routeStats() []control.RouteStat {
	if n.cost == nil {
		return nil
	}
	var limits map[int]int
	if n.adm != nil {
		limits = n.adm.sched.Limits()
	}
	var out []control.RouteStat
	for _, r := range n.cost.table.Routes() {
		out = append(out, control.RouteStat{Name: n.cost.routes.Name(route.ID(r.ID)), Cost: r.Cost, Samples: r.Samples, Limit: limits[r.ID]})
	}
	return out
}

// routeCosts is swd_route_cost_seconds: each learnt route's cost.
func (n *Node) routeCosts() map[string]float64 {
	rs := n.routeStats()
	if len(rs) == 0 {
		return nil
	}
	out := make(map[string]float64, len(rs))
	for _, r := range rs {
		out[r.Name] = r.Cost.Seconds()
	}
	return out
}
