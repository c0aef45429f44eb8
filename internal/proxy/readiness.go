package proxy

import (
	"errors"
	"net"
)

// SetAppReadiness connects the node's view of its app: ready says whether
// the app is ready (transfers are refused with swderr.ErrAppUnavailable
// while it is not), down is told at once when the app refused a
// connection. Either may be nil. Call before serving.
func (h *Handler) SetAppReadiness(ready func() bool, down func()) {
	h.appReady, h.appDown = ready, down
}

func (h *Handler) noteAppDown() {
	if h.appDown != nil {
		h.appDown()
	}
}

// appRefused reports whether err says the app could not be reached at all
// (the connection was never made), so it cannot have started the request.
func appRefused(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}
