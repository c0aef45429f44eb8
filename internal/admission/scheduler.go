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
// the requests of that route completed in the window divided by its length.
// A window in which the route's limit never held a ticket back (while a node
// slot was free) says nothing about the limit: the limit stays and the
// window is not compared. Limits never exceed m (the queue's Concurrency,
// read through the function given to NewScheduler).
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
	done     int       // completions in the current window
	held     bool      // the limit held a ticket back in this window
	start    time.Time // the current window's start
}

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
		r.held = true
	}
	return nil
}

// Granted implements queue.Scheduler.
func (s *Scheduler) Granted(t *queue.Ticket) {
	r, _ := s.route(t.Route)
	r.inFlight++
}

// Released implements queue.Scheduler: one completion of t's route, and
// the route's window closes if it has passed.
func (s *Scheduler) Released(t *queue.Ticket) {
	r, id := s.route(t.Route)
	r.inFlight--
	r.done++
	s.maybeStep(r, id, s.now())
}

// maybeStep closes r's window if it has passed: the limit climbs when the
// window held a ticket back, and a new window starts.
func (s *Scheduler) maybeStep(r *routeState, id int, now time.Time) {
	el := now.Sub(r.start)
	if el < s.cfg.Window {
		return
	}
	m := max(s.m(), 1)
	if r.held {
		r.climb.Step(float64(r.done)/el.Seconds(), m)
	} else {
		r.climb.Cap(m)
	}
	s.limits[id].Store(int64(r.climb.Limit()))
	r.done, r.held, r.start = 0, false, now
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
