package proxy

import (
	"net/http"

	"github.com/swd-project/swd/internal/queue"
)

// Router gives requests their affinity key and priority class, and says
// where a keyed request should be served (the node wires internal/affinity
// and internal/cohort behind it; docs/affinity.md). Its methods are called
// for every request and must be safe for concurrent use.
type Router interface {
	// Classify returns r's affinity key ("" for none) and priority class
	// (0 normal, higher first where the queue's Scheduler honours it).
	Classify(r *http.Request) (key string, priority int)
	// Place returns the peer a request for key should run on, or "" to run
	// it here.
	Place(key string) string
}

// SetRouter makes h tag every request's ticket with its key and priority
// and send keyed requests whose place is another node there at once, over
// the transfer path (the move counts as the request's hop; this node still
// answers its client). Call before serving.
func (h *Handler) SetRouter(r Router) { h.router = r }

// push admits t for request r: tagged by the router, and handed at once to
// the key's place when that is another node and t may move; else queued
// here.
func (h *Handler) push(t *queue.Ticket, r *http.Request) error {
	if h.router == nil {
		return h.q.Push(t)
	}
	t.Affinity, t.Priority = h.router.Classify(r)
	if t.Affinity != "" && t.Transferable {
		if peer := h.router.Place(t.Affinity); peer != "" && peer != h.cfg.NodeName {
			return h.q.PushTo(t, peer)
		}
	}
	return h.q.Push(t)
}
