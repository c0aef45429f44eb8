package queue

import (
	"container/list"
	"time"
)

// Pulls (policy steal, docs/sim.md "the daemon's contract"): a node whose
// app slot frees with nothing waiting holds the slot (TryHold) and asks a
// peer for its head; the peer takes it with HandHead and its owner sends
// it on the Forward path; the puller admits it into the held slot
// (PushHeld), or gives the slot back (Hold.Release) after its last miss.
//
// The head is the first waiting ticket in (Key, sequence) order that is
// pullable: Transferable and not Moved. A ticket granted a slot is no
// longer waiting, so a pull never takes a request handed to the app, and a
// request that moved once (Moved) is never taken again. HeadAge gossips
// the head's age; a ticket being handed over has left the waiting list, so
// it no longer counts.

// pullable says whether a waiting ticket may be a pull's head.
func pullable(t *Ticket) bool { return t.Transferable && !t.Moved }

// before reports whether a precedes b in (Key, sequence) order.
func before(a, b *Ticket) bool { return a.Key < b.Key || (a.Key == b.Key && a.seq < b.seq) }

// nextPullable is the first pullable ticket from e on, or nil. Call with
// q.mu held.
func (q *Queue) nextPullable(e *list.Element) *Ticket {
	for ; e != nil; e = e.Next() {
		if t := e.Value.(*Ticket); pullable(t) {
			return t
		}
	}
	return nil
}

// setHead records h as the head. Call with q.mu held.
func (q *Queue) setHead(h *Ticket) {
	q.head = h
	if h == nil {
		q.headAt.Store(0)
		return
	}
	q.headAt.Store(monoNanos(h.pushed))
}

// headNewsLocked calls the OnHeadChange function when the queue got a
// head or lost its last one since the previous call. Every operation that
// changes the waiting list ends with it (through checkIdleLocked), so a
// head that comes and goes within one operation (a Push granted at once)
// is no news. Call with q.mu held.
func (q *Queue) headNewsLocked() {
	if has := q.head != nil; has != q.hadHead {
		q.hadHead = has
		if fn := q.onHead.Load(); fn != nil {
			(*fn)()
		}
	}
}

// noteInserted makes t the head if it is pullable and precedes the head.
// Call with q.mu held, after t joined the waiting list.
func (q *Queue) noteInserted(t *Ticket) {
	if pullable(t) && (q.head == nil || before(t, q.head)) {
		q.setHead(t)
	}
}

// HeadAge is the age of the oldest waiting ticket a pull may take (see
// HandHead), since its first Push; 0 when there is none. Lock-free: what
// the node gossips (cluster.Extras.HeadAge).
func (q *Queue) HeadAge() time.Duration {
	at := q.headAt.Load()
	if at == 0 {
		return 0
	}
	return max(time.Duration(monoNanos(time.Now())-at), 1)
}

// HandHead takes the head for peer's pull: the first waiting pullable
// ticket, in (Key, sequence) order, that Config.MoveRule lets go to peer.
// It leaves the waiting list at once (so HeadAge no longer counts it) and
// its owner's Wait returns Outcome{Transfer, peer, PullID: pullID}. It
// returns the ticket, or nil when no waiting ticket may go (the pull's
// "nothing").
func (q *Queue) HandHead(peer string, pullID uint64) *Ticket {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == nil {
		return nil
	}
	for e := q.head.elem; e != nil; e = e.Next() {
		t := e.Value.(*Ticket)
		if !pullable(t) || !q.movable(t, peer) {
			continue
		}
		q.remove(t)
		t.st = stHandedOff
		t.notify <- Outcome{Kind: Transfer, Peer: peer, At: time.Now(), PullID: pullID}
		q.checkIdleLocked()
		return t
	}
	return nil
}

// Hold is an app slot a node keeps free for a request it pulls (TryHold).
// While held the slot counts as in flight (Load, InFlight): peers see it
// busy and no local request takes it. It ends exactly once: used by
// PushHeld, or given back by Release.
type Hold struct {
	q     *Queue
	st    holdState // guarded by q.mu
	began time.Time // when the slot was held
	ended time.Time // when it ended; guarded by q.mu
	done  chan struct{}
}

// newHold returns a hold on a slot the caller counts in flight.
func (q *Queue) newHold() *Hold {
	return &Hold{q: q, began: time.Now(), done: make(chan struct{})}
}

type holdState int

const (
	holdActive holdState = iota
	holdUsed
	holdReleased
)

// Done is closed when the hold ended, used or released.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Used reports whether a pulled request took the slot.
func (h *Hold) Used() bool {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	return h.st == holdUsed
}

// HeldFor reports how long the slot was held, from the hold to its end
// (used or released: the pull's dead time), and whether a pulled request
// took the slot; ended is false while the hold is active.
func (h *Hold) HeldFor() (d time.Duration, used, ended bool) {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	if h.st == holdActive {
		return 0, false, false
	}
	return h.ended.Sub(h.began), h.st == holdUsed, true
}

// TryHold takes a free app slot for a pull, when one is free, nothing
// waits and the queue is not draining; else it returns nil.
func (q *Queue) TryHold() *Hold {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.draining || q.waiting.Len() > 0 || !q.slotFree() {
		return nil
	}
	q.nInFlight.Add(1)
	return q.newHold()
}

// Release gives a hold's slot back unless a pulled request took it, and
// grants it to any request that arrived meanwhile. It reports whether it
// released the slot (false: already used or released).
func (h *Hold) Release() bool {
	q := h.q
	q.mu.Lock()
	defer q.mu.Unlock()
	return h.releaseLocked()
}

func (h *Hold) releaseLocked() bool {
	if h.st != holdActive {
		return false
	}
	h.st = holdReleased
	h.ended = time.Now()
	close(h.done)
	h.q.nInFlight.Add(-1)
	h.q.grantLocked()
	return true
}

// PushHeld admits a pulled request into the slot h holds: t is granted at
// once (Wait returns Granted) and h is used. A hold that already ended
// (released after a timeout) leaves t to take its turn as Push does. It
// fails as Push does (ErrDraining; ErrQueueFull only without a hold), and
// then a still active hold is released, so the slot is not lost.
func (q *Queue) PushHeld(t *Ticket, h *Hold) error {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if h == nil || h.q != q || h.st != holdActive {
		if err := q.admitLocked(t, now, false); err != nil {
			return err
		}
		q.insert(t)
		q.grantLocked()
		return nil
	}
	if err := q.admitLocked(t, now, true); err != nil {
		h.releaseLocked()
		return err
	}
	h.st = holdUsed
	h.ended = now
	close(h.done)
	t.st = stGranted // the hold's in-flight count is now t's
	if q.cfg.Scheduler != nil {
		q.cfg.Scheduler.Granted(t)
	}
	t.notify <- Outcome{Kind: Granted}
	return nil
}

// OnHeadChange registers fn (replacing any earlier one; nil removes it):
// the queue calls it when it gets a head (a pullable waiting ticket) where
// it had none, and when it loses its last one: head news a steal node
// gossips at once. It is called under the queue's lock, so it must be
// quick, must not block and must not call into the queue.
func (q *Queue) OnHeadChange(fn func()) {
	if fn == nil {
		q.onHead.Store(nil)
		return
	}
	q.onHead.Store(&fn)
}

// SetOvertake registers fn (replacing any earlier one; nil removes it):
// when Done frees a slot while tickets wait (and the queue has no
// Scheduler and is not draining), the slot is not granted to the head but
// held, and Done calls fn with the hold after releasing the queue's lock.
// fn must end the hold: pull a request into it (PushHeld) or Release it,
// which grants it to the head as Done would have. Policy steal's overtake
// rule: the slot waits for a peer's request much older than the local
// head.
func (q *Queue) SetOvertake(fn func(*Hold)) {
	if fn == nil {
		q.overtake.Store(nil)
		return
	}
	q.overtake.Store(&fn)
}

// OnIdleSlot registers fn (replacing any earlier one; nil removes it):
// Done calls it, after releasing the queue's lock, when it left an app slot
// free with nothing waiting, the moment a steal node pulls. fn must not
// block.
func (q *Queue) OnIdleSlot(fn func()) {
	if fn == nil {
		q.onIdle.Store(nil)
		return
	}
	q.onIdle.Store(&fn)
}
