package queue

import "time"

// Movable returns up to n of the waiting tickets that may be handed off,
// from the tail: the tickets HandOff(n, ...) would take now, in the order
// it would take them. A caller that chooses among them (a transfer cost
// rule) hands its choice over with HandOffTickets; meanwhile any of them
// may be granted a slot or leave, which HandOffTickets notices.
func (q *Queue) Movable(n int) []*Ticket {
	if n <= 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []*Ticket
	for e := q.waiting.Back(); e != nil && len(out) < n; e = e.Prev() {
		if t := e.Value.(*Ticket); t.Transferable {
			out = append(out, t)
		}
	}
	return out
}

// HandOffTickets hands each of ts that is still waiting to its owner with
// Outcome{Transfer, peer}, as HandOff does, and returns how many it handed
// off. Tickets granted, handed off or gone since Movable are skipped, and
// so are tickets Config.MoveRule does not let go to peer (Movable lists
// tickets without knowing the peer).
func (q *Queue) HandOffTickets(ts []*Ticket, peer string) int {
	if len(ts) == 0 {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	handed := 0
	for _, t := range ts {
		if t == nil || t.st != stWaiting || t.elem == nil || !q.movable(t, peer) {
			continue
		}
		q.remove(t)
		t.st = stHandedOff
		t.notify <- Outcome{Kind: Transfer, Peer: peer, At: now}
		handed++
	}
	q.checkIdleLocked()
	return handed
}
