package node

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/swderr"
)

// peerHealth ejects peers whose transfers fail, before memberlist declares
// them dead: after ejectAfter consecutive failures a peer is left out of the
// policies' view for a backoff that doubles on every ejection (1 s up to
// 30 s) and resets when a transfer to it succeeds. Refusals are not
// failures: a full peer is healthy.
type peerHealth struct {
	now        func() time.Time
	mu         sync.Mutex
	peers      map[string]*peerState
	ejectAfter int
	minBackoff time.Duration
	maxBackoff time.Duration
}

type peerState struct {
	fails   int
	backoff time.Duration
	until   time.Time
}

func newPeerHealth(now func() time.Time) *peerHealth {
	return &peerHealth{now: now, peers: map[string]*peerState{}, ejectAfter: 3, minBackoff: time.Second, maxBackoff: 30 * time.Second}
}

// record notes a transfer's result.
func (h *peerHealth) record(peer string, err error) {
	// A full or draining peer that refuses is healthy; so is one that
	// rejected a request as malformed, or whose client went away. A peer
	// that cannot be reached is not.
	if err != nil && !errors.Is(err, swderr.ErrUnreachable) &&
		(errors.Is(err, swderr.ErrRefused) || errors.Is(err, swderr.ErrBadRequest) ||
			errors.Is(err, context.Canceled) || errors.Is(err, swderr.ErrClientGone) ||
			errors.Is(err, swderr.ErrQueueTimeout)) {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.peers[peer]
	if err == nil {
		if s != nil {
			delete(h.peers, peer)
		}
		return
	}
	if s == nil {
		s = &peerState{}
		h.peers[peer] = s
	}
	s.fails++
	if s.fails >= h.ejectAfter && !h.now().Before(s.until) {
		if s.backoff == 0 {
			s.backoff = h.minBackoff
		} else {
			s.backoff = min(2*s.backoff, h.maxBackoff)
		}
		s.until = h.now().Add(s.backoff)
	}
}

// healthy reports whether peer may be a transfer target now.
func (h *peerHealth) healthy(peer string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.peers[peer]
	return s == nil || !h.now().Before(s.until)
}

// ejected lists peers currently ejected.
func (h *peerHealth) ejected() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	now := h.now()
	for name, s := range h.peers {
		if now.Before(s.until) {
			out = append(out, name)
		}
	}
	return out
}

// readiness answers /readyz: a node is ready while it is not draining and
// its app answers HTTP (any status); a dispatcher while it has a backend.
// App probes are cached for a second.
type readiness struct {
	n      *Node
	client *http.Client
	mu     sync.Mutex
	at     time.Time
	err    error
}

func newReadiness(n *Node) *readiness {
	return &readiness{n: n, client: &http.Client{Timeout: time.Second}}
}

func (r *readiness) check(ctx context.Context) error {
	if r.n.draining.Load() {
		return errors.New("draining")
	}
	if r.n.cfg.Role == cluster.RoleDispatcher {
		if len(r.n.backends()) == 0 {
			return errors.New("no backend node known")
		}
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) < time.Second && !r.at.IsZero() {
		return r.err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.n.cfg.Proxy.App, nil)
	if err == nil {
		var resp *http.Response
		resp, err = r.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
	}
	if err != nil {
		err = errors.New("app not answering: " + err.Error())
	}
	r.at, r.err = time.Now(), err
	return err
}

func (r *readiness) serve(w http.ResponseWriter, req *http.Request) {
	if err := r.check(req.Context()); err != nil {
		http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}
