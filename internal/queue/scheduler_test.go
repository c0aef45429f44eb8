package queue_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// lifo grants the newest waiting ticket first and records the calls it gets.
type lifo struct {
	granted, released []any
}

func (s *lifo) Pick(w *queue.Waiting) *queue.Ticket { return w.Back() }
func (s *lifo) Granted(t *queue.Ticket)             { s.granted = append(s.granted, t.Value) }
func (s *lifo) Released(t *queue.Ticket)            { s.released = append(s.released, t.Value) }

func TestSchedulerPicksTheGrant(t *testing.T) {
	s := &lifo{}
	cfg := cfgM(1)
	cfg.Scheduler = s
	q := newQueue(t, cfg)

	// a takes the idle slot (through Pick: the only waiting ticket);
	// b, c, d wait in FIFO order but the scheduler takes the newest.
	a := push(t, q, "a", false)
	b := push(t, q, "b", false)
	c := push(t, q, "c", false)
	d := push(t, q, "d", false)
	requireGranted(t, q, a)
	requireCounts(t, q, 3, 1)
	q.Done(a)
	requireGranted(t, q, d)
	q.Done(d)
	requireGranted(t, q, c)
	q.Done(c)
	requireGranted(t, q, b)
	q.Done(b)
	requireCounts(t, q, 0, 0)
	assert.Equal(t, []any{"a", "d", "c", "b"}, s.granted)
	assert.Equal(t, []any{"a", "d", "c", "b"}, s.released, "Released once per Done, in order")
}

// gate holds every slot idle until opened; then it is FIFO.
type gate struct {
	open              bool
	granted, released int
}

func (g *gate) Pick(w *queue.Waiting) *queue.Ticket {
	if !g.open {
		return nil
	}
	return w.Front()
}
func (g *gate) Granted(*queue.Ticket)  { g.granted++ }
func (g *gate) Released(*queue.Ticket) { g.released++ }

func TestSchedulerHoldsSlotsUntilKick(t *testing.T) {
	g := &gate{}
	cfg := cfgM(2)
	cfg.Scheduler = g
	q := newQueue(t, cfg)
	a := push(t, q, "a", false)
	b := push(t, q, "b", false)
	c := push(t, q, "c", false)
	// Both slots free, three waiting, nothing granted: the scheduler holds.
	requireCounts(t, q, 3, 0)
	// Kick after the state changed fills both slots in FIFO order.
	q.Kick()
	requireCounts(t, q, 3, 0)
	g.open = true
	q.Kick()
	requireGranted(t, q, a)
	requireGranted(t, q, b)
	requireCounts(t, q, 1, 2)
	q.Done(a)
	requireGranted(t, q, c)
	q.Done(b)
	q.Done(c)
	requireCounts(t, q, 0, 0)
	assert.Equal(t, 3, g.granted)
	assert.Equal(t, 3, g.released)
}

// bad picks a ticket that is not waiting: a programming error.
type bad struct{ t *queue.Ticket }

func (b bad) Pick(*queue.Waiting) *queue.Ticket { return b.t }
func (bad) Granted(*queue.Ticket)               {}
func (bad) Released(*queue.Ticket)              {}

func TestSchedulerPickingAStrangerPanics(t *testing.T) {
	stranger := queue.NewTicket("x", false)
	cfg := cfgM(1)
	cfg.Scheduler = bad{stranger}
	q := newQueue(t, cfg)
	assert.PanicsWithValue(t, "queue: Scheduler picked a ticket that is not waiting", func() {
		_ = q.Push(queue.NewTicket("a", false))
	})
}

// random picks any waiting ticket, or none, with the queue's lock held (so
// its rng needs no lock of its own); it counts what it holds.
type random struct {
	rng     *rand.Rand
	held    int
	maxHeld int
}

func (r *random) Pick(w *queue.Waiting) *queue.Ticket {
	if r.rng.IntN(4) == 0 {
		return nil
	}
	k := r.rng.IntN(w.Len())
	t := w.Front()
	for range k {
		t = w.Next(t)
	}
	// Walking back from the end reaches the same ticket.
	u := w.Back()
	for range w.Len() - 1 - k {
		u = w.Prev(u)
	}
	if t != u {
		panic("Waiting: Next and Prev disagree")
	}
	return t
}
func (r *random) Granted(*queue.Ticket) {
	r.held++
	r.maxHeld = max(r.maxHeld, r.held)
}
func (r *random) Released(*queue.Ticket) { r.held-- }

// TestSchedulerProperty: with a scheduler picking at random (and sometimes
// holding), many concurrent owners each get their ticket served exactly
// once, never more than m at once, and Granted/Released balance.
func TestSchedulerProperty(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		m := int(seed%3) + 1
		r := &random{rng: rand.New(rand.NewPCG(seed, 7))}
		cfg := cfgM(m)
		cfg.Scheduler = r
		q := newQueue(t, cfg)
		var wg sync.WaitGroup
		var mu sync.Mutex
		served := map[int]int{}
		for i := range 60 {
			wg.Go(func() {
				tk := queue.NewTicket(i, false)
				require.NoError(t, q.Push(tk))
				ctx, cancel := context.WithTimeout(context.Background(), safety)
				o, err := q.Wait(ctx, tk)
				cancel()
				require.NoError(t, err)
				require.Equal(t, queue.Granted, o.Kind)
				mu.Lock()
				served[i]++
				mu.Unlock()
				q.Done(tk)
			})
		}
		// A hold may leave every slot idle with nothing in flight to call
		// Done: kick every millisecond until all are served, as the timer
		// of a limit-raising scheduler would.
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		tick := time.NewTicker(time.Millisecond)
	loop:
		for {
			select {
			case <-done:
				break loop
			case <-tick.C:
				q.Kick()
			}
		}
		tick.Stop()
		require.Len(t, served, 60, "seed %d", seed)
		for i, n := range served {
			require.Equal(t, 1, n, "seed %d: ticket %d served %d times", seed, i, n)
		}
		assert.LessOrEqual(t, r.maxHeld, m, "seed %d: never more than m granted", seed)
		assert.Equal(t, 0, r.held, "seed %d: every grant released", seed)
		requireCounts(t, q, 0, 0)
	}
}
