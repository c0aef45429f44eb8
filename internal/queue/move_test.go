package queue_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// homeRule lets a ticket with an Affinity key move only to the peer named
// by that key ("b" may go to b); tickets without a key move freely. It
// records every question it is asked.
type homeRule struct{ asked []string }

func (h *homeRule) Movable(t *queue.Ticket, peer string) bool {
	h.asked = append(h.asked, t.Value.(string)+">"+peer)
	return t.Affinity == "" || t.Affinity == peer
}

func keyed(t *testing.T, q *queue.Queue, v, key string) *queue.Ticket {
	t.Helper()
	tk := queue.NewTicket(v, true)
	tk.Affinity = key
	require.NoError(t, q.Push(tk))
	return tk
}

// TestHandOffHonoursMovable: HandOff skips tickets the rule keeps, takes
// the others from the tail, and never asks about tickets that are not
// Transferable.
func TestHandOffHonoursMovable(t *testing.T) {
	rule := &homeRule{}
	cfg := cfgM(1)
	cfg.MoveRule = rule
	q := newQueue(t, cfg)
	run := push(t, q, "run", true) // takes the slot
	requireGranted(t, q, run)
	free := keyed(t, q, "free", "")
	toB := keyed(t, q, "toB", "b")
	pinned := push(t, q, "pinned", false)
	toC := keyed(t, q, "toC", "c")
	rule.asked = nil

	// To b: toC stays (its home is c), pinned is not transferable, toB
	// and free move, tail first.
	assert.Equal(t, 2, q.HandOff(5, "b"))
	requireTransfer(t, q, toB, "b")
	requireTransfer(t, q, free, "b")
	assert.Equal(t, []string{"toC>b", "toB>b", "free>b"}, rule.asked, "asked tail first, never about pinned")
	assert.Equal(t, []string{"pinned", "toC"}, snapshot(q))

	// To c: toC may go now.
	assert.Equal(t, 1, q.HandOff(5, "c"))
	requireTransfer(t, q, toC, "c")
	assert.Equal(t, []string{"pinned"}, snapshot(q))
	_ = pinned
}

// TestHandOffTicketsHonoursMovable: tickets listed by Movable (without a
// peer) that the rule keeps from the chosen peer stay in place.
func TestHandOffTicketsHonoursMovable(t *testing.T) {
	rule := &homeRule{}
	cfg := cfgM(1)
	cfg.MoveRule = rule
	q := newQueue(t, cfg)
	requireGranted(t, q, push(t, q, "run", true))
	free := keyed(t, q, "free", "")
	toC := keyed(t, q, "toC", "c")
	listed := q.Movable(10)
	require.Equal(t, []*queue.Ticket{toC, free}, listed, "listed whatever the peer")
	assert.Equal(t, 1, q.HandOffTickets(listed, "b"))
	requireTransfer(t, q, free, "b")
	assert.Equal(t, []string{"toC"}, snapshot(q), "toC's home is c: it stays")
}

// TestPushTo covers admission with an immediate hand-off.
func TestPushTo(t *testing.T) {
	for _, tc := range []struct {
		name         string
		transferable bool
		key, peer    string
		// wantPeer is the hand-off's peer; "" means queued here.
		wantPeer string
	}{
		// A movable ticket is handed to the peer at once.
		{"sent", true, "b", "b", "b"},
		// The rule refuses this peer: it is queued here.
		{"refused by rule", true, "c", "b", ""},
		// Not transferable: queued here whatever the rule says.
		{"not transferable", false, "b", "b", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rule := &homeRule{}
			cfg := cfgM(1)
			cfg.MoveRule = rule
			q := newQueue(t, cfg)
			busy := push(t, q, "busy", false) // hold the slot so nothing is granted
			requireGranted(t, q, busy)
			tk := queue.NewTicket("x", tc.transferable)
			tk.Affinity = tc.key
			require.NoError(t, q.PushTo(tk, tc.peer))
			if tc.wantPeer != "" {
				requireTransfer(t, q, tk, tc.wantPeer)
				requireCounts(t, q, 0, 1)
				// Refused by the peer: it takes its place here.
				require.NoError(t, q.PutBack(tk))
				assert.Equal(t, []string{"x"}, snapshot(q))
				return
			}
			requireCounts(t, q, 1, 1)
			q.Done(busy)
			requireGranted(t, q, tk)
		})
	}
}

// TestPushToIdleQueueStillSends: a keyed ticket bound elsewhere is not
// granted the idle local slot first.
func TestPushToIdleQueueStillSends(t *testing.T) {
	q := newQueue(t, cfgM(1))
	tk := queue.NewTicket("x", true)
	require.NoError(t, q.PushTo(tk, "b"))
	requireTransfer(t, q, tk, "b")
	requireCounts(t, q, 0, 0)
}

// TestPushToErrors: PushTo refuses as Push does.
func TestPushToErrors(t *testing.T) {
	cfg := cfgM(1)
	cfg.Limit = 1
	q := newQueue(t, cfg)
	requireGranted(t, q, push(t, q, "run", false))
	push(t, q, "wait", false)
	require.ErrorIs(t, q.PushTo(queue.NewTicket("x", true), "b"), queue.ErrQueueFull, "full")
	q.Drain()
	require.ErrorIs(t, q.PushTo(queue.NewTicket("y", true), "b"), queue.ErrDraining, "draining")
	tk := queue.NewTicket("z", true)
	q2 := newQueue(t, cfgM(1))
	require.NoError(t, q2.PushTo(tk, "b"))
	require.ErrorContains(t, q2.PushTo(tk, "b"), "already pushed")
}
