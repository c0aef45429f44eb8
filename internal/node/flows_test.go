package node

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/queue"
)

// TestHandOffWithCost: the runner's hand-off applies the transfer-cost rule
// to the planner's moves on the real queue: the 1 MiB tail, too costly for
// the wait it would save, stays; the small request before it goes in its
// place. With the rule off, the planned count leaves from the tail.
func TestHandOffWithCost(t *testing.T) {
	v := policy.View{Self: 0, Nodes: []policy.NodeLoad{
		{Name: "a", Load: 4, Concurrency: 1, Known: true},
		{Name: "b", Load: 1, Concurrency: 1, Known: true},
	}}
	moves := []policy.Move{{From: 0, To: 1, Count: 1}}
	cost := policy.TransferCost{Service: 40 * time.Millisecond, Handoff: []policy.SizeCost{
		{MaxBytes: 1 << 10, Cost: time.Millisecond}, {MaxBytes: 1 << 20, Cost: 100 * time.Millisecond},
	}}
	for _, tt := range []struct {
		name   string
		cost   policy.TransferCost
		moved  string
		stayed []any
	}{
		// The rule: the large tail would save 80 ms < 100 ms; the small one 40 ms > 1 ms.
		{"measured", cost, "small", []any{"large-old", "large"}},
		// Off: the tail goes, whatever its size.
		{"off", policy.TransferCost{}, "large", []any{"large-old", "small"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: 10})
			require.NoError(t, err)
			tickets := map[string]*queue.Ticket{}
			for _, p := range []struct {
				name string
				size int64
			}{{"running", 0}, {"large-old", 1 << 20}, {"small", 100}, {"large", 1 << 20}} {
				tk := queue.NewTicket(p.name, true)
				tk.Size = p.size
				require.NoError(t, q.Push(tk))
				tickets[p.name] = tk
			}
			n := &Node{q: q}
			n.handOffWith(v, moves, tt.cost)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			out, err := q.Wait(ctx, tickets[tt.moved])
			require.NoError(t, err)
			assert.Equal(t, queue.Transfer, out.Kind)
			assert.Equal(t, "b", out.Peer)
			assert.Equal(t, tt.stayed, q.Snapshot())
		})
	}
}

func TestValidateTransferCost(t *testing.T) {
	assert.NoError(t, validateTransferCost(TransferCostMeasured))
	assert.NoError(t, validateTransferCost(TransferCostOff))
	err := validateTransferCost("on")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--transfer-cost")
	c := DefaultConfig()
	c.NodeName = "n"
	c.TransferCost = ""
	assert.ErrorContains(t, c.Validate(), "--transfer-cost", "an empty mode is refused, not taken as off")
}
