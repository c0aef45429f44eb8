// Package proxy is SWD's HTTP front on a node: it admits client requests
// into the local queue, serves granted ones on the local application with
// httputil.ReverseProxy, and, when the policy runner hands a waiting request
// to a peer, transfers it and relays the peer's answer. It also serves
// requests transferred here (transfer.Backend). Dispatcher is the front
// door of a dispatcher (`swd --role dispatcher`), which sends every request
// to a node, at once (rr, ct) or from its one FIFO when the node has a free
// slot (cq, hold.go).
//
// Every request is answered by the goroutine that accepted it, exactly once:
// the queue (or the dispatcher's FIFO) only tells that goroutine what to do
// next.
//
// Concurrency: Handler and Dispatcher are safe for concurrent use; one
// goroutine per request, plus, while a Dispatcher holds requests, one that
// retries their placement every few milliseconds and ends when the FIFO
// empties.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// Config configures a Handler (a node's front; a dispatcher's is
// DispatcherConfig). Validate's messages name the swd flag that sets each
// field.
type Config struct {
	// NodeName is this node's name (sent as the transfer's sender).
	NodeName string
	// App is the local application's base URL.
	App string
	// MaxBody is the largest request body accepted; beyond it, 413.
	MaxBody int64
	// MaxTransferBody is the largest body buffered in memory (and moved to
	// another node in one message); larger bodies are spooled to a file
	// and move by a streamed transfer (Transfer.ForwardStream).
	MaxTransferBody int64
	// MaxHops is how many transfers a request may make. Default 1.
	MaxHops int
	// Placement says where a transferred request lands in this node's
	// queue: "arrival" (by its original arrival time; default) or "tail".
	Placement string
	// IdempotentMethods may be run locally once when a transfer failed
	// after the peer may have started them. Default GET, HEAD, OPTIONS.
	IdempotentMethods []string
	// RetryAfter is the Retry-After advice on 503 answers. Default 1s.
	RetryAfter time.Duration
	// TransferTimeout bounds a whole transfer (queueing and service on the
	// peer, and the answer). Default 60s.
	TransferTimeout time.Duration
	// EarlyReject answers 503 at once when the predicted wait (requests
	// ahead × recent mean service time ÷ slots) exceeds the queue timeout,
	// instead of queueing a request that would time out anyway.
	EarlyReject bool
	// AbandonAfter bounds how long the app may go on with a request whose
	// client left: its slot stays taken until the app's answer has ended
	// (read and discarded) or, after AbandonAfter, swd closes the app
	// connection. Default 60s.
	AbandonAfter time.Duration
	// UpgradeSlot says whether an upgraded connection (WebSocket) holds its
	// app slot for its whole life ("hold", the default: the app counts it)
	// or frees it once the switch is made ("free": the app's upgraded
	// connections are not limited by m).
	UpgradeSlot string
	// MaxBufferedBytes bounds the request body bytes held in memory at
	// once, over all requests; a body that does not fit is refused with
	// 503. Default 64 MiB; at least MaxTransferBody.
	MaxBufferedBytes int64
	// BodyIdleTimeout is the longest a client may send no byte of its
	// request body; then 408 and the connection closes. Default 10s.
	BodyIdleTimeout time.Duration
	// SpoolDir is where bodies larger than MaxTransferBody are received
	// (in swd-spool/<pid>-*/ under it; default the system's temporary
	// directory); MaxSpoolBytes bounds their total size (default 1 GiB).
	SpoolDir      string
	MaxSpoolBytes int64
	// Logger receives debug request logs and warnings.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		App:               "http://127.0.0.1:9000",
		MaxBody:           64 << 20,
		MaxTransferBody:   1 << 20,
		MaxHops:           1,
		Placement:         "arrival",
		IdempotentMethods: []string{http.MethodGet, http.MethodHead, http.MethodOptions},
		RetryAfter:        time.Second,
		TransferTimeout:   time.Minute,
		EarlyReject:       true,
		AbandonAfter:      time.Minute,
		UpgradeSlot:       "hold",
		MaxBufferedBytes:  64 << 20,
		BodyIdleTimeout:   10 * time.Second,
		MaxSpoolBytes:     1 << 30,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	u, err := url.Parse(c.App)
	switch {
	case c.NodeName == "":
		return errors.New("proxy: node name is required")
	case err != nil:
		return fmt.Errorf("--app %q: %w", c.App, err)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("--app %q must be http(s)://host:port", c.App)
	case c.MaxBody < 0:
		return fmt.Errorf("--max-body must not be negative, got %d", c.MaxBody)
	case c.MaxTransferBody < 0 || c.MaxTransferBody > c.MaxBody:
		return fmt.Errorf("--max-transfer-body must be between 0 and --max-body (%d), got %d", c.MaxBody, c.MaxTransferBody)
	case c.MaxHops < 0:
		return fmt.Errorf("--max-hops must not be negative, got %d", c.MaxHops)
	case c.Placement != "arrival" && c.Placement != "tail":
		return fmt.Errorf("--placement must be \"arrival\" or \"tail\", got %q", c.Placement)
	case c.UpgradeSlot != "hold" && c.UpgradeSlot != "free":
		return fmt.Errorf("--upgrade-slot must be \"hold\" or \"free\", got %q", c.UpgradeSlot)
	case c.MaxBufferedBytes < c.MaxTransferBody:
		return fmt.Errorf("--max-buffered-bytes must be at least --max-transfer-body (%d), got %d", c.MaxTransferBody, c.MaxBufferedBytes)
	case c.MaxSpoolBytes < 0:
		return fmt.Errorf("--max-spool-bytes must not be negative, got %d", c.MaxSpoolBytes)
	case c.BodyIdleTimeout <= 0:
		return fmt.Errorf("--body-idle-timeout must be positive, got %s", c.BodyIdleTimeout)
	case c.AbandonAfter <= 0:
		return fmt.Errorf("--abandon-after must be positive, got %s", c.AbandonAfter)
	}
	return validateForwarding(c.RetryAfter, c.TransferTimeout, c.IdempotentMethods)
}

// validateForwarding checks the settings a node's front and a dispatcher
// share for forwarding requests.
func validateForwarding(retryAfter, transferTimeout time.Duration, idempotent []string) error {
	for _, m := range idempotent {
		if !transfer.ValidMethod(m) || m == http.MethodConnect {
			return fmt.Errorf("--idempotent-methods: %q is not an HTTP method (a token, not CONNECT)", m)
		}
	}
	switch {
	case retryAfter < 0:
		return fmt.Errorf("--retry-after must not be negative, got %s", retryAfter)
	case transferTimeout <= 0:
		return fmt.Errorf("--transfer-timeout must be positive, got %s", transferTimeout)
	}
	return nil
}

// Peers resolves a peer's node name to its gRPC address.
type Peers interface {
	GRPCAddr(name string) (string, bool)
}

// Handler serves client requests and transferred requests on one node.
type Handler struct {
	cfg   Config
	q     *queue.Queue
	rp    *httputil.ReverseProxy
	fwd   *transfer.Client
	peers Peers
	m     *metrics.Metrics
	log   *slog.Logger
	retry string
	ids   *requestIDs
	// Health hooks a peer-health tracker into transfer outcomes.
	onTransfer func(peer string, err error)
	// service is the recent mean service time of local requests.
	service ewma
	// backlog reports the requests ahead of a new arrival and the slots
	// serving them (see SetBacklog).
	backlog func() (ahead, slots int)
	// cost learns routes' costs and counts the work in service (SetCosts).
	cost *costs
	// appReady, if set, says whether the local app is ready: transfers
	// are refused while it is not; appDown is told when the app refused a
	// connection (see readiness.go).
	appReady func() bool
	appDown  func()
	// memBudget and spoolBudget bound received bodies; spool makes the
	// files (see body.go).
	memBudget, spoolBudget budget
	spool                  *spool
	// router tags keyed requests and places them (see SetRouter).
	router Router
	// admitter admits client requests before they queue (see SetAdmitter).
	admitter Admitter
	// pullHold finds the slot held for one of this node's pulls (see
	// SetPullHolds); nil when the node does not pull.
	pullHold func(id uint64) *queue.Hold
}

// ewma is an exponentially weighted moving average of durations, updated
// lock-free.
type ewma struct{ bits atomic.Uint64 }

const ewmaWeight = 0.1

func (e *ewma) observe(d time.Duration) {
	for {
		old := e.bits.Load()
		cur := math.Float64frombits(old)
		next := float64(d)
		if old != 0 {
			next = cur + ewmaWeight*(float64(d)-cur)
		}
		if e.bits.CompareAndSwap(old, math.Float64bits(next)) {
			return
		}
	}
}

func (e *ewma) mean() time.Duration { return time.Duration(math.Float64frombits(e.bits.Load())) }

// SetBacklog sets a second opinion for the early-reject check: when this
// node's own waiting requests and m predict a miss, f's count of requests
// ahead and slots decides. A node running a transfer policy counts the
// whole cluster, since its excess moves to other nodes. Call before serving.
func (h *Handler) SetBacklog(f func() (ahead, slots int)) { h.backlog = f }

// MeanServiceTime is the recent mean time the local app took per request.
func (h *Handler) MeanServiceTime() time.Duration { return h.service.mean() }

// overloaded reports whether a new arrival would wait past the queue
// timeout, by the current backlog and mean service time.
func (h *Handler) overloaded() error {
	timeout := h.q.Config().Timeout
	if !h.cfg.EarlyReject || timeout <= 0 {
		return nil
	}
	mean := h.service.mean()
	if mean <= 0 {
		return nil
	}
	predict := func(ahead, slots int) time.Duration {
		return time.Duration(float64(ahead) * float64(mean) / float64(max(slots, 1)))
	}
	// The local backlog is cheap to read; only when it alone predicts a
	// miss is the (cluster-wide) backlog consulted.
	ahead, slots := h.q.Waiting(), h.q.Concurrency()
	predicted := predict(ahead, slots)
	if predicted > timeout && h.backlog != nil {
		ahead, slots = h.backlog()
		predicted = predict(ahead, slots)
	}
	if predicted > timeout {
		return fmt.Errorf("%w: %d requests ahead at %s each over %d slots is %s, more than the %s queue timeout",
			swderr.ErrOverloaded, ahead, mean.Round(time.Microsecond), slots, predicted.Round(time.Millisecond), timeout)
	}
	return nil
}

// New returns a node's HTTP handler. fwd and peers may be nil on a node
// that never transfers.
func New(cfg Config, q *queue.Queue, fwd *transfer.Client, peers Peers, m *metrics.Metrics) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if m == nil {
		m = metrics.New(metrics.Live{})
	}
	app, _ := url.Parse(cfg.App)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		cfg: cfg, q: q, fwd: fwd, peers: peers, m: m, log: log,
		retry: retryAfterHeader(cfg.RetryAfter),
		ids:   newRequestIDs(cfg.NodeName),
		spool: &spool{root: spoolRoot(cfg.SpoolDir)},
	}
	h.memBudget.limit, h.spoolBudget.limit = cfg.MaxBufferedBytes, cfg.MaxSpoolBytes
	if n := cleanStaleSpools(h.spool.root); n > 0 {
		log.Info("removed spool directories of processes that are gone", "dir", h.spool.root, "removed", n)
	}
	h.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(app)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			if p, ok := pr.In.Context().Value(ctxKey{}).(*pending); ok && p.in != nil {
				pr.Out.Header.Set("X-Forwarded-Proto", p.in.Scheme)
			}
		},
		Transport:    releasingTransport{RoundTripper: newAppTransport(), freeUpgrades: cfg.UpgradeSlot == "free"},
		ErrorHandler: h.appError,
		ErrorLog:     slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return h, nil
}

// OnTransfer registers a callback told of every outgoing transfer's result
// (nil error on success). Call before serving.
func (h *Handler) OnTransfer(f func(peer string, err error)) { h.onTransfer = f }

func newAppTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           appDialer(&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}),
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
	}
}

type ctxKey struct{}

// releasingTransport frees a request's app slot when the app's answer has
// been read to its end, so a slow client reading a large answer does not
// hold the slot the app no longer uses. An answer closed before its end (the
// client left) is read to its end and discarded in the background, and only
// then is the slot freed: the app is still working on it (see serveLocal).
// Upgrade answers (101) are left alone: their body is the connection
// itself; with --upgrade-slot free, the slot is freed once the switch is
// made.
type releasingTransport struct {
	http.RoundTripper
	freeUpgrades bool
}

func (rt releasingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.RoundTripper.RoundTrip(req)
	if err != nil || resp == nil {
		return resp, err
	}
	p, ok := req.Context().Value(ctxKey{}).(*pending)
	if !ok || p.release == nil {
		return resp, nil
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if rt.freeUpgrades {
			p.release()
		}
		return resp, nil
	}
	resp.Body = &releaseOnEOF{ReadCloser: resp.Body, p: p}
	return resp, nil
}

type releaseOnEOF struct {
	io.ReadCloser
	p   *pending
	eof bool
}

func (b *releaseOnEOF) Read(x []byte) (int, error) {
	n, err := b.ReadCloser.Read(x)
	if err == io.EOF {
		b.eof = true
		b.p.release()
	}
	return n, err
}

// Close frees the slot at once after the whole answer was read; before
// that, it hands the rest of the answer to a goroutine that reads it to its
// end (or until the abandon timer closes the app connection) and then
// frees the slot.
func (b *releaseOnEOF) Close() error {
	if b.eof || b.p.draining {
		err := b.ReadCloser.Close()
		b.p.release()
		return err
	}
	b.p.draining = true
	go func() {
		_, _ = io.Copy(io.Discard, b.ReadCloser)
		_ = b.ReadCloser.Close()
		b.p.release()
		if b.p.finish != nil {
			b.p.finish()
		}
	}()
	return nil
}

// abortServer marks a transferred request's context so ReverseProxy aborts
// broken answers (see ServeTransferred).
var abortServer = &http.Server{}

var errAnswerAborted = errors.New("answer aborted after its head")

// pending is a request's payload in the queue.
type pending struct {
	id      string
	r       *http.Request
	body    []byte      // buffered body (transferable), or nil
	spooled io.ReaderAt // body received into a spool file, or nil
	size    int64       // the spooled body's size
	held    heldBody    // the budgets the body holds; freed when the request ends
	arrival time.Time
	hops    int
	in      *transfer.Inbound // set for requests transferred here
	// appOutcome is set by appError when the app did not answer.
	appOutcome metrics.Outcome
	// release frees the app slot (once); set while serving locally.
	// finish ends the app request's context and its abandon timer (once),
	// after the app's answer was read or abandoned.
	release, finish func()
	// clientCtx is the client's (or sender's) context: the request the app
	// gets does not end with it (see serveLocal).
	clientCtx context.Context
	// draining is set when the rest of the app's answer is being read in
	// the background: that goroutine frees the slot.
	draining bool
	// refuse is set by appError when a transferred request could not reach
	// the app at all: nothing was written, and the sender gets a refusal.
	refuse error
	// decided is when the policy handed the request off (flow.go);
	// respBytes the app's answer body bytes when served here.
	decided   time.Time
	respBytes int64
}

// ServeHTTP serves a client request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	if r.Method == http.MethodConnect {
		h.m.Reject(metrics.ReasonConnect)
		h.m.ObserveRequest(metrics.OutcomeRejected, time.Since(start))
		http.Error(w, "swd: CONNECT is not supported", http.StatusMethodNotAllowed)
		return
	}
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		// RFC 9112 6.3: net/http lets chunked win over a Content-Length it
		// dropped; close the connection after answering so no byte after
		// this body can be read as another request (see FramingGuard).
		w.Header().Set("Connection", "close")
	}
	p := &pending{id: h.ids.of(r), r: r, arrival: start}
	defer h.free(&p.held)
	cw := &countingWriter{ResponseWriter: w}
	w = cw
	defer func() { h.m.ObserveFlow(metrics.EdgeClient, p.bodyBytes(), cw.n) }()
	transferable, err := h.readBody(w, r, p)
	if err != nil {
		h.fail(w, r, p, err, start)
		return
	}
	if err := h.overloaded(); err != nil {
		h.fail(w, r, p, err, start)
		return
	}
	if err := h.admit(r); err != nil {
		h.fail(w, r, p, err, start)
		return
	}
	t := queue.NewTicket(p, transferable && h.cfg.MaxHops > 0)
	h.predict(r, t)
	t.Size = p.bodyBytes()
	if err := h.push(t, r); err != nil {
		h.fail(w, r, p, err, start)
		return
	}
	outcome, err := h.run(w, r, t, p)
	if err != nil {
		h.fail(w, r, p, err, start)
		return
	}
	h.m.ObserveRequest(outcome, time.Since(start))
}

// ServeTransferred implements transfer.Backend: it admits a request a peer
// transferred here and serves it on the local app.
func (h *Handler) ServeTransferred(w http.ResponseWriter, r *http.Request, in transfer.Inbound) (err error) {
	// ReverseProxy (and transferOut) abort a broken answer by panicking
	// with http.ErrAbortHandler, which net/http recovers; this runs in a
	// gRPC handler, which does not, so recover it here and report the
	// answer as broken. ReverseProxy only panics when it sees a server in
	// the context.
	r = r.WithContext(context.WithValue(r.Context(), http.ServerContextKey, abortServer))
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				panic(v)
			}
			err = errAnswerAborted
			h.m.TransferIn(in.From, metrics.TransferFailed)
		}
	}()
	p := &pending{id: in.ID, r: r, arrival: in.Arrival, hops: in.Hops, in: &in}
	defer h.free(&p.held)
	if in.Streamed {
		if err := h.receiveTransferred(r, p, in); err != nil {
			h.m.TransferIn(in.From, metrics.TransferRefused)
			h.releaseRefusedPull(in)
			// The body never arrived whole, so nothing ran: whatever broke
			// it (the sender gone, a stall, a size mismatch, a budget),
			// the sender still has the request and may serve it.
			return errors.Join(swderr.ErrRefused, err)
		}
	} else if r.ContentLength > 0 {
		body, _ := io.ReadAll(r.Body) // an in-memory reader
		p.body = body
	}
	t := queue.NewTicket(p, in.Hops < h.cfg.MaxHops && !in.Dispatched)
	t.Moved = !in.Dispatched // it moved once: never another node's pull
	h.predict(r, t)
	// The request keeps its place by arrival and the queue deadline it had
	// where its client called (arrival + --queue-timeout), so a transfer
	// never extends its wait. An arrival time that cannot be honest (in
	// the future, or older than the queue timeout plus a minute of clock
	// skew) is not believed: the request is placed as arriving now, so a
	// forged arrival_unix_nano cannot jump the queue.
	arrival := plausibleArrival(in.Arrival, time.Now(), h.q.Config().Timeout)
	if h.cfg.Placement == "arrival" && !in.Dispatched {
		t.Key = arrival.UnixNano()
	}
	if timeout := h.q.Config().Timeout; timeout > 0 {
		t.Deadline = arrival.Add(timeout)
	}
	peer := in.From
	if h.appReady != nil && !h.appReady() {
		h.m.TransferIn(peer, metrics.TransferRefused)
		h.releaseRefusedPull(in)
		return fmt.Errorf("%w: refusing a transfer", swderr.ErrAppUnavailable)
	}
	if err := h.admitTransferred(t, r, in); err != nil {
		h.m.TransferIn(peer, metrics.TransferRefused)
		h.releaseRefusedPull(in)
		return err
	}
	reportAdmitted(w)
	_, err = h.run(w, r, t, p)
	outcome := metrics.TransferOK
	if err != nil {
		outcome = metrics.TransferFailed
	}
	h.m.TransferIn(peer, outcome)
	h.m.TransferFlow(metrics.DirIn, peer, p.bodyBytes(), p.respBytes)
	return err
}

// receiveTransferred receives a ForwardStream's body (transfer.Inbound's
// Streamed) through the path a client's takes (receive: memory up to
// MaxTransferBody, spool beyond, under the same budgets), after the checks
// that need no body: a request this node would refuse anyway is refused
// before its body crosses the network.
func (h *Handler) receiveTransferred(r *http.Request, p *pending, in transfer.Inbound) error {
	switch {
	case h.appReady != nil && !h.appReady():
		return fmt.Errorf("%w: refusing a transfer", swderr.ErrAppUnavailable)
	case h.q.Draining():
		return swderr.ErrDraining
	case r.ContentLength > h.cfg.MaxBody:
		// Not ErrBodyTooLarge: the sender accepted the body and may
		// still serve it itself, so this is a refusal.
		return fmt.Errorf("%w: a body of %d bytes, at most %d here (--max-body)", swderr.ErrBufferFull, r.ContentLength, h.cfg.MaxBody)
	}
	if h.heldFor(in) == nil {
		// A request answering one of this node's pulls goes into the slot
		// held for it: no early-reject check (as admitTransferred).
		if err := h.overloaded(); err != nil {
			return err
		}
	}
	if r.ContentLength == 0 {
		// Nothing to hold, but the body must end where it was announced to.
		if n, err := r.Body.Read(make([]byte, 1)); n > 0 || err != io.EOF {
			return fmt.Errorf("%w: body of announced size 0: %w", swderr.ErrBadRequest, err)
		}
		p.body = []byte{}
		return nil
	}
	mem, spooled, size, err := h.receive(r, r.Body, &p.held)
	if err != nil {
		return err
	}
	if spooled != nil {
		p.spooled, p.size = spooled, size
		return nil
	}
	p.body = mem
	return nil
}

// arrivalSkew is the clock difference between nodes an arrival time may
// show and still be believed.
const arrivalSkew = time.Minute

// plausibleArrival returns arrival when an honest sender could have sent
// it (not after now plus the skew, not before now minus the queue timeout
// and the skew; a future time within the skew counts as now), else now.
func plausibleArrival(arrival, now time.Time, timeout time.Duration) time.Time {
	switch {
	case arrival.After(now):
		return now
	case timeout > 0 && now.Sub(arrival) >= timeout+arrivalSkew:
		return now
	case timeout <= 0 && now.Sub(arrival) >= arrivalSkew:
		return now
	}
	return arrival
}

// readBody enforces MaxBody and receives the whole body before the request
// is queued (see receive). It reports whether the request may be
// transferred: a body held in memory travels in one Forward message, a
// spooled one by ForwardStream.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request, p *pending) (bool, error) {
	transferable := !isUpgrade(r) && transfer.Transferable(r)
	if r.ContentLength > h.cfg.MaxBody {
		return false, fmt.Errorf("%w: %d bytes, at most %d", swderr.ErrBodyTooLarge, r.ContentLength, h.cfg.MaxBody)
	}
	if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
		return transferable, nil
	}
	ir := &idleReader{r: http.MaxBytesReader(w, r.Body, h.cfg.MaxBody), rc: http.NewResponseController(w), timeout: h.cfg.BodyIdleTimeout}
	defer ir.disarm()
	mem, spooled, size, err := h.receive(r, ir, &p.held)
	if err != nil {
		if errors.Is(err, swderr.ErrBodyTimeout) {
			w.Header().Set("Connection", "close")
		}
		return false, err
	}
	if spooled != nil {
		p.spooled, p.size = spooled, size
		return transferable, nil
	}
	p.body = mem
	if p.body == nil {
		p.body = []byte{}
	}
	return transferable, nil
}

func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "upgrade") {
				return true
			}
		}
	}
	return false
}

// run waits for the ticket's outcome and serves it, locally or on a peer,
// until the request is answered. It returns the request's outcome for
// metrics, or an error if nothing was written and the caller must answer.
func (h *Handler) run(w http.ResponseWriter, r *http.Request, t *queue.Ticket, p *pending) (metrics.Outcome, error) {
	ctx := r.Context()
	for {
		out, err := h.q.Wait(ctx, t)
		if err != nil {
			return "", err
		}
		switch out.Kind {
		case queue.Granted:
			h.serveLocal(w, r, t, p)
			if p.refuse != nil {
				return "", p.refuse
			}
			if p.appOutcome != "" {
				return p.appOutcome, nil
			}
			return metrics.OutcomeLocal, nil
		case queue.Transfer:
			p.decided = out.At
			outcome, done, err := h.transferOut(ctx, w, r, t, p, out.Peer, out.PullID)
			if done {
				return outcome, err
			}
		}
	}
}

func (h *Handler) serveLocal(w http.ResponseWriter, r *http.Request, t *queue.Ticket, p *pending) {
	ctx := r.Context()
	var began time.Time
	var serving func(learn bool)
	var once sync.Once
	// The app's request does not end when the client leaves: most apps go
	// on working on a request whose client left, so the slot (m is the
	// app's limit) stays taken until the app's answer has ended or the app
	// closed the connection (swd half-closes it, see appconn.go). Only
	// after AbandonAfter without a client does swd close the app
	// connection itself, which frees the slot.
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ar := &appRequest{cancel: cancel}
	var (
		mu       sync.Mutex
		finished bool
		abandon  *time.Timer
	)
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !finished {
			ar.clientGone()
			abandon = time.AfterFunc(h.cfg.AbandonAfter, cancel)
		}
	})
	// The slot is released as soon as the app's answer has been read to
	// its end (see releasingTransport), not when a slow client has taken
	// all of it: the app is free then. Whatever happens, at the latest
	// when serving ends, or when the rest of an abandoned answer has been
	// read.
	p.clientCtx = ctx
	p.release = func() {
		once.Do(func() {
			h.q.Done(t)
			if ctx.Err() == nil && !began.IsZero() {
				h.service.observe(time.Since(began))
			}
			if serving != nil {
				serving(ctx.Err() == nil)
			}
		})
	}
	var finishOnce sync.Once
	p.finish = func() {
		finishOnce.Do(func() {
			stop()
			mu.Lock()
			finished = true
			if abandon != nil {
				abandon.Stop()
			}
			mu.Unlock()
			cancel()
		})
	}
	defer func() {
		if !p.draining {
			p.release()
			p.finish()
		}
	}()
	wait := time.Since(t.Pushed())
	h.m.ObserveQueueWait(wait)
	if rep, ok := w.(transfer.QueueWaitReporter); ok {
		rep.ReportQueueWait(wait) // a transferred request: its sender learns the wait
	}
	// Bodies are received whole (readBody), so the app request can be
	// sent again on another connection (see appConn).
	switch {
	case p.body != nil:
		body := p.body
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	case p.spooled != nil:
		f, size := p.spooled, p.size
		r.Body = io.NopCloser(io.NewSectionReader(f, 0, size))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(f, 0, size)), nil }
		r.ContentLength = size
	}
	r = r.WithContext(context.WithValue(ar.trace(actx), ctxKey{}, p))
	serving = h.startService(t)
	began = time.Now()
	cw := &countingWriter{ResponseWriter: w}
	h.rp.ServeHTTP(cw, r)
	p.respBytes = cw.n
	h.m.ObserveFlow(metrics.EdgeApp, p.bodyBytes(), cw.n)
	if h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.Debug("request served locally", "id", p.id, "method", r.Method, "transferred_in", p.in != nil,
			"wait", wait.String())
	}
}

// transferOut sends a handed-off request to peer. done is false when the
// request went back into the local queue and must be waited for again.
func (h *Handler) transferOut(ctx context.Context, w http.ResponseWriter, r *http.Request, t *queue.Ticket, p *pending, peer string, pullID uint64) (outcome metrics.Outcome, done bool, err error) {
	putBack := func(local bool) (metrics.Outcome, bool, error) {
		if local {
			err = h.q.PutBackLocal(t)
		} else {
			err = h.q.PutBack(t)
		}
		if err != nil {
			return "", true, fmt.Errorf("put back: %w", err)
		}
		return "", false, nil
	}
	addr, ok := h.peers.GRPCAddr(peer)
	if !ok {
		h.m.TransferUnroutable()
		return putBack(false)
	}
	start := time.Now()
	msg := transfer.ToMessage(transfer.Outbound{
		ID: p.id, Request: r, Body: p.body, Arrival: p.arrival, Hops: p.hops, From: h.cfg.NodeName, PullID: pullID,
	})
	tctx, cancel := context.WithTimeout(ctx, h.cfg.TransferTimeout)
	var res transfer.Result
	var ferr error
	if p.spooled != nil {
		res, ferr = h.fwd.ForwardStream(tctx, addr, msg, p.spooled, p.size, w)
	} else {
		res, ferr = h.fwd.Forward(tctx, addr, msg, w)
	}
	cancel()
	if h.onTransfer != nil {
		h.onTransfer(peer, transferHealth(res, ferr))
	}
	if res.HeadWritten && h.admitter != nil {
		// The peer's app answered this node's client: the admitter learns
		// the session cookies it set, as for the local app's answers.
		h.admitter.Observe(&http.Response{Header: w.Header()})
	}
	o := classifyForward(res, ferr, ctx.Err() != nil, slices.Contains(h.cfg.IdempotentMethods, r.Method))
	h.m.TransferOut(peer, o.transfer, time.Since(start))
	h.observeTransferOut(peer, p, o.transfer, res, start)
	switch o.kind {
	case forwardAnswered:
		if h.log.Enabled(ctx, slog.LevelDebug) {
			h.log.Debug("request served remotely", "id", p.id, "peer", peer, "peer_queue_wait", res.QueueWait.String())
		}
		return metrics.OutcomeRemote, true, nil
	case forwardClientGone:
		if res.HeadWritten {
			return metrics.OutcomeClientGone, true, nil
		}
		return "", true, fmt.Errorf("%w: %w", swderr.ErrClientGone, ferr)
	case forwardAbort:
		h.log.Warn("transfer answer cut off", "id", p.id, "peer", peer, "err", ferr)
		panic(http.ErrAbortHandler)
	case forwardRefused:
		return putBack(false)
	case forwardNotRun:
		return "", true, ferr // 503: its wait is over
	case forwardRetry:
		h.log.Info("transfer failed; running idempotent request locally", "id", p.id, "peer", peer, "err", ferr)
		return putBack(true)
	default:
		h.log.Warn("transfer failed after peer may have started it", "id", p.id, "peer", peer, "err", ferr)
		return "", true, ferr
	}
}

// fail answers a request that was not served. A client that went away gets
// nothing (there is nobody to answer).
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, p *pending, err error, start time.Time) {
	outcome := metrics.OutcomeRejected
	gone := errors.Is(err, swderr.ErrClientGone) || errors.Is(err, context.Canceled)
	if gone && r.Context().Err() == nil {
		// Not this client: a cancellation from elsewhere (a peer's call
		// ended) while the client still waits for an answer. It may have
		// started: answer 502, never nothing.
		err = fmt.Errorf("%w: %v", swderr.ErrMaybeStarted, err)
		gone = false
	}
	switch {
	case gone:
		h.m.ObserveRequest(metrics.OutcomeClientGone, time.Since(start))
		return
	case errors.Is(err, swderr.ErrQueueTimeout):
		outcome = metrics.OutcomeTimedOut
	case errors.Is(err, swderr.ErrMaybeStarted):
		outcome = metrics.OutcomeFailed
	}
	h.m.ObserveRequest(outcome, time.Since(start))
	h.m.Reject(reason(err))
	WriteError(w, err, h.retry)
	if h.log.Enabled(r.Context(), slog.LevelDebug) {
		h.log.Debug("request not served", "id", p.id, "method", r.Method, "err", err)
	}
}

// reason is the rejection reason an error is counted under.
func reason(err error) metrics.Reason {
	switch {
	case errors.Is(err, swderr.ErrQueueFull):
		return metrics.ReasonQueueFull
	case errors.Is(err, swderr.ErrQueueTimeout):
		return metrics.ReasonQueueTimeout
	case errors.Is(err, swderr.ErrOverloaded), errors.Is(err, swderr.ErrBufferFull),
		errors.Is(err, swderr.ErrSessionRefused):
		return metrics.ReasonOverloaded
	case errors.Is(err, swderr.ErrDraining):
		return metrics.ReasonDraining
	case errors.Is(err, swderr.ErrBodyTooLarge):
		return metrics.ReasonBodyTooLarge
	case errors.Is(err, swderr.ErrMaybeStarted):
		return metrics.ReasonTransferFailed
	case errors.Is(err, swderr.ErrBadRequest), errors.Is(err, swderr.ErrBodyTimeout):
		return metrics.ReasonBadRequest
	case errors.Is(err, swderr.ErrNoBackend):
		return metrics.ReasonNoBackend
	case errors.Is(err, swderr.ErrRefused):
		return metrics.ReasonRefused
	default:
		return metrics.ReasonOther
	}
}

// retryAfterHeader is the Retry-After value for d: whole seconds, rounded
// up.
func retryAfterHeader(d time.Duration) string {
	return strconv.Itoa(int((d + time.Second - 1) / time.Second))
}

// WriteError answers with the status swderr maps err to, and Retry-After
// on 503s.
func WriteError(w http.ResponseWriter, err error, retryAfter string) {
	code := swderr.HTTPStatus(err)
	if swderr.RetryAfter(err) && retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.Header().Set("X-Swd-Error", firstLine(err.Error()))
	http.Error(w, "swd: "+firstLine(err.Error()), code)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// appError is the ReverseProxy's error handler for the local app.
func (h *Handler) appError(w http.ResponseWriter, r *http.Request, err error) {
	p, _ := r.Context().Value(ctxKey{}).(*pending)
	set := func(outcome metrics.Outcome) {
		if p != nil {
			p.appOutcome = outcome
		}
	}
	clientCtx := r.Context()
	if p != nil && p.clientCtx != nil {
		clientCtx = p.clientCtx
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		set(metrics.OutcomeRejected)
		h.m.Reject(metrics.ReasonBodyTooLarge)
		http.Error(w, "swd: request body too large", http.StatusRequestEntityTooLarge)
	case clientCtx.Err() != nil || r.Context().Err() != nil:
		// the client went away; nobody to answer
		set(metrics.OutcomeClientGone)
	case appRefused(err) && p != nil && p.in != nil:
		// A transferred request the app never got: refuse it, so the
		// sender puts it back and serves it elsewhere.
		h.noteAppDown()
		set(metrics.OutcomeRejected)
		p.refuse = fmt.Errorf("%w: %w", swderr.ErrAppUnavailable, err)
	default:
		if appRefused(err) {
			h.noteAppDown()
		}
		set(metrics.OutcomeFailed)
		h.log.Warn("app request failed", "err", err)
		w.Header().Set("X-Swd-Error", "app unreachable")
		http.Error(w, "swd: application unavailable", http.StatusBadGateway)
	}
}
