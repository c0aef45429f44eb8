package queue

import "time"

// movable is the one rule for whether waiting ticket t may leave for peer
// (see "Moving" in the package doc). Call with q.mu held.
func (q *Queue) movable(t *Ticket, peer string) bool {
	return t.Transferable && (q.cfg.MoveRule == nil || q.cfg.MoveRule.Movable(t, peer))
}

// PushTo admits t as Push does (the same checks and errors: ErrDraining,
// ErrQueueFull), but instead of queueing it here hands it at once to peer:
// Wait returns Outcome{Transfer, peer}, and the owner sends it there (a
// keyed request arriving at a node that is not its home). If the transfer
// is refused, the owner PutBacks it and it takes its place here by its Key
// like any refused hand-off. A ticket that may not move to peer (see
// Config.MoveRule) is queued here, as by Push.
func (q *Queue) PushTo(t *Ticket, peer string) error {
	now := time.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.admitLocked(t, now, false); err != nil {
		return err
	}
	if !q.movable(t, peer) {
		q.insert(t)
		q.grantLocked()
		return nil
	}
	t.st = stHandedOff
	t.notify <- Outcome{Kind: Transfer, Peer: peer, At: now}
	return nil
}
