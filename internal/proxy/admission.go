package proxy

import (
	"context"
	"net/http"
)

// Admitter decides, before a client's request joins the queue, whether it
// may (session admission, internal/admission; docs/admission.md). Its
// methods are called for every client request and must be safe for
// concurrent use.
type Admitter interface {
	// Admit returns nil when r may be queued, possibly after waiting; an
	// error (a swderr sentinel) is the answer to the client.
	Admit(ctx context.Context, r *http.Request) error
	// Observe is shown the app's answer to every request served here
	// (it learns the session cookies the app sets).
	Observe(resp *http.Response)
}

// SetAdmitter makes h pass every request its client sent here through a
// (requests transferred in were admitted where their client called), and
// show a every answer of the app. Call before serving.
func (h *Handler) SetAdmitter(a Admitter) {
	h.admitter = a
	h.rp.ModifyResponse = func(resp *http.Response) error {
		a.Observe(resp)
		return nil
	}
}

// admit is the Admitter's verdict on r (nil without one).
func (h *Handler) admit(r *http.Request) error {
	if h.admitter == nil {
		return nil
	}
	return h.admitter.Admit(r.Context(), r)
}
