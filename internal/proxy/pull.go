package proxy

import (
	"net/http"

	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/transfer"
)

// Pulls (policy steal): this node hands its head to a peer that asks
// (HandHead, called by the Transfer service's Pull), and admits a request
// it pulled itself into the app slot it holds for that pull
// (admitTransferred).

var _ transfer.HeadSource = (*Handler)(nil)

// SetPullHolds sets how a request arriving for one of this node's pulls
// finds the app slot held for it: f returns the hold of pull id, or nil
// when that pull is over (the request then queues like any transfer). Call
// before serving.
func (h *Handler) SetPullHolds(f func(id uint64) *queue.Hold) { h.pullHold = f }

// HandHead implements transfer.HeadSource: the queue's head (the oldest
// waiting request that never moved, never one in service) leaves for peer,
// and the goroutine that owns it sends it there on the Forward path with
// pullID, answering its client as for any transfer (or putting it back if
// peer refuses).
func (h *Handler) HandHead(peer string, pullID uint64) (string, bool) {
	if _, ok := h.peers.GRPCAddr(peer); !ok {
		return "", false // could not be sent: keep it
	}
	t := h.q.HandHead(peer, pullID)
	if t == nil {
		return "", false
	}
	return t.Value.(*pending).id, true
}

// admitTransferred queues a transferred request: into the slot held for
// its pull when it answers one of this node's pulls that still holds one
// (no early-reject check: it is served at once), else like any request.
func (h *Handler) admitTransferred(t *queue.Ticket, r *http.Request, in transfer.Inbound) error {
	if hold := h.heldFor(in); hold != nil {
		return h.q.PushHeld(t, hold)
	}
	if err := h.overloaded(); err != nil {
		return err
	}
	return h.push(t, r)
}

// heldFor returns the slot held for the pull a transferred request
// answers, while that pull still holds one; else nil.
func (h *Handler) heldFor(in transfer.Inbound) *queue.Hold {
	if in.PullID == 0 || h.pullHold == nil {
		return nil
	}
	return h.pullHold(in.PullID)
}

// releaseRefusedPull frees at once the slot held for the pull a refused
// transferred request answered, so the requests waiting here get it
// instead of it idling until the pull gives up.
func (h *Handler) releaseRefusedPull(in transfer.Inbound) {
	if hold := h.heldFor(in); hold != nil {
		hold.Release()
	}
}
