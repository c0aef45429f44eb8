package queue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// safety bounds every blocking call in these tests so a bug hangs a test for
// at most this long instead of until the go test timeout. It is never used to
// judge speed.
const safety = 5 * time.Second

// newQueue returns a queue with cfg or fails the test.
func newQueue(t testing.TB, cfg queue.Config) *queue.Queue {
	t.Helper()
	q, err := queue.New(cfg)
	require.NoError(t, err)
	return q
}

// cfgM is a queue configuration with m slots, a large limit and no timeout.
func cfgM(m int) queue.Config {
	return queue.Config{Concurrency: m, Limit: 1 << 16}
}

// push creates a ticket with value v and pushes it, failing on error.
func push(t testing.TB, q *queue.Queue, v any, transferable bool) *queue.Ticket {
	t.Helper()
	tk := queue.NewTicket(v, transferable)
	require.NoError(t, q.Push(tk), "push %v", v)
	return tk
}

// pushKey is push with an explicit ordering key.
func pushKey(t testing.TB, q *queue.Queue, v any, key int64, transferable bool) *queue.Ticket {
	t.Helper()
	tk := queue.NewTicket(v, transferable)
	tk.Key = key
	require.NoError(t, q.Push(tk), "push %v", v)
	return tk
}

// waitFor waits for a ticket whose outcome is already decided (it must not
// block) and returns the outcome, failing on error.
func waitFor(t testing.TB, q *queue.Queue, tk *queue.Ticket) queue.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	o, err := q.Wait(ctx, tk)
	require.NoError(t, err, "wait %v", tk.Value)
	return o
}

// requireGranted checks that tk was granted a slot.
func requireGranted(t testing.TB, q *queue.Queue, tk *queue.Ticket) {
	t.Helper()
	require.Equal(t, queue.Outcome{Kind: queue.Granted}, waitFor(t, q, tk), "ticket %v", tk.Value)
}

// requireTransfer checks that tk was handed off to peer.
func requireTransfer(t testing.TB, q *queue.Queue, tk *queue.Ticket, peer string) {
	t.Helper()
	o := waitFor(t, q, tk)
	require.False(t, o.At.IsZero(), "a hand-off carries its decision time")
	o.At = time.Time{}
	require.Equal(t, queue.Outcome{Kind: queue.Transfer, Peer: peer}, o, "ticket %v", tk.Value)
}

// requireCounts checks the lock-free counters at a quiescent point.
func requireCounts(t testing.TB, q *queue.Queue, waiting, inFlight int) {
	t.Helper()
	require.Equal(t, waiting, q.Waiting(), "Waiting")
	require.Equal(t, inFlight, q.InFlight(), "InFlight")
	require.Equal(t, waiting+inFlight, q.Load(), "Load")
}

// snapshot is q.Snapshot with a concrete element type for comparisons.
func snapshot(q *queue.Queue) []string {
	out := []string{}
	for _, v := range q.Snapshot() {
		out = append(out, v.(string))
	}
	return out
}

// waitAsync runs Wait in a goroutine and delivers its result.
type waitResult struct {
	o   queue.Outcome
	err error
}

func waitAsync(ctx context.Context, q *queue.Queue, tk *queue.Ticket) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		o, err := q.Wait(ctx, tk)
		ch <- waitResult{o, err}
	}()
	return ch
}

// recv takes a result from ch within the safety bound.
func recv[T any](t testing.TB, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(safety):
		require.FailNow(t, "no result within the safety bound")
		panic("unreachable")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     queue.Config
		wantErr string // substring; empty means valid
	}{
		// The documented defaults are valid.
		{"defaults", queue.DefaultConfig(), ""},
		// A zero timeout means "no limit" and is valid.
		{"no timeout", queue.Config{Concurrency: 1, Limit: 1}, ""},
		{"zero concurrency", queue.Config{Concurrency: 0, Limit: 1}, "concurrency must be at least 1, got 0"},
		{"zero limit", queue.Config{Concurrency: 1, Limit: 0}, "queue limit must be at least 1, got 0"},
		{"negative timeout", queue.Config{Concurrency: 1, Limit: 1, Timeout: -time.Second}, "must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			q, nerr := queue.New(tc.cfg)
			if tc.wantErr == "" {
				require.NoError(t, err)
				require.NoError(t, nerr)
				assert.Equal(t, tc.cfg, q.Config())
				assert.Equal(t, tc.cfg.Concurrency, q.Concurrency())
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
			require.ErrorContains(t, nerr, tc.wantErr)
			assert.Nil(t, q)
		})
	}
}

func TestFIFOGrantOrder(t *testing.T) {
	tests := []struct {
		name string
		m, n int
	}{
		// One slot: strictly one after another.
		{"m=1", 1, 6},
		// Several slots: the first m are granted at once, the rest in order.
		{"m=3", 3, 10},
		// More slots than tickets: everything is granted at push.
		{"m>n", 8, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(tc.m))
			var tks []*queue.Ticket
			var want []string
			for i := range tc.n {
				v := fmt.Sprintf("t%02d", i)
				tks = append(tks, push(t, q, v, true))
				want = append(want, v)
			}
			granted := min(tc.m, tc.n)
			// Push grants immediately while a slot is free.
			for _, tk := range tks[:granted] {
				requireGranted(t, q, tk)
			}
			require.Equal(t, want[granted:], snapshot(q))
			requireCounts(t, q, tc.n-granted, granted)

			// Done on the oldest in service grants the next head, in order.
			for i := 0; i < tc.n; i++ {
				q.Done(tks[i])
				if next := i + tc.m; next < tc.n {
					requireGranted(t, q, tks[next])
					require.Equal(t, want[next+1:], snapshot(q))
				}
				require.LessOrEqual(t, q.InFlight(), tc.m)
			}
			requireCounts(t, q, 0, 0)
		})
	}
}

func TestPushGrantsImmediatelyWhenSlotFree(t *testing.T) {
	q := newQueue(t, cfgM(2))
	a := push(t, q, "a", true)
	// The outcome is decided inside Push: Wait with an already-cancelled
	// context still reports the grant.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o, err := q.Wait(ctx, a)
	require.NoError(t, err)
	require.Equal(t, queue.Granted, o.Kind)
	requireCounts(t, q, 0, 1)
	assert.False(t, a.Pushed().IsZero(), "Pushed is set")
	q.Done(a)
	requireCounts(t, q, 0, 0)
}

func TestDoneGrantsNextHead(t *testing.T) {
	q := newQueue(t, cfgM(1))
	a := push(t, q, "a", true)
	b := push(t, q, "b", true)
	c := push(t, q, "c", true)
	requireGranted(t, q, a)

	// b blocks in Wait until a is done.
	res := waitAsync(context.Background(), q, b)
	require.Equal(t, []string{"b", "c"}, snapshot(q))
	q.Done(a)
	r := recv(t, res)
	require.NoError(t, r.err)
	require.Equal(t, queue.Granted, r.o.Kind)
	require.Equal(t, []string{"c"}, snapshot(q))
	requireCounts(t, q, 1, 1)

	q.Done(b)
	requireGranted(t, q, c)
	q.Done(c)
	requireCounts(t, q, 0, 0)
}

func TestPushErrors(t *testing.T) {
	q := newQueue(t, cfgM(1))
	a := push(t, q, "a", true)
	// A ticket can be pushed only once, whatever its state.
	err := q.Push(a)
	require.ErrorContains(t, err, "already pushed")
	require.NotErrorIs(t, err, queue.ErrQueueFull)
	requireGranted(t, q, a)
	q.Done(a)
	require.ErrorContains(t, q.Push(a), "already pushed")
	requireCounts(t, q, 0, 0)
}

func TestQueueFull(t *testing.T) {
	tests := []struct {
		name     string
		m, limit int
	}{
		// The smallest queue: one in service, one waiting.
		{"m=1 limit=1", 1, 1},
		// Slots do not count against the waiting limit.
		{"m=2 limit=3", 2, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, queue.Config{Concurrency: tc.m, Limit: tc.limit})
			var tks []*queue.Ticket
			for i := range tc.m + tc.limit {
				tks = append(tks, push(t, q, fmt.Sprint(i), true))
			}
			requireCounts(t, q, tc.limit, tc.m)

			extra := queue.NewTicket("extra", true)
			err := q.Push(extra)
			require.ErrorIs(t, err, queue.ErrQueueFull)
			require.ErrorContains(t, err, fmt.Sprintf("(%d waiting)", tc.limit), "the error says how many wait")
			requireCounts(t, q, tc.limit, tc.m)

			// A refused ticket is not in the queue and may be pushed again
			// once there is room.
			q.Done(tks[0])
			require.NoError(t, q.Push(extra))
			requireCounts(t, q, tc.limit, tc.m)
		})
	}
}

func TestPutBackAdmittedWhenFull(t *testing.T) {
	q := newQueue(t, queue.Config{Concurrency: 1, Limit: 2})
	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	b := push(t, q, "b", true)
	require.Equal(t, 1, q.HandOff(1, "peer"))
	requireTransfer(t, q, b, "peer")
	c := push(t, q, "c", true) // takes b's room
	require.ErrorIs(t, q.Push(queue.NewTicket("d", true)), queue.ErrQueueFull)

	require.NoError(t, q.PutBack(b), "put-back ignores the limit")
	require.Equal(t, []string{"a", "b", "c"}, snapshot(q), "b is back at its place, before c")
	requireCounts(t, q, 3, 1)

	for _, tk := range []*queue.Ticket{g, a, b, c} {
		requireGranted(t, q, tk)
		q.Done(tk)
	}
	requireCounts(t, q, 0, 0)
}

func TestPutBackAdmittedWhenDraining(t *testing.T) {
	q := newQueue(t, cfgM(1))
	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	b := push(t, q, "b", true)
	require.Equal(t, 1, q.HandOff(1, "peer"))
	requireTransfer(t, q, b, "peer")

	q.Drain()
	require.ErrorIs(t, q.Push(queue.NewTicket("x", true)), queue.ErrDraining)
	require.NoError(t, q.PutBack(b))
	require.Equal(t, []string{"a", "b"}, snapshot(q))

	for _, tk := range []*queue.Ticket{g, a, b} {
		requireGranted(t, q, tk)
		q.Done(tk)
	}
	requireCounts(t, q, 0, 0)
}

func TestPutBackErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, q *queue.Queue) *queue.Ticket
	}{
		// A ticket never pushed has no place to return to.
		{"new", func(t *testing.T, q *queue.Queue) *queue.Ticket { return queue.NewTicket("x", true) }},
		// A granted ticket holds a slot; it was not handed off.
		{"granted", func(t *testing.T, q *queue.Queue) *queue.Ticket { return push(t, q, "x", true) }},
		// A waiting ticket is still in the queue.
		{"waiting", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			push(t, q, "g", true)
			return push(t, q, "x", true)
		}},
		// A ticket put back once is waiting again and cannot be put back twice.
		{"put back twice", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			push(t, q, "g", true)
			x := push(t, q, "x", true)
			require.Equal(t, 1, q.HandOff(1, "p"))
			requireTransfer(t, q, x, "p")
			require.NoError(t, q.PutBack(x))
			return x
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			tk := tc.setup(t, q)
			w, f := q.Waiting(), q.InFlight()
			require.ErrorContains(t, q.PutBack(tk), "not handed off")
			require.ErrorContains(t, q.PutBackLocal(tk), "not handed off")
			requireCounts(t, q, w, f)
		})
	}
}

func TestTimeout(t *testing.T) {
	const timeout = 50 * time.Millisecond
	q := newQueue(t, queue.Config{Concurrency: 1, Limit: 8, Timeout: timeout})
	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	requireGranted(t, q, g)

	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	o, err := q.Wait(ctx, a)
	require.ErrorIs(t, err, queue.ErrQueueTimeout)
	require.NotErrorIs(t, err, queue.ErrClientGone)
	require.Zero(t, o)
	// The timed-out ticket is gone: not waiting, and never granted later.
	requireCounts(t, q, 0, 1)
	require.Empty(t, snapshot(q))
	b := push(t, q, "b", true)
	q.Done(g)
	requireGranted(t, q, b)
	requireCounts(t, q, 0, 1)
	q.Done(b)
	requireCounts(t, q, 0, 0)
	assert.Panics(t, func() { q.Done(a) }, "a was never granted")
}

func TestTimeoutDoesNotAffectGranted(t *testing.T) {
	// A granted ticket's deadline passing does not take its slot away: Wait
	// reports the grant even if the deadline has passed by then.
	q := newQueue(t, queue.Config{Concurrency: 1, Limit: 8, Timeout: time.Nanosecond})
	for range 50 {
		a := push(t, q, "a", true)
		requireGranted(t, q, a)
		requireCounts(t, q, 0, 1)
		q.Done(a)
	}
	requireCounts(t, q, 0, 0)
}

func TestTimeoutAfterPutBack(t *testing.T) {
	// A put-back ticket keeps its first deadline and still times out.
	q := newQueue(t, queue.Config{Concurrency: 1, Limit: 8, Timeout: 50 * time.Millisecond})
	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	require.Equal(t, 1, q.HandOff(1, "p"))
	requireTransfer(t, q, a, "p")
	require.NoError(t, q.PutBack(a))

	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	_, err := q.Wait(ctx, a)
	require.ErrorIs(t, err, queue.ErrQueueTimeout)
	requireCounts(t, q, 0, 1)
	q.Done(g)
	requireCounts(t, q, 0, 0)
}

var errCustomCause = errors.New("custom cause")

func TestCancel(t *testing.T) {
	tests := []struct {
		name string
		// ctx returns the context to Wait with and a function that ends it
		// (nil when it ends by itself).
		ctx       func(t *testing.T) (context.Context, func())
		wantCause error
		// before: end the context before Wait rather than while it blocks.
		before bool
	}{
		// A plain cancel before Wait: the cause is context.Canceled.
		{"cancel before wait", withCancel, context.Canceled, true},
		// A cancel while Wait blocks (or is about to).
		{"cancel during wait", withCancel, context.Canceled, false},
		// A cancel with a cause: the cause is wrapped, not just Canceled.
		{"cancel cause", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithCancelCause(context.Background())
			t.Cleanup(func() { cancel(nil) })
			return ctx, func() { cancel(errCustomCause) }
		}, errCustomCause, false},
		// A client deadline is a client going away too.
		{"client deadline", func(t *testing.T) (context.Context, func()) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			t.Cleanup(cancel)
			return ctx, nil
		}, context.DeadlineExceeded, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			g := push(t, q, "g", true)
			requireGranted(t, q, g)
			a := push(t, q, "a", true)
			b := push(t, q, "b", true)

			ctx, end := tc.ctx(t)
			if tc.before {
				end()
			}
			res := waitAsync(ctx, q, a)
			if !tc.before && end != nil {
				end()
			}
			r := recv(t, res)
			require.ErrorIs(t, r.err, queue.ErrClientGone)
			require.ErrorIs(t, r.err, tc.wantCause)
			require.Zero(t, r.o)

			// a left the queue; b moves up and gets the next slot.
			requireCounts(t, q, 1, 1)
			require.Equal(t, []string{"b"}, snapshot(q))
			q.Done(g)
			requireGranted(t, q, b)
			q.Done(b)
			requireCounts(t, q, 0, 0)
			assert.Panics(t, func() { q.Done(a) }, "a was never granted")
		})
	}
}

func withCancel(t *testing.T) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx, cancel
}

func TestCancelAfterDecisionReportsOutcome(t *testing.T) {
	// An outcome decided before the owner looks is never lost to a cancel:
	// Wait with a dead context still reports it (both select branches are
	// ready; repeat so both are taken).
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name   string
		decide func(q *queue.Queue, tk *queue.Ticket)
		want   queue.Outcome
	}{
		// Granted at push.
		{"granted", func(*queue.Queue, *queue.Ticket) {}, queue.Outcome{Kind: queue.Granted}},
		// Handed off before the owner waited.
		{"handed off", func(q *queue.Queue, _ *queue.Ticket) { q.HandOff(1, "p") }, queue.Outcome{Kind: queue.Transfer, Peer: "p"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			for range 100 {
				var g *queue.Ticket
				if tc.want.Kind == queue.Transfer {
					g = push(t, q, "g", false)
				}
				tk := push(t, q, "x", true)
				tc.decide(q, tk)
				o, err := q.Wait(dead, tk)
				require.NoError(t, err)
				o.At = time.Time{} // a hand-off's decision time
				require.Equal(t, tc.want, o)
				if g != nil {
					q.Done(g)
				} else {
					q.Done(tk)
				}
				requireCounts(t, q, 0, 0)
			}
		})
	}
}

func TestHandOff(t *testing.T) {
	tests := []struct {
		name         string
		transferable []bool // tickets t0.. pushed behind one in service
		n            int
		wantN        int
		wantTaken    []string // tail first
		wantLeft     []string
	}{
		// Takes from the tail.
		{"tail", []bool{true, true, true, true}, 2, 2, []string{"t3", "t2"}, []string{"t0", "t1"}},
		// Skips tickets that may not move.
		{"skip", []bool{true, false, true, false}, 2, 2, []string{"t2", "t0"}, []string{"t1", "t3"}},
		// Asking for more than there are returns how many moved.
		{"fewer", []bool{false, true, false}, 5, 1, []string{"t1"}, []string{"t0", "t2"}},
		// Nothing transferable.
		{"none", []bool{false, false}, 2, 0, nil, []string{"t0", "t1"}},
		// Empty queue.
		{"empty", nil, 3, 0, nil, []string{}},
		// n <= 0 moves nothing.
		{"zero", []bool{true}, 0, 0, nil, []string{"t0"}},
		{"negative", []bool{true}, -1, 0, nil, []string{"t0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			g := push(t, q, "g", true) // in service: never handed off
			byName := map[string]*queue.Ticket{}
			for i, tr := range tc.transferable {
				v := fmt.Sprintf("t%d", i)
				byName[v] = push(t, q, v, tr)
			}
			require.Equal(t, tc.wantN, q.HandOff(tc.n, "peer-1"))
			require.Equal(t, tc.wantLeft, snapshot(q))
			requireCounts(t, q, len(tc.wantLeft), 1)
			for _, v := range tc.wantTaken {
				requireTransfer(t, q, byName[v], "peer-1")
			}
			requireGranted(t, q, g)
		})
	}
}

func TestPutBackOriginalPosition(t *testing.T) {
	tests := []struct {
		name     string
		handOff  int      // taken from the tail of a b c d e
		pushMore []string // pushed while the tail is away
		putBack  []string // put back in this order
		want     []string
	}{
		// Straight back.
		{"same place", 2, nil, []string{"d", "e"}, []string{"a", "b", "c", "d", "e"}},
		// Reverse order of return does not matter.
		{"reverse", 2, nil, []string{"e", "d"}, []string{"a", "b", "c", "d", "e"}},
		// Newer tickets stay behind the returning ones.
		{"others pushed meanwhile", 2, []string{"f", "g"}, []string{"e", "d"}, []string{"a", "b", "c", "d", "e", "f", "g"}},
		// Only some return; the rest keep their relative order.
		{"partial", 3, []string{"f"}, []string{"c", "e"}, []string{"a", "b", "c", "e", "f"}},
		// The whole queue away and back.
		{"all", 5, []string{"f"}, []string{"b", "e", "a", "d", "c"}, []string{"a", "b", "c", "d", "e", "f"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			push(t, q, "in-service", true)
			byName := map[string]*queue.Ticket{}
			for _, v := range []string{"a", "b", "c", "d", "e"} {
				byName[v] = push(t, q, v, true)
			}
			require.Equal(t, tc.handOff, q.HandOff(tc.handOff, "p"))
			for _, v := range []string{"a", "b", "c", "d", "e"}[5-tc.handOff:] {
				requireTransfer(t, q, byName[v], "p")
			}
			for _, v := range tc.pushMore {
				byName[v] = push(t, q, v, true)
			}
			for _, v := range tc.putBack {
				require.NoError(t, q.PutBack(byName[v]))
			}
			require.Equal(t, tc.want, snapshot(q))
			requireCounts(t, q, len(tc.want), 1)
		})
	}
}

func TestPutBackHeadGrantedAtOnce(t *testing.T) {
	// A ticket put back into an idle queue gets a slot at once.
	q := newQueue(t, cfgM(1))
	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	require.Equal(t, 1, q.HandOff(1, "p"))
	requireTransfer(t, q, a, "p")
	q.Done(g)
	requireCounts(t, q, 0, 0)
	require.NoError(t, q.PutBack(a))
	requireGranted(t, q, a)
	requireCounts(t, q, 0, 1)
	q.Done(a)
	requireCounts(t, q, 0, 0)
}

func TestPutBackLocal(t *testing.T) {
	q := newQueue(t, cfgM(1))
	push(t, q, "g", true)
	a := push(t, q, "a", true)
	b := push(t, q, "b", true)
	require.Equal(t, 1, q.HandOff(1, "p"))
	requireTransfer(t, q, b, "p")

	require.NoError(t, q.PutBackLocal(b))
	assert.False(t, b.Transferable, "marked not transferable")
	require.Equal(t, []string{"a", "b"}, snapshot(q), "at its original place")

	// A later hand-off skips b and takes a.
	require.Equal(t, 1, q.HandOff(2, "p2"))
	requireTransfer(t, q, a, "p2")
	require.Equal(t, []string{"b"}, snapshot(q))
	require.Equal(t, 0, q.HandOff(1, "p3"))
}

func TestKeyOrdering(t *testing.T) {
	tests := []struct {
		name string
		keys []int64 // pushed in this order as k<key>#<index>
		want []string
	}{
		// Lower keys go first regardless of push order.
		{"by key", []int64{300, 100, 200}, []string{"100#1", "200#2", "300#0"}},
		// Equal keys keep push order.
		{"ties by push order", []int64{5, 5, 1, 5}, []string{"1#2", "5#0", "5#1", "5#3"}},
		// Negative keys are valid and order first.
		{"negative", []int64{10, -10}, []string{"-10#1", "10#0"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			push(t, q, "in-service", true)
			for i, k := range tc.keys {
				pushKey(t, q, fmt.Sprintf("%d#%d", k, i), k, true)
			}
			require.Equal(t, tc.want, snapshot(q))
		})
	}
}

// nextNano spins until the wall clock has moved past ns, so the next default
// key is strictly greater. It does not judge speed.
func nextNano(t *testing.T, ns int64) {
	t.Helper()
	require.Eventually(t, func() bool { return time.Now().UnixNano() > ns }, safety, time.Microsecond)
}

func TestKeyByArrivalTime(t *testing.T) {
	// A transferred request pushed with its original arrival time as key
	// lands among local tickets by age.
	q := newQueue(t, cfgM(1))
	push(t, q, "in-service", true)
	a := push(t, q, "a", true)
	require.NotZero(t, a.Key, "a zero key becomes the push time")
	// The key is the push time on a monotonic clock anchored to the wall
	// clock at process start: equal to the wall clock up to its steps.
	require.InDelta(t, a.Pushed().UnixNano(), a.Key, float64(time.Millisecond))
	nextNano(t, a.Key)
	b := push(t, q, "b", true)
	require.Greater(t, b.Key, a.Key)
	nextNano(t, b.Key)
	c := push(t, q, "c", true)

	pushKey(t, q, "arrived with a", a.Key, true)    // same age as a: after it
	pushKey(t, q, "oldest", a.Key-1, true)          // older than all
	pushKey(t, q, "between b and c", b.Key+1, true) // b.Key < key <= c.Key
	pushKey(t, q, "newest", time.Now().Add(time.Hour).UnixNano(), true)
	want := []string{"oldest", "a", "arrived with a", "b", "between b and c", "c", "newest"}
	if b.Key+1 == c.Key {
		// Same key as c, pushed after it.
		want = []string{"oldest", "a", "arrived with a", "b", "c", "between b and c", "newest"}
	}
	require.Equal(t, want, snapshot(q))

	// Hand-off and put-back keep the key.
	require.Equal(t, 7, q.HandOff(7, "p"))
	for _, tk := range []*queue.Ticket{a, b, c} {
		requireTransfer(t, q, tk, "p")
		require.NoError(t, q.PutBack(tk))
	}
	require.Equal(t, []string{"a", "b", "c"}, snapshot(q))
}

func TestCounters(t *testing.T) {
	// Load, Waiting and InFlight agree with the queue at every quiescent point.
	q := newQueue(t, queue.Config{Concurrency: 2, Limit: 16, Timeout: 0})
	requireCounts(t, q, 0, 0)
	var tks []*queue.Ticket
	for i := range 5 {
		tks = append(tks, push(t, q, fmt.Sprint(i), true))
		requireCounts(t, q, max(0, i+1-2), min(i+1, 2))
	}
	requireGranted(t, q, tks[0])
	requireGranted(t, q, tks[1])

	q.Done(tks[0]) // grants 2
	requireCounts(t, q, 2, 2)
	requireGranted(t, q, tks[2])

	require.Equal(t, 1, q.HandOff(1, "p")) // takes 4
	requireCounts(t, q, 1, 2)
	requireTransfer(t, q, tks[4], "p")
	requireCounts(t, q, 1, 2)

	require.NoError(t, q.PutBack(tks[4]))
	requireCounts(t, q, 2, 2)

	dead, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := q.Wait(dead, tks[3])
	require.ErrorIs(t, err, queue.ErrClientGone)
	requireCounts(t, q, 1, 2)

	q.Done(tks[1]) // grants 4
	requireGranted(t, q, tks[4])
	requireCounts(t, q, 0, 2)
	q.Done(tks[2])
	q.Done(tks[4])
	requireCounts(t, q, 0, 0)
}

func TestSetConcurrency(t *testing.T) {
	q := newQueue(t, cfgM(1))
	var tks []*queue.Ticket
	for i := range 6 {
		tks = append(tks, push(t, q, fmt.Sprint(i), true))
	}
	requireCounts(t, q, 5, 1)

	// Raising m grants the newly free slots in order.
	require.NoError(t, q.SetConcurrency(4))
	require.Equal(t, 4, q.Concurrency())
	for _, tk := range tks[:4] {
		requireGranted(t, q, tk)
	}
	require.Equal(t, []string{"4", "5"}, snapshot(q))
	requireCounts(t, q, 2, 4)

	// Lowering m takes no slot away, but no new grant until below it.
	require.NoError(t, q.SetConcurrency(2))
	require.Equal(t, 2, q.Concurrency())
	requireCounts(t, q, 2, 4)
	q.Done(tks[0])
	q.Done(tks[1])
	requireCounts(t, q, 2, 2)
	q.Done(tks[2])
	requireGranted(t, q, tks[4])
	requireCounts(t, q, 1, 2)

	// Invalid values are refused and change nothing.
	require.ErrorContains(t, q.SetConcurrency(0), "at least 1")
	require.Equal(t, 2, q.Concurrency())

	q.Done(tks[3])
	requireGranted(t, q, tks[5])
	q.Done(tks[4])
	q.Done(tks[5])
	requireCounts(t, q, 0, 0)
}

func TestDrain(t *testing.T) {
	q := newQueue(t, cfgM(1))
	require.False(t, q.Draining())
	require.ErrorContains(t, q.WaitIdle(context.Background()), "not draining", "WaitIdle before Drain")

	g := push(t, q, "g", true)
	a := push(t, q, "a", true)
	q.Drain()
	q.Drain() // idempotent
	require.True(t, q.Draining())
	err := q.Push(queue.NewTicket("late", true))
	require.ErrorIs(t, err, queue.ErrDraining)

	idle := make(chan error, 1)
	go func() { idle <- q.WaitIdle(context.Background()) }()
	requireNotIdle := func() {
		t.Helper()
		select {
		case err := <-idle:
			require.FailNow(t, "WaitIdle returned while busy", "err=%v", err)
		default:
		}
	}

	// Queued tickets keep being served during a drain.
	requireGranted(t, q, g)
	requireNotIdle()
	q.Done(g)
	requireGranted(t, q, a)
	requireNotIdle()
	q.Done(a)
	require.NoError(t, recv(t, idle))

	// Once idle, WaitIdle returns at once.
	require.NoError(t, q.WaitIdle(context.Background()))
}

func TestWaitIdle(t *testing.T) {
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		// run drives a draining queue with g in service and a waiting
		// (both transferable) towards idle.
		run func(t *testing.T, q *queue.Queue, g, a *queue.Ticket)
	}{
		// Everything served.
		{"served", func(t *testing.T, q *queue.Queue, g, a *queue.Ticket) {
			q.Done(g)
			requireGranted(t, q, a)
			q.Done(a)
		}},
		// The last waiter leaving by cancel makes the queue idle.
		{"waiter gone", func(t *testing.T, q *queue.Queue, g, a *queue.Ticket) {
			_, err := q.Wait(dead, a)
			require.ErrorIs(t, err, queue.ErrClientGone)
			q.Done(g)
		}},
		// Handed-off tickets count as gone: their owners answer them.
		{"handed off", func(t *testing.T, q *queue.Queue, g, a *queue.Ticket) {
			require.Equal(t, 1, q.HandOff(1, "p"))
			q.Done(g)
		}},
		// Evicted waiters are gone.
		{"evicted", func(t *testing.T, q *queue.Queue, g, a *queue.Ticket) {
			require.Equal(t, 1, q.Evict())
			q.Done(g)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			g := push(t, q, "g", true)
			a := push(t, q, "a", true)
			q.Drain()
			idle := make(chan error, 1)
			go func() { idle <- q.WaitIdle(context.Background()) }()
			tc.run(t, q, g, a)
			require.NoError(t, recv(t, idle))
			requireCounts(t, q, 0, 0)
		})
	}

	t.Run("context ends", func(t *testing.T) {
		q := newQueue(t, cfgM(1))
		push(t, q, "g", true)
		q.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		require.ErrorIs(t, q.WaitIdle(ctx), context.DeadlineExceeded)
		require.ErrorIs(t, q.WaitIdle(dead), context.Canceled)
	})
	t.Run("already idle", func(t *testing.T) {
		q := newQueue(t, cfgM(1))
		q.Drain()
		require.NoError(t, q.WaitIdle(context.Background()))
	})
}

func TestEvict(t *testing.T) {
	q := newQueue(t, cfgM(1))
	require.Equal(t, 0, q.Evict(), "nothing to evict")

	g := push(t, q, "g", true)
	requireGranted(t, q, g)
	a := push(t, q, "a", true)
	b := push(t, q, "b", false)
	c := push(t, q, "c", true)
	resA := waitAsync(context.Background(), q, a) // one owner is blocked in Wait
	q.Drain()

	require.Equal(t, 3, q.Evict())
	requireCounts(t, q, 0, 1) // the one in service is not touched
	require.Empty(t, snapshot(q))

	r := recv(t, resA)
	require.ErrorIs(t, r.err, queue.ErrDraining)
	require.Zero(t, r.o)
	for _, tk := range []*queue.Ticket{b, c} {
		ctx, cancel := context.WithTimeout(context.Background(), safety)
		o, err := q.Wait(ctx, tk)
		cancel()
		require.ErrorIs(t, err, queue.ErrDraining)
		require.Zero(t, o)
		assert.Panics(t, func() { q.Done(tk) }, "evicted tickets hold no slot")
	}

	q.Done(g)
	requireCounts(t, q, 0, 0)
	require.NoError(t, q.WaitIdle(context.Background()))
}

func TestEvictSeenByCancellingOwner(t *testing.T) {
	// An owner whose context ends after its ticket was evicted learns of the
	// eviction (ErrDraining), not of a client gone.
	dead, cancel := context.WithCancel(context.Background())
	cancel()
	q := newQueue(t, cfgM(1))
	push(t, q, "g", true)
	for range 50 {
		a := push(t, q, "a", true)
		require.Equal(t, 1, q.Evict())
		_, err := q.Wait(dead, a)
		require.ErrorIs(t, err, queue.ErrDraining)
		require.NotErrorIs(t, err, queue.ErrClientGone)
	}
	requireCounts(t, q, 0, 1)
}

func TestDoneWithoutSlotPanics(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, q *queue.Queue) *queue.Ticket
	}{
		// Never pushed.
		{"new", func(t *testing.T, q *queue.Queue) *queue.Ticket { return queue.NewTicket("x", true) }},
		// Still waiting behind the one in service.
		{"waiting", func(t *testing.T, q *queue.Queue) *queue.Ticket { return push(t, q, "x", true) }},
		// Handed off for transfer.
		{"handed off", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			x := push(t, q, "x", true)
			require.Equal(t, 1, q.HandOff(1, "p"))
			return x
		}},
		// Done twice.
		{"done twice", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			require.NoError(t, q.SetConcurrency(2))
			x := push(t, q, "x", true)
			requireGranted(t, q, x)
			q.Done(x)
			return x
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			g := push(t, q, "g", false)
			tk := tc.setup(t, q)
			w, f := q.Waiting(), q.InFlight()
			assert.PanicsWithValue(t, "queue: Done on a ticket that holds no slot", func() { q.Done(tk) })
			requireCounts(t, q, w, f)
			// The queue is still usable: the lock was released.
			q.Done(g)
			require.NotPanics(t, func() { q.Snapshot() })
		})
	}
}

func TestPutBackLocalFailureHasNoSideEffect(t *testing.T) {
	q := newQueue(t, cfgM(1))
	push(t, q, "g", true)
	x := push(t, q, "x", true)
	require.ErrorContains(t, q.PutBackLocal(x), "not handed off")
	assert.True(t, x.Transferable, "a refused PutBackLocal changes nothing")
	require.Equal(t, 1, q.HandOff(1, "p"), "x is still transferable")
	requireTransfer(t, q, x, "p")
}

func TestWaitHonoursContextWithoutPendingOutcome(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, q *queue.Queue) *queue.Ticket
	}{
		// Never pushed.
		{"new", func(t *testing.T, q *queue.Queue) *queue.Ticket { return queue.NewTicket("x", true) }},
		// Push refused: the ticket is not in the queue.
		{"push refused", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			push(t, q, "w", true)
			x := queue.NewTicket("x", true)
			require.ErrorIs(t, q.Push(x), queue.ErrQueueFull)
			return x
		}},
		// Served and done.
		{"done", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			require.NoError(t, q.SetConcurrency(2))
			x := push(t, q, "x", true)
			requireGranted(t, q, x)
			q.Done(x)
			return x
		}},
		// Already left by cancel (a second Wait).
		{"cancelled", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			x := queue.NewTicket("x", true)
			q2 := newQueue(t, cfgM(1))
			push(t, q2, "g2", true)
			require.NoError(t, q2.Push(x))
			dead, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := q2.Wait(dead, x)
			require.ErrorIs(t, err, queue.ErrClientGone)
			return x
		}},
		// Handed off, outcome received, not put back (a second Wait).
		{"transfer received", func(t *testing.T, q *queue.Queue) *queue.Ticket {
			x := push(t, q, "x", true)
			require.Equal(t, 1, q.HandOff(1, "p"))
			requireTransfer(t, q, x, "p")
			return x
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newQueue(t, queue.Config{Concurrency: 1, Limit: 1})
			push(t, q, "g", false)
			tk := tc.setup(t, q)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r := recv(t, waitAsync(ctx, q, tk))
			require.Error(t, r.err, "Wait returns once ctx has ended")
		})
	}
}

// OnHeadChange reports the queue getting a head where it had none and
// losing its last one, not every change of head.
func TestOnHeadChange(t *testing.T) {
	q := newQueue(t, cfgM(1))
	var calls int
	q.OnHeadChange(func() { calls++ })
	busy := push(t, q, "busy", true) // granted at once: no head
	requireGranted(t, q, busy)
	assert.Zero(t, calls, "a request in service is no head")
	moved := queue.NewTicket("moved", true)
	moved.Moved = true
	require.NoError(t, q.Push(moved))
	assert.Zero(t, calls, "a moved request is no head")
	a := push(t, q, "a", true)
	assert.Equal(t, 1, calls, "got a head")
	push(t, q, "b", true)
	assert.Equal(t, 1, calls, "a second pullable request is no news")
	require.Same(t, a, q.HandHead("peer", 1))
	assert.Equal(t, 1, calls, "the head moved on to b: no news")
	require.NotNil(t, q.HandHead("peer", 2))
	assert.Equal(t, 2, calls, "lost the last head")
	assert.Zero(t, q.HeadAge())
	assert.Nil(t, q.HandHead("peer", 3), "only the moved request waits")
}

// With an overtake function, a slot Done frees while tickets wait is held
// and handed to it: released, it goes to the head as usual; used, a pulled
// request takes it and the head keeps waiting. Without waiting tickets
// Done does not call it.
func TestOvertake(t *testing.T) {
	for _, use := range []bool{false, true} {
		t.Run(fmt.Sprintf("used=%v", use), func(t *testing.T) {
			q := newQueue(t, cfgM(1))
			holds := make(chan *queue.Hold, 2)
			q.SetOvertake(func(h *queue.Hold) { holds <- h })
			a := push(t, q, "a", true)
			requireGranted(t, q, a)
			b := push(t, q, "b", true)
			q.Done(a)
			var h *queue.Hold
			select {
			case h = <-holds:
			default:
				require.FailNow(t, "Done with a ticket waiting did not offer the slot")
			}
			assert.Equal(t, 1, q.InFlight(), "the held slot counts in flight")
			assert.Equal(t, 1, q.Waiting(), "b still waits")
			var next *queue.Ticket
			if use {
				pulled := queue.NewTicket("pulled", false)
				pulled.Moved = true
				require.NoError(t, q.PushHeld(pulled, h))
				requireGranted(t, q, pulled)
				assert.Equal(t, 1, q.Waiting(), "b waits behind the pulled request")
				next = pulled
			} else {
				require.True(t, h.Release())
				requireGranted(t, q, b)
				next = b
			}
			q.Done(next)
			if use { // b was still waiting: offered again
				h2 := <-holds
				require.True(t, h2.Release())
				requireGranted(t, q, b)
				q.Done(b)
			}
			assert.Empty(t, holds, "Done with nothing waiting offered the slot")
			assert.Zero(t, q.Load())
		})
	}
}
