package policy_test

// Property tests on random load vectors and views, with fixed seeds so a
// failure reproduces: the seed and the input are in every message.

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

// iterations of each random test; kept small enough for the whole suite to
// run in a few seconds under -race on a shared 2-core machine.
const iterations = 800

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randomView draws a view of 1..64 nodes with random loads, random stale
// entries, random per-node concurrency and a random self.
func randomView(r *rand.Rand) policy.View {
	n := 1 + r.IntN(64)
	loads := randomLoads(r, n)
	v := exactView(r.IntN(n), 1+r.IntN(4), loads...)
	staleP := []float64{0, 0.1, 0.5, 0.9}[r.IntN(4)]
	for i := range v.Nodes {
		if r.Float64() < staleP {
			v.Nodes[i].Known = false
		}
		if i != v.Self && r.IntN(4) == 0 {
			v.Nodes[i].Concurrency = r.IntN(5) // others' m plays no part; 0 too
		}
	}
	return v
}

// TestPlanInvariantsRandomViews: on random views with stale entries, every
// transfer policy's moves go from Self to known nodes, add up to at most
// Self's waiting requests, and ignore unknown entries entirely.
func TestPlanInvariantsRandomViews(t *testing.T) {
	t.Parallel()
	for _, name := range transferPolicies {
		pl := planner(t, name)
		t.Run(name, func(t *testing.T) {
			r := newRand(1)
			for range iterations {
				v := randomView(r)
				checkMoves(t, name, v, pl.Plan(v))
				checkStaleIgnored(t, name, pl, v, r)
			}
		})
	}
}

// TestPlanClusterInvariants: on random exact views, for every transfer
// policy, PlanCluster conserves requests, its After is the loads plus its
// Transfers, no node sends more than its waiting requests, no node ends
// below what it holds in service (min(load, m)), and the transfers are
// exactly the per-node plans.
func TestPlanClusterInvariants(t *testing.T) {
	t.Parallel()
	for _, name := range transferPolicies {
		pl := planner(t, name)
		t.Run(name, func(t *testing.T) {
			r := newRand(2)
			for range iterations {
				loads := randomLoads(r, 1+r.IntN(64))
				m := 1 + r.IntN(4)
				checkCluster(t, name, pl, loads, m)
			}
		})
	}
}

// checkCluster asserts PlanCluster's invariants for one planner and input.
// The per-node checks collect their failures and assert once, which keeps
// the random tests fast.
func checkCluster(tb testing.TB, name string, pl policy.Planner, loads []int, m int) policy.ClusterPlan {
	tb.Helper()
	in := slices.Clone(loads)
	cp, err := policy.PlanCluster(pl, loads, m)
	require.NoError(tb, err)
	require.Equal(tb, in, loads, "%s: PlanCluster changed its input", name)
	require.NotNil(tb, cp.Transfers, "%s: Transfers must be [] not null in JSON", name)
	require.Len(tb, cp.After, len(loads))
	require.Equal(tb, sum(loads), sum(cp.After), "%s: requests not conserved on %v (m=%d): %v", name, loads, m, cp.After)

	var bad []string
	after := slices.Clone(loads)
	sent := make([]int, len(loads))
	for _, mv := range cp.Transfers {
		if mv.From < 0 || mv.From >= len(loads) || mv.To < 0 || mv.To >= len(loads) || mv.From == mv.To || mv.Count <= 0 {
			bad = append(bad, fmt.Sprintf("malformed move %+v", mv))
			continue
		}
		after[mv.From] -= mv.Count
		after[mv.To] += mv.Count
		sent[mv.From] += mv.Count
	}
	require.Empty(tb, bad, "%s on %v (m=%d)", name, loads, m)
	if len(loads) > 0 { // (for no nodes After is nil, not [])
		require.Equal(tb, after, cp.After, "%s: After is not loads + Transfers on %v", name, loads)
	}

	perNode := []policy.Move{}
	v := exactView(0, m, loads...)
	for i, l := range loads {
		if sent[i] > max(0, l-m) {
			bad = append(bad, fmt.Sprintf("node %d sends %d of load %d", i, sent[i], l))
		}
		if cp.After[i] < min(l, m) {
			bad = append(bad, fmt.Sprintf("node %d ends at %d, below the min(%d, m) it serves", i, cp.After[i], l))
		}
		v.Self = i
		perNode = append(perNode, pl.Plan(v)...)
	}
	require.Empty(tb, bad, "%s on %v (m=%d)", name, loads, m)
	require.Equal(tb, perNode, cp.Transfers, "%s: PlanCluster is not the per-node plans on %v", name, loads)
	return cp
}

// TestNUMatchesReference: nu makes exactly the moves of the literal,
// rational-arithmetic reference of the spec's steps (prefix-sum reading),
// on random views with stale entries and binding caps; nu-exact likewise
// against the reference run with quotas.
func TestNUMatchesReference(t *testing.T) {
	t.Parallel()
	cases := []struct {
		policy string
		opt    refOptions
	}{
		{"nu", refOptions{}},
		{"nu-exact", refOptions{quotas: true}},
	}
	for _, tc := range cases {
		pl := planner(t, tc.policy)
		t.Run(tc.policy, func(t *testing.T) {
			r := newRand(3)
			for range iterations {
				v := randomView(r)
				require.Equal(t, refPlan(v, tc.opt), pl.Plan(v), "%s on %+v", tc.policy, v)
			}
		})
	}
}

// TestNUMatchesReferenceSmall exhausts every load vector of up to 4 nodes
// with loads 0..5 (m = 1 and 2, every self): the small cases are where the
// fractional parts of the mean and ceil/floor edges are densest.
func TestNUMatchesReferenceSmall(t *testing.T) {
	t.Parallel()
	nu, exact := planner(t, "nu"), planner(t, "nu-exact")
	for n := 1; n <= 4; n++ {
		loads := make([]int, n)
		for {
			for m := 1; m <= 2; m++ {
				for self := range n {
					v := exactView(self, m, loads...)
					require.Equal(t, refPlan(v, refOptions{}), nu.Plan(v), "nu on %v self %d m %d", loads, self, m)
					require.Equal(t, refPlan(v, refOptions{quotas: true}), exact.Plan(v), "nu-exact on %v self %d m %d", loads, self, m)
				}
			}
			if !nextVector(loads, 5) {
				break
			}
		}
	}
}

// nextVector steps xs through every vector with entries 0..hi, like an
// odometer; false after the last.
func nextVector(xs []int, hi int) bool {
	for i := range xs {
		if xs[i] < hi {
			xs[i]++
			return true
		}
		xs[i] = 0
	}
	return false
}

// TestNUTargetsAndSenders: on exact views nu sends only to nodes strictly
// below the mean (never to an overloaded node, never to one at the mean),
// and a sender never ends below ceil(mean) (its over is load - ceil(mean))
// nor receives anything. (Receivers, on the other hand, can end far above
// ceil(mean): see TestNUHerdWithFractionalMean.)
func TestNUTargetsAndSenders(t *testing.T) {
	t.Parallel()
	pl := planner(t, "nu")
	r := newRand(4)
	for range iterations {
		loads := randomLoads(r, 1+r.IntN(64))
		m := 1 + r.IntN(4)
		cp := checkCluster(t, "nu", pl, loads, m)
		n, S := len(loads), sum(loads)
		ceilMean := (S + n - 1) / n
		in := received(n, cp.Transfers)
		for _, mv := range cp.Transfers {
			require.Less(t, loads[mv.To]*n, S, "nu sends to node %d at or above the mean on %v", mv.To, loads)
		}
		for i := range loads {
			if loads[i] > ceilMean {
				require.Zero(t, in[i], "nu sends to overloaded node %d on %v", i, loads)
				require.GreaterOrEqual(t, cp.After[i], ceilMean, "nu sender %d goes below ceil(mean) on %v", i, loads)
			}
		}
	}
}

// TestNUExactBalances: the spec's property of the integer-quota variant.
// With an exact view, simultaneous activation and nothing pinned in service
// every node ends exactly on its quota. The cap at waiting requests
// (Load - m) cannot bind when every quota is at least m (over = load - quota
// <= load - m), which for m = 1 is exactly "total at least n"; there the
// result must be the quotas, so every node is within 1 of every other.
func TestNUExactBalances(t *testing.T) {
	t.Parallel()
	pl := planner(t, "nu-exact")
	r := newRand(5)
	checked := 0
	for range 3 * iterations {
		n := 1 + r.IntN(64)
		loads := randomLoads(r, n)
		m := 1 + r.IntN(4)
		if sum(loads) < m*n {
			continue // some quota is below m: the cap may bind (TestNUExactCapBinds)
		}
		checked++
		cp := checkCluster(t, "nu-exact", pl, loads, m)
		require.Equal(t, quotas(loads), cp.After, "nu-exact on %v (m=%d)", loads, m)
		require.LessOrEqual(t, spread(cp.After), 1)
	}
	require.Greater(t, checked, iterations/2, "too few vectors with total >= m*n were drawn")
}

// TestNUExactCapBinds documents what nu-exact does when some quota is below
// m, so a node cannot shed down to its quota without moving a request that
// is in service. On exact views:
//   - a sender ends at max(quota, min(load, m)): its capped over is always
//     placed (the walk finds room for the whole uncapped over);
//   - each sender's moves are its uncapped moves cut off at the capped over,
//     so no node receives more than without the cap and no receiver passes
//     its quota, but the other senders, which counted the capped node's full
//     excess as going ahead of them, leave some receivers short;
//   - with m = 1 the result is still within 1 everywhere (quotas are 0 or 1
//     when the total is below n, and a capped sender keeps exactly 1), but
//     with m > 1 the spread can be up to m (a node keeps its m in service).
func TestNUExactCapBinds(t *testing.T) {
	t.Parallel()
	pl := planner(t, "nu-exact")
	r := newRand(6)
	bound := 0
	for range iterations {
		n := 1 + r.IntN(24) // the rational reference is O(n^2) per cluster
		loads := randomLoads(r, n)
		m := 1 + r.IntN(4)
		cp := checkCluster(t, "nu-exact", pl, loads, m)
		q := quotas(loads)
		uncapped, _ := refCluster(loads, m, refOptions{quotas: true, noCap: true})
		in := received(n, cp.Transfers)
		capBinds := false
		var bad []string
		for i, l := range loads {
			switch {
			case l > q[i]:
				if want := max(q[i], min(l, m)); cp.After[i] != want || in[i] != 0 {
					bad = append(bad, fmt.Sprintf("sender %d ends at %d (received %d), want max(quota, min(load, m)) = %d", i, cp.After[i], in[i], want))
				}
				capBinds = capBinds || min(l, m) > q[i]
			case l < q[i]:
				if cp.After[i] < l || cp.After[i] > q[i] {
					bad = append(bad, fmt.Sprintf("receiver %d ends at %d, outside [load %d, quota %d]", i, cp.After[i], l, q[i]))
				}
			default:
				if cp.After[i] != l {
					bad = append(bad, fmt.Sprintf("node %d at quota %d ends at %d", i, l, cp.After[i]))
				}
			}
			mine := movesFrom(cp.Transfers, i)
			if want := truncate(movesFrom(uncapped, i), total(mine)); !slices.Equal(want, mine) {
				bad = append(bad, fmt.Sprintf("node %d moves %v, not its uncapped moves cut at its capped over: %v", i, mine, want))
			}
		}
		require.Empty(t, bad, "nu-exact on %v (m=%d), quotas %v", loads, m, q)
		if m == 1 {
			require.LessOrEqual(t, spread(cp.After), 1, "m=1 on %v: %v", loads, cp.After)
		}
		if capBinds {
			bound++
		}
	}
	require.Greater(t, bound, iterations/10, "too few vectors where the cap binds were drawn")

	// A hand case with m = 2: loads [0 0 3 3], S = 6, quotas [2 2 1 1].
	// Node 2: over = 3 - 1 = 2, capped at 1 waiting; t=1 node 1: under 2,
	// moves 1. Node 3: over 2, capped at 1; t=1 node 2: under 1 - 3 = -2;
	// t=2 node 1: 0; t=3 node 0: 2, moves 1. After [1 1 2 2]: nodes 2 and 3
	// keep their 2 in service, off their quota of 1; nodes 0 and 1 end 1 short.
	cp, err := policy.PlanCluster(pl, []int{0, 0, 3, 3}, 2)
	require.NoError(t, err)
	require.Equal(t, []int{1, 1, 2, 2}, cp.After)
	// m = 4, loads [5 0 0 0 0 0]: quotas [1 1 1 1 1 0], node 0 may move only
	// its 1 waiting request (to node 4, its nearest node with a quota of 1),
	// and keeps 4: spread 4.
	cp, err = policy.PlanCluster(pl, []int{5, 0, 0, 0, 0, 0}, 4)
	require.NoError(t, err)
	require.Equal(t, []int{4, 0, 0, 0, 1, 0}, cp.After)
}

// movesFrom is the moves of one source, in order.
func movesFrom(moves []policy.Move, from int) []policy.Move {
	var out []policy.Move
	for _, mv := range moves {
		if mv.From == from {
			out = append(out, mv)
		}
	}
	return out
}

// total adds up the counts of moves.
func total(moves []policy.Move) int {
	s := 0
	for _, mv := range moves {
		s += mv.Count
	}
	return s
}

// truncate cuts a move list once total requests have been sent.
func truncate(moves []policy.Move, total int) []policy.Move {
	var out []policy.Move
	for _, mv := range moves {
		if total <= 0 {
			break
		}
		mv.Count = min(mv.Count, total)
		total -= mv.Count
		out = append(out, mv)
	}
	return out
}

// TestLLHerdIsCommon: on random exact views with several overloaded nodes,
// LL routinely sends one node more than its room below ceil(mean) (every
// overloaded node picks the same least-loaded node), while nu-exact never
// does (receivers end at most on their quota, TestNUExactCapBinds).
func TestLLHerdIsCommon(t *testing.T) {
	t.Parallel()
	ll, exact := planner(t, "ll"), planner(t, "nu-exact")
	r := newRand(7)
	herds := 0
	for range iterations {
		n := 2 + r.IntN(63)
		loads := randomLoads(r, n)
		S := sum(loads)
		ceilMean := (S + n - 1) / n
		cpL := checkCluster(t, "ll", ll, loads, 1)
		cpX := checkCluster(t, "nu-exact", exact, loads, 1)
		inL, inX := received(n, cpL.Transfers), received(n, cpX.Transfers)
		herd := false
		for i := range loads {
			require.LessOrEqual(t, inX[i], max(0, ceilMean-loads[i]), "nu-exact overfills node %d on %v", i, loads)
			herd = herd || inL[i] > max(0, ceilMean-loads[i])
		}
		if herd {
			herds++
		}
	}
	require.Greater(t, herds, iterations/10)
}

// TestNUNoHerdProperty checks the paper's claim for N ("no herd effect") on
// random exact views: no node is sent more than its room below ceil(mean).
// It fails for the spec's N: see TestNUHerdWithFractionalMean.
func TestNUNoHerdProperty(t *testing.T) {
	t.Skip("bug (spec, not code): N piles requests on one node when the mean's fraction is high; " +
		"e.g. loads [0 2 0 2 0 2 0], m=1: nu sends all 3 excess requests to node 6 (after [0 1 0 1 0 1 3], " +
		"want every node <= ceil(6/7) = 1); see TestNUHerdWithFractionalMean")
	pl := planner(t, "nu")
	r := newRand(8)
	for range iterations {
		n := 2 + r.IntN(63)
		loads := randomLoads(r, n)
		ceilMean := (sum(loads) + n - 1) / n
		cp := checkCluster(t, "nu", pl, loads, 1)
		in := received(n, cp.Transfers)
		for i := range loads {
			require.LessOrEqual(t, in[i], max(0, ceilMean-loads[i]), "nu overfills node %d on %v: %v", i, loads, cp.After)
		}
	}
}
