package swderr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/swderr"
)

// wrapped returns err wrapped the way callers in SWD wrap sentinels.
func wrapped(err error) error { return fmt.Errorf("context: %w", err) }

func TestHTTPStatus(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		// No error is a plain success.
		{"nil", nil, http.StatusOK},
		// Every "try again later" state is a 503.
		{"queue full", swderr.ErrQueueFull, http.StatusServiceUnavailable},
		{"queue timeout", swderr.ErrQueueTimeout, http.StatusServiceUnavailable},
		{"overloaded", swderr.ErrOverloaded, http.StatusServiceUnavailable},
		{"draining", swderr.ErrDraining, http.StatusServiceUnavailable},
		{"refused", swderr.ErrRefused, http.StatusServiceUnavailable},
		{"no backend", swderr.ErrNoBackend, http.StatusServiceUnavailable},
		// Wrapping with %w keeps the mapping.
		{"wrapped queue full", wrapped(swderr.ErrQueueFull), http.StatusServiceUnavailable},
		// A body over --max-body is a 413.
		{"body too large", swderr.ErrBodyTooLarge, http.StatusRequestEntityTooLarge},
		{"wrapped body too large", wrapped(swderr.ErrBodyTooLarge), http.StatusRequestEntityTooLarge},
		// Malformed requests and unknown policies are the caller's fault.
		{"bad request", swderr.ErrBadRequest, http.StatusBadRequest},
		{"unknown policy", swderr.ErrUnknownPolicy, http.StatusBadRequest},
		// A wrong control token.
		{"unauthenticated", swderr.ErrUnauthenticated, http.StatusUnauthorized},
		// hardening (issue 17): a stalled body, spent buffers, a dead app
		{"body timeout", swderr.ErrBodyTimeout, http.StatusRequestTimeout},
		{"buffers full", swderr.ErrBufferFull, http.StatusServiceUnavailable},
		{"app unavailable", swderr.ErrAppUnavailable, http.StatusServiceUnavailable},
		// A client that went away gets nginx's 499 (never sent).
		{"client gone", swderr.ErrClientGone, 499},
		{"context canceled", context.Canceled, 499},
		// A deadline is a gateway timeout.
		{"deadline", context.DeadlineExceeded, http.StatusGatewayTimeout},
		// A transfer that may have started and failed is a bad gateway.
		{"maybe started", swderr.ErrMaybeStarted, http.StatusBadGateway},
		// Maybe-started joined with a deadline reports the deadline.
		{"maybe started + deadline", errors.Join(swderr.ErrMaybeStarted, context.DeadlineExceeded), http.StatusGatewayTimeout},
		// Maybe-started joined with a cancellation is a gone client.
		{"maybe started + canceled", errors.Join(swderr.ErrMaybeStarted, context.Canceled), 499},
		// Refusal wins over anything joined after it (the 503 case is checked first).
		{"refused + canceled", errors.Join(swderr.ErrRefused, context.Canceled), http.StatusServiceUnavailable},
		// Peer-side refusal reasons never reach a client directly: default 502.
		{"hop limit", swderr.ErrHopLimit, http.StatusBadGateway},
		{"not member", swderr.ErrNotMember, http.StatusBadGateway},
		// Anything unknown is a bad gateway.
		{"unknown error", io.ErrUnexpectedEOF, http.StatusBadGateway},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, swderr.HTTPStatus(tc.err))
			assert.Equal(t, tc.want == http.StatusServiceUnavailable, swderr.RetryAfter(tc.err),
				"Retry-After goes exactly with 503")
		})
	}
}

func TestGRPCCode(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want codes.Code
	}{
		// No error is OK.
		{"nil", nil, codes.OK},
		// Capacity refusals are ResourceExhausted (a refusal).
		{"queue full", swderr.ErrQueueFull, codes.ResourceExhausted},
		{"overloaded", swderr.ErrOverloaded, codes.ResourceExhausted},
		{"wrapped queue full", wrapped(swderr.ErrQueueFull), codes.ResourceExhausted},
		// State refusals are FailedPrecondition (a refusal).
		{"draining", swderr.ErrDraining, codes.FailedPrecondition},
		{"hop limit", swderr.ErrHopLimit, codes.FailedPrecondition},
		{"not member", swderr.ErrNotMember, codes.FailedPrecondition},
		{"refused", swderr.ErrRefused, codes.FailedPrecondition},
		{"wrapped draining", wrapped(swderr.ErrDraining), codes.FailedPrecondition},
		// Timeouts.
		{"queue timeout", swderr.ErrQueueTimeout, codes.DeadlineExceeded},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		// Cancellation.
		{"client gone", swderr.ErrClientGone, codes.Canceled},
		{"canceled", context.Canceled, codes.Canceled},
		// Malformed input.
		{"bad request", swderr.ErrBadRequest, codes.InvalidArgument},
		{"body too large", swderr.ErrBodyTooLarge, codes.InvalidArgument},
		{"unknown policy", swderr.ErrUnknownPolicy, codes.InvalidArgument},
		// Authentication.
		{"unauthenticated", swderr.ErrUnauthenticated, codes.Unauthenticated},
		// a dead app's refusal is marked so the sender puts the request back
		{"app unavailable", swderr.ErrAppUnavailable, codes.FailedPrecondition},
		{"buffers full", swderr.ErrBufferFull, codes.ResourceExhausted},
		// No node to dispatch to.
		{"no backend", swderr.ErrNoBackend, codes.Unavailable},
		// Maybe-started is not a refusal: Internal.
		{"maybe started", swderr.ErrMaybeStarted, codes.Internal},
		// Anything unknown is Internal.
		{"unknown", io.ErrUnexpectedEOF, codes.Internal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, swderr.GRPCCode(tc.err))
		})
	}
}

func TestToGRPC(t *testing.T) {
	// nil stays nil.
	require.NoError(t, swderr.ToGRPC(nil))

	// A sentinel becomes a status with its code and message.
	err := swderr.ToGRPC(wrapped(swderr.ErrQueueFull))
	st, ok := status.FromError(err)
	require.True(t, ok)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, "context: queue full", st.Message())

	// An error that already is a status is passed through unchanged.
	orig := status.Error(codes.Unavailable, "peer down")
	assert.Same(t, orig, swderr.ToGRPC(orig))
}

func TestIsRefusal(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		// No error is no refusal.
		{"nil", nil, false},
		// The sentinel itself, plain or wrapped.
		{"refused", swderr.ErrRefused, true},
		{"wrapped refused", wrapped(swderr.ErrRefused), true},
		// The two refusal codes, as a peer sends them.
		{"resource exhausted", status.Error(codes.ResourceExhausted, "full"), true},
		{"failed precondition", status.Error(codes.FailedPrecondition, "draining"), true},
		// A status wrapped by a caller is still recognised.
		{"wrapped status", wrapped(status.Error(codes.ResourceExhausted, "full")), true},
		// Sentinels converted by ToGRPC on the peer.
		{"peer queue full", swderr.ToGRPC(swderr.ErrQueueFull), true},
		{"peer draining", swderr.ToGRPC(swderr.ErrDraining), true},
		{"peer hop limit", swderr.ToGRPC(swderr.ErrHopLimit), true},
		{"peer not member", swderr.ToGRPC(swderr.ErrNotMember), true},
		// Other codes do not guarantee the request was not taken.
		{"unavailable", status.Error(codes.Unavailable, "conn reset"), false},
		{"internal", status.Error(codes.Internal, "boom"), false},
		{"deadline", status.Error(codes.DeadlineExceeded, "late"), false},
		{"canceled", status.Error(codes.Canceled, "gone"), false},
		{"unknown", status.Error(codes.Unknown, "?"), false},
		// A plain error is no refusal (status.FromError reports Unknown).
		{"plain error", io.ErrUnexpectedEOF, false},
		// The local sentinels for refusal reasons are not ErrRefused themselves.
		{"local queue full", swderr.ErrQueueFull, false},
		{"maybe started", swderr.ErrMaybeStarted, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, swderr.IsRefusal(tc.err))
		})
	}
}

func TestFromGRPC(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error // sentinel the result must wrap; nil: result must equal err
	}{
		// Refusal codes become ErrRefused.
		{"resource exhausted", status.Error(codes.ResourceExhausted, "full"), swderr.ErrRefused},
		{"failed precondition", status.Error(codes.FailedPrecondition, "draining"), swderr.ErrRefused},
		// Deadlines and cancellations become context errors.
		{"deadline", status.Error(codes.DeadlineExceeded, "late"), context.DeadlineExceeded},
		{"canceled", status.Error(codes.Canceled, "gone"), context.Canceled},
		// Authentication and bad input.
		{"unauthenticated", status.Error(codes.Unauthenticated, "token"), swderr.ErrUnauthenticated},
		{"invalid argument", status.Error(codes.InvalidArgument, "bad"), swderr.ErrBadRequest},
		// Round trips through ToGRPC.
		{"round trip queue full", swderr.ToGRPC(swderr.ErrQueueFull), swderr.ErrRefused},
		{"round trip queue timeout", swderr.ToGRPC(swderr.ErrQueueTimeout), context.DeadlineExceeded},
		{"round trip bad request", swderr.ToGRPC(swderr.ErrBadRequest), swderr.ErrBadRequest},
		// Codes without a sentinel are returned unchanged.
		{"unavailable", status.Error(codes.Unavailable, "down"), nil},
		{"internal", status.Error(codes.Internal, "boom"), nil},
		// Non-status errors and nil are returned unchanged.
		{"plain", io.ErrUnexpectedEOF, nil},
		{"nil", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := swderr.FromGRPC(tc.err)
			if tc.want == nil {
				assert.Equal(t, tc.err, got)
				return
			}
			require.Error(t, got)
			assert.ErrorIs(t, got, tc.want)
			// The original status survives inside the joined error.
			st, ok := status.FromError(got)
			require.True(t, ok)
			assert.Equal(t, status.Code(tc.err), st.Code())
		})
	}
}
