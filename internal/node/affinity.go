package node

import (
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/queue"
)

// placementTTL is how long one placement snapshot (view, loads, bound)
// serves keyed arrivals and the queue's move rule before it is rebuilt:
// well under the 20 ms gossip interval, so nothing gossiped is missed, and
// long enough that a hand-off scanning many tickets builds it once.
const placementTTL = time.Millisecond

// validateAffinity checks the affinity and cohort settings of a derived
// config (called from validate).
func (c Config) validateAffinity() error {
	aff, coh := c.Affinity.Source.Enabled(), c.Cohort.Enabled
	if (aff || coh) && c.Role != "node" {
		return errors.New("--affinity and --cohort apply to nodes (--role node), not to a dispatcher")
	}
	if err := c.Affinity.Validate(); err != nil {
		return err
	}
	if err := c.Cohort.Validate(); err != nil {
		return err
	}
	switch {
	case aff && c.Proxy.MaxHops < 1:
		return errors.New("--affinity sends a keyed request to its home node by a transfer: --max-hops must be at least 1")
	case coh && !aff:
		return errors.New("--cohort orders requests by their key: give --affinity header:NAME or cookie:NAME too")
	case coh && c.Queue.Scheduler != nil:
		return errors.New("--cohort installs the queue's scheduler, but another feature already installs one (--admission page|sqs): only one scheduler runs at a time, choose one")
	}
	return nil
}

// router places keyed requests (proxy.Router) and is the queue's move
// rule for them: the node's view, with peers that failing transfers
// ejected counted as unknown, through internal/affinity.
type router struct {
	n    *Node
	cfg  affinity.Config
	prio cohort.PriorityRule
	snap atomic.Pointer[placementSnap]
}

type placementSnap struct {
	p  affinity.Placement
	at time.Time
}

// installAffinity sets up keyed placement and the cohort order on a
// node's queue configuration (before the queue is built).
func (n *Node) installAffinity(qc *queue.Config) error {
	if !n.cfg.Affinity.Source.Enabled() {
		return nil
	}
	n.router = &router{n: n, cfg: n.cfg.Affinity, prio: n.cfg.Cohort.Priority}
	qc.MoveRule = n.router
	if n.cfg.Cohort.Enabled {
		s, err := cohort.New(n.cfg.Cohort)
		if err != nil {
			return err
		}
		n.cohort = s
		qc.Scheduler = s
	}
	return nil
}

// Classify implements proxy.Router.
func (r *router) Classify(req *http.Request) (string, int) {
	return r.cfg.Source.Key(req), r.prio.Of(req.Header)
}

// Place implements proxy.Router: the peer a keyed request should run on,
// "" for this node.
func (r *router) Place(key string) string {
	p := r.placement()
	i := p.Place(key)
	if i >= 0 && i == p.Home(key) {
		r.n.m.Placed(metrics.PlacementHome)
	} else {
		r.n.m.Placed(metrics.PlacementSpilled)
	}
	if i >= 0 && i != p.Self() {
		return p.Name(i)
	}
	return ""
}

// Movable is the queue's move rule (queue.MoveRule): unkeyed tickets move
// freely, keyed ones as affinity.Placement.MayMove says; while the node
// drains, every ticket may go (its home is leaving).
func (r *router) Movable(t *queue.Ticket, peer string) bool {
	if t.Affinity == "" || r.n.draining.Load() {
		return true
	}
	p := r.placement()
	return p.MayMove(t.Affinity, p.Index(peer))
}

// placement is the current snapshot, rebuilt when older than placementTTL.
func (r *router) placement() affinity.Placement {
	now := time.Now()
	if s := r.snap.Load(); s != nil && now.Sub(s.at) < placementTTL {
		return s.p
	}
	p := affinity.NewPlacement(r.n.affinityView(), r.cfg)
	r.snap.Store(&placementSnap{p: p, at: now})
	return p
}

// affinityView is the cluster's view with ejected peers marked unknown
// (an empty view before the cluster runs: everything stays here).
func (n *Node) affinityView() policy.View {
	if n.cl == nil {
		return policy.View{Self: -1}
	}
	v := n.cl.View()
	for i := range v.Nodes {
		if i != v.Self && v.Nodes[i].Known && !n.hlth.healthy(v.Nodes[i].Name) {
			v.Nodes[i].Known = false
		}
	}
	return v
}

// cohortPicks is swd_cohort_picks_total: the cohort order's grants by
// class (nil without --cohort).
func (n *Node) cohortPicks() map[string]float64 {
	if n.cohort == nil {
		return nil
	}
	st := n.cohort.Stats()
	out := make(map[string]float64, len(st.Picks))
	for c, v := range st.Picks {
		out[cohort.Class(c).String()] = float64(v)
	}
	return out
}
