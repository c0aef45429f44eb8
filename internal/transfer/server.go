// Package transfer moves waiting HTTP requests between SWD nodes over gRPC
// (proto/swd/v1 Transfer.Forward) and streams the answers back. A node with
// a free slot may also ask a peer for its head (Transfer.Pull, policy
// steal): the peer's HeadSource hands it over, and it arrives on Forward.
//
// The sender (Client) converts a queued request into a ForwardRequest, calls
// the peer, and copies the streamed answer onto its client's
// http.ResponseWriter. The receiver (Server) converts the message back into
// an http.Request bound to the local application only, and hands it to a
// Backend (the daemon's proxy), which admits it like a local request and
// writes the app's answer to a ResponseWriter that streams over gRPC.
//
// The sender always learns a transfer's fate: a refusal (ResourceExhausted
// or FailedPrecondition before any answer, marked with the RefusedKey
// trailer), or a peer the client could not connect to, means the peer did
// not take the request, and Client.Forward returns an error wrapping
// swderr.ErrRefused;
// any other failure before the answer's head wraps swderr.ErrMaybeStarted;
// a failure after the head was written to the client is returned as is
// (the client's response is already under way and must be aborted).
//
// Concurrency: Client and Server are safe for concurrent use. A
// ResponseWriter given to the Backend belongs to one call.
package transfer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// Backend runs transferred requests on the local application.
type Backend interface {
	// ServeTransferred admits r like a local request and writes the app's
	// answer to w. It must return an error without writing anything when
	// it does not take the request (a refusal: queue full, draining); once
	// it has written to w, the answer is the peer's to finish. For a
	// ForwardStream call (in.Streamed) it reads the whole body from r.Body
	// before it queues the request, within its own body budgets; a read
	// error (size mismatch: swderr.ErrBadRequest; stall:
	// swderr.ErrBodyTimeout; sender gone: swderr.ErrClientGone) or a budget
	// refusal (swderr.ErrBufferFull) is returned with nothing written.
	ServeTransferred(w http.ResponseWriter, r *http.Request, in Inbound) error
}

// HeadSource hands this node's head to a pulling peer (policy steal).
type HeadSource interface {
	// HandHead takes the oldest waiting request that never moved (never
	// one handed to the app) for peer's pull pullID, and starts sending it
	// to peer on the Forward path with that pull ID; it returns the
	// request's ID, or ok false when nothing may go.
	HandHead(peer string, pullID uint64) (id string, ok bool)
}

// QueueWaitReporter is implemented by the ResponseWriter a Server gives its
// Backend. The Backend reports how long the request waited in its queue
// before the application took it, before it writes the answer's head; the
// head carries the wait to the sender (Result.QueueWait). A report after
// the head is ignored.
type QueueWaitReporter interface {
	ReportQueueWait(time.Duration)
}

// MembershipChecker says whether a node name is a current cluster member.
type MembershipChecker interface {
	IsMember(name string) bool
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// NodeName is this node's name, reported as served_by.
	NodeName string
	// MaxHops is the most transfers a request may have made to arrive
	// here; a message with more hops is refused. Default 1.
	MaxHops int
	// ChunkSize is the largest body chunk per stream message. Default 32 KiB.
	ChunkSize int
	// CheckMembership refuses transfers from senders that are not members.
	CheckMembership bool
	// BodyIdleTimeout is the longest a ForwardStream sender may send no
	// body message; then the body fails with swderr.ErrBodyTimeout.
	// Default 10s.
	BodyIdleTimeout time.Duration
}

// DefaultServerConfig returns the defaults.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{MaxHops: 1, ChunkSize: 32 << 10, CheckMembership: true, BodyIdleTimeout: 10 * time.Second}
}

// Validate reports the first problem with c.
func (c ServerConfig) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("transfer server: node name is required")
	case c.MaxHops < 1:
		return fmt.Errorf("transfer server: max hops must be at least 1, got %d", c.MaxHops)
	case c.ChunkSize < 512:
		return fmt.Errorf("transfer server: chunk size must be at least 512 bytes, got %d", c.ChunkSize)
	case c.BodyIdleTimeout <= 0:
		return fmt.Errorf("transfer server: body idle timeout must be positive, got %s", c.BodyIdleTimeout)
	}
	return nil
}

// Server implements swdv1.TransferServer.
type Server struct {
	swdv1.UnimplementedTransferServer
	cfg     ServerConfig
	backend Backend
	members MembershipChecker
}

// Pull implements the Transfer service: the caller asks for this node's
// head. It is checked as Forward's sender is (certificate names, not this
// node, a member; the gRPC interceptors authenticated the call), then the
// backend, when it is a HeadSource, hands its head over or says "nothing"
// at once. A backend that is not a HeadSource never has anything.
func (s *Server) Pull(ctx context.Context, m *swdv1.PullRequest) (*swdv1.PullResponse, error) {
	from := m.GetFromNode()
	if err := certNames(ctx, from); err != nil {
		return nil, swderr.ToGRPC(err)
	}
	if from == s.cfg.NodeName || from == "" {
		return nil, swderr.ToGRPC(fmt.Errorf("%w: %q is this node", swderr.ErrNotMember, from))
	}
	if s.cfg.CheckMembership && !s.members.IsMember(from) {
		return nil, swderr.ToGRPC(fmt.Errorf("%w: %q", swderr.ErrNotMember, from))
	}
	if m.GetPullId() == 0 {
		return nil, swderr.ToGRPC(fmt.Errorf("%w: pull without a pull ID", swderr.ErrBadRequest))
	}
	hs, ok := s.backend.(HeadSource)
	if !ok {
		return &swdv1.PullResponse{}, nil
	}
	id, found := hs.HandHead(from, m.GetPullId())
	return &swdv1.PullResponse{Found: found, RequestId: id}, nil
}

// NewServer returns a Transfer service serving into backend.
func NewServer(cfg ServerConfig, backend Backend, members MembershipChecker) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.CheckMembership && members == nil {
		return nil, errors.New("transfer server: membership checks need a membership checker")
	}
	return &Server{cfg: cfg, backend: backend, members: members}, nil
}

var _ swdv1.TransferServer = (*Server)(nil)

// Forward implements the Transfer service.
func (s *Server) Forward(m *swdv1.ForwardRequest, stream swdv1.Transfer_ForwardServer) error {
	if err := s.checkHead(stream.Context(), m); err != nil {
		return refuse(stream, err)
	}
	r, in, err := FromMessage(stream.Context(), m)
	if err != nil {
		return swderr.ToGRPC(err)
	}
	return s.serve(stream, r, in)
}

// checkHead applies the refusals that depend on the message's head only
// (hop limit, sender's certificate and membership), before any body is
// read.
func (s *Server) checkHead(ctx context.Context, m *swdv1.ForwardRequest) error {
	if int(m.GetHops()) > s.cfg.MaxHops {
		return fmt.Errorf("%w: %d hops, at most %d", swderr.ErrHopLimit, m.GetHops(), s.cfg.MaxHops)
	}
	if err := certNames(ctx, m.GetFromNode()); err != nil {
		return err
	}
	if m.GetFromNode() == s.cfg.NodeName {
		// No node transfers to itself; a message naming this node came
		// from somebody else (a standalone node is its own only member).
		return fmt.Errorf("%w: %q is this node", swderr.ErrNotMember, m.GetFromNode())
	}
	if s.cfg.CheckMembership && !s.members.IsMember(m.GetFromNode()) {
		return fmt.Errorf("%w: %q", swderr.ErrNotMember, m.GetFromNode())
	}
	return nil
}

// serve hands r to the Backend and streams its answer.
func (s *Server) serve(stream responseStream, r *http.Request, in Inbound) error {
	w := newStreamWriter(stream, s.cfg.NodeName, s.cfg.ChunkSize)
	err := s.backend.ServeTransferred(w, r, in)
	switch {
	case err != nil && !w.wroteHead:
		if swderr.GRPCCode(err) == codes.ResourceExhausted || swderr.GRPCCode(err) == codes.FailedPrecondition {
			return refuse(stream, err)
		}
		if errors.Is(err, swderr.ErrQueueTimeout) {
			// Admitted but timed out waiting: it never reached the app.
			stream.SetTrailer(metadata.Pairs(NotRunKey, "1"))
		}
		return swderr.ToGRPC(err)
	case err != nil:
		// The answer broke after its head: abort the stream so the sender
		// sees a broken answer, never a clean truncated one.
		return status.Error(codes.Aborted, "answer broken after its head: "+err.Error())
	case w.wroteHead && stream.Context().Err() != nil:
		// The call ended (the sender's transfer timeout, or the sender
		// gone) while the answer was being written: the app's connection
		// was half-closed and its answer may have ended early, cleanly.
		// Never end such an answer as complete.
		return status.FromContextError(stream.Context().Err()).Err()
	}
	return w.finish()
}

// responseStream is the sending side of Forward and ForwardStream.
type responseStream interface {
	Context() context.Context
	Send(*swdv1.ForwardResponse) error
	SendHeader(metadata.MD) error
	SetTrailer(metadata.MD)
}

// RefusedKey is the trailer metadata key with which a server marks a
// refusal: only such an answer proves the request was not taken (a
// RESOURCE_EXHAUSTED raised by the client's own gRPC library does not).
const RefusedKey = "swd-refused"

// certNames binds a transfer's sender name to its certificate: over mTLS,
// the verified client certificate's common name or one of its DNS names
// must be the from_node it claims (`swdctl certs init NAME` makes such
// certificates), so holding some certificate of the cluster's CA is not
// enough to send as any member. Without TLS it checks nothing.
func certNames(ctx context.Context, from string) error {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 || len(ti.State.VerifiedChains[0]) == 0 {
		return nil
	}
	cert := ti.State.VerifiedChains[0][0]
	if cert.Subject.CommonName == from || slices.Contains(cert.DNSNames, from) {
		return nil
	}
	return fmt.Errorf("%w: the client certificate (%q) does not name %q", swderr.ErrNotMember, cert.Subject.CommonName, from)
}

// NotRunKey marks a Forward that the peer admitted but that timed out in
// its queue: the request never ran, and its deadline has passed.
const NotRunKey = "swd-not-run"

// refuse ends a Forward with err, marked as a refusal.
func refuse(stream interface{ SetTrailer(metadata.MD) }, err error) error {
	stream.SetTrailer(metadata.Pairs(RefusedKey, "1"))
	return swderr.ToGRPC(err)
}

// streamWriter is an http.ResponseWriter that streams over Forward.
type streamWriter struct {
	stream    responseStream
	node      string
	chunk     int
	header    http.Header
	wroteHead bool
	status    int
	err       error
	queueWait time.Duration
}

var _ QueueWaitReporter = (*streamWriter)(nil)

func newStreamWriter(s responseStream, node string, chunk int) *streamWriter {
	return &streamWriter{stream: s, node: node, chunk: chunk, header: make(http.Header)}
}

func (w *streamWriter) Header() http.Header { return w.header }

// ReportQueueWait implements QueueWaitReporter.
func (w *streamWriter) ReportQueueWait(d time.Duration) {
	if !w.wroteHead {
		w.queueWait = d
	}
}

func (w *streamWriter) WriteHeader(code int) {
	if w.wroteHead || w.err != nil {
		return
	}
	if code >= 100 && code < 200 {
		return // informational answers are not relayed
	}
	w.wroteHead = true
	w.status = code
	h := w.header.Clone()
	for k := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			delete(h, k)
		}
	}
	w.err = w.stream.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_Head{Head: &swdv1.ResponseHead{
		Status:         int32(code),
		Headers:        toHeaders(h),
		ServedBy:       w.node,
		QueueWaitNanos: int64(w.queueWait),
	}}})
}

func (w *streamWriter) Write(p []byte) (int, error) {
	if !w.wroteHead {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	n := 0
	for len(p) > 0 {
		c := min(len(p), w.chunk)
		// Send marshals synchronously, so p may be reused after it returns.
		if err := w.stream.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_BodyChunk{BodyChunk: p[:c]}}); err != nil {
			w.err = err
			return n, err
		}
		n += c
		p = p[c:]
	}
	return n, nil
}

// Flush is a no-op: every Write is sent as its own message at once.
func (w *streamWriter) Flush() {}

// finish sends the head if nothing was written, then any trailers.
func (w *streamWriter) finish() error {
	if !w.wroteHead {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return w.err
	}
	tr := trailers(w.header)
	if len(tr) == 0 {
		return nil
	}
	return w.stream.Send(&swdv1.ForwardResponse{Part: &swdv1.ForwardResponse_Trailer{Trailer: &swdv1.ResponseTrailer{Trailers: toHeaders(tr)}}})
}

// trailers collects trailer fields from a handler's header map: those
// announced in "Trailer" and those set with http.TrailerPrefix.
func trailers(h http.Header) http.Header {
	out := http.Header{}
	for _, names := range h.Values("Trailer") {
		for _, n := range strings.Split(names, ",") {
			n = http.CanonicalHeaderKey(strings.TrimSpace(n))
			if v, ok := h[n]; ok && n != "" {
				out[n] = v
			}
		}
	}
	for k, v := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			out[http.CanonicalHeaderKey(strings.TrimPrefix(k, http.TrailerPrefix))] = v
		}
	}
	return out
}
