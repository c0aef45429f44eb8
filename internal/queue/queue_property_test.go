package queue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// mState is a model ticket's state; the last four are terminal.
type mState int

const (
	mWaiting mState = iota
	mGranted
	mHandedOff // terminal if never put back
	mDone
	mTimedOut
	mCancelled
)

type mTicket struct {
	name         string
	tk           *queue.Ticket
	key          int64
	seq          int // order of successful pushes, the queue's tie-break
	transferable bool
	moved        bool // arrived by a transfer: never a pull's head
	st           mState
	ends         int // terminal outcomes recorded; must end at exactly 1
}

// model is a reference implementation of the queue's observable behaviour,
// driven in step with a real queue from a single goroutine.
type model struct {
	t        *testing.T
	rng      *rand.Rand
	q        *queue.Queue
	m, limit int
	// bound is what InFlight may reach: m, or more right after m was
	// lowered (SetConcurrency takes no slot away), shrinking with each Done.
	bound    int
	timeouts bool // Config.Timeout is 1ns: every waiting ticket is overdue

	all      []*mTicket
	waiting  []*mTicket // ordered by (key, seq)
	inFlight []*mTicket
	handed   []*mTicket
	// holds are the slots held for pulls (TryHold), counted in flight.
	holds  []*queue.Hold
	pulls  uint64 // pull IDs used so far
	pushes int
	grants int
	dones  int
	log    []string // operations so far, for failure messages
}

func (md *model) logf(format string, args ...any) {
	md.log = append(md.log, fmt.Sprintf(format, args...))
}

// String formats the recent operations for failure messages; testify only
// formats messages on failure, so passing md (not md.String()) is free.
func (md *model) String() string { return "ops:\n  " + fmtLines(md.log) }

func fmtLines(lines []string) string {
	if len(lines) > 30 {
		lines = append([]string{"..."}, lines[len(lines)-30:]...)
	}
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

func before(a, b *mTicket) bool { return a.key < b.key || (a.key == b.key && a.seq < b.seq) }

func (md *model) insert(mt *mTicket) {
	i := 0
	for i < len(md.waiting) && before(md.waiting[i], mt) {
		i++
	}
	md.waiting = slices.Insert(md.waiting, i, mt)
	mt.st = mWaiting
}

func (md *model) removeWaiting(mt *mTicket) {
	i := slices.Index(md.waiting, mt)
	require.GreaterOrEqual(md.t, i, 0)
	md.waiting = slices.Delete(md.waiting, i, i+1)
}

func (md *model) end(mt *mTicket, st mState) {
	mt.st = st
	mt.ends++
}

// grant hands free slots to the head, as the queue must, and checks that the
// queue granted exactly those tickets, in order.
func (md *model) grant() {
	for len(md.inFlight)+len(md.holds) < md.m && len(md.waiting) > 0 {
		mt := md.waiting[0]
		md.waiting = md.waiting[1:]
		mt.st = mGranted
		md.inFlight = append(md.inFlight, mt)
		md.grants++
		o := md.wait(context.Background(), mt)
		require.Equal(md.t, queue.Outcome{Kind: queue.Granted}, o.o, "grant of %s: %v\n%s", mt.name, o.err, md)
		require.NoError(md.t, o.err)
	}
}

func (md *model) wait(ctx context.Context, mt *mTicket) waitResult {
	ctx, cancel := context.WithTimeout(ctx, safety)
	defer cancel()
	o, err := md.q.Wait(ctx, mt.tk)
	return waitResult{o, err}
}

// check compares the queue with the model at a quiescent point.
func (md *model) check() {
	t := md.t
	want := []string{}
	for _, mt := range md.waiting {
		want = append(want, mt.name)
	}
	got := []string{}
	for _, v := range md.q.Snapshot() {
		got = append(got, v.(string))
	}
	require.Equal(t, want, got, "waiting order\n%s", md)
	// The work load index's view of the queue: the waiting tickets' costs
	// summed, and the movable ones' costs from the tail.
	var cost time.Duration
	var tail []time.Duration
	for i, mt := range md.waiting {
		cost += mt.tk.Cost
		if mt := md.waiting[len(md.waiting)-1-i]; mt.tk.Transferable {
			tail = append(tail, mt.tk.Cost)
		}
	}
	require.Equal(t, cost, md.q.WaitingCost(), "WaitingCost\n%s", md)
	require.Equal(t, tail, md.q.TailCosts(len(md.waiting)), "TailCosts\n%s", md)
	if len(tail) > 1 {
		require.Equal(t, tail[:1], md.q.TailCosts(1), "TailCosts(1)")
	}
	require.Equal(t, len(md.waiting), md.q.Waiting(), "Waiting\n%s", md)
	require.Equal(t, len(md.inFlight)+len(md.holds), md.q.InFlight(), "InFlight (holds included)\n%s", md)
	// HeadAge is the age of the first waiting ticket a pull may take.
	if h := md.head(); h == nil {
		require.Zero(t, md.q.HeadAge(), "HeadAge with no pullable ticket\n%s", md)
	} else {
		lo := time.Since(h.tk.Pushed())
		age := md.q.HeadAge()
		hi := time.Since(h.tk.Pushed())
		require.True(t, lo <= age && age <= hi, "HeadAge %s is not %s's age (%s..%s)\n%s", age, h.name, lo, hi, md)
	}
	require.Equal(t, md.q.Waiting()+md.q.InFlight(), md.q.Load(), "Load == Waiting + InFlight")
	require.Equal(t, md.m, md.q.Concurrency())
	require.LessOrEqual(t, md.q.InFlight(), md.bound, "InFlight <= m (or what it was when m was lowered)\n%s", md)
	if md.bound == md.m {
		require.LessOrEqual(t, md.q.InFlight(), md.m, "InFlight <= m")
	}
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

// head is the model's pull head: the first waiting ticket that is
// transferable and never moved.
func (md *model) head() *mTicket {
	for _, mt := range md.waiting {
		if mt.transferable && !mt.moved {
			return mt
		}
	}
	return nil
}

// pull takes the head for a peer's pull (HandHead); it must be the
// model's head, never a granted or moved ticket, and its owner must learn
// the hand-off with the pull's ID.
func (md *model) pull() {
	peer := fmt.Sprintf("p%d", md.rng.IntN(3))
	md.pulls++
	want := md.head()
	got := md.q.HandHead(peer, md.pulls)
	md.logf("pull %d by %s -> %v", md.pulls, peer, got != nil)
	if want == nil {
		require.Nil(md.t, got, "HandHead found a head the model has not\n%s", md)
		return
	}
	require.Same(md.t, want.tk, got, "HandHead took another ticket than %s\n%s", want.name, md)
	md.removeWaiting(want)
	want.st = mHandedOff
	md.handed = append(md.handed, want)
	r := md.wait(context.Background(), want)
	require.NoError(md.t, r.err, md)
	r.o.At = time.Time{}
	require.Equal(md.t, queue.Outcome{Kind: queue.Transfer, Peer: peer, PullID: md.pulls}, r.o, "%s\n%s", want.name, md)
}

// hold takes a free slot for a pull; the queue gives one exactly when a
// slot is free and nothing waits.
func (md *model) hold() {
	h := md.q.TryHold()
	md.logf("hold -> %v", h != nil)
	if len(md.waiting) > 0 || len(md.inFlight)+len(md.holds) >= md.m {
		require.Nil(md.t, h, "a hold with requests waiting or no slot free\n%s", md)
		return
	}
	require.NotNil(md.t, h, "no hold with a slot free and nothing waiting\n%s", md)
	md.holds = append(md.holds, h)
}

// endHold ends a hold: released (a miss), or used by a pulled request that
// arrives into it and is granted at once.
func (md *model) endHold() {
	i := md.rng.IntN(len(md.holds))
	h := md.holds[i]
	md.holds = slices.Delete(md.holds, i, i+1)
	_, _, ended := h.HeldFor()
	require.False(md.t, ended, "an active hold reports an end")
	if md.rng.IntN(2) == 0 {
		md.logf("release hold")
		require.True(md.t, h.Release(), md)
		require.False(md.t, h.Release(), "a second release")
		require.False(md.t, h.Used())
		d, used, ended := h.HeldFor()
		require.True(md.t, ended && !used && d >= 0, "a released hold's end")
		md.grant() // a request that arrived meanwhile takes the slot
		return
	}
	mt := &mTicket{name: fmt.Sprintf("t%d", len(md.all)), moved: true}
	mt.tk = queue.NewTicket(mt.name, false)
	mt.tk.Moved = true
	mt.tk.Key = int64(md.pushes+1) * 1000
	err := md.q.PushHeld(mt.tk, h)
	md.logf("push-held %s -> %v", mt.name, err)
	require.NoError(md.t, err, md)
	require.True(md.t, h.Used())
	require.False(md.t, h.Release(), "a used hold released")
	d, used, ended := h.HeldFor()
	require.True(md.t, ended && used && d >= 0, "a used hold's end")
	mt.key, mt.seq = mt.tk.Key, md.pushes
	md.pushes++
	md.all = append(md.all, mt)
	mt.st = mGranted
	md.inFlight = append(md.inFlight, mt)
	md.grants++
	o := md.wait(context.Background(), mt)
	require.NoError(md.t, o.err)
	require.Equal(md.t, queue.Outcome{Kind: queue.Granted}, o.o, md)
}

func (md *model) push() {
	mt := &mTicket{name: fmt.Sprintf("t%d", len(md.all)), transferable: md.rng.IntN(10) < 7}
	mt.tk = queue.NewTicket(mt.name, mt.transferable)
	mt.tk.Cost = time.Duration(len(md.all)+1) * time.Millisecond // distinct, drawn from no random source
	if md.rng.IntN(5) == 0 {                                     // arrived by a transfer (and may move on with hops left)
		mt.moved, mt.tk.Moved = true, true
	}
	switch r := md.rng.IntN(10); {
	case r < 2: // default: push time
	case r < 4 && len(md.all) > 0: // arrived about when another did
		mt.tk.Key = pick(md.rng, md.all).key + int64(md.rng.IntN(3)-1)
		if mt.tk.Key == 0 {
			mt.tk.Key = 1
		}
	default: // a fresh arrival in push order
		mt.tk.Key = int64(md.pushes+1) * 1000
	}
	full := len(md.waiting) >= md.limit && len(md.inFlight)+len(md.holds) >= md.m
	err := md.q.Push(mt.tk)
	md.logf("push %s key=%d transferable=%v -> %v", mt.name, mt.tk.Key, mt.transferable, err)
	if full {
		require.ErrorIs(md.t, err, queue.ErrQueueFull, md)
		require.ErrorContains(md.t, err, fmt.Sprintf("(%d waiting)", len(md.waiting)))
		return
	}
	require.NoError(md.t, err, md)
	require.NotZero(md.t, mt.tk.Key)
	mt.key = mt.tk.Key
	mt.seq = md.pushes
	md.pushes++
	md.all = append(md.all, mt)
	md.insert(mt)
	md.grant()
}

func (md *model) handOff() {
	n := md.rng.IntN(4)
	peer := fmt.Sprintf("p%d", md.rng.IntN(3))
	var taken []*mTicket
	for i := len(md.waiting) - 1; i >= 0 && len(taken) < n; i-- {
		if md.waiting[i].transferable {
			taken = append(taken, md.waiting[i])
		}
	}
	got := md.q.HandOff(n, peer)
	md.logf("handoff %d to %s -> %d", n, peer, got)
	require.Equal(md.t, len(taken), got, "hand-off count\n%s", md)
	for _, mt := range taken {
		md.removeWaiting(mt)
		mt.st = mHandedOff
		md.handed = append(md.handed, mt)
		r := md.wait(context.Background(), mt)
		require.NoError(md.t, r.err, md)
		require.False(md.t, r.o.At.IsZero(), "hand-off without its decision time")
		r.o.At = time.Time{}
		require.Equal(md.t, queue.Outcome{Kind: queue.Transfer, Peer: peer}, r.o, "%s\n%s", mt.name, md)
	}
}

func (md *model) putBack() {
	i := md.rng.IntN(len(md.handed))
	mt := md.handed[i]
	md.handed = slices.Delete(md.handed, i, i+1)
	var err error
	if md.rng.IntN(3) == 0 {
		err = md.q.PutBackLocal(mt.tk)
		mt.transferable = false
		md.logf("putback-local %s -> %v", mt.name, err)
	} else {
		err = md.q.PutBack(mt.tk)
		md.logf("putback %s -> %v", mt.name, err)
	}
	require.NoError(md.t, err, md)
	require.Equal(md.t, mt.transferable, mt.tk.Transferable)
	md.insert(mt)
	md.grant()
}

func (md *model) done() {
	i := md.rng.IntN(len(md.inFlight))
	mt := md.inFlight[i]
	md.inFlight = slices.Delete(md.inFlight, i, i+1)
	md.logf("done %s", mt.name)
	md.q.Done(mt.tk)
	md.dones++
	md.end(mt, mDone)
	md.bound = max(md.m, min(md.bound, len(md.inFlight)+len(md.holds)))
	md.grant()
}

// leave makes a waiting ticket's owner give up: by cancel, or (with
// timeouts on) by its overdue deadline.
func (md *model) leave(timeout bool) {
	mt := pick(md.rng, md.waiting)
	ctx, cancel := context.WithCancel(context.Background())
	if !timeout {
		cancel()
	}
	r := md.wait(ctx, mt)
	cancel()
	md.logf("leave %s timeout=%v -> %v", mt.name, timeout, r.err)
	require.Zero(md.t, r.o, "%s\n%s", mt.name, md)
	md.removeWaiting(mt)
	switch {
	case errors.Is(r.err, queue.ErrQueueTimeout) && md.timeouts:
		// With an overdue deadline and a dead context, either may win.
		md.end(mt, mTimedOut)
	case errors.Is(r.err, queue.ErrClientGone) && !timeout:
		require.ErrorIs(md.t, r.err, context.Canceled)
		md.end(mt, mCancelled)
	default:
		require.FailNow(md.t, "unexpected wait result", "%s: %v\n%s", mt.name, r.err, md)
	}
	md.grant() // nothing to grant: a waiter leaving frees no slot
}

func (md *model) setConcurrency() {
	m := 1 + md.rng.IntN(4)
	md.logf("set m=%d", m)
	require.NoError(md.t, md.q.SetConcurrency(m))
	md.m = m
	md.bound = max(m, len(md.inFlight)+len(md.holds))
	md.grant()
}

// step runs one random operation that is possible in the current state.
func (md *model) step() {
	for {
		switch r := md.rng.IntN(112); {
		case r >= 100 && r < 105:
			md.pull()
		case r >= 105 && r < 108:
			md.hold()
		case r >= 108 && len(md.holds) > 0:
			md.endHold()
		case r >= 100:
			continue
		case r < 30:
			md.push()
		case r < 45:
			md.handOff()
		case r < 58 && len(md.handed) > 0:
			md.putBack()
		case r < 78 && len(md.inFlight) > 0:
			md.done()
		case r < 88 && len(md.waiting) > 0:
			md.leave(false)
		case r < 95 && len(md.waiting) > 0 && md.timeouts:
			md.leave(true)
		case r >= 95 && r < 100:
			md.setConcurrency()
		default:
			continue
		}
		return
	}
}

// finish ends every ticket still in the queue; handed-off tickets that were
// never put back stay with their owners (answered remotely).
func (md *model) finish() {
	for len(md.holds) > 0 {
		md.endHold()
		md.check()
	}
	for len(md.waiting) > 0 || len(md.inFlight) > 0 {
		if len(md.inFlight) > 0 && (len(md.waiting) == 0 || md.rng.IntN(2) == 0) {
			md.done()
		} else {
			md.leave(md.timeouts && md.rng.IntN(2) == 0)
		}
		md.check()
	}
}

// TestProperty drives the queue and the model with random operation
// sequences from fixed seeds and checks, after every operation, the order of
// waiting tickets (FIFO by key among the waiting; grants from the head, in
// order), Load == Waiting + InFlight, InFlight <= m, WaitingCost and
// TailCosts against the waiting tickets' costs, HeadAge against the first
// waiting ticket that may be pulled; pulls (HandHead) take exactly that
// ticket, never one granted (in service) or moved once, and slots held
// for pulls count in flight until used or released; and at the end, that
// every pushed ticket ended exactly once as granted+done, timed out,
// cancelled, or handed off and not put back.
func TestProperty(t *testing.T) {
	const sequences, ops = 400, 80
	var totals [mCancelled + 1]int
	for seed := range uint64(sequences) {
		rng := rand.New(rand.NewPCG(seed, 0x53d))
		md := &model{
			t:        t,
			rng:      rng,
			m:        1 + rng.IntN(3),
			limit:    1 + rng.IntN(6),
			timeouts: seed%2 == 1,
		}
		cfg := queue.Config{Concurrency: md.m, Limit: md.limit}
		if md.timeouts {
			cfg.Timeout = time.Nanosecond
		}
		md.bound = md.m
		md.q = newQueue(t, cfg)
		md.logf("seed %d: %+v", seed, cfg)
		for range ops {
			md.step()
			md.check()
		}
		md.finish()

		// Conservation.
		counts := map[mState]int{}
		for _, mt := range md.all {
			if mt.st == mHandedOff {
				md.end(mt, mHandedOff)
			}
			require.Equal(t, 1, mt.ends, "%s ended %d times (state %d)\n%s", mt.name, mt.ends, mt.st, md)
			counts[mt.st]++
			totals[mt.st]++
		}
		require.Equal(t, md.pushes, counts[mDone]+counts[mTimedOut]+counts[mCancelled]+counts[mHandedOff], md)
		require.Equal(t, md.grants, md.dones, "every grant done once")
		require.Equal(t, md.grants, counts[mDone])
		requireCounts(t, md.q, 0, 0)
		require.Empty(t, md.q.Snapshot())
	}
	t.Logf("%d sequences: done=%d timed out=%d cancelled=%d handed off=%d", sequences,
		totals[mDone], totals[mTimedOut], totals[mCancelled], totals[mHandedOff])
}
