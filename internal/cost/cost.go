// Package cost learns what a unit of work costs and adds up the work a node
// holds: the "work" load index (paper 003, SPLiT; docs/algorithms.md, "The
// work load index").
//
// The statistic (Stat) is SPLiT's equation (1): for a unit's first Theta
// samples it is their arithmetic mean, a(n+1) = (a(n)·n + x) / (n+1); from
// then on an exponential moving average whose weight W is the old value's,
// a(n+1) = a(n)·W + x·(1−W). In SWD a unit is a route (internal/route) and a
// sample is one request's service time at the app. Table keeps one Stat per
// route, plus one over every route (the fallback for a route not yet seen).
//
// A node's predicted work is the predicted cost of every waiting request
// (the queue keeps that sum, from each ticket's Cost) plus the predicted
// remaining time of every request in service, which a Ledger adds up
// (Remaining: a request already past its prediction is not assumed
// finished). The daemon gossips it when --load-index is work; the
// simulator computes the same sum with the same functions.
//
// Concurrency: Stat and Config are plain values, not safe for concurrent
// mutation. A Table is safe for concurrent use: Observe takes the route's
// mutex, Predict reads atomics. A Ledger is safe for concurrent use: the
// requests in service (at most the node's m) sit behind a mutex held only
// for O(1) updates and an O(m) sum, never across I/O. Time enters a Ledger
// through the clock given to NewLedger.
package cost

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures the statistic.
type Config struct {
	// Theta is how many samples are averaged arithmetically before the
	// statistic becomes an exponential moving average (SPLiT's θ). At
	// least 1.
	Theta int
	// Weight is the moving average's weight of the old value (SPLiT's w):
	// a(n+1) = a(n)·Weight + x·(1−Weight). In [0, 1): 0 keeps only the
	// latest sample.
	Weight float64
	// Prior is the cost assumed for a request when nothing has been
	// learnt yet (no completion of any route). Positive.
	Prior time.Duration
}

// DefaultConfig returns θ = 100 and w = 0.99 (chosen with the simulator:
// docs/sim.md, "The work load index") and a 10 ms prior.
func DefaultConfig() Config {
	return Config{Theta: 100, Weight: 0.99, Prior: 10 * time.Millisecond}
}

// MaxTheta bounds Config.Theta.
const MaxTheta = 1 << 20

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Theta < 1 || c.Theta > MaxTheta:
		return fmt.Errorf("cost theta must be in [1, %d], got %d", MaxTheta, c.Theta)
	case !(c.Weight >= 0 && c.Weight < 1):
		return fmt.Errorf("cost weight must be in [0, 1), got %v", c.Weight)
	case c.Prior <= 0:
		return fmt.Errorf("cost prior must be positive, got %s", c.Prior)
	}
	return nil
}

// Stat is SPLiT's running statistic of one unit. The zero value has no
// samples.
type Stat struct {
	n uint64
	a float64 // ns
}

// Observe adds one sample x (negative samples count as 0) under c's θ and
// w.
func (s *Stat) Observe(x time.Duration, c Config) {
	v := float64(max(x, 0))
	if s.n < uint64(c.Theta) {
		s.a = (s.a*float64(s.n) + v) / float64(s.n+1)
	} else {
		s.a = s.a*c.Weight + v*(1-c.Weight)
	}
	s.n++
}

// Samples is how many samples the statistic has seen.
func (s Stat) Samples() uint64 { return s.n }

// Value is the statistic, 0 without samples.
func (s Stat) Value() time.Duration { return time.Duration(math.Round(s.a)) }

// Predict is the predicted cost of a request of a route whose statistic is
// route, on a node whose statistic over every route is all: route's value
// once it has a sample, else all's, else c.Prior. Table.Predict is the
// same rule over its own statistics.
func Predict(route, all Stat, c Config) time.Duration {
	switch {
	case route.n > 0:
		return route.Value()
	case all.n > 0:
		return all.Value()
	}
	return c.Prior
}

// Remaining is the predicted remaining service time of a request predicted
// to cost c that has been in service for elapsed: c − elapsed while that is
// positive. A request past its prediction is not assumed finished: it
// counts its whole predicted cost again, as if it restarted. Service times
// with a long tail are what overrun, and there a request that has run
// longer than the mean has, on average, at least the mean still to go;
// with near-constant costs an overrun is short-lived and rare.
// (docs/sim.md, "The work load index", compares the alternatives.)
func Remaining(c, elapsed time.Duration) time.Duration {
	c = max(c, 0)
	if r := c - max(elapsed, 0); r > 0 {
		return r
	}
	return c
}

// ErrUnknownRoute is returned for a route ID outside a Table.
var ErrUnknownRoute = errors.New("route outside the cost table")

// Table is one Stat per route ID (dense IDs 0..Len()-1, as internal/route
// hands them out) and one over every route.
type Table struct {
	cfg    Config
	routes []routeStat
	all    routeStat
}

type routeStat struct {
	mu   sync.Mutex
	s    Stat          // guarded by mu
	cur  atomic.Int64  // s.Value() in ns, for lock-free reads
	seen atomic.Uint64 // s.Samples()
}

func (r *routeStat) observe(x time.Duration, c Config) {
	r.mu.Lock()
	r.s.Observe(x, c)
	r.cur.Store(int64(r.s.Value()))
	r.seen.Store(r.s.Samples())
	r.mu.Unlock()
}

// NewTable returns a table for routes IDs 0..routes-1 (internal/route's
// Table.Max()).
func NewTable(c Config, routes int) (*Table, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if routes < 1 {
		return nil, fmt.Errorf("cost table needs at least 1 route, got %d", routes)
	}
	return &Table{cfg: c, routes: make([]routeStat, routes)}, nil
}

// Config returns the table's configuration.
func (t *Table) Config() Config { return t.cfg }

// Len is how many routes the table holds.
func (t *Table) Len() int { return len(t.routes) }

// Observe adds a service time of route id.
func (t *Table) Observe(id int, x time.Duration) error {
	if id < 0 || id >= len(t.routes) {
		return fmt.Errorf("%w: %d of %d", ErrUnknownRoute, id, len(t.routes))
	}
	t.routes[id].observe(x, t.cfg)
	t.all.observe(x, t.cfg)
	return nil
}

// Predict is the predicted cost of a request of route id: the route's
// statistic once it has a sample, else the statistic over every route,
// else Config.Prior.
func (t *Table) Predict(id int) time.Duration {
	if id >= 0 && id < len(t.routes) && t.routes[id].seen.Load() > 0 {
		return time.Duration(t.routes[id].cur.Load())
	}
	if t.all.seen.Load() > 0 {
		return time.Duration(t.all.cur.Load())
	}
	return t.cfg.Prior
}

// Route is a snapshot of one route's statistic.
type Route struct {
	ID      int
	Cost    time.Duration
	Samples uint64
}

// Routes lists the routes with at least one sample, by ID.
func (t *Table) Routes() []Route {
	var out []Route
	for i := range t.routes {
		if n := t.routes[i].seen.Load(); n > 0 {
			out = append(out, Route{ID: i, Cost: time.Duration(t.routes[i].cur.Load()), Samples: n})
		}
	}
	return out
}

// Ledger adds up the predicted remaining service of a node's requests in
// service (see Remaining); with the predicted costs of its waiting requests
// (which the queue sums: queue.Queue.WaitingCost) it is the node's work.
type Ledger struct {
	now func() time.Time

	mu      sync.Mutex
	serving []*Serving // in service, in no particular order
}

// Serving is a request in service, as Start returned it.
type Serving struct {
	cost  time.Duration
	start time.Time
	idx   int // position in Ledger.serving, -1 once finished
}

// NewLedger returns an empty ledger reading time from now (time.Now when
// nil).
func NewLedger(now func() time.Time) *Ledger {
	if now == nil {
		now = time.Now
	}
	return &Ledger{now: now}
}

// Start counts a request of predicted cost c as in service from now on.
// Pass the result to Finish exactly once.
func (l *Ledger) Start(c time.Duration) *Serving {
	s := &Serving{cost: max(c, 0), start: l.now()}
	l.mu.Lock()
	s.idx = len(l.serving)
	l.serving = append(l.serving, s)
	l.mu.Unlock()
	return s
}

// Finish stops counting s; it returns how long s was in service. A second
// Finish of the same s does nothing and returns 0.
func (l *Ledger) Finish(s *Serving) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.idx < 0 {
		return 0
	}
	last := len(l.serving) - 1
	l.serving[s.idx] = l.serving[last]
	l.serving[s.idx].idx = s.idx
	l.serving[last] = nil
	l.serving = l.serving[:last]
	s.idx = -1
	return l.now().Sub(s.start)
}

// Remaining is the predicted remaining service now: the sum of Remaining
// over the requests in service.
func (l *Ledger) Remaining() time.Duration {
	now := l.now()
	var w time.Duration
	l.mu.Lock()
	for _, s := range l.serving {
		w += Remaining(s.cost, now.Sub(s.start))
	}
	l.mu.Unlock()
	return w
}
