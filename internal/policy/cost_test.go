package policy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

const (
	small = int64(200)     // a form post
	large = int64(1 << 20) // a 1 MiB upload
)

// costs: 40 ms requests, 0.5 ms to hand off a small body, 30 ms a 1 MiB one.
var costs = policy.TransferCost{
	Service: 40 * time.Millisecond,
	Handoff: []policy.SizeCost{{MaxBytes: 1 << 10, Cost: 500 * time.Microsecond}, {MaxBytes: 1 << 20, Cost: 30 * time.Millisecond}},
}

func TestQueueWait(t *testing.T) {
	for _, tt := range []struct {
		load, m int
		want    time.Duration
	}{
		{0, 1, 0},                      // idle node: straight to the app
		{1, 1, 40 * time.Millisecond},  // one in service: wait for it
		{3, 1, 120 * time.Millisecond}, // one in service, two ahead
		{3, 4, 0},                      // a slot free
		{5, 4, 20 * time.Millisecond},  // two completions at 4 per 40 ms
		{2, 0, 80 * time.Millisecond},  // m below 1 counts as 1
	} {
		assert.Equal(t, tt.want, policy.QueueWait(tt.load, tt.m, 40*time.Millisecond), "load %d m %d", tt.load, tt.m)
	}
}

func TestTransferCostOf(t *testing.T) {
	assert.Equal(t, 500*time.Microsecond, costs.Of(0))
	assert.Equal(t, 500*time.Microsecond, costs.Of(1<<10))
	assert.Equal(t, 30*time.Millisecond, costs.Of(1<<10+1))
	assert.Equal(t, 30*time.Millisecond, costs.Of(8<<20), "beyond the table: the last class")
	assert.Zero(t, policy.TransferCost{}.Of(large), "no table: free")
	require.NoError(t, costs.Validate())
	for _, bad := range []policy.TransferCost{
		{Service: -1},
		{Handoff: []policy.SizeCost{{MaxBytes: 10, Cost: -1}}},
		{Handoff: []policy.SizeCost{{MaxBytes: -1}}},
		{Handoff: []policy.SizeCost{{MaxBytes: 10}, {MaxBytes: 10}}},
	} {
		assert.Error(t, bad.Validate(), "%+v", bad)
	}
}

func TestWorthMoving(t *testing.T) {
	for _, tt := range []struct {
		name    string
		v       policy.View
		moves   []policy.Move
		movable []int64
		cost    policy.TransferCost
		want    []policy.Handoff
	}{
		{
			// The rule off (nothing measured): the planner's counts from the
			// tail, whatever the bodies.
			name: "off", v: exactView(0, 1, 6, 0), moves: []policy.Move{{From: 0, To: 1, Count: 2}},
			movable: []int64{large, large, small}, cost: policy.TransferCost{},
			want: []policy.Handoff{{To: 1, Picks: []int{0, 1}}},
		},
		{
			// Small bodies and long waits: everything planned moves.
			name: "small bodies go", v: exactView(0, 1, 6, 0), moves: []policy.Move{{From: 0, To: 1, Count: 2}},
			movable: []int64{small, small, small}, cost: costs,
			want: []policy.Handoff{{To: 1, Picks: []int{0, 1}}},
		},
		{
			// Self holds 3 (one running), the target 1: the tail would wait
			// 80 ms here, 40 ms there; its 1 MiB body's 30 ms hand-off is
			// less than the 40 ms saved, so it goes.
			name: "large body, wait long enough", v: exactView(0, 1, 3, 1), moves: []policy.Move{{From: 0, To: 1, Count: 1}},
			movable: []int64{large, small}, cost: costs,
			want: []policy.Handoff{{To: 1, Picks: []int{0}}},
		},
		{
			// Self holds 2 (one running), the target 1: the tail would wait
			// 40 ms either way; nothing is saved, so even a free hand-off
			// does not go.
			name: "nothing to save", v: exactView(0, 1, 2, 1), moves: []policy.Move{{From: 0, To: 1, Count: 1}},
			movable: []int64{small}, cost: policy.TransferCost{Service: 40 * time.Millisecond},
			want: nil,
		},
		{
			// Self holds 4, the target 1: the tail would save 80 ms, less
			// than a 100 ms hand-off of its 1 MiB (a slow network): it stays
			// and the small request before it (40 ms saved) goes instead.
			name: "large tail stays, small one goes", v: exactView(0, 1, 4, 1), moves: []policy.Move{{From: 0, To: 1, Count: 1}},
			movable: []int64{large, small, large},
			cost: policy.TransferCost{Service: 40 * time.Millisecond, Handoff: []policy.SizeCost{
				{MaxBytes: 1 << 10, Cost: time.Millisecond}, {MaxBytes: 1 << 20, Cost: 100 * time.Millisecond}}},
			want: []policy.Handoff{{To: 1, Picks: []int{1}}},
		},
		{
			// Each request sent to the same target lands behind the ones
			// sent before it and saves less (self 6, target 0): 200 - 0,
			// 160 - 40, 120 - 80 = 40 ms, all above a 30 ms hand-off; the
			// fourth would save 80 - 120 < 0 and stays.
			name: "savings shrink", v: exactView(0, 1, 6, 0), moves: []policy.Move{{From: 0, To: 1, Count: 4}},
			movable: []int64{large, large, large, large, large}, cost: costs,
			want: []policy.Handoff{{To: 1, Picks: []int{0, 1, 2}}},
		},
		{
			// A request not worth moving to the first target may go to a
			// later, emptier one: the large tail would save 80 ms at node 1
			// (load 2), less than its 100 ms hand-off, but 160 ms at the
			// idle node 2; the small one before it saves 40 ms at node 1.
			name: "left for a later move", v: exactView(0, 1, 5, 2, 0),
			moves:   []policy.Move{{From: 0, To: 1, Count: 1}, {From: 0, To: 2, Count: 1}},
			movable: []int64{large, small},
			cost: policy.TransferCost{Service: 40 * time.Millisecond, Handoff: []policy.SizeCost{
				{MaxBytes: 1 << 10, Cost: time.Millisecond}, {MaxBytes: 1 << 20, Cost: 100 * time.Millisecond}}},
			want: []policy.Handoff{{To: 1, Picks: []int{1}}, {To: 2, Picks: []int{0}}},
		},
		{
			// Moves that are not Self's, to Self, out of range or empty are
			// ignored.
			name: "invalid moves", v: exactView(0, 1, 6, 0),
			moves:   []policy.Move{{From: 1, To: 0, Count: 1}, {From: 0, To: 0, Count: 1}, {From: 0, To: 5, Count: 1}, {From: 0, To: 1, Count: 0}},
			movable: []int64{small}, cost: costs, want: nil,
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, policy.WorthMoving(tt.v, tt.moves, tt.movable, tt.cost))
		})
	}
}

// On random views, every planner's moves filtered by the rule: each pick is
// a distinct movable request, no move gets more than its count, every
// pick's saving exceeds its cost (recomputed from the documented formula),
// and with the rule off the picks are the tail taken in move order.
func TestWorthMovingProperties(t *testing.T) {
	for _, name := range []string{"ll", "nu", "nu-exact"} {
		pl := planner(t, name)
		r := newRand(22)
		for it := range iterations {
			v := randomView(r)
			moves := pl.Plan(v)
			movable := make([]int64, r.IntN(v.Nodes[v.Self].Waiting()+3))
			for i := range movable {
				movable[i] = []int64{0, 100, 5000, 300 << 10, 1 << 20, 4 << 20}[r.IntN(6)]
			}
			c := policy.TransferCost{Service: time.Duration(1+r.IntN(100)) * time.Millisecond}
			for _, b := range []int64{1 << 10, 16 << 10, 256 << 10, 1 << 20} {
				if r.IntN(4) > 0 {
					c.Handoff = append(c.Handoff, policy.SizeCost{MaxBytes: b, Cost: time.Duration(r.IntN(60)) * time.Millisecond})
				}
			}
			what := fmt.Sprintf("%s iteration %d: view %+v moves %v movable %v cost %+v", name, it, v, moves, movable, c)
			got := policy.WorthMoving(v, moves, movable, c)
			want := map[int]int{}
			for _, mv := range moves {
				want[mv.To] += mv.Count
			}
			seen := map[int]bool{}
			self := v.Nodes[v.Self]
			for _, h := range got {
				require.LessOrEqual(t, len(h.Picks), want[h.To], what)
				require.NotEmpty(t, h.Picks, what)
				to := v.Nodes[h.To]
				for i, k := range h.Picks {
					require.True(t, k >= 0 && k < len(movable) && !seen[k], "%s: pick %d", what, k)
					seen[k] = true
					saving := policy.QueueWait(self.Load-1-k, self.Concurrency, c.Service) - policy.QueueWait(to.Load+i, to.Concurrency, c.Service)
					require.Greater(t, saving, c.Of(movable[k]), "%s: pick %d to %d", what, k, h.To)
				}
			}
			// Off: the tail in move order, as HandOff takes it.
			off := policy.WorthMoving(v, moves, movable, policy.TransferCost{})
			next := 0
			for _, h := range off {
				for _, k := range h.Picks {
					require.Equal(t, next, k, what)
					next++
				}
			}
			total := 0
			for _, mv := range moves {
				total += mv.Count
			}
			require.Equal(t, min(total, len(movable)), next, what)
		}
	}
}

// PlanClusterCost: with the rule off it is PlanCluster; with small bodies
// and cheap hand-offs it moves the same; with 1 MiB bodies that cost more
// than one service time, nu's single-step moves (each saving one service
// time) are all held back.
func TestPlanClusterCost(t *testing.T) {
	nu := planner(t, "nu")
	loads := []int{5, 0, 3, 8}
	plain, err := policy.PlanCluster(nu, loads, 1)
	require.NoError(t, err)
	off, err := policy.PlanClusterCost(nu, loads, 1, large, policy.TransferCost{})
	require.NoError(t, err)
	assert.Equal(t, plain, off)
	cheap, err := policy.PlanClusterCost(nu, loads, 1, small, costs)
	require.NoError(t, err)
	assert.Equal(t, plain.After, cheap.After)
	assert.Zero(t, cheap.HeldBack)
	dear, err := policy.PlanClusterCost(nu, loads, 1, large, policy.TransferCost{Service: 40 * time.Millisecond,
		Handoff: []policy.SizeCost{{MaxBytes: 1 << 20, Cost: time.Second}}})
	require.NoError(t, err)
	assert.Equal(t, loads, dear.After)
	assert.Empty(t, dear.Transfers)
	assert.Equal(t, 5, dear.HeldBack, "all five planned moves")
	_, err = policy.PlanClusterCost(nu, loads, 1, -1, costs)
	assert.Error(t, err)
	_, err = policy.PlanClusterCost(nu, loads, 1, 0, policy.TransferCost{Service: -1})
	assert.Error(t, err)
}
