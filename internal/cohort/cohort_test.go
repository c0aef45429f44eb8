package cohort_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/queue"
)

// safety bounds every blocking wait; it never judges speed.
const safety = 10 * time.Second

// clock is an injected clock the test moves; tickets are pushed with their
// arrival on it as Key, as the queue does with the real clock.
type clock struct{ ns atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

type env struct {
	t *testing.T
	q *queue.Queue
	s *cohort.Scheduler
	c *clock
	// rec records every grant; byValue finds a ticket by its value.
	rec     *recorder
	byValue map[any]*queue.Ticket
}

// recorder is the cohort scheduler with its grants recorded (the queue
// calls it under its lock; single-goroutine tests read it after the call
// that caused the grant returned).
type recorder struct {
	*cohort.Scheduler
	granted []any
}

func (r *recorder) Granted(t *queue.Ticket) {
	r.granted = append(r.granted, t.Value)
	r.Scheduler.Granted(t)
}

func newEnv(t *testing.T, m, capacity int, mod func(*cohort.Config)) *env {
	t.Helper()
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	cfg := cohort.DefaultConfig()
	cfg.Enabled, cfg.Capacity, cfg.MaxWait, cfg.Now = true, capacity, time.Hour, c.now
	if mod != nil {
		mod(&cfg)
	}
	s, err := cohort.New(cfg)
	require.NoError(t, err)
	rec := &recorder{Scheduler: s}
	q, err := queue.New(queue.Config{Concurrency: m, Limit: 1 << 12, Scheduler: rec})
	require.NoError(t, err)
	return &env{t: t, q: q, s: s, c: c, rec: rec, byValue: map[any]*queue.Ticket{}}
}

// push queues a ticket named v with key k and priority p.
func (e *env) push(v, k string, p int) *queue.Ticket {
	e.t.Helper()
	tk := queue.NewTicket(v, false)
	tk.Affinity, tk.Priority = k, p
	tk.Key = e.c.now().UnixNano()
	e.c.advance(time.Nanosecond) // distinct arrival times
	e.byValue[v] = tk
	require.NoError(e.t, e.q.Push(tk))
	return tk
}

// last is the ticket granted most recently.
func (e *env) last() *queue.Ticket {
	e.t.Helper()
	require.NotEmpty(e.t, e.rec.granted)
	return e.byValue[e.rec.granted[len(e.rec.granted)-1]]
}

// run pushes a ticket for key k, requires it to be granted at once, and
// finishes it.
func (e *env) run(v, k string) {
	e.t.Helper()
	tk := e.push(v, k, 0)
	require.Equal(e.t, v, e.last().Value, "%s granted at once", v)
	e.q.Done(tk)
}

// order finishes cur and then each ticket granted in turn (m = 1), until
// n more have been granted, and returns their values in grant order.
func (e *env) order(cur *queue.Ticket, n int) []any {
	e.t.Helper()
	for range n {
		before := len(e.rec.granted)
		e.q.Done(cur)
		require.Greater(e.t, len(e.rec.granted), before, "nothing granted after %v", cur.Value)
		cur = e.last()
	}
	e.q.Done(cur)
	return append([]any(nil), e.rec.granted[len(e.rec.granted)-n:]...)
}

// TestCachedFirstThenArrivalOrder: the in-cache cohort (and unkeyed
// requests) before the out-of-cache one, each in arrival order.
func TestCachedFirstThenArrivalOrder(t *testing.T) {
	e := newEnv(t, 1, 10, nil)
	e.run("warmA", "A") // the model holds A
	hold := e.push("hold", "", 0)
	e.push("b", "B", 0)
	e.push("a", "A", 0)
	e.push("c", "C", 0)
	e.push("u", "", 0)
	e.push("a2", "A", 0)
	assert.Equal(t, []any{"a", "u", "a2", "b", "c"}, e.order(hold, 5))
	st := e.s.Stats()
	assert.Equal(t, uint64(3), st.Misses, "warmA, b, c")
	assert.Equal(t, uint64(2), st.Hits, "a, a2")
	assert.Equal(t, uint64(3), st.Picks[cohort.ClassUncached], "warmA, b, c")
}

// TestOneKeyNeverRunsTwice: a ticket whose key is running waits even with
// a slot free; it is granted when its key's request finishes.
func TestOneKeyNeverRunsTwice(t *testing.T) {
	e := newEnv(t, 3, 10, nil)
	a1 := e.push("a1", "A", 0)
	e.push("a2", "A", 0)
	b := e.push("b", "B", 0)
	assert.Equal(t, []any{"a1", "b"}, e.rec.granted)
	assert.Equal(t, 1, e.q.Waiting(), "a2 waits")
	assert.Equal(t, 2, e.q.InFlight(), "one slot left idle")
	assert.Positive(t, e.s.Stats().Holds)
	e.q.Done(b)
	assert.Equal(t, 1, e.q.Waiting(), "b's end does not free A")
	e.q.Done(a1)
	assert.Equal(t, "a2", e.last().Value)
	e.q.Done(e.last())
	assert.Equal(t, 0, e.q.Load())
}

// TestOneKeyNeverRunsTwiceProperty: many owners with random keys on random
// m; at no moment do two requests of one key hold slots, and every ticket
// is served exactly once.
func TestOneKeyNeverRunsTwiceProperty(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		rng := rand.New(rand.NewPCG(seed, 3))
		m := 1 + rng.IntN(4)
		e := newEnv(t, m, 1+rng.IntN(5), func(c *cohort.Config) { c.Now = time.Now })
		var mu sync.Mutex
		running := map[string]int{}
		served := map[int]int{}
		maxInFlight := 0
		keys := make([]string, 80)
		for i := range keys {
			if rng.IntN(5) > 0 {
				keys[i] = fmt.Sprintf("k%d", rng.IntN(6))
			}
		}
		var wg sync.WaitGroup
		for i := range keys {
			wg.Go(func() {
				tk := queue.NewTicket(i, false)
				tk.Affinity = keys[i]
				require.NoError(t, e.q.Push(tk))
				ctx, cancel := context.WithTimeout(context.Background(), safety)
				o, err := e.q.Wait(ctx, tk)
				cancel()
				require.NoError(t, err)
				require.Equal(t, queue.Granted, o.Kind)
				mu.Lock()
				if k := keys[i]; k != "" {
					running[k]++
					require.Equal(t, 1, running[k], "seed %d: key %s runs twice", seed, k)
				}
				served[i]++
				maxInFlight = max(maxInFlight, e.q.InFlight())
				mu.Unlock()
				time.Sleep(time.Duration(rng2(i)) * 100 * time.Microsecond)
				mu.Lock()
				if k := keys[i]; k != "" {
					running[k]--
				}
				mu.Unlock()
				e.q.Done(tk)
			})
		}
		wg.Wait()
		require.Len(t, served, len(keys))
		for i, n := range served {
			require.Equal(t, 1, n, "seed %d: ticket %d served %d times", seed, i, n)
		}
		assert.LessOrEqual(t, maxInFlight, m)
		assert.Equal(t, 0, e.q.Load())
	}
}

// rng2 is a deterministic small number per ticket (the goroutines must not
// share the test's rng).
func rng2(i int) int { return (i*7 + 3) % 5 }

// TestEvictionOrder: idle entries first, least recently finished first;
// then the busy entry (tickets wait for it) that finished most recently;
// never a running one.
func TestEvictionOrder(t *testing.T) {
	e := newEnv(t, 2, 3, func(c *cohort.Config) { c.MaxWait = time.Second })
	for _, k := range []string{"A", "B", "C"} {
		e.run("load"+k, k)
	}
	assert.Equal(t, []string{"A", "B", "C"}, e.s.Cached())

	// D misses with all three idle: A (least recently finished) goes.
	e.run("d", "D")
	assert.Equal(t, []string{"B", "C", "D"}, e.s.Cached())
	// Finish C after D: the order by finish is now B, D, C.
	e.run("c0", "C")
	assert.Equal(t, []string{"B", "D", "C"}, e.s.Cached())

	// B runs and an unkeyed ticket holds the other slot. Tickets then wait
	// for X (a miss), C and D (busy entries); X waited longest.
	b := e.push("b", "B", 0)
	h := e.push("h", "", 0)
	x := e.push("x", "X", 0)
	e.push("c", "C", 0)
	e.push("dd", "D", 0)
	require.Equal(t, "h", e.last().Value)
	e.c.advance(2 * time.Second) // x is starved: it goes next
	e.q.Done(h)
	require.Equal(t, "x", e.last().Value)
	// The model was full of B (running), D and C (both busy; C finished
	// last): no idle entry, so C, the most recently finished busy one,
	// went. B never does: it runs.
	assert.Equal(t, []string{"B", "D", "X"}, e.s.Cached())
	assert.Equal(t, uint64(2), e.s.Stats().Evictions)
	e.q.Done(b)
	e.q.Done(x)
}

// TestRunningEntryNeverEvicted: with capacity below m, every cached key
// running, a miss makes the model hold more than its capacity rather than
// evict a running key; it shrinks back on the next miss.
func TestRunningEntryNeverEvicted(t *testing.T) {
	e := newEnv(t, 2, 1, nil)
	a := e.push("a", "A", 0)
	b := e.push("b", "B", 0)
	assert.Equal(t, []any{"a", "b"}, e.rec.granted)
	assert.ElementsMatch(t, []string{"A", "B"}, e.s.Cached())
	e.q.Done(a)
	e.q.Done(b)
	e.run("c", "C")
	assert.Equal(t, []string{"C"}, e.s.Cached(), "idle A and B evicted until under capacity")
}

// TestStarvationBound: a ticket waiting longer than MaxWait goes next,
// before cached and high-priority ones; the oldest starved one first.
func TestStarvationBound(t *testing.T) {
	e := newEnv(t, 1, 10, func(c *cohort.Config) { c.MaxWait = time.Second })
	e.run("warm", "A")
	hold := e.push("hold", "", 0)
	e.push("u1", "U1", 0)
	e.push("u2", "U2", 0)
	e.c.advance(2 * time.Second) // u1 and u2 have waited 2 s
	e.push("a", "A", 0)
	e.push("p", "P", 1)
	// u1 then u2 are starved; then p (priority) and a (cached).
	assert.Equal(t, []any{"u1", "u2", "p", "a"}, e.order(hold, 4))
	assert.Equal(t, uint64(2), e.s.Stats().Picks[cohort.ClassStarved])
}

// TestStarvationBoundUnderCachedStream: an uncached request is not
// starved by a stream of cached ones: it runs as soon as it has waited
// MaxWait, and not before.
func TestStarvationBoundUnderCachedStream(t *testing.T) {
	e := newEnv(t, 1, 10, func(c *cohort.Config) { c.MaxWait = time.Second })
	e.run("warm", "A")
	cur := e.push("a0", "A", 0)
	u := e.push("u", "U", 0)
	for i := 1; ; i++ {
		require.Less(t, i, 100, "u never ran")
		// A cached request arrives before each slot frees, 100 ms apart.
		e.push(fmt.Sprintf("a%d", i), "A", 0)
		e.c.advance(100 * time.Millisecond)
		e.q.Done(cur)
		if cur = e.last(); cur == u {
			break
		}
	}
	age := time.Duration(e.c.now().UnixNano() - u.Key)
	assert.Greater(t, age, time.Second, "not before the bound")
	assert.Less(t, age-100*time.Millisecond, time.Second, "at the first slot after the bound")
	assert.Equal(t, uint64(1), e.s.Stats().Picks[cohort.ClassStarved])
	e.q.Done(u)
}

// TestPriorityClass: a high-priority request goes before cached ones,
// whether or not its key is cached; a higher class before a lower one.
func TestPriorityClass(t *testing.T) {
	e := newEnv(t, 1, 10, nil)
	e.run("warm", "A")
	hold := e.push("hold", "", 0)
	e.push("a", "A", 0)
	e.push("p1", "P", 1)
	e.push("p2", "Q", 2)
	e.push("p1b", "", 1)
	assert.Equal(t, []any{"p2", "p1", "p1b", "a"}, e.order(hold, 4))
}

func TestConfigAndPriorityRule(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*cohort.Config)
		err  string
	}{
		// The defaults are valid.
		{"default", func(*cohort.Config) {}, ""},
		// A cache of no keys is refused.
		{"capacity", func(c *cohort.Config) { c.Capacity = 0 }, "--cohort-cache"},
		// The starvation bound cannot be switched off.
		{"max wait", func(c *cohort.Config) { c.MaxWait = 0 }, "--cohort-max-wait"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cohort.DefaultConfig()
			tc.mod(&c)
			_, err := cohort.New(c)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	for _, tc := range []struct {
		name, in string
		header   http.Header
		want     int
		err      bool
	}{
		// No rule: nothing is high priority.
		{"none", "", http.Header{"X-Priority": {"high"}}, 0, false},
		// A header alone: present with any value.
		{"present", "x-priority", http.Header{"X-Priority": {"yes"}}, 1, false},
		// Absent.
		{"absent", "X-Priority", http.Header{}, 0, false},
		// With a value: only that value.
		{"value", "X-Priority=high", http.Header{"X-Priority": {"high"}}, 1, false},
		{"other value", "X-Priority=high", http.Header{"X-Priority": {"low"}}, 0, false},
		// A bad header name is refused.
		{"bad", "=high", nil, 0, true},
	} {
		t.Run("priority "+tc.name, func(t *testing.T) {
			r, err := cohort.ParsePriority(tc.in)
			if tc.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, r.Of(tc.header))
			if tc.in != "" {
				again, err := cohort.ParsePriority(r.String())
				require.NoError(t, err)
				assert.Equal(t, r, again)
			}
		})
	}
}

// TestReleasedUnknownPanics: a programming error is loud.
func TestReleasedUnknownPanics(t *testing.T) {
	s, err := cohort.New(cohort.DefaultConfig())
	require.NoError(t, err)
	tk := queue.NewTicket("x", false)
	tk.Affinity = "K"
	assert.PanicsWithValue(t, cohort.ErrNotGranted, func() { s.Released(tk) })
}
