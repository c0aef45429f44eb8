package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// TestClassifyForward pins the one decision both the Handler (transfers)
// and the Dispatcher (dispatches) make about a forward, in the order its
// cases are checked. Errors are shaped as transfer.Client.Forward returns
// them.
func TestClassifyForward(t *testing.T) {
	var (
		noHead    = transfer.Result{}
		headOnly  = transfer.Result{HeadWritten: true, ContentLength: -1}
		headWhole = transfer.Result{HeadWritten: true, ContentLength: 5, BodyBytes: 5}
		headPart  = transfer.Result{HeadWritten: true, ContentLength: 5, BodyBytes: 2}
		refused   = errors.Join(swderr.ErrRefused, errors.New("rpc error: code = ResourceExhausted"))
		unreached = errors.Join(swderr.ErrRefused, swderr.ErrUnreachable, errors.New("dial"))
		notRun    = errors.Join(swderr.ErrQueueTimeout, errors.New("rpc error: code = DeadlineExceeded"))
		maybe     = errors.Join(swderr.ErrMaybeStarted, errors.New("rpc error: code = Unavailable"))
		maybeCtx  = errors.Join(swderr.ErrMaybeStarted, context.Canceled, errors.New("rpc error: code = Canceled"))
		cutOff    = fmt.Errorf("transfer answer cut off after 2 bytes: %w", errors.New("rpc error: code = Aborted"))
		afterGone = errors.Join(swderr.ErrClientGone, context.Canceled, errors.New("stream closed"))
	)
	cases := []struct {
		name       string
		res        transfer.Result
		err        error
		clientGone bool
		mayRetry   bool
		want       forwardKind
		transfer   metrics.TransferOutcome
	}{
		// No error: the peer's answer was relayed, whatever else holds.
		{"answered", headWhole, nil, false, false, forwardAnswered, metrics.TransferOK},
		{"answered, client left at the very end", headWhole, nil, true, true, forwardAnswered, metrics.TransferOK},
		// The client left right after reading the whole declared body: the
		// stream's error is ours, not the peer's, and the answer counts.
		{"whole body then client gone", headWhole, afterGone, true, false, forwardAnswered, metrics.TransferOK},
		// The client left mid-answer (or the length was not declared):
		// nobody to answer, the transfer did not deliver.
		{"part of the body then client gone", headPart, afterGone, true, false, forwardClientGone, metrics.TransferFailed},
		{"no length then client gone", headOnly, afterGone, true, true, forwardClientGone, metrics.TransferFailed},
		// The head went out and the answer broke with the client still there:
		// abort, even for an idempotent request (it cannot be replaced).
		{"broken after the head", headPart, cutOff, false, true, forwardAbort, metrics.TransferFailed},
		// A marked refusal or an unreachable peer: nothing was taken.
		{"refused", noHead, refused, false, false, forwardRefused, metrics.TransferRefused},
		{"unreachable", noHead, unreached, false, false, forwardRefused, metrics.TransferRefused},
		// A refusal wins over a gone client: the request is put back (and
		// the node's wait then ends it as client gone) or the dispatcher's
		// next try fails at once.
		{"refused, client gone", noHead, refused, true, false, forwardRefused, metrics.TransferRefused},
		// A gone client before any answer: nobody to answer, so neither the
		// peer's not-run verdict (a 503) nor a retry matters.
		{"client gone before the head", noHead, maybeCtx, true, true, forwardClientGone, metrics.TransferFailed},
		{"not run, client gone", noHead, notRun, true, false, forwardClientGone, metrics.TransferFailed},
		// Admitted, timed out in the peer's queue, never ran: 503, never a
		// retry (its wait is over), even for an idempotent request.
		{"not run", noHead, notRun, false, true, forwardNotRun, metrics.TransferFailed},
		// May have started: an idempotent request may run once more.
		{"maybe started, may retry", noHead, maybe, false, true, forwardRetry, metrics.TransferRetried},
		// May have started and may not run again (not idempotent, or the
		// dispatcher's one retry is spent): 502.
		{"maybe started, no retry", noHead, maybe, false, false, forwardFailed, metrics.TransferFailed},
		// An error Forward does not classify still counts as maybe started.
		{"unclassified error", noHead, errors.New("surprise"), false, false, forwardFailed, metrics.TransferFailed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := classifyForward(c.res, c.err, c.clientGone, c.mayRetry)
			assert.Equal(t, c.want, got.kind)
			assert.Equal(t, c.transfer, got.transfer)
		})
	}
}

// TestRequestIDs: the client's X-Request-Id is kept up to the cap; a
// missing, empty or longer one is replaced by a fresh ID that names the
// node and never repeats.
func TestRequestIDs(t *testing.T) {
	g := newRequestIDs("node-a")
	cases := []struct {
		name   string
		header string
		keep   bool
	}{
		// A client's ID is the request's ID.
		{"client id", "abc-123", true},
		// Exactly the cap is still kept.
		{"at the cap", strings.Repeat("x", maxRequestIDLen), true},
		// One byte over the cap: replaced, so logs and transfers stay small.
		{"over the cap", strings.Repeat("x", maxRequestIDLen+1), false},
		// None given: a fresh one.
		{"no header", "", false},
	}
	seen := map[string]bool{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/", nil)
			if c.header != "" {
				r.Header.Set("X-Request-Id", c.header)
			}
			id := g.of(r)
			if c.keep {
				assert.Equal(t, c.header, id)
				return
			}
			assert.True(t, strings.HasPrefix(id, "node-a-"), id)
			assert.LessOrEqual(t, len(id), maxRequestIDLen)
			assert.False(t, seen[id], "fresh IDs repeat: %s", id)
			seen[id] = true
		})
	}
}
