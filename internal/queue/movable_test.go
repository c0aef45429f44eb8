package queue_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// Movable lists the transferable waiting tickets from the tail, as HandOff
// would take them; HandOffTickets hands over exactly the chosen ones that
// still wait, leaving the others in place.
func TestMovableAndHandOffTickets(t *testing.T) {
	q := newQueue(t, cfgM(1))
	run := push(t, q, "run", true) // takes the slot
	a := push(t, q, "a", true)
	b := push(t, q, "b", false) // not transferable
	c := push(t, q, "c", true)
	d := push(t, q, "d", true)
	requireGranted(t, q, run)

	// Tail first, the untransferable one skipped, the running one never.
	assert.Equal(t, []*queue.Ticket{d, c, a}, q.Movable(10))
	assert.Equal(t, []*queue.Ticket{d, c}, q.Movable(2))
	assert.Empty(t, q.Movable(0))

	// Choose c only (d is too costly to move, say): d stays at the tail.
	require.Equal(t, 1, q.HandOffTickets([]*queue.Ticket{c}, "node-1"))
	requireTransfer(t, q, c, "node-1")
	requireCounts(t, q, 3, 1)
	assert.Equal(t, []any{"a", "b", "d"}, q.Snapshot())

	// A chosen ticket that was granted meanwhile is skipped, as are ones
	// already handed off, never pushed (nil) or untransferable.
	q.Done(run)
	requireGranted(t, q, a)
	assert.Equal(t, 1, q.HandOffTickets([]*queue.Ticket{a, c, nil, b, d}, "node-2"))
	requireTransfer(t, q, d, "node-2")
	assert.Equal(t, []any{"b"}, q.Snapshot())
	requireCounts(t, q, 1, 1)
	assert.Zero(t, q.HandOffTickets(nil, "node-2"))
}
