package proxy

import (
	"net/http"

	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/route"
)

// costs is a node's cost learning (internal/cost): the route of each
// request, each route's learnt service time, and the requests in service.
type costs struct {
	routes *route.Table
	table  *cost.Table
	ledger *cost.Ledger
}

// SetCosts makes the handler give every ticket its route (rt) and
// predicted cost (ct's statistic of that route), count every request the
// app serves in ledger while it serves it, and teach ct each route's
// service time (from the slot's grant to the end of the app's answer, as
// the early-reject mean; requests whose client went away are not learnt).
// ct must hold at least rt.Max() routes. Call before serving.
func (h *Handler) SetCosts(rt *route.Table, ct *cost.Table, ledger *cost.Ledger) {
	h.cost = &costs{routes: rt, table: ct, ledger: ledger}
}

// predict sets t's route and predicted cost (nothing without SetCosts).
func (h *Handler) predict(r *http.Request, t *queue.Ticket) {
	if h.cost == nil {
		return
	}
	id := h.cost.routes.Of(r)
	t.Route, t.Cost = int(id), h.cost.table.Predict(int(id))
}

// startService counts t as in service from now; the function it returns
// ends that (once) and, when learn, teaches the route its service time.
// nil without SetCosts.
func (h *Handler) startService(t *queue.Ticket) func(learn bool) {
	if h.cost == nil {
		return nil
	}
	c := h.cost
	s := c.ledger.Start(t.Cost)
	return func(learn bool) {
		d := c.ledger.Finish(s)
		if learn {
			_ = c.table.Observe(t.Route, d) // IDs come from routes, which ct covers
		}
	}
}
