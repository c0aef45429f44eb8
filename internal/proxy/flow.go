package proxy

import (
	"net/http"
	"time"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/transfer"
)

// Flow statistics (internal/metrics flow.go): what each request carries
// across the client, app and transfer edges, and how long a move's
// hand-off takes. The hooks here are called from proxy.go.

// countingWriter counts the body bytes written through it. It keeps
// flushing and, through Unwrap, everything http.ResponseController reaches
// (hijacking for upgrades, deadlines).
type countingWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// Flush implements http.Flusher for callers that assert it (the transfer
// client relays answers chunk by chunk).
func (c *countingWriter) Flush() { _ = c.FlushError() }

// FlushError is what http.ResponseController calls to flush.
func (c *countingWriter) FlushError() error {
	return http.NewResponseController(c.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// bodyBytes is the request body's size: the spooled or buffered body,
// else the declared length (0 when unknown).
func (p *pending) bodyBytes() int64 {
	if p.spooled != nil {
		return p.size
	}
	if p.body != nil {
		return int64(len(p.body))
	}
	if p.r != nil && p.r.ContentLength > 0 {
		return p.r.ContentLength
	}
	return 0
}

// reportAdmitted tells a transferred request's sender, through the
// transfer server's writer, that the request is now in this node's queue.
func reportAdmitted(w http.ResponseWriter) {
	if a, ok := w.(transfer.AdmissionReporter); ok {
		a.ReportAdmitted()
	}
}

// observeTransferOut records an outgoing transfer's flow: its bodies when
// the peer answered, and its hand-off time (the policy's decision until the
// peer reported the request queued) when the peer reported one.
func (h *Handler) observeTransferOut(peer string, p *pending, o metrics.TransferOutcome, res transfer.Result, started time.Time) {
	if o == metrics.TransferOK {
		h.m.TransferFlow(metrics.DirOut, peer, p.bodyBytes(), res.BodyBytes)
	}
	if !res.Admitted.IsZero() {
		from := p.decided
		if from.IsZero() || from.After(started) {
			from = started
		}
		h.m.ObserveHandoff(p.bodyBytes(), res.Admitted.Sub(from))
	}
}
