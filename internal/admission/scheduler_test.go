package admission

import (
	"container/heap"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// fakeClock is an injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

func (c *fakeClock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

// recorder wraps a Scheduler and records the tickets it granted.
type recorder struct {
	*Scheduler
	granted []*queue.Ticket
}

func (r *recorder) Granted(t *queue.Ticket) {
	r.Scheduler.Granted(t)
	r.granted = append(r.granted, t)
}

func (r *recorder) take() []*queue.Ticket {
	g := r.granted
	r.granted = nil
	return g
}

func newTestQueue(t *testing.T, cfg Config, m int) (*queue.Queue, *recorder) {
	t.Helper()
	var q *queue.Queue
	s, err := NewScheduler(cfg, 8, func() int { return q.Concurrency() })
	require.NoError(t, err)
	rec := &recorder{Scheduler: s}
	q, err = queue.New(queue.Config{Concurrency: m, Limit: 1000, Scheduler: rec})
	require.NoError(t, err)
	return q, rec
}

func ticket(route int) *queue.Ticket {
	t := queue.NewTicket(nil, false)
	t.Route = route
	return t
}

func TestSchedulerHoldsARouteAtItsLimit(t *testing.T) {
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Mode, cfg.InitialLimit, cfg.Now = ModePage, 2, clk.Now
	q, rec := newTestQueue(t, cfg, 8)
	heavy := []*queue.Ticket{ticket(0), ticket(0), ticket(0)}
	for _, tk := range heavy {
		require.NoError(t, q.Push(tk))
	}
	// Two of route 0 run; the third waits although 6 node slots are free.
	require.Equal(t, heavy[:2], rec.take())
	assert.Equal(t, 1, q.Waiting())
	// Route 1 has its own FIFO: it passes the held ticket of route 0.
	light := ticket(1)
	require.NoError(t, q.Push(light))
	require.Equal(t, []*queue.Ticket{light}, rec.take())
	// A route-0 completion lets the held one run.
	q.Done(heavy[0])
	require.Equal(t, []*queue.Ticket{heavy[2]}, rec.take())
	assert.Equal(t, map[int]int{0: 2, 1: 2}, rec.Limits())
}

func TestSchedulerNeverExceedsM(t *testing.T) {
	clk := newFakeClock()
	cfg := DefaultConfig()
	cfg.Mode, cfg.InitialLimit, cfg.Now = ModePage, 4, clk.Now
	q, rec := newTestQueue(t, cfg, 3)
	for r := range 3 {
		for range 2 {
			require.NoError(t, q.Push(ticket(r)))
		}
	}
	assert.Len(t, rec.take(), 3) // m = 3 bounds the node's total
	assert.Equal(t, 3, q.InFlight())
}

// event is a completion in the simulated app.
type event struct {
	at time.Time
	t  *queue.Ticket
}

type events []event

func (e events) Len() int           { return len(e) }
func (e events) Less(i, j int) bool { return e[i].at.Before(e[j].at) }
func (e events) Swap(i, j int)      { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)        { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// TestSchedulerLearnsTheKnee runs the real queue and scheduler against a
// simulated app with dummyapp's contention model (injected time, no
// sleeping): a backlogged route's limit settles around the model's knee.
func TestSchedulerLearnsTheKnee(t *testing.T) {
	cases := []struct {
		name      string
		knee, m   int
		initial   int
		serviceMs float64
		power     float64
	}{
		// the bench's heavy page, starting at 1
		{name: "knee 2", knee: 2, m: 16, initial: 1, serviceMs: 100, power: 2},
		// a knee of 6, climbing from 2
		{name: "knee 6", knee: 6, m: 16, initial: 2, serviceMs: 50, power: 2},
		// starting above the knee at m
		{name: "knee 3 from m", knee: 3, m: 12, initial: 12, serviceMs: 20, power: 1.5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := DefaultConfig()
			cfg.Mode, cfg.InitialLimit, cfg.Now, cfg.Window = ModePage, c.initial, clk.Now, time.Second
			q, rec := newTestQueue(t, cfg, c.m)
			var pending events
			running := 0
			start := func() {
				for _, tk := range rec.take() {
					running++
					f := 1.0
					if running > c.knee {
						f = math.Pow(float64(running)/float64(c.knee), c.power)
					}
					d := time.Duration(c.serviceMs * f * float64(time.Millisecond))
					heap.Push(&pending, event{at: clk.Now().Add(d), t: tk})
				}
			}
			// a backlog that never runs out
			for range 4 * c.m {
				require.NoError(t, q.Push(ticket(0)))
			}
			start()
			var limits []int
			for range 8000 {
				ev := heap.Pop(&pending).(event)
				clk.Set(ev.at)
				running--
				q.Done(ev.t)
				require.NoError(t, q.Push(ticket(0)))
				start()
				limits = append(limits, rec.Limits()[0])
			}
			// after the first half, the limit stays within 1 of the knee
			for _, l := range limits[len(limits)/2:] {
				require.GreaterOrEqual(t, l, c.knee-1)
				require.LessOrEqual(t, l, c.knee+1)
			}
		})
	}
}
