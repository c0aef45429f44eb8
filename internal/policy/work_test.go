package policy_test

// Tests of the work load index's planning: the rule that turns work into
// whole requests, the work view, the planners run on it (hand-checked
// cases and properties on random views), the cluster what-if `swdctl plan
// --costs` prints, and steal's pull view.

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

func TestParseLoadIndex(t *testing.T) {
	for _, x := range []policy.LoadIndex{policy.IndexCount, policy.IndexWork} {
		got, err := policy.ParseLoadIndex(x.String())
		require.NoError(t, err)
		assert.Equal(t, x, got)
	}
	_, err := policy.ParseLoadIndex("time")
	require.ErrorContains(t, err, `unknown load index "time" (known: count, work)`)
	assert.Equal(t, "LoadIndex(7)", policy.LoadIndex(7).String())
}

func TestTakeWork(t *testing.T) {
	cases := []struct {
		name   string
		costs  []time.Duration // hand-off order: tail first
		budget time.Duration
		want   int
	}{
		// 10 ms requests into 35 ms: 10, 20, 30 taken (5 left); the
		// fourth (10 >= 2*5) would overshoot more than it helps.
		{"lights", []time.Duration{10 * ms, 10 * ms, 10 * ms, 10 * ms}, 35 * ms, 3},
		// Exactly half the budget left still stops: 10 >= 2*5 (ties keep
		// the request).
		{"tie stays", []time.Duration{30 * ms, 10 * ms}, 35 * ms, 1},
		// A heavy request (310) moves into 200 ms: 310 < 400, it is
		// nearer 200 than moving nothing.
		{"heavy rounds up", []time.Duration{310 * ms, 10 * ms}, 200 * ms, 1},
		// ... but not into 150: 310 >= 300; and the run stops there even
		// though a light one sits behind it (a hand-off is contiguous).
		{"heavy stops the run", []time.Duration{310 * ms, 10 * ms}, 150 * ms, 0},
		{"zero budget", []time.Duration{ms}, 0, 0},
		{"nothing to take", nil, time.Second, 0},
		// Everything fits.
		{"all", []time.Duration{10 * ms, 310 * ms}, time.Second, 2},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, policy.TakeWork(tc.costs, tc.budget), tc.name)
	}
}

// workNodes builds an exact view's nodes from (load, work) pairs, m = 1.
func workNodes(lw ...[2]int) []policy.NodeLoad {
	out := make([]policy.NodeLoad, len(lw))
	for i, x := range lw {
		out[i] = policy.NodeLoad{Name: fmt.Sprintf("n%d", i), Load: x[0], Concurrency: 1, Known: true, Work: time.Duration(x[1]) * ms}
	}
	return out
}

func TestWorkView(t *testing.T) {
	// Node 0 (self): a heavy in service and two heavies waiting, 930 ms;
	// node 1: three lights, 30 ms; node 2 shows 4 requests but no work (it
	// runs --load-index count): 4 × self's 310 ms per request.
	v := policy.View{Self: 0, Nodes: workNodes([2]int{3, 930}, [2]int{3, 30}, [2]int{4, 0}), Costs: []time.Duration{310 * ms, 310 * ms}}
	v.Nodes[1].Work += 500 * time.Microsecond // 30.5 ms rounds up to 31 quanta
	wv := policy.WorkView(v)
	assert.Equal(t, []int{930, 31, 1240}, []int{wv.Nodes[0].Load, wv.Nodes[1].Load, wv.Nodes[2].Load})
	assert.Equal(t, 620, wv.Nodes[0].Waiting(), "self's movable work: the two waiting heavies")
	assert.Equal(t, 3, v.Nodes[0].Load, "the view given is not modified")
	// Self with everything movable (nothing in service) keeps all of it
	// movable despite Waiting()'s floor of one slot.
	v = policy.View{Self: 0, Nodes: workNodes([2]int{2, 20}, [2]int{0, 0}), Costs: []time.Duration{10 * ms, 10 * ms}}
	wv = policy.WorkView(v)
	assert.Equal(t, 20, wv.Nodes[0].Waiting())
}

func TestPlanWorkHand(t *testing.T) {
	nu := planner(t, "nu")
	// Four nodes, self 0. Count sees 3, 3, 3, 3: balanced, nothing moves.
	// Work sees self 930 (a heavy in service, two waiting), the others 30
	// each: mean 255; over = 930 - 255 = 675, capped at 620 movable.
	// Walking 3, 2, 1 (relative 1, 2, 3): under grows by 225 per node, so
	// node 3 has room 225, node 2 225 (450 - 225), node 1 170 (the rest
	// of over): shares [0, 225), [225, 450), [450, 620). The two heavies
	// laid end to end have midpoints 155 and 465 (both below 620): the
	// first goes to 3, the second to 1.
	v := policy.View{Self: 0, Nodes: workNodes([2]int{3, 930}, [2]int{3, 30}, [2]int{3, 30}, [2]int{3, 30}),
		Costs: []time.Duration{310 * ms, 310 * ms}}
	assert.Empty(t, nu.Plan(v), "count: every node holds 3")
	got := policy.PlanWork(nu, v)
	assert.Equal(t, []policy.Move{{From: 0, To: 3, Count: 1}, {From: 0, To: 1, Count: 1}}, got)
	checkMoves(t, "nu on work", v, got)

	// A heavy moves when the planned work as a whole has room for it,
	// though no single target's share does: self 620 (a heavy in service,
	// one waiting), seven idle peers; mean 77.5, over 542 capped at the
	// waiting 310. Relative 1..4 (nodes 7, 6, 5, 4) get 77, 78, 77, 78
	// (77.5 per node in whole quanta): shares [0, 77), [77, 155),
	// [155, 232), [232, 310), none of which could take 310 alone. The
	// heavy's midpoint, 155, is below the total 310, so it moves, and
	// lies in the third share: node 5.
	v = policy.View{Self: 0, Nodes: workNodes([2]int{2, 620}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}, [2]int{0, 0}),
		Costs: []time.Duration{310 * ms}}
	got = policy.PlanWork(nu, v)
	assert.Equal(t, []policy.Move{{From: 0, To: 5, Count: 1}}, got)
	checkMoves(t, "nu on work, heavy over several shares", v, got)

	// The reverse: self holds three lights (30 ms), a peer two heavies:
	// count would move a light to the idle node; work sees self below
	// the mean and moves nothing.
	v = policy.View{Self: 0, Nodes: workNodes([2]int{3, 30}, [2]int{2, 620}, [2]int{0, 0}),
		Costs: []time.Duration{10 * ms, 10 * ms}}
	assert.Equal(t, []policy.Move{{From: 0, To: 2, Count: 1}}, nu.Plan(v))
	assert.Empty(t, policy.PlanWork(nu, v))

	// No costs (nothing movable) or self out of range: nothing.
	assert.Empty(t, policy.PlanWork(nu, policy.View{Self: 0, Nodes: workNodes([2]int{3, 930}, [2]int{0, 0})}))
	assert.Empty(t, policy.PlanWork(nu, policy.View{Self: 5, Nodes: workNodes([2]int{3, 930}), Costs: []time.Duration{ms}}))
}

// randomWorkView draws a view whose self holds some requests in service
// (never movable), some waiting that may not move (moved before), and
// some movable ones with costs from a mixed workload; peers show loads and
// works, some unknown.
func randomWorkView(rng *rand.Rand) policy.View {
	n := 2 + rng.IntN(14)
	m := 1 + rng.IntN(3)
	nodes := make([]policy.NodeLoad, n)
	draw := func() time.Duration {
		if rng.IntN(10) == 0 {
			return 310 * ms
		}
		return 10 * ms
	}
	for i := range nodes {
		load := rng.IntN(12)
		var w time.Duration
		for range load {
			w += draw()
		}
		nodes[i] = policy.NodeLoad{Name: fmt.Sprintf("n%d", i), Load: load, Concurrency: m, Known: rng.IntN(8) != 0, Work: w}
	}
	self := rng.IntN(n)
	inService := rng.IntN(m + 1)
	pinned := rng.IntN(3)
	movable := rng.IntN(12)
	var costs []time.Duration
	var w time.Duration
	for range movable {
		c := draw()
		costs = append(costs, c)
		w += c
	}
	for range inService + pinned {
		w += draw()
	}
	nodes[self] = policy.NodeLoad{Name: "self", Load: inService + pinned + movable, Concurrency: m, Known: true, Work: w}
	if inService < m && pinned+movable > 0 {
		// A node with waiting requests has every slot busy.
		nodes[self].Load = m + pinned + movable
	}
	return policy.View{Self: self, Nodes: nodes, Costs: costs}
}

// TestPlanWorkProperties: on random work views every planner's work plan
// is a valid plan (from self to distinct known peers, positive counts) that
// moves at most self's movable requests: never one in service, never one
// that may not move.
func TestPlanWorkProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 3))
	for _, name := range transferPolicies {
		pl := planner(t, name)
		for k := range 3000 {
			v := randomWorkView(rng)
			moves := policy.PlanWork(pl, v)
			what := fmt.Sprintf("%s view %d", name, k)
			checkMoves(t, what, v, moves)
			total := 0
			for _, mv := range moves {
				total += mv.Count
			}
			require.LessOrEqual(t, total, len(v.Costs), "%s: moved more than the movable requests", what)
		}
	}
}

// TestPlanClusterWork: the what-if `swdctl plan --costs` prints, by hand and
// on random clusters: requests and work are conserved, no node sends more
// than it has waiting, and the work spread shrinks on the hand case.
func TestPlanClusterWork(t *testing.T) {
	H, L := 310*ms, 10*ms
	costs := [][]time.Duration{{H, H, H}, {L, L, L}, {L, L, L}, {L, L, L}}
	plan, err := policy.PlanClusterWork(planner(t, "nu"), costs, 1)
	require.NoError(t, err)
	// As TestPlanWorkHand: node 0 sends a heavy to 3 and one to 1; every
	// other node is below the mean and sends nothing.
	assert.Equal(t, []policy.WorkMove{{Move: policy.Move{From: 0, To: 3, Count: 1}, WorkMs: 310}, {Move: policy.Move{From: 0, To: 1, Count: 1}, WorkMs: 310}}, plan.Transfers)
	assert.Equal(t, []int{1, 4, 3, 4}, plan.After)
	assert.Equal(t, []float64{310, 340, 30, 340}, plan.AfterWorkMs)

	_, err = policy.PlanClusterWork(planner(t, "nu"), costs, 0)
	require.ErrorContains(t, err, "concurrency must be at least 1")
	_, err = policy.PlanClusterWork(planner(t, "nu"), [][]time.Duration{{-ms}}, 1)
	require.ErrorContains(t, err, "cost 0 of node 0 is negative")

	rng := rand.New(rand.NewPCG(5, 8))
	for _, name := range transferPolicies {
		pl := planner(t, name)
		for k := range 500 {
			n, m := 1+rng.IntN(12), 1+rng.IntN(2)
			costs := make([][]time.Duration, n)
			total, work := 0, time.Duration(0)
			for i := range costs {
				for range rng.IntN(10) {
					c := time.Duration(1+rng.IntN(400)) * ms
					costs[i] = append(costs[i], c)
					work += c
				}
				total += len(costs[i])
			}
			plan, err := policy.PlanClusterWork(pl, costs, m)
			require.NoError(t, err)
			sent := make([]int, n)
			after, afterWork := 0, 0.0
			for _, mv := range plan.Transfers {
				sent[mv.From] += mv.Count
			}
			for i := range costs {
				require.LessOrEqual(t, sent[i], max(len(costs[i])-m, 0), "%s cluster %d: node %d sent what is in service", name, k, i)
				require.GreaterOrEqual(t, plan.After[i], 0)
				after += plan.After[i]
				afterWork += plan.AfterWorkMs[i]
			}
			require.Equal(t, total, after, "%s cluster %d: requests not conserved", name, k)
			require.InDelta(t, float64(work)/float64(ms), afterWork, 1e-6, "%s cluster %d: work not conserved", name, k)
		}
	}
}

func TestWorkPullView(t *testing.T) {
	// Self idle (a free slot): peers showing a head are ranked by head age
	// plus work. Peer 1's head waited longer, but peer 2 holds far more
	// work; peer 3 shows no head and stays without one.
	v := policy.View{Self: 0, Nodes: workNodes([2]int{0, 0}, [2]int{2, 20}, [2]int{2, 620}, [2]int{1, 300})}
	v.Nodes[1].HeadAge = 50 * ms
	v.Nodes[2].HeadAge = 5 * ms
	pv := policy.WorkPullView(v)
	assert.Equal(t, 70*ms, pv.Nodes[1].HeadAge)
	assert.Equal(t, 625*ms, pv.Nodes[2].HeadAge)
	assert.Zero(t, pv.Nodes[3].HeadAge)
	assert.Equal(t, 50*ms, v.Nodes[1].HeadAge, "the view given is not modified")
	steal, err := policy.Lookup("steal")
	require.NoError(t, err)
	c := policy.DefaultStealConfig()
	c.Order = policy.OldestHead
	assert.Equal(t, []int{1, 2}, policy.StealPull(c, v, 1), "count: oldest head first")
	assert.Equal(t, []int{2, 1}, policy.StealPull(c, pv, 1), "work: most work behind the head first")
	require.NotNil(t, steal.Puller)

	// Self busy with requests waiting (an overtake): ages are compared as
	// under count, the view is unchanged.
	v.Nodes[0] = policy.NodeLoad{Name: "n0", Load: 3, Concurrency: 1, Known: true, Work: 30 * ms, HeadAge: ms}
	assert.Equal(t, v.Nodes, policy.WorkPullView(v).Nodes)
}
