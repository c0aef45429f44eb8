// Package swderr holds the sentinel errors for SWD's expected states and is
// the one place that maps errors to HTTP status codes and gRPC codes.
//
// Concurrency: everything here is immutable and safe for concurrent use.
package swderr

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Sentinel errors for expected states. Wrap them with %w; test with errors.Is.
var (
	// ErrQueueFull: the local queue holds --queue-limit waiting requests.
	ErrQueueFull = errors.New("queue full")
	// ErrQueueTimeout: a request waited longer than --queue-timeout.
	ErrQueueTimeout = errors.New("queue timeout")
	// ErrOverloaded: the predicted wait exceeds the request's deadline.
	ErrOverloaded = errors.New("predicted wait exceeds deadline")
	// ErrDraining: the node is shutting down and admits nothing new.
	ErrDraining = errors.New("draining")
	// ErrClientGone: the client went away before the request was answered.
	ErrClientGone = errors.New("client gone")
	// ErrBodyTooLarge: the request body exceeds --max-body.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrRefused: a peer refused a transfer; the request was NOT taken and
	// may be put back in the sender's queue.
	ErrRefused = errors.New("transfer refused by peer")
	// ErrHopLimit: a transferred request arrived with too many hops.
	ErrHopLimit = errors.New("hop limit reached")
	// ErrNotMember: the sender of a transfer is not a current member.
	ErrNotMember = errors.New("sender is not a cluster member")
	// ErrUnreachable: no connection to a peer could be made, so it received
	// nothing (joined with ErrRefused: the request may be put back), but the
	// peer counts as failing.
	ErrUnreachable = errors.New("peer unreachable")
	// ErrMaybeStarted: a transfer failed after the peer may have started
	// the request; it must not be retried unless idempotent.
	ErrMaybeStarted = errors.New("transfer failed after peer may have started the request")
	// ErrBadRequest: the request is malformed.
	ErrBadRequest = errors.New("bad request")
	// ErrUnknownPolicy: no policy is registered under that name.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrNoBackend: a dispatcher has no node to send a request to.
	ErrNoBackend = errors.New("no backend node available")
	// ErrUnauthenticated: missing or wrong control token.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrBodyTimeout: the client sent no byte of its request body for the
	// body idle timeout (408).
	ErrBodyTimeout = errors.New("request body timeout")
	// ErrBufferFull: the node's budget for buffered request bodies (memory
	// or spool files) is spent; the request is refused (503).
	ErrBufferFull = errors.New("request body buffers full")
	// ErrAppUnavailable: the node's application is not ready; transfers to
	// it are refused (a refusal: the sender puts the request back).
	ErrAppUnavailable = errors.New("application not ready")
	// ErrPeer5xx: a peer served a transferred request and its app answered
	// 5xx; peer health counts it against that peer (outlier detection).
	ErrPeer5xx = errors.New("peer's application answered 5xx")
	// ErrSessionRefused: --admission sqs refused a request that starts a
	// new session (the session queue is full, or its admission would come
	// after the session wait bound): 503 with Retry-After, at once.
	ErrSessionRefused = errors.New("new session refused")
)

// HTTPStatus maps an error to the status code SWD answers a client with.
func HTTPStatus(err error) int {
	switch {
	case err == nil:
		return http.StatusOK
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrQueueTimeout),
		errors.Is(err, ErrOverloaded), errors.Is(err, ErrDraining),
		errors.Is(err, ErrRefused), errors.Is(err, ErrNoBackend),
		errors.Is(err, ErrBufferFull), errors.Is(err, ErrAppUnavailable),
		errors.Is(err, ErrSessionRefused):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrBodyTimeout):
		return http.StatusRequestTimeout
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrUnknownPolicy):
		return http.StatusBadRequest
	case errors.Is(err, ErrUnauthenticated):
		return http.StatusUnauthorized
	case errors.Is(err, ErrClientGone), errors.Is(err, context.Canceled):
		return 499 // nginx's "client closed request"; never actually sent
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	default:
		return http.StatusBadGateway
	}
}

// RetryAfter reports whether an error's HTTP answer should carry Retry-After.
func RetryAfter(err error) bool {
	return HTTPStatus(err) == http.StatusServiceUnavailable
}

// GRPCCode maps an error to a gRPC code. Refusals that guarantee the request
// was not taken map to ResourceExhausted (queue full) or FailedPrecondition
// (draining, hop limit, not a member), which IsRefusal recognises.
func GRPCCode(err error) codes.Code {
	switch {
	case err == nil:
		return codes.OK
	case errors.Is(err, ErrQueueFull), errors.Is(err, ErrOverloaded),
		errors.Is(err, ErrBufferFull), errors.Is(err, ErrSessionRefused):
		return codes.ResourceExhausted
	case errors.Is(err, ErrDraining), errors.Is(err, ErrHopLimit),
		errors.Is(err, ErrNotMember), errors.Is(err, ErrRefused),
		errors.Is(err, ErrAppUnavailable):
		return codes.FailedPrecondition
	case errors.Is(err, ErrQueueTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrBodyTimeout):
		return codes.DeadlineExceeded
	case errors.Is(err, ErrClientGone), errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, ErrBadRequest), errors.Is(err, ErrBodyTooLarge),
		errors.Is(err, ErrUnknownPolicy):
		return codes.InvalidArgument
	case errors.Is(err, ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, ErrNoBackend):
		return codes.Unavailable
	default:
		return codes.Internal
	}
}

// ToGRPC converts an error to a gRPC status error carrying its message.
func ToGRPC(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(GRPCCode(err), err.Error())
}

// IsRefusal reports whether a gRPC error from a transfer means the peer
// certainly did not take the request.
func IsRefusal(err error) bool {
	if errors.Is(err, ErrRefused) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.ResourceExhausted, codes.FailedPrecondition:
		return true
	}
	return false
}

// FromGRPC turns a gRPC error from a peer back into a wrapped sentinel where
// one applies, so callers can use errors.Is.
func FromGRPC(err error) error {
	st, ok := status.FromError(err)
	if !ok || err == nil {
		return err
	}
	switch st.Code() {
	case codes.ResourceExhausted, codes.FailedPrecondition:
		return errors.Join(ErrRefused, err)
	case codes.DeadlineExceeded:
		return errors.Join(context.DeadlineExceeded, err)
	case codes.Canceled:
		return errors.Join(context.Canceled, err)
	case codes.Unauthenticated:
		return errors.Join(ErrUnauthenticated, err)
	case codes.InvalidArgument:
		return errors.Join(ErrBadRequest, err)
	}
	return err
}
