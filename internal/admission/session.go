package admission

import (
	"container/list"
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/swderr"
)

// Gate is the session scheduler of --admission sqs (see the package doc).
//
// A request belongs to a known session when it carries the session cookie
// with a value swd saw within SessionIdle: on a request it admitted, or set
// by the app's answer to one (Observe). Known requests pass at once. Any
// other request starts a new session: it joins the bounded session queue and
// the sessions in it are admitted in arrival order, at most one per
// interval. A new session is refused at once (swderr.ErrSessionRefused)
// when the queue is full or its predicted admission (the next free
// admission time plus one interval per session ahead of it) lies more than
// SessionMaxWait ahead; when the interval grows, sessions already waiting
// whose prediction moves past their bound are refused then, not left to
// time out.
//
// The interval adapts every AdaptEvery: the page-queue length (a function
// the owner supplies: the requests waiting in the node's queue) is sampled,
// and while the mean of the last AdaptWindow samples is above Threshold
// the interval grows by Step, while below it shrinks by Step, within
// [MinInterval, MaxInterval]. While the page queues are longer than
// PauseFactor times the threshold right now, no new session is admitted.
//
// Concurrency: all methods are safe for concurrent use; one mutex guards
// the queue and the known sessions. Run drives the timers.
type Gate struct {
	cfg     Config
	now     func() time.Time
	pageLen func() float64

	mu       sync.Mutex
	interval time.Duration
	next     time.Time // earliest time the next new session may be admitted
	waiting  list.List // of *waiter, arrival order
	timer    *time.Timer
	samples  []float64 // ring of page-queue lengths
	nSample  int
	known    sessions

	intervalNs        atomic.Int64
	queueLen          atomic.Int64
	admitted, refused atomic.Uint64
}

type waiter struct {
	deadline time.Time
	ch       chan error // buffered(1): nil admitted, else the refusal
	elem     *list.Element
}

// GateStats are cumulative counters and current values.
type GateStats struct {
	// Admitted and Refused count new sessions.
	Admitted, Refused uint64
	// Queue is the sessions waiting now; Interval the session interval.
	Queue    int
	Interval time.Duration
}

// NewGate returns a session gate; pageLen reports the page queues' length.
func NewGate(cfg Config, pageLen func() float64) (*Gate, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gate{
		cfg: cfg, now: cfg.clock(), pageLen: pageLen,
		interval: cfg.Interval,
		samples:  make([]float64, cfg.AdaptWindow),
		known:    newSessions(cfg.MaxSessions),
	}
	g.intervalNs.Store(int64(cfg.Interval))
	return g, nil
}

// Stats returns the gate's counters. Safe from any goroutine.
func (g *Gate) Stats() GateStats {
	return GateStats{
		Admitted: g.admitted.Load(), Refused: g.refused.Load(),
		Queue: int(g.queueLen.Load()), Interval: time.Duration(g.intervalNs.Load()),
	}
}

// Admit returns nil when r may go on to the page queues: at once for a
// known session, after its turn in the session queue for a new one. It
// fails with swderr.ErrSessionRefused, or swderr.ErrClientGone when ctx
// ends while it waits.
func (g *Gate) Admit(ctx context.Context, r *http.Request) error {
	value := ""
	if c, err := r.Cookie(g.cfg.SessionCookie); err == nil {
		value = c.Value
	}
	g.mu.Lock()
	now := g.now()
	if value != "" && g.known.touch(value, now, g.cfg.SessionIdle) {
		g.mu.Unlock()
		return nil
	}
	w, err := g.enqueueLocked(now)
	if w == nil {
		if err == nil && value != "" {
			g.known.add(value, now)
		}
		g.mu.Unlock()
		return err
	}
	g.armLocked(now)
	g.mu.Unlock()
	select {
	case err := <-w.ch:
		if err == nil && value != "" {
			g.mu.Lock()
			g.known.add(value, g.now())
			g.mu.Unlock()
		}
		return err
	case <-ctx.Done():
		g.mu.Lock()
		if w.elem != nil {
			g.waiting.Remove(w.elem)
			w.elem = nil
			g.queueLen.Store(int64(g.waiting.Len()))
			g.mu.Unlock()
			return fmt.Errorf("%w: waiting for session admission: %w", swderr.ErrClientGone, context.Cause(ctx))
		}
		g.mu.Unlock()
		return <-w.ch // decided concurrently: sent before elem was cleared
	}
}

// enqueueLocked admits a new session at once (nil, nil), refuses it (nil,
// err), or queues it (w, nil).
func (g *Gate) enqueueLocked(now time.Time) (*waiter, error) {
	if g.waiting.Len() == 0 && !now.Before(g.next) && !g.pausedLocked() {
		g.next = now.Add(g.interval)
		g.admitted.Add(1)
		return nil, nil
	}
	if g.waiting.Len() >= g.cfg.SessionQueue {
		g.refused.Add(1)
		return nil, fmt.Errorf("%w: %d new sessions already wait", swderr.ErrSessionRefused, g.waiting.Len())
	}
	at := g.predictLocked(now, g.waiting.Len())
	if wait := at.Sub(now); wait > g.cfg.SessionMaxWait {
		g.refused.Add(1)
		return nil, fmt.Errorf("%w: admission predicted in %s, more than the %s session wait bound (one new session per %s)",
			swderr.ErrSessionRefused, wait.Round(time.Millisecond), g.cfg.SessionMaxWait, g.interval)
	}
	w := &waiter{deadline: now.Add(g.cfg.SessionMaxWait), ch: make(chan error, 1)}
	w.elem = g.waiting.PushBack(w)
	g.queueLen.Store(int64(g.waiting.Len()))
	return w, nil
}

// predictLocked is when the session with ahead sessions before it would be
// admitted.
func (g *Gate) predictLocked(now time.Time, ahead int) time.Time {
	at := g.next
	if at.Before(now) {
		at = now
	}
	return at.Add(time.Duration(ahead) * g.interval)
}

// release admits the sessions whose turn has come by now, at most one per
// interval, and refuses those whose predicted admission passed their bound.
func (g *Gate) releaseLocked(now time.Time) {
	for g.waiting.Len() > 0 && !now.Before(g.next) && !g.pausedLocked() {
		w := g.waiting.Remove(g.waiting.Front()).(*waiter)
		w.elem = nil
		g.admitted.Add(1)
		w.ch <- nil
		g.next = now.Add(g.interval)
	}
	g.pruneLocked(now)
	g.queueLen.Store(int64(g.waiting.Len()))
}

// pausedLocked reports whether the page queues are so long now (more than
// PauseFactor times the threshold) that no new session is admitted at all
// until they shrink: the interval reacts to the mean over AdaptWindow,
// which lags a burst of pages by up to a session's length.
func (g *Gate) pausedLocked() bool {
	return g.pageLen != nil && g.pageLen() > PauseFactor*g.cfg.Threshold
}

// PauseFactor: see pausedLocked.
const PauseFactor = 2

// pruneLocked refuses waiting sessions whose predicted admission lies past
// their deadline (the interval grew since they queued).
func (g *Gate) pruneLocked(now time.Time) {
	i := 0
	for e := g.waiting.Front(); e != nil; {
		next := e.Next()
		w := e.Value.(*waiter)
		if g.predictLocked(now, i).After(w.deadline) {
			g.waiting.Remove(e)
			w.elem = nil
			g.refused.Add(1)
			w.ch <- fmt.Errorf("%w: the session interval grew to %s; admission would come after the %s bound",
				swderr.ErrSessionRefused, g.interval, g.cfg.SessionMaxWait)
		} else {
			i++
		}
		e = next
	}
	g.queueLen.Store(int64(g.waiting.Len()))
}

// armLocked makes sure a timer fires when the head of the queue is due.
func (g *Gate) armLocked(now time.Time) {
	if g.waiting.Len() == 0 {
		return
	}
	d := g.next.Sub(now)
	if d <= 0 { // due but paused: look again in an interval
		d = g.interval
	}
	if g.timer == nil {
		g.timer = time.AfterFunc(d, g.fire)
		return
	}
	g.timer.Reset(d)
}

func (g *Gate) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.now()
	g.releaseLocked(now)
	g.armLocked(now)
}

// adaptLocked records one page-queue sample and adapts the interval.
func (g *Gate) adaptLocked(sample float64) {
	g.samples[g.nSample%len(g.samples)] = sample
	g.nSample++
	n := min(g.nSample, len(g.samples))
	sum := 0.0
	for _, v := range g.samples[:n] {
		sum += v
	}
	mean := sum / float64(n)
	iv := g.interval
	switch {
	case mean > g.cfg.Threshold:
		iv += g.cfg.Step
	case mean < g.cfg.Threshold:
		iv -= g.cfg.Step
	}
	g.interval = min(max(iv, g.cfg.MinInterval), g.cfg.MaxInterval)
	g.intervalNs.Store(int64(g.interval))
}

// Adapt samples the page-queue length and adapts the interval now (Run
// calls it every AdaptEvery; tests call it directly).
func (g *Gate) Adapt() {
	s := 0.0
	if g.pageLen != nil {
		s = g.pageLen()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.adaptLocked(s)
	now := g.now()
	g.releaseLocked(now)
	g.armLocked(now)
}

// Run adapts the interval every AdaptEvery until ctx ends, then refuses
// the sessions still waiting.
func (g *Gate) Run(ctx context.Context) {
	t := time.NewTicker(g.cfg.AdaptEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.mu.Lock()
			for e := g.waiting.Front(); e != nil; e = g.waiting.Front() {
				w := g.waiting.Remove(e).(*waiter)
				w.elem = nil
				w.ch <- fmt.Errorf("%w: session admission stopped", swderr.ErrDraining)
			}
			g.queueLen.Store(0)
			if g.timer != nil {
				g.timer.Stop()
			}
			g.mu.Unlock()
			return
		case <-t.C:
			g.Adapt()
		}
	}
}

// Observe records the session cookie an app's answer sets, so the
// session's next requests pass as known. Call it for every answer to a
// request the gate admitted.
func (g *Gate) Observe(resp *http.Response) {
	for _, c := range resp.Cookies() {
		if c.Name != g.cfg.SessionCookie || c.Value == "" {
			continue
		}
		g.mu.Lock()
		if c.MaxAge < 0 {
			g.known.remove(c.Value)
		} else {
			g.known.add(c.Value, g.now())
		}
		g.mu.Unlock()
	}
}

// Interval is the current session interval.
func (g *Gate) Interval() time.Duration { return time.Duration(g.intervalNs.Load()) }

// sessions is the set of known session cookie values with when each was
// last seen, least recently seen first, at most max of them.
type sessions struct {
	max   int
	order list.List // of *sessionEntry
	byVal map[string]*list.Element
}

type sessionEntry struct {
	value string
	seen  time.Time
}

func newSessions(max int) sessions {
	return sessions{max: max, byVal: map[string]*list.Element{}}
}

// touch reports whether value was seen within idle of now, and if so marks
// it seen now. An expired entry is removed.
func (s *sessions) touch(value string, now time.Time, idle time.Duration) bool {
	e, ok := s.byVal[value]
	if !ok {
		return false
	}
	se := e.Value.(*sessionEntry)
	if now.Sub(se.seen) > idle {
		s.remove(value)
		return false
	}
	se.seen = now
	s.order.MoveToBack(e)
	return true
}

// add marks value seen now, forgetting the least recently seen session
// when full.
func (s *sessions) add(value string, now time.Time) {
	if e, ok := s.byVal[value]; ok {
		e.Value.(*sessionEntry).seen = now
		s.order.MoveToBack(e)
		return
	}
	for s.order.Len() >= s.max {
		s.remove(s.order.Front().Value.(*sessionEntry).value)
	}
	s.byVal[value] = s.order.PushBack(&sessionEntry{value: value, seen: now})
}

func (s *sessions) remove(value string) {
	if e, ok := s.byVal[value]; ok {
		s.order.Remove(e)
		delete(s.byVal, value)
	}
}

func (s *sessions) len() int { return s.order.Len() }
