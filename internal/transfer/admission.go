package transfer

import (
	"google.golang.org/grpc/metadata"
)

// AdmittedKey is the header metadata a Server sends as soon as its Backend
// has queued a transferred request (AdmissionReporter), long before the
// answer: the sender learns when the hand-off ended (Result.Admitted), so
// it can measure what moving a request costs apart from the peer's queue
// and app. A peer that does not send it leaves Result.Admitted zero.
const AdmittedKey = "swd-admitted"

// AdmissionReporter is implemented by the ResponseWriter a Server gives its
// Backend. The Backend calls ReportAdmitted once it has queued the request
// (never for a refusal), before it writes the answer; later calls, and
// calls after the head, do nothing.
type AdmissionReporter interface {
	ReportAdmitted()
}

var _ AdmissionReporter = (*streamWriter)(nil)

// ReportAdmitted implements AdmissionReporter: it sends the stream's
// header metadata with AdmittedKey now. gRPC sends headers once, so a
// second call (or one after the head, which sent them) is refused by the
// stream and ignored here.
func (w *streamWriter) ReportAdmitted() {
	if w.wroteHead {
		return
	}
	_ = w.stream.SendHeader(metadata.Pairs(AdmittedKey, "1"))
}
