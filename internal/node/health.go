package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/swderr"
)

// peerHealth ejects peers whose transfers fail, before memberlist declares
// them dead, and peers whose app keeps answering 5xx (outlier detection as
// Envoy does it): after ejectAfter consecutive failures, or eject5xxAfter
// consecutive 5xx answers, a peer is left out of the policies' view for a
// backoff that doubles on every ejection (1 s up to 30 s) and resets when a
// transfer to it succeeds. Refusals are not failures: a full peer is
// healthy. At most maxEjectedShare of the peers (at least one) are ejected
// at once, so a cluster-wide problem (every app failing) does not empty
// every node's view.
type peerHealth struct {
	now          func() time.Time
	peers        func() int // how many peers there are (members but self)
	mu           sync.Mutex
	states       map[string]*peerState
	ejectAfter   int
	eject5xx     int
	minBackoff   time.Duration
	maxBackoff   time.Duration
	maxEjectFrac float64
}

type peerState struct {
	fails   int // consecutive failed transfers
	fives   int // consecutive 5xx answers
	backoff time.Duration
	until   time.Time
}

// maxEjectedShare bounds the share of peers ejected at once.
const maxEjectedShare = 0.5

func newPeerHealth(now func() time.Time, peers func() int) *peerHealth {
	return &peerHealth{now: now, peers: peers, states: map[string]*peerState{}, ejectAfter: 3, eject5xx: 5,
		minBackoff: time.Second, maxBackoff: 30 * time.Second, maxEjectFrac: maxEjectedShare}
}

// record notes a transfer's result.
func (h *peerHealth) record(peer string, err error) {
	// A full or draining peer that refuses is healthy; so is one that
	// rejected a request as malformed, or whose client went away. A peer
	// that cannot be reached is not, nor is one whose app answers 5xx.
	if err != nil && !errors.Is(err, swderr.ErrUnreachable) && !errors.Is(err, swderr.ErrPeer5xx) &&
		(errors.Is(err, swderr.ErrRefused) || errors.Is(err, swderr.ErrBadRequest) ||
			errors.Is(err, context.Canceled) || errors.Is(err, swderr.ErrClientGone) ||
			errors.Is(err, swderr.ErrQueueTimeout)) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.states[peer]
	if err == nil {
		if s != nil {
			delete(h.states, peer)
		}
		return
	}
	if s == nil {
		s = &peerState{}
		h.states[peer] = s
	}
	if errors.Is(err, swderr.ErrPeer5xx) {
		s.fives++
	} else {
		s.fails++
	}
	now := h.now()
	if (s.fails >= h.ejectAfter || s.fives >= h.eject5xx) && !now.Before(s.until) && h.mayEject(now) {
		if s.backoff == 0 {
			s.backoff = h.minBackoff
		} else {
			s.backoff = min(2*s.backoff, h.maxBackoff)
		}
		s.until = now.Add(s.backoff)
	}
}

// mayEject reports whether one more peer may be ejected now. Call with
// h.mu held.
func (h *peerHealth) mayEject(now time.Time) bool {
	ejected := 0
	for _, s := range h.states {
		if now.Before(s.until) {
			ejected++
		}
	}
	peers := 0
	if h.peers != nil {
		peers = h.peers()
	}
	return ejected+1 <= max(1, int(float64(peers)*h.maxEjectFrac))
}

// healthy reports whether peer may be a transfer target now.
func (h *peerHealth) healthy(peer string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.states[peer]
	return s == nil || !h.now().Before(s.until)
}

// ejected lists peers currently ejected.
func (h *peerHealth) ejected() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	now := h.now()
	for name, s := range h.states {
		if now.Before(s.until) {
			out = append(out, name)
		}
	}
	return out
}

// readiness answers /readyz: a node is ready while it is not draining and
// its app accepts connections; a dispatcher while it has a backend.
// A node probes its app in the background every appProbeInterval (and at
// once when the proxy saw the app refuse a connection); the result is also
// gossiped (cluster.Extras.Unavailable), so peers stop sending the node
// anything while its app is down, and the node refuses transfers.
type readiness struct {
	n       *Node
	timeout time.Duration
	down    atomic.Bool // the app is not ready
	kick    chan struct{}
	mu      sync.Mutex
	err     error // why the app is not ready
}

// appProbeInterval is how often a node probes its app.
const appProbeInterval = 250 * time.Millisecond

func newReadiness(n *Node) *readiness {
	return &readiness{n: n, timeout: time.Second, kick: make(chan struct{}, 1)}
}

// ready reports whether the app answered the last probe.
func (r *readiness) ready() bool { return !r.down.Load() }

// markDown records that the app refused a connection, and probes again at
// once (the next probe decides when it is back).
func (r *readiness) markDown() {
	if !r.down.Swap(true) {
		r.set(errors.New("app refused a connection"))
		r.n.log.Warn("app not ready: it refused a connection; peers stop sending work here")
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *readiness) set(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

// run probes the app until stop is closed.
func (r *readiness) run(stop <-chan struct{}) {
	t := time.NewTicker(appProbeInterval)
	defer t.Stop()
	for {
		err := r.probe()
		was := r.down.Swap(err != nil)
		r.set(err)
		switch {
		case err != nil && !was:
			r.n.log.Warn("app not ready; peers stop sending work here", "err", err)
		case err == nil && was:
			r.n.log.Info("app ready again")
		}
		select {
		case <-stop:
			return
		case <-t.C:
		case <-r.kick:
		}
	}
}

// probe checks that the app accepts connections. It opens and closes a
// TCP connection and sends no request: a request would be one more than m
// at the app. An app that accepts but fails is caught by peer health (5xx
// and failed transfers), and one that refuses a connection the proxy
// opens is marked down at once (markDown).
func (r *readiness) probe() error {
	u, err := url.Parse(r.n.cfg.Proxy.App)
	if err != nil {
		return fmt.Errorf("app URL: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	c, err := net.DialTimeout("tcp", host, r.timeout)
	if err != nil {
		return errors.New("app not accepting connections: " + err.Error())
	}
	return c.Close()
}

func (r *readiness) check() error {
	if r.n.draining.Load() {
		return errors.New("draining")
	}
	if r.n.cfg.Role == cluster.RoleDispatcher {
		if len(r.n.backends()) == 0 {
			return errors.New("no backend node known")
		}
		return nil
	}
	if r.down.Load() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.err != nil {
			return r.err
		}
		return errors.New("app not answering")
	}
	return nil
}

func (r *readiness) serve(w http.ResponseWriter, _ *http.Request) {
	if err := r.check(); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
