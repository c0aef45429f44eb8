package admission

import (
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/queue"
)

// Scheduler is the page scheduler: a queue.Scheduler giving each route
// (queue.Ticket.Route, an internal/route ID) its own FIFO with at most its
// learnt limit in flight at the app. A free slot goes to the oldest waiting
// ticket whose route is below its limit; if every waiting ticket's route is
// at its limit, the slot stays idle until one finishes.
//
// Each route's limit is hill-climbed (Climber) once per Config.Window, on
// the route's throughput at its limit: the requests of the route that
// completed while the route was at its limit, divided by the time it spent
// at its limit in the window. Measured so, the throughput is the app's
// answer to that many requests of the route at once, not the clients'
// demand (which a plain count per window would mix in). A window in which
// the route never completed a request at its limit says nothing about the
// limit: the limit stays and the window is not compared; one with fewer
// than MinSamples such completions is extended.
// (A route at its limit with nothing waiting still measures the app at that
// concurrency; the limit then rises at most one above the route's demand,
// where it is never reached and so stays.)
// Limits never exceed m (the queue's Concurrency, read through the function
// given to NewScheduler).
//
// Concurrency: the queue calls Pick, Granted and Released under its lock,
// one at a time; Limits and Len may be called from any goroutine (atomics).
type Scheduler struct {
	cfg    Config
	now    func() time.Time
	m      func() int
	routes []routeState
	limits []atomic.Int64 // mirror of routes[i].climb.Limit(); 0: never seen
}

type routeState struct {
	seen     bool
	climb    Climber
	inFlight int
	start    time.Time // the current window's start
	// At the limit in this window: completions, time, and since when
	// (zero: below the limit now).
	satDone  int
	satTime  time.Duration
	satSince time.Time
}

// MinSamples is the fewest completions at the limit a window needs before
// its throughput is compared; maxWindows bounds how long a window waits for
// them.
const (
	MinSamples = 10
	maxWindows = 10
)

var _ queue.Scheduler = (*Scheduler)(nil)

// NewScheduler returns a page scheduler for routes 0..maxRoutes-1 (IDs
// outside share the last one); m reports the node's current concurrency.
func NewScheduler(cfg Config, maxRoutes int, m func() int) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	maxRoutes = max(maxRoutes, 1)
	return &Scheduler{
		cfg: cfg, now: cfg.clock(), m: m,
		routes: make([]routeState, maxRoutes),
		limits: make([]atomic.Int64, maxRoutes),
	}, nil
}

func (s *Scheduler) route(id int) (*routeState, int) {
	if id < 0 || id >= len(s.routes) {
		id = len(s.routes) - 1
	}
	r := &s.routes[id]
	if !r.seen {
		r.seen = true
		r.climb = NewClimber(min(s.cfg.InitialLimit, max(s.m(), 1)))
		r.start = s.now()
		s.limits[id].Store(int64(r.climb.Limit()))
	}
	return r, id
}

// Pick implements queue.Scheduler.
func (s *Scheduler) Pick(w *queue.Waiting) *queue.Ticket {
	for t := w.Front(); t != nil; t = w.Next(t) {
		r, _ := s.route(t.Route)
		if r.inFlight < r.climb.Limit() {
			return t
		}
	}
	return nil
}

// Granted implements queue.Scheduler.
func (s *Scheduler) Granted(t *queue.Ticket) {
	r, _ := s.route(t.Route)
	r.inFlight++
	if r.inFlight >= r.climb.Limit() && r.satSince.IsZero() {
		r.satSince = s.now()
	}
}

// Released implements queue.Scheduler: one completion of t's route, and
// the route's window closes if it has passed.
func (s *Scheduler) Released(t *queue.Ticket) {
	r, id := s.route(t.Route)
	now := s.now()
	if r.inFlight >= r.climb.Limit() {
		r.satDone++
	}
	r.inFlight--
	if r.inFlight < r.climb.Limit() && !r.satSince.IsZero() {
		r.satTime += now.Sub(r.satSince)
		r.satSince = time.Time{}
	}
	s.maybeStep(r, id, now)
}

// maybeStep closes r's window if it has passed: the limit climbs when the
// route completed at least MinSamples requests at its limit in it; a window
// with some but fewer goes on (up to maxWindows windows); one with none
// ends without a step (the route's demand stayed below its limit: the
// limit says nothing). A new window starts.
func (s *Scheduler) maybeStep(r *routeState, id int, now time.Time) {
	el := now.Sub(r.start)
	if el < s.cfg.Window {
		return
	}
	if r.satDone > 0 && r.satDone < MinSamples && el < maxWindows*s.cfg.Window {
		return
	}
	if !r.satSince.IsZero() {
		r.satTime += now.Sub(r.satSince)
	}
	m := max(s.m(), 1)
	if r.satDone >= MinSamples && r.satTime > 0 {
		r.climb.Step(float64(r.satDone)/r.satTime.Seconds(), m)
	} else {
		r.climb.Cap(m)
	}
	s.limits[id].Store(int64(r.climb.Limit()))
	r.start, r.satDone, r.satTime, r.satSince = now, 0, 0, time.Time{}
	if r.inFlight >= r.climb.Limit() {
		r.satSince = now
	}
}

// Limits returns the learnt limit of every route seen so far, by route ID.
func (s *Scheduler) Limits() map[int]int {
	out := map[int]int{}
	for i := range s.limits {
		if v := s.limits[i].Load(); v > 0 {
			out[i] = int(v)
		}
	}
	return out
}
