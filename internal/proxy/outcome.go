package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// forwardKind is what became of forwarding a request to another node, and
// so what the sender must do next. A node's Handler forwards requests the
// policy runner handed off (transferOut); a Dispatcher forwards every
// request it dispatches. Both decide with classifyForward, so they cannot
// disagree. The contract (transfer.Client.Forward, docs/architecture.md
// "Transfer outcomes"): a refusal means the peer did not take the request;
// not-run means it took it and never ran it; anything else before the
// answer's head may have started it; after the head, the answer cannot be
// replaced.
type forwardKind int

const (
	// forwardAnswered: the peer's answer reached the client whole.
	forwardAnswered forwardKind = iota
	// forwardClientGone: the client went away (before the answer's head, or
	// after it with the answer incomplete): nobody to answer.
	forwardClientGone
	// forwardAbort: the answer's head reached the client, then the forward
	// broke: abort the client's response, so it is seen as broken, never
	// silently truncated.
	forwardAbort
	// forwardRefused: the peer certainly did not take the request: a node
	// puts it back at its place, a dispatcher tries another node.
	forwardRefused
	// forwardNotRun: the peer took the request but it timed out in the
	// peer's queue: it never ran, and its wait is over: 503.
	forwardNotRun
	// forwardRetry: the peer may have started the request, which is
	// idempotent and may run once more: a node runs it locally, a dispatcher
	// on another node.
	forwardRetry
	// forwardFailed: the peer may have started the request, which may not
	// run again: 502.
	forwardFailed
)

// forwardOutcome is a forward's classification and the metric label values
// it is counted under.
type forwardOutcome struct {
	kind forwardKind
	// transfer is the outcome the forward is recorded under
	// (metrics.TransferOut), the same way by the Handler and the Dispatcher.
	transfer metrics.TransferOutcome
}

// classifyForward decides a forward's outcome from what transfer.Client.
// Forward returned, whether the client has gone (its request's context
// ended), and whether the request may run again (an idempotent method
// not retried before). The order matters and is pinned by its table test:
// what the client already received comes first, then a refusal (nothing
// was taken, whatever else happened), then a gone client (nobody to answer,
// so neither a 503 nor a retry), then the peer's own verdicts.
func classifyForward(res transfer.Result, err error, clientGone, mayRetry bool) forwardOutcome {
	switch {
	case err == nil:
		return forwardOutcome{forwardAnswered, metrics.TransferOK}
	case res.HeadWritten && clientGone && res.Complete():
		// The whole declared answer reached the client before it left.
		return forwardOutcome{forwardAnswered, metrics.TransferOK}
	case res.HeadWritten && clientGone:
		return forwardOutcome{forwardClientGone, metrics.TransferFailed}
	case res.HeadWritten:
		return forwardOutcome{forwardAbort, metrics.TransferFailed}
	case errors.Is(err, swderr.ErrRefused):
		return forwardOutcome{forwardRefused, metrics.TransferRefused}
	case clientGone:
		return forwardOutcome{forwardClientGone, metrics.TransferFailed}
	case errors.Is(err, swderr.ErrQueueTimeout):
		return forwardOutcome{forwardNotRun, metrics.TransferFailed}
	case mayRetry:
		return forwardOutcome{forwardRetry, metrics.TransferRetried}
	default:
		return forwardOutcome{forwardFailed, metrics.TransferFailed}
	}
}

// maxRequestIDLen caps a client's X-Request-Id that SWD adopts as the
// request's ID (logs, transfers); a longer one is replaced.
const maxRequestIDLen = 128

// requestIDs derives request IDs: the client's X-Request-Id when it has
// one of at most maxRequestIDLen bytes, else a fresh one: the node's name,
// a per-process prefix and a counter. Safe for concurrent use.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs(nodeName string) *requestIDs {
	return &requestIDs{prefix: nodeName + "-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36) + "-"}
}

func (g *requestIDs) of(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= maxRequestIDLen {
		return id
	}
	return g.prefix + strconv.FormatUint(g.n.Add(1), 36)
}

// transferHealth is what a forward tells peer health: its error, or, for
// an answer whose status is 5xx, an error wrapping swderr.ErrPeer5xx (the
// peer's app failed; Envoy's outlier detection counts these too).
func transferHealth(res transfer.Result, err error) error {
	if err == nil && res.Status >= 500 {
		return fmt.Errorf("%w: %d", swderr.ErrPeer5xx, res.Status)
	}
	return err
}
