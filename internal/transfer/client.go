package transfer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// MaxMessageSize is the largest gRPC message sent or received.
	// Default 4 MiB (a 1 MiB transferable body plus headers fits).
	MaxMessageSize int
	// DialOptions are extra options for every peer connection, such as
	// transport credentials (mTLS). Without credentials the connection is
	// plaintext.
	DialOptions []grpc.DialOption
	// Auth authenticates this node to its peers with a node MAC on every
	// call (internal/auth; never the control token); the zero value sends
	// none.
	Auth auth.NodeCreds
}

// DefaultClientConfig returns the defaults.
func DefaultClientConfig() ClientConfig { return ClientConfig{MaxMessageSize: 4 << 20} }

// Validate reports the first problem with c.
func (c ClientConfig) Validate() error {
	if c.MaxMessageSize < 64<<10 {
		return fmt.Errorf("transfer client: max message size must be at least 64 KiB, got %d", c.MaxMessageSize)
	}
	return nil
}

// Client sends requests to peers, one cached connection per peer address.
type Client struct {
	cfg   ClientConfig
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewClient returns a transfer client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Client{cfg: cfg, conns: map[string]*grpc.ClientConn{}}, nil
}

// Conn returns the cached connection to addr, creating it if needed. The
// control plane reuses these connections.
func (c *Client) Conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Notice a peer that vanished (cut off, frozen) during a long
		// transfer instead of waiting for the transfer timeout.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(c.cfg.MaxMessageSize),
			grpc.MaxCallSendMsgSize(c.cfg.MaxMessageSize),
		),
	}
	opts = append(opts, c.cfg.DialOptions...)
	opts = append(opts, c.cfg.Auth.DialOption())
	cc, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial peer %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Prune closes connections to addresses not in keep.
func (c *Client) Prune(keep map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, cc := range c.conns {
		if !keep[addr] {
			_ = cc.Close()
			delete(c.conns, addr)
		}
	}
}

// Close closes every connection.
func (c *Client) Close() error {
	c.Prune(nil)
	return nil
}

// Result describes a finished (or failed) transfer.
type Result struct {
	// Status is the HTTP status the peer answered with (0 if none).
	Status int
	// ServedBy is the node that ran the request.
	ServedBy string
	// QueueWait is how long the request waited in ServedBy's queue before
	// its application took it, as that node reported it.
	QueueWait time.Duration
	// HeadWritten is true once the answer's head reached w; after that a
	// failure cannot be retried or turned into another status.
	HeadWritten bool
	// BodyBytes counts the body bytes copied to w.
	BodyBytes int64
	// ContentLength is the answer's declared length, or -1.
	ContentLength int64
	// Admitted is when the peer's report that it queued the request
	// arrived (AdmittedKey); zero when it sent none.
	Admitted time.Time
}

// Complete reports whether the whole declared body reached w.
func (r Result) Complete() bool { return r.ContentLength >= 0 && r.BodyBytes == r.ContentLength }

// Forward sends msg to the peer at addr and copies the answer to w.
//
// Errors before the head reached w wrap swderr.ErrRefused when the peer
// certainly did not take the request, or swderr.ErrMaybeStarted otherwise
// (joined with context errors when ctx ended). Errors after the head has
// been written have Result.HeadWritten set.
func (c *Client) Forward(ctx context.Context, addr string, msg *swdv1.ForwardRequest, w http.ResponseWriter) (Result, error) {
	return c.ForwardThen(ctx, addr, msg, w, nil)
}

// ForwardThen is Forward with whole called once, in the calling
// goroutine, as soon as the peer's answer is known to be whole: its last
// body byte arrived (an answer with a Content-Length), or the stream
// ended. It runs before that last part is written to w, so a dispatcher
// frees the node's slot (whose app has finished, having sent its last
// byte) without waiting for the client to take the answer or for the
// stream's end (policy cq). It is not called when the call fails before
// the answer is whole; the caller then acts on the error as for Forward.
func (c *Client) ForwardThen(ctx context.Context, addr string, msg *swdv1.ForwardRequest, w http.ResponseWriter, whole func()) (Result, error) {
	var res Result
	cc, err := c.Conn(addr)
	if err != nil {
		return res, errors.Join(swderr.ErrRefused, swderr.ErrUnreachable, err)
	}
	if err := ready(ctx, cc); err != nil {
		// Nothing was sent: the peer cannot have taken the request.
		return res, errors.Join(swderr.ErrRefused, swderr.ErrUnreachable, fmt.Errorf("peer %s: %w", addr, err))
	}
	stream, err := swdv1.NewTransferClient(cc).Forward(ctx, msg)
	if err != nil {
		return res, classify(ctx, nil, err)
	}
	return c.answer(ctx, stream, w, whole)
}

// answerStream is the receiving side of Forward and ForwardStream.
type answerStream interface {
	Header() (metadata.MD, error)
	Recv() (*swdv1.ForwardResponse, error)
	Trailer() metadata.MD
}

// answer copies a call's streamed answer to w (see Forward for the errors),
// calling whole, if not nil, once the answer is known whole (ForwardThen).
func (c *Client) answer(ctx context.Context, stream answerStream, w http.ResponseWriter, whole func()) (Result, error) {
	var res Result
	isWhole := func() {
		if whole != nil {
			whole()
			whole = nil
		}
	}
	if md, err := stream.Header(); err == nil && len(md.Get(AdmittedKey)) > 0 {
		res.Admitted = time.Now()
	}
	first, err := stream.Recv()
	if err != nil {
		return res, classify(ctx, stream.Trailer(), err)
	}
	head := first.GetHead()
	if head == nil {
		return res, fmt.Errorf("%w: peer sent no head first", swderr.ErrMaybeStarted)
	}
	res.Status = int(head.GetStatus())
	res.ServedBy = head.GetServedBy()
	res.QueueWait = time.Duration(head.GetQueueWaitNanos())
	if res.Status < 200 || res.Status > 999 {
		return res, fmt.Errorf("%w: peer sent invalid status %d", swderr.ErrMaybeStarted, res.Status)
	}
	dst := w.Header()
	for _, h := range head.GetHeaders() {
		dst[http.CanonicalHeaderKey(h.GetName())] = h.GetValues()
	}
	res.ContentLength = -1
	if cl := dst.Get("Content-Length"); cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil {
			res.ContentLength = v
		}
	}
	w.WriteHeader(res.Status)
	res.HeadWritten = true
	flusher, _ := w.(http.Flusher)
	for {
		part, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			isWhole()
			return res, nil
		}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				// Our client went away (often right after reading a
				// complete Content-Length body): not the peer's fault.
				return res, errors.Join(swderr.ErrClientGone, ctxErr, err)
			}
			return res, fmt.Errorf("transfer answer cut off after %d bytes: %w", res.BodyBytes, err)
		}
		switch p := part.GetPart().(type) {
		case *swdv1.ForwardResponse_BodyChunk:
			if res.ContentLength >= 0 && res.BodyBytes+int64(len(p.BodyChunk)) >= res.ContentLength {
				isWhole() // the last byte: the peer's app has finished
			}
			n, werr := w.Write(p.BodyChunk)
			res.BodyBytes += int64(n)
			if werr != nil {
				return res, fmt.Errorf("write answer to client: %w: %w", swderr.ErrClientGone, werr)
			}
			if flusher != nil {
				flusher.Flush()
			}
		case *swdv1.ForwardResponse_Trailer:
			for _, h := range p.Trailer.GetTrailers() {
				dst[http.TrailerPrefix+http.CanonicalHeaderKey(h.GetName())] = h.GetValues()
			}
		}
	}
}

// Pull asks the peer at addr for its head on behalf of node from (policy
// steal): found reports that the peer handed a request over, which follows
// on a Forward carrying pullID. A peer that cannot be reached, or refuses,
// returns an error; it handed nothing over.
func (c *Client) Pull(ctx context.Context, addr, from string, pullID uint64) (found bool, err error) {
	cc, err := c.Conn(addr)
	if err != nil {
		return false, errors.Join(swderr.ErrUnreachable, err)
	}
	if err := ready(ctx, cc); err != nil {
		return false, errors.Join(swderr.ErrUnreachable, fmt.Errorf("peer %s: %w", addr, err))
	}
	resp, err := swdv1.NewTransferClient(cc).Pull(ctx, &swdv1.PullRequest{FromNode: from, PullId: pullID})
	if err != nil {
		return false, fmt.Errorf("pull from %s: %w", addr, swderr.FromGRPC(err))
	}
	return resp.GetFound(), nil
}

// Keepalive settings of peer connections; servers must permit pings this
// often (see ServerKeepalive).
const (
	KeepaliveTime    = 10 * time.Second
	KeepaliveTimeout = 5 * time.Second
)

// ServerKeepalive returns the server options that accept the client's
// keepalive pings and ping idle-looking clients themselves.
func ServerKeepalive() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: KeepaliveTime / 2, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * KeepaliveTime, Timeout: KeepaliveTimeout}),
	}
}

// readyTimeout bounds the wait for a connection to a peer to come up.
const readyTimeout = time.Second

// ready waits until cc is connected, so that a peer that is down is known
// not to have received anything.
func ready(ctx context.Context, cc *grpc.ClientConn) error {
	if cc.GetState() == connectivity.Ready {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	for {
		st := cc.GetState()
		switch st {
		case connectivity.Ready:
			return nil
		case connectivity.Idle:
			cc.Connect()
		case connectivity.TransientFailure:
			// A peer that was down may be back (a restart): retry now
			// instead of waiting out the exponential reconnect backoff.
			cc.ResetConnectBackoff()
		case connectivity.Shutdown:
			return errors.New("connection closed")
		}
		if !cc.WaitForStateChange(ctx, st) {
			return fmt.Errorf("not connected after %s (state %s)", readyTimeout, cc.GetState())
		}
	}
}

// classify turns an error before the head into a refusal (only when the
// server marked it so) or a maybe-started failure.
func classify(ctx context.Context, trailer metadata.MD, err error) error {
	if len(trailer.Get(RefusedKey)) > 0 && swderr.IsRefusal(err) {
		return errors.Join(swderr.ErrRefused, err)
	}
	if len(trailer.Get(NotRunKey)) > 0 {
		return errors.Join(swderr.ErrQueueTimeout, err)
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return errors.Join(swderr.ErrMaybeStarted, ctxErr, err)
	}
	if swderr.IsRefusal(err) {
		// A refusal code the server did not mark (e.g. the client's own
		// "message larger than max"): the peer may have run the request.
		return errors.Join(swderr.ErrMaybeStarted, err)
	}
	return errors.Join(swderr.ErrMaybeStarted, swderr.FromGRPC(err))
}
