package proxy

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
)

// A holding dispatcher (policy cq, docs/architecture.md "The holding
// dispatcher") keeps arrivals in one FIFO and sends its head to a node the
// moment that node has a free slot, as HAProxy's maxconn queue does. The
// decision is the policy's Holder; this file is the mechanism around it:
//
//   - Every request waiting for a node is a heldEntry in Dispatcher.fifo,
//     oldest first; its handler goroutine waits on the entry's channel.
//   - placeLocked runs, under Dispatcher.mu, whenever placing may have
//     become possible: an arrival (hold), a completion (release) and every
//     holdRecheck while the FIFO is not empty, which is how a node coming
//     up, a node's m changing and a policy switch are noticed. It asks the
//     Holder for the head with exact outstanding counts (requests in flight
//     included), each node's m and the FIFO's depth (cq sends a request
//     ahead to a busy node when the FIFO is deep: policy.FreeSlotAhead),
//     sends the head to the node it names, counted there at once, and
//     repeats until the Holder says -1.
//   - A request leaves the FIFO placed, by its client going away, by its
//     wait reaching the deadline (--queue-timeout from its arrival), or,
//     when the policy no longer holds, handed to the Picker. Whichever
//     happens first under the lock wins, so a request is placed once.

// holdRecheck is how often placement is retried while requests are held,
// besides arrivals and completions: the delay before a node that came up,
// a changed m or a policy switch takes effect.
const holdRecheck = 5 * time.Millisecond

// placeHow is how a held request left the FIFO.
type placeHow int

const (
	// placedNode: the request goes to placement.b, already counted there.
	placedNode placeHow = iota
	// placedPick: the policy stopped holding; the request goes through the
	// Picker.
	placedPick
	// placedNone: no node is left to try (none is up, or every one up has
	// refused this request).
	placedNone
)

type placement struct {
	how placeHow
	b   Backend
}

// heldEntry is one request in the FIFO.
type heldEntry struct {
	el      *list.Element   // its place in the FIFO; nil once it left
	exclude map[string]bool // nodes that refused it: never offered again
	// placed receives the request's placement, once, under Dispatcher.mu;
	// buffered so the sender never blocks.
	placed chan placement
}

// HoldWith registers the source of the current holding policy: a non-nil
// Holder makes the dispatcher hold arrivals in its FIFO (cq); nil means
// every arrival goes to the Picker at once. Call before serving.
func (d *Dispatcher) HoldWith(holder func() policy.Holder) { d.holder = holder }

// Held returns how many requests wait in the FIFO.
func (d *Dispatcher) Held() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fifo.Len()
}

func (d *Dispatcher) currentHolder() policy.Holder {
	if d.holder == nil {
		return nil
	}
	return d.holder()
}

func (d *Dispatcher) holding() bool { return d.currentHolder() != nil }

// hold puts a request in the FIFO and waits for its placement. It returns
// the node (picked true), or picked false when the policy stopped holding
// (the caller uses the Picker), or an error: swderr.ErrQueueFull,
// ErrQueueTimeout, ErrClientGone, or ErrNoBackend when no node is left to
// try. A request with nodes in exclude has been placed before and refused:
// it goes back to the head of the FIFO, where it was the oldest.
func (d *Dispatcher) hold(ctx context.Context, exclude map[string]bool, deadline time.Time) (Backend, bool, error) {
	wait := time.Until(deadline)
	if wait <= 0 {
		return Backend{}, false, fmt.Errorf("%w after %s in the dispatcher's FIFO", swderr.ErrQueueTimeout, d.cfg.HoldTimeout)
	}
	e := &heldEntry{exclude: exclude, placed: make(chan placement, 1)}
	d.mu.Lock()
	if len(exclude) > 0 {
		e.el = d.fifo.PushFront(e)
	} else if d.fifo.Len() >= d.cfg.HoldLimit {
		d.mu.Unlock()
		return Backend{}, false, fmt.Errorf("%w: the dispatcher holds %d requests (--queue-limit)", swderr.ErrQueueFull, d.cfg.HoldLimit)
	} else {
		e.el = d.fifo.PushBack(e)
	}
	d.placeLocked()
	if d.fifo.Len() > 0 && !d.polling {
		d.polling = true
		go d.recheck()
	}
	d.mu.Unlock()

	timer := time.NewTimer(wait)
	defer timer.Stop()
	var p placement
	select {
	case p = <-e.placed:
	case <-ctx.Done():
		if d.unhold(e) {
			return Backend{}, false, fmt.Errorf("%w while held: %w", swderr.ErrClientGone, ctx.Err())
		}
		// Placed meanwhile: give the slot back.
		if p = <-e.placed; p.how == placedNode {
			d.release(p.b.Name)
		}
		return Backend{}, false, fmt.Errorf("%w while held: %w", swderr.ErrClientGone, ctx.Err())
	case <-timer.C:
		if d.unhold(e) {
			return Backend{}, false, fmt.Errorf("%w after %s in the dispatcher's FIFO", swderr.ErrQueueTimeout, d.cfg.HoldTimeout)
		}
		p = <-e.placed // placed meanwhile: it goes
	}
	switch p.how {
	case placedNode:
		return p.b, true, nil
	case placedPick:
		return Backend{}, false, nil
	default:
		return Backend{}, false, swderr.ErrNoBackend
	}
}

// unhold removes a request from the FIFO if it is still there (not yet
// placed), reporting whether it was.
func (d *Dispatcher) unhold(e *heldEntry) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.el == nil {
		return false
	}
	d.fifo.Remove(e.el)
	e.el = nil
	return true
}

// settle takes the head out of the FIFO and tells its handler p.
func (d *Dispatcher) settle(e *heldEntry, p placement) {
	d.fifo.Remove(e.el)
	e.el = nil
	e.placed <- p
}

// placeLocked places FIFO heads while the Holder finds them a node (see
// the top of this file). Called with d.mu held.
func (d *Dispatcher) placeLocked() {
	if d.fifo.Len() == 0 {
		return
	}
	h := d.currentHolder()
	if h == nil {
		// The policy stopped holding: every held request, oldest first,
		// goes through the Picker (their handlers pick in turn).
		for d.fifo.Len() > 0 {
			d.settle(d.fifo.Front().Value.(*heldEntry), placement{how: placedPick})
		}
		return
	}
	bs := d.backends()
	counts := make([]int, len(bs))
	conc := make([]int, len(bs))
	for i, b := range bs {
		counts[i] = d.outstanding[b.Name]
		conc[i] = b.Concurrency
	}
	for d.fifo.Len() > 0 {
		head := d.fifo.Front().Value.(*heldEntry)
		up := make([]bool, len(bs))
		anyUp := false
		for i, b := range bs {
			up[i] = !head.exclude[b.Name]
			anyUp = anyUp || up[i]
		}
		if !anyUp {
			d.settle(head, placement{how: placedNone})
			continue
		}
		i := h.Place(policy.DispatchView{Outstanding: counts, Up: up, Seq: d.seq, Concurrency: conc, Held: d.fifo.Len()})
		if i < 0 || i >= len(bs) || !up[i] {
			return
		}
		d.seq++
		if d.onDispatch != nil {
			names := make([]string, len(bs))
			for j, b := range bs {
				names[j] = b.Name
			}
			d.onDispatch(DispatchDecision{Backends: names, Outstanding: slices.Clone(counts), Chosen: i})
		}
		counts[i]++
		d.outstanding[bs[i].Name]++
		d.settle(head, placement{how: placedNode, b: bs[i]})
	}
}

// recheck retries placement every holdRecheck until the FIFO is empty.
func (d *Dispatcher) recheck() {
	t := time.NewTicker(holdRecheck)
	defer t.Stop()
	for range t.C {
		d.mu.Lock()
		d.placeLocked()
		if d.fifo.Len() == 0 {
			d.polling = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
	}
}
