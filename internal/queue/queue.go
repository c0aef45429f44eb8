// Package queue is SWD's local request queue: a bounded FIFO in front of the
// application that admits at most Concurrency (m) requests to the app at
// once, hands out its tail for transfer to other nodes, and takes a request
// back at its original place when a transfer is refused.
//
// Every request is represented by a Ticket. The goroutine serving the
// client's request owns its ticket: it Pushes it, then Waits for an Outcome:
// either a slot at the application (Granted; it must call Done afterwards)
// or a hand-off to a peer (Transfer; it must either finish the request
// remotely, or PutBack the ticket and Wait again). Only the owner ever
// answers the client, so a request is answered exactly once.
//
// Order: waiting tickets are ordered by (Key, sequence). Key defaults to the
// push time in nanoseconds, which makes the queue FIFO; a transferred request
// may be pushed with its original arrival time as key to land by age. A free
// slot goes to the first waiting ticket in that order, unless the Config has
// a Scheduler: then the Scheduler picks which waiting ticket it goes to, or
// holds the slot idle (per-route limits, cache-aware order). HandOff for
// transfer always takes from the tail of the (Key, sequence) order; PushTo
// hands a ticket off as it is admitted (a keyed request whose home is
// another node).
//
// Moving: a waiting ticket leaves for a peer only if it is Transferable and
// Config.MoveRule (when set) allows it for that peer. This one rule holds for
// every way a ticket leaves for a peer: HandOff from the tail,
// HandOffTickets (the tickets a transfer-cost rule chose), PushTo at
// admission, and any removal of a waiting ticket on a peer's behalf (a
// pull). Keyed requests use it to stay at their home node unless the home is
// past its load bound (internal/affinity, docs/affinity.md).
//
// Pulls (policy steal, pull.go): HandHead hands the head (the oldest
// waiting ticket that is Transferable and not Moved) to a pulling peer;
// TryHold, PushHeld and Hold.Release keep a free slot for a request this
// node pulls; HeadAge, OnIdleSlot, OnHeadChange and SetOvertake tell the
// node when to pull.
//
// Concurrency: all methods are safe for concurrent use. Load, Waiting,
// InFlight and HeadAge read atomics and never take the lock, so the cluster
// layer can read the load index on its 20 ms tick without contending with
// requests. The OnHeadChange function runs under the lock; the OnIdleSlot
// and overtake functions run after it is released, in the goroutine that
// called Done.
package queue

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/swderr"
)

// Sentinel errors, shared with the rest of SWD through swderr.
var (
	ErrQueueFull    = swderr.ErrQueueFull
	ErrQueueTimeout = swderr.ErrQueueTimeout
	ErrDraining     = swderr.ErrDraining
	ErrClientGone   = swderr.ErrClientGone
)

// Config configures a Queue.
type Config struct {
	// Concurrency is m: the most tickets granted (in service) at once.
	Concurrency int
	// Limit is the most tickets waiting at once; Push beyond it fails with
	// ErrQueueFull. Put-back tickets are always re-admitted.
	Limit int
	// Timeout is the longest a ticket may wait, counted from its first Push
	// (time spent on a refused transfer counts). Zero means no limit.
	Timeout time.Duration
	// Scheduler, if set, decides which waiting ticket a free slot goes to
	// (see Scheduler). Nil means FIFO by (Key, sequence).
	Scheduler Scheduler
	// MoveRule, if set, says whether a Transferable ticket may leave this
	// node for a peer (see "Moving" in the package doc). Nil: every
	// Transferable ticket may.
	MoveRule MoveRule
}

// MoveRule decides whether a waiting Transferable ticket may leave for
// peer. The queue calls Movable under its lock, so it must be quick and
// must not call back into the queue.
type MoveRule interface {
	Movable(t *Ticket, peer string) bool
}

// Scheduler decides which waiting ticket a free app slot goes to. The queue
// calls it under its lock, so its methods must be quick and must not call
// back into the queue; it may keep state, which only these calls change.
//
// Pick is called while a slot is free and tickets wait; it returns one of
// them (from w), or nil to leave the free slots idle until the next Push,
// PutBack, Done, SetConcurrency or Kick. Every grant goes through Pick, also
// a Push onto an idle queue. Granted is told each ticket Pick chose once it
// holds its slot, and Released each granted ticket whose slot Done freed,
// exactly once each.
type Scheduler interface {
	Pick(w *Waiting) *Ticket
	Granted(t *Ticket)
	Released(t *Ticket)
}

// Waiting is the queue's waiting tickets in (Key, sequence) order, as a
// Scheduler sees them. It is valid only during the Scheduler call it was
// passed to.
type Waiting struct{ l *list.List }

// Len is the number of waiting tickets.
func (w *Waiting) Len() int { return w.l.Len() }

// Front is the first waiting ticket (lowest Key), or nil.
func (w *Waiting) Front() *Ticket { return ticketOf(w.l.Front()) }

// Back is the last waiting ticket, or nil.
func (w *Waiting) Back() *Ticket { return ticketOf(w.l.Back()) }

// Next is the ticket after t in the order, or nil at the end.
func (w *Waiting) Next(t *Ticket) *Ticket { return ticketOf(t.elem.Next()) }

// Prev is the ticket before t in the order, or nil at the start.
func (w *Waiting) Prev(t *Ticket) *Ticket { return ticketOf(t.elem.Prev()) }

func ticketOf(e *list.Element) *Ticket {
	if e == nil {
		return nil
	}
	return e.Value.(*Ticket)
}

// DefaultConfig returns the defaults documented in the interfaces spec.
func DefaultConfig() Config {
	return Config{Concurrency: 1, Limit: 1024, Timeout: 30 * time.Second}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.Limit < 1:
		return fmt.Errorf("queue limit must be at least 1, got %d", c.Limit)
	case c.Timeout < 0:
		return fmt.Errorf("queue timeout must not be negative, got %s", c.Timeout)
	}
	return nil
}

// OutcomeKind says what a waiting ticket got.
type OutcomeKind int

const (
	// Granted: the ticket holds an application slot; call Done when finished.
	Granted OutcomeKind = iota + 1
	// Transfer: the ticket was taken from the tail for transfer to Peer.
	Transfer
	// Evicted: the queue gave up on the ticket (Evict at the end of a
	// drain); Wait reports it as ErrDraining.
	Evicted
)

// Outcome is what Wait returns.
type Outcome struct {
	Kind OutcomeKind
	Peer string // for Transfer: the destination node's name
	// At is when a Transfer was decided (the hand-off), zero otherwise.
	At time.Time
	// PullID is set when the Transfer answers Peer's pull (HandHead): the
	// owner sends the request with it, so Peer serves it in the slot it
	// holds for that pull. Zero for every other hand-off.
	PullID uint64
}

type state int

const (
	stNew state = iota
	stWaiting
	stGranted
	stHandedOff
	stGone
)

// Ticket is one request's place in the queue. Create it with NewTicket; the
// exported fields are set by the owner before Push and not changed after.
type Ticket struct {
	// Transferable says whether the ticket may be handed out for transfer.
	Transferable bool
	// Key orders waiting tickets (lower first); zero means push time.
	Key int64
	// Value is the owner's payload (the buffered request), opaque here.
	Value any
	// Deadline, if set before Push, bounds the wait further than the
	// queue's Timeout (a transferred request keeps the deadline it had on
	// the node its client called).
	Deadline time.Time

	// Attributes for Schedulers and load indices; the queue itself only
	// sums Cost (WaitingCost, TailCosts). Set by the owner before Push.

	// Route is the request's route (internal/route ID).
	Route int
	// Affinity is the request's affinity key ("" for none).
	Affinity string
	// Priority is the request's class: higher goes first where a
	// Scheduler honours it. Zero is the normal class.
	Priority int
	// Cost is the request's predicted service time (0: unknown).
	Cost time.Duration
	// Size is the request's body in bytes, what moving it carries.
	Size int64
	// Moved says the request already moved once (it arrived here by a
	// transfer): it is never this node's head for a pull (see HandHead).
	Moved bool

	seq      uint64
	pushed   time.Time
	deadline time.Time
	st       state // guarded by Queue.mu
	elem     *list.Element
	notify   chan Outcome // buffered(1); one send per Push/PutBack
}

// NewTicket returns a ticket ready to Push.
func NewTicket(value any, transferable bool) *Ticket {
	return &Ticket{Value: value, Transferable: transferable, notify: make(chan Outcome, 1)}
}

// Pushed returns when the ticket was first pushed.
func (t *Ticket) Pushed() time.Time { return t.pushed }

// epoch anchors monoNanos: wall-clock nanoseconds at process start plus
// monotonic time since, so default keys never go backwards when the wall
// clock steps, yet stay comparable with arrival times from other nodes.
var epoch = time.Now()

func monoNanos(now time.Time) int64 { return epoch.UnixNano() + int64(now.Sub(epoch)) }

// Queue is a bounded FIFO with at most Concurrency tickets in service.
type Queue struct {
	cfg Config

	mu       sync.Mutex
	waiting  list.List // of *Ticket, ordered by (Key, seq)
	seq      uint64
	draining bool
	idle     chan struct{} // closed when draining and nothing waits or runs

	// Atomics mirror the guarded state for lock-free readers.
	nWaiting  atomic.Int64
	nInFlight atomic.Int64
	conc      atomic.Int64
	// waitCost is the sum of the waiting tickets' Cost (the work load
	// index's waiting part; see WaitingCost).
	waitCost atomic.Int64

	// head is the first waiting ticket, in (Key, sequence) order, that a
	// pull may take (pullable); nil when there is none. headAt mirrors its
	// push time (monoNanos; 0: none) for the lock-free HeadAge.
	head   *Ticket
	headAt atomic.Int64
	// hadHead is whether head was set at the last headNewsLocked.
	hadHead bool
	// onIdle is called after Done leaves a slot free with nothing waiting
	// (OnIdleSlot).
	onIdle atomic.Pointer[func()]
	// onHead is called when the queue gets or loses its head
	// (OnHeadChange).
	onHead atomic.Pointer[func()]
	// overtake gets the slot Done frees while tickets wait (SetOvertake).
	overtake atomic.Pointer[func(*Hold)]
}

// New returns an empty queue. cfg must be valid.
func New(cfg Config) (*Queue, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("queue config: %w", err)
	}
	q := &Queue{cfg: cfg}
	q.conc.Store(int64(cfg.Concurrency))
	return q, nil
}

// Load is the load index: waiting plus in service. Lock-free.
func (q *Queue) Load() int { return int(q.nWaiting.Load() + q.nInFlight.Load()) }

// Waiting is the number of tickets waiting. Lock-free.
func (q *Queue) Waiting() int { return int(q.nWaiting.Load()) }

// InFlight is the number of tickets granted and not yet Done. Lock-free.
func (q *Queue) InFlight() int { return int(q.nInFlight.Load()) }

// Concurrency is the current m. Lock-free.
func (q *Queue) Concurrency() int { return int(q.conc.Load()) }

// Config returns the queue's configuration.
func (q *Queue) Config() Config { return q.cfg }

// Push admits t. If a slot is free and nothing waits ahead of it, t is
// granted at once (Wait returns immediately). It fails with ErrDraining or
// ErrQueueFull; the ticket is then not in the queue.
func (q *Queue) Push(t *Ticket) error {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.admitLocked(t, now, false); err != nil {
		return err
	}
	q.insert(t)
	q.grantLocked()
	return nil
}

// admitLocked checks that a new ticket may enter (not pushed before, not
// draining, room to wait unless held: it has a slot) and stamps it:
// sequence, push time, Key and deadline.
func (q *Queue) admitLocked(t *Ticket, now time.Time, held bool) error {
	if t.st != stNew {
		return fmt.Errorf("push: ticket already pushed")
	}
	if q.draining {
		return ErrDraining
	}
	if !held && q.waiting.Len() >= q.cfg.Limit && !q.slotFree() {
		return fmt.Errorf("%w (%d waiting)", ErrQueueFull, q.waiting.Len())
	}
	q.seq++
	t.seq = q.seq
	t.pushed = now
	if t.Key == 0 {
		t.Key = monoNanos(now)
	}
	if q.cfg.Timeout > 0 {
		t.deadline = now.Add(q.cfg.Timeout)
	}
	if !t.Deadline.IsZero() && (t.deadline.IsZero() || t.Deadline.Before(t.deadline)) {
		t.deadline = t.Deadline
	}
	return nil
}

// PutBack returns a ticket that was handed off for transfer (and refused) to
// its original place in the queue. It is admitted even when the queue is full
// or draining: it already had its place. The owner then Waits again.
func (q *Queue) PutBack(t *Ticket) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.st != stHandedOff {
		return fmt.Errorf("put back: ticket is not handed off")
	}
	q.insert(t)
	q.grantLocked()
	return nil
}

// PutBackLocal is PutBack for a ticket that must now be served here (a
// transfer that may have started and is idempotent, so it runs locally
// once): it is marked not transferable before it is re-queued.
func (q *Queue) PutBackLocal(t *Ticket) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t.st != stHandedOff {
		return fmt.Errorf("put back: ticket is not handed off")
	}
	t.Transferable = false
	q.insert(t)
	q.grantLocked()
	return nil
}

// insert places t among the waiting tickets by (Key, seq), scanning from the
// tail since new and returning tickets mostly belong near it.
func (q *Queue) insert(t *Ticket) {
	t.st = stWaiting
	defer q.noteInserted(t)
	for e := q.waiting.Back(); e != nil; e = e.Prev() {
		o := e.Value.(*Ticket)
		if o.Key < t.Key || (o.Key == t.Key && o.seq < t.seq) {
			t.elem = q.waiting.InsertAfter(t, e)
			q.nWaiting.Add(1)
			q.waitCost.Add(int64(max(t.Cost, 0)))
			return
		}
	}
	t.elem = q.waiting.PushFront(t)
	q.nWaiting.Add(1)
	q.waitCost.Add(int64(max(t.Cost, 0)))
}

func (q *Queue) remove(t *Ticket) {
	if t == q.head {
		q.setHead(q.nextPullable(t.elem.Next()))
	}
	q.waiting.Remove(t.elem)
	t.elem = nil
	q.nWaiting.Add(-1)
	q.waitCost.Add(-int64(max(t.Cost, 0)))
}

// WaitingCost is the sum of the waiting tickets' Cost: what the work load
// index counts for the requests waiting here. Lock-free. (The queue reads
// no other attribute; Cost must not change while the ticket is queued.)
func (q *Queue) WaitingCost() time.Duration { return time.Duration(q.waitCost.Load()) }

// TailCosts lists the Cost of up to n waiting tickets that may move, in
// the order HandOff takes them (from the tail, skipping tickets that may
// not move): what work-based planning needs to turn work into a count of
// requests (policy.View.Costs).
func (q *Queue) TailCosts(n int) []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []time.Duration
	for e := q.waiting.Back(); e != nil && len(out) < n; e = e.Prev() {
		if t := e.Value.(*Ticket); t.Transferable {
			out = append(out, t.Cost)
		}
	}
	return out
}

func (q *Queue) slotFree() bool { return q.nInFlight.Load() < q.conc.Load() }

// grantLocked hands free slots to the head of the queue, or to the tickets
// the Scheduler picks.
func (q *Queue) grantLocked() {
	sched := q.cfg.Scheduler
	for q.slotFree() && q.waiting.Len() > 0 {
		var t *Ticket
		if sched == nil {
			t = q.waiting.Front().Value.(*Ticket)
		} else {
			if t = sched.Pick(&Waiting{l: &q.waiting}); t == nil {
				break
			}
			if t.st != stWaiting || t.elem == nil {
				panic("queue: Scheduler picked a ticket that is not waiting")
			}
		}
		// Count it in flight before it leaves the waiting count, so a
		// lock-free Load never reads low.
		q.nInFlight.Add(1)
		q.remove(t)
		t.st = stGranted
		if sched != nil {
			sched.Granted(t)
		}
		t.notify <- Outcome{Kind: Granted}
	}
	q.checkIdleLocked()
}

// Kick gives free slots to waiting tickets again: a Scheduler whose state
// changed outside the queue's calls (a limit raised by a timer) calls it so
// that slots it held idle are filled.
func (q *Queue) Kick() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.grantLocked()
}

// Wait blocks until t is granted a slot or handed off for transfer. If ctx
// ends first, t leaves the queue and Wait returns ErrClientGone; if t's
// queue timeout passes first, ErrQueueTimeout. A ticket that was granted or
// handed off in the same instant still reports its outcome, so no slot and
// no hand-off is ever lost.
func (q *Queue) Wait(ctx context.Context, t *Ticket) (Outcome, error) {
	select { // granted at Push (an idle node): no timer needed
	case o := <-t.notify:
		if o.Kind == Evicted {
			return Outcome{}, fmt.Errorf("%w: evicted from the queue", ErrDraining)
		}
		return o, nil
	default:
	}
	var timeout <-chan time.Time
	if !t.deadline.IsZero() {
		timer := time.NewTimer(time.Until(t.deadline))
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case o := <-t.notify:
		if o.Kind == Evicted {
			return Outcome{}, fmt.Errorf("%w: evicted from the queue", ErrDraining)
		}
		return o, nil
	case <-ctx.Done():
		return q.abandon(t, fmt.Errorf("%w: %w", ErrClientGone, context.Cause(ctx)))
	case <-timeout:
		return q.abandon(t, fmt.Errorf("%w after %s", ErrQueueTimeout, q.cfg.Timeout))
	}
}

// abandon removes a still-waiting ticket; if it was granted or handed off
// concurrently, it returns that outcome instead.
func (q *Queue) abandon(t *Ticket, err error) (Outcome, error) {
	q.mu.Lock()
	if t.st == stWaiting {
		q.remove(t)
		t.st = stGone
		q.checkIdleLocked()
		q.mu.Unlock()
		return Outcome{}, err
	}
	q.mu.Unlock()
	// A grant, hand-off or eviction decided concurrently was sent under the
	// lock before st changed, so it is in the buffer now. Anything else (a
	// ticket never pushed, already finished, or whose hand-off was already
	// received) has nothing pending: report ctx's error.
	select {
	case o := <-t.notify:
		if o.Kind == Evicted {
			return Outcome{}, fmt.Errorf("%w: evicted from the queue", ErrDraining)
		}
		return o, nil
	default:
		return Outcome{}, err
	}
}

// Done releases a slot granted to a ticket and grants the next waiter.
// When that leaves a slot free with nothing waiting, it then calls the
// OnIdleSlot function. With an overtake function (SetOvertake) and tickets
// waiting, the slot is held instead and handed to that function.
func (q *Queue) Done(t *Ticket) {
	q.mu.Lock()
	if t.st != stGranted {
		q.mu.Unlock()
		panic("queue: Done on a ticket that holds no slot")
	}
	t.st = stGone
	if q.cfg.Scheduler != nil {
		q.cfg.Scheduler.Released(t)
	}
	if ov := q.overtake.Load(); ov != nil && q.cfg.Scheduler == nil && q.waiting.Len() > 0 &&
		!q.draining && q.nInFlight.Load() <= q.conc.Load() {
		// The freed slot becomes a hold (its in-flight count stays): the
		// overtake function pulls into it or releases it to the local head.
		h := q.newHold()
		q.mu.Unlock()
		(*ov)(h)
		return
	}
	q.nInFlight.Add(-1)
	q.grantLocked()
	idle := q.slotFree() && q.waiting.Len() == 0 && !q.draining
	q.mu.Unlock()
	if fn := q.onIdle.Load(); idle && fn != nil {
		(*fn)()
	}
}

// HandOff takes up to n transferable waiting tickets from the tail of the
// queue and hands each to its owner with Outcome{Transfer, peer}. It skips
// tickets that may not move to peer (not Transferable, or refused by
// Config.MoveRule), and returns how many it handed off.
func (q *Queue) HandOff(n int, peer string) int {
	if n <= 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	handed := 0
	for e := q.waiting.Back(); e != nil && handed < n; {
		t := e.Value.(*Ticket)
		prev := e.Prev()
		if q.movable(t, peer) {
			q.remove(t)
			t.st = stHandedOff
			t.notify <- Outcome{Kind: Transfer, Peer: peer, At: time.Now()}
			handed++
		}
		e = prev
	}
	q.checkIdleLocked()
	return handed
}

// Drain stops admissions: later Pushes fail with ErrDraining. Tickets
// already queued keep being served; PutBack still works.
func (q *Queue) Drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.draining = true
	q.checkIdleLocked()
}

// Evict removes every waiting ticket; their Waits fail with ErrDraining so
// their owners answer 503. Used when a drain runs out of time. It returns
// how many tickets were evicted.
func (q *Queue) Evict() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for e := q.waiting.Front(); e != nil; e = q.waiting.Front() {
		t := e.Value.(*Ticket)
		q.remove(t)
		t.st = stGone
		t.notify <- Outcome{Kind: Evicted}
		n++
	}
	q.checkIdleLocked()
	return n
}

// Draining reports whether Drain was called.
func (q *Queue) Draining() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.draining
}

// WaitIdle blocks until the queue is draining and nothing waits or runs, or
// ctx ends. Handed-off tickets count as gone: their owners answer them.
func (q *Queue) WaitIdle(ctx context.Context) error {
	q.mu.Lock()
	if !q.draining {
		q.mu.Unlock()
		return errors.New("wait idle: queue is not draining")
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
		q.checkIdleLocked()
	}
	ch := q.idle
	q.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (q *Queue) checkIdleLocked() {
	q.headNewsLocked()
	if q.draining && q.idle != nil && q.waiting.Len() == 0 && q.nInFlight.Load() == 0 {
		select {
		case <-q.idle:
		default:
			close(q.idle)
		}
	}
}

// SetConcurrency changes m at run time and grants newly free slots.
func (q *Queue) SetConcurrency(m int) error {
	if m < 1 {
		return fmt.Errorf("concurrency must be at least 1, got %d", m)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.conc.Store(int64(m))
	q.grantLocked()
	return nil
}

// Snapshot lists the waiting tickets' values from head to tail (for tests
// and status pages; O(n)).
func (q *Queue) Snapshot() []any {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]any, 0, q.waiting.Len())
	for e := q.waiting.Front(); e != nil; e = e.Next() {
		out = append(out, e.Value.(*Ticket).Value)
	}
	return out
}
