package policy_test

// Shared helpers of the policy tests: view builders, the invariant checks
// every transfer plan must pass, random load vectors, and independent
// reference implementations of N and its integer-quota variant written
// straight from the numbered steps of docs/algorithms.md.

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

// transferPolicies are the registered transfer policies under test, in a
// fixed order.
var transferPolicies = []string{"ll", "nu", "nu-exact"}

// planner returns the registered planner of a transfer policy.
func planner(tb testing.TB, name string) policy.Planner {
	tb.Helper()
	p, err := policy.Lookup(name)
	require.NoError(tb, err)
	require.Equal(tb, policy.KindTransfer, p.Kind, "policy %s", name)
	require.NotNil(tb, p.Planner, "policy %s", name)
	return p.Planner
}

// exactView is the view node self has of a cluster where every entry is
// known and every node serves m requests at once.
func exactView(self, m int, loads ...int) policy.View {
	nodes := make([]policy.NodeLoad, len(loads))
	for i, l := range loads {
		nodes[i] = policy.NodeLoad{Name: fmt.Sprintf("n%d", i), Load: l, Concurrency: m, Known: true}
	}
	return policy.View{Self: self, Nodes: nodes}
}

// withUnknown marks the given nodes of v as unknown (stale), in a copy.
func withUnknown(v policy.View, ids ...int) policy.View {
	nodes := slices.Clone(v.Nodes)
	for _, id := range ids {
		nodes[id].Known = false
	}
	return policy.View{Self: v.Self, Nodes: nodes}
}

// checkMoves asserts what every transfer plan must satisfy, whatever the
// policy: each move goes from Self to another known node in range with a
// positive count, no target appears twice, and the counts add up to at
// most Self's waiting requests (Load - m: what is in service never moves).
func checkMoves(tb testing.TB, what string, v policy.View, moves []policy.Move) {
	tb.Helper()
	if v.Self < 0 || v.Self >= len(v.Nodes) {
		require.Empty(tb, moves, "%s: self %d outside a view of %d nodes", what, v.Self, len(v.Nodes))
		return
	}
	total := 0
	seen := map[int]bool{}
	for _, mv := range moves {
		require.Equal(tb, v.Self, mv.From, "%s: move %+v not from self", what, mv)
		require.NotEqual(tb, v.Self, mv.To, "%s: move %+v to self", what, mv)
		require.Positive(tb, mv.Count, "%s: move %+v", what, mv)
		require.True(tb, mv.To >= 0 && mv.To < len(v.Nodes), "%s: move %+v target out of range", what, mv)
		require.True(tb, v.Nodes[mv.To].Known, "%s: move %+v targets an unknown node", what, mv)
		require.False(tb, seen[mv.To], "%s: target %d appears twice in %v", what, mv.To, moves)
		seen[mv.To] = true
		total += mv.Count
	}
	require.LessOrEqual(tb, total, v.Nodes[v.Self].Waiting(),
		"%s: moves %v exceed self's %d waiting requests", what, moves, v.Nodes[v.Self].Waiting())
}

// compact drops the unknown entries (except Self) from v and returns the
// smaller view together with the absolute ID of each of its entries.
func compact(v policy.View) (policy.View, []int) {
	var out policy.View
	var ids []int
	for i, n := range v.Nodes {
		if n.Known || i == v.Self {
			if i == v.Self {
				out.Self = len(out.Nodes)
			}
			out.Nodes = append(out.Nodes, n)
			ids = append(ids, i)
		}
	}
	return out, ids
}

// checkStaleIgnored asserts that unknown entries play no part in a plan:
// planning on v gives the same moves as planning on v with the unknown
// entries removed (IDs mapped back), and as planning on v with every
// unknown entry's load changed.
func checkStaleIgnored(tb testing.TB, what string, pl policy.Planner, v policy.View, r *rand.Rand) {
	tb.Helper()
	if v.Self < 0 || v.Self >= len(v.Nodes) {
		return
	}
	got := pl.Plan(v)
	small, ids := compact(v)
	var want []policy.Move
	for _, mv := range pl.Plan(small) {
		want = append(want, policy.Move{From: ids[mv.From], To: ids[mv.To], Count: mv.Count})
	}
	require.Equal(tb, want, got, "%s: plan changes when unknown entries are dropped from %+v", what, v)

	noisy := policy.View{Self: v.Self, Nodes: slices.Clone(v.Nodes)}
	for i := range noisy.Nodes {
		if !noisy.Nodes[i].Known && i != v.Self {
			noisy.Nodes[i].Load = r.IntN(1000)
		}
	}
	require.Equal(tb, got, pl.Plan(noisy), "%s: plan depends on the loads of unknown entries of %+v", what, v)
}

// randomLoads draws a load vector of n nodes from one of several shapes, so
// that random tests see flat, spread and concentrated clusters alike.
func randomLoads(r *rand.Rand, n int) []int {
	loads := make([]int, n)
	switch r.IntN(5) {
	case 0: // uniform small loads, many ties
		for i := range loads {
			loads[i] = r.IntN(5)
		}
	case 1: // uniform wide loads
		for i := range loads {
			loads[i] = r.IntN(200)
		}
	case 2: // a few hot nodes on an idle ring (the paper's Figure 2 shape)
		for range 1 + r.IntN(3) {
			loads[r.IntN(n)] += r.IntN(60)
		}
	case 3: // all equal, then a few nudged
		base := r.IntN(10)
		for i := range loads {
			loads[i] = base
		}
		for range r.IntN(4) {
			loads[r.IntN(n)] += 1 + r.IntN(8)
		}
	default: // alternating hot and idle runs
		run := 1 + r.IntN(4)
		for i := range loads {
			if (i/run)%2 == 0 {
				loads[i] = r.IntN(30)
			}
		}
	}
	return loads
}

// --- Reference implementations ------------------------------------------

// refOptions choose the variant the reference follows.
type refOptions struct {
	// quotas: the nu-exact variant (integer quotas) instead of the real mean.
	quotas bool
	// noCap: do not cap over at the waiting requests (what the spec's
	// balance property assumes: nothing pinned in service).
	noCap bool
}

// refPlan is an independent reference for the planning node of N (and of
// nu-exact with opt.quotas), written literally from the spec's numbered
// steps in its prefix-sum reading, in exact rational arithmetic (math/big),
// so no float rounding can flip a floor.
//
// Only the known entries (and Self) form the ring; relative IDs are
// computed from the spec's formula (i - j + n) % n over positions in that
// ring, not by walking backwards, so an error in either is caught.
func refPlan(v policy.View, opt refOptions) []policy.Move {
	if v.Self < 0 || v.Self >= len(v.Nodes) {
		return nil
	}
	var ring []int // absolute IDs, ascending
	i := -1        // position of self in ring
	for id, nd := range v.Nodes {
		if nd.Known || id == v.Self {
			if id == v.Self {
				i = len(ring)
			}
			ring = append(ring, id)
		}
	}
	n := len(ring)
	byRel := make([]int, n) // relative ID -> absolute ID
	for j := range ring {
		byRel[(i-j+n)%n] = ring[j]
	}
	load := func(id int) *big.Rat { return new(big.Rat).SetInt64(int64(v.Nodes[id].Load)) }
	S := int64(0)
	for _, id := range ring {
		S += int64(v.Nodes[id].Load)
	}

	// Step 1: m = mean load over all nodes. In the quota variant every node
	// has its own integer target instead: floor(S/n), plus one for the
	// S mod n lowest absolute IDs (the first S mod n entries of ring).
	mean := big.NewRat(S, int64(n))
	targets := map[int]*big.Rat{}
	for j, id := range ring {
		targets[id] = mean
		if opt.quotas {
			q := S / int64(n)
			if int64(j) < S%int64(n) {
				q++
			}
			targets[id] = new(big.Rat).SetInt64(q)
		}
	}
	target := func(id int) *big.Rat { return targets[id] }

	// Step 2: over = own load - ceil(m) (own quota in the variant), capped
	// at the requests waiting (spec 3.2, assumption 3).
	over := load(v.Self)
	over.Sub(over, ratCeil(target(v.Self)))
	if !opt.noCap {
		if w := new(big.Rat).SetInt64(int64(v.Nodes[v.Self].Waiting())); over.Cmp(w) > 0 {
			over = w
		}
	}
	// Step 3: if over <= 0, stop.
	if over.Sign() <= 0 {
		return nil
	}
	// Step 4: t = 1, under = 0.
	var moves []policy.Move
	t := 1
	under := new(big.Rat)
	for t < n { // Step 8's "if t == n, stop", checked before each visit
		tgt := byRel[t]
		// Step 5: under += m - load(t).
		under.Add(under, new(big.Rat).Sub(target(tgt), load(tgt)))
		// Step 6: if floor(under) > 0, move k = min(floor(under), over) to t;
		// step 8 in the prefix-sum reading: subtract k (not a negative
		// floor) from over and under.
		if f := ratFloor(under); f.Sign() > 0 {
			k := f
			if over.Cmp(k) < 0 {
				k = over
			}
			moves = append(moves, policy.Move{From: v.Self, To: tgt, Count: ratInt(k)})
			over = new(big.Rat).Sub(over, k)
			under.Sub(under, k)
		}
		// Step 7: stop once over is used up.
		if over.Sign() <= 0 {
			break
		}
		t++ // Step 8 (and 9: go to 5)
	}
	return moves
}

// literalPlan is N read word for word, the reading the spec rejects: step 8
// subtracts floor(under) from over and under even when it is negative.
// Used only to show that the implementation is not this reading.
func literalPlan(v policy.View) []policy.Move {
	n := len(v.Nodes)
	i := v.Self
	S := int64(0)
	for _, nd := range v.Nodes {
		S += int64(nd.Load)
	}
	mean := big.NewRat(S, int64(n))
	over := new(big.Rat).SetInt64(int64(v.Nodes[i].Load))
	over.Sub(over, ratCeil(mean))
	if over.Sign() <= 0 {
		return nil
	}
	var moves []policy.Move
	under := new(big.Rat)
	for t := 1; t < n; t++ {
		tgt := (i - t + n) % n
		under.Add(under, new(big.Rat).Sub(mean, new(big.Rat).SetInt64(int64(v.Nodes[tgt].Load))))
		f := ratFloor(under)
		if f.Sign() > 0 {
			k := f
			if over.Cmp(k) < 0 {
				k = over
			}
			moves = append(moves, policy.Move{From: i, To: tgt, Count: ratInt(k)})
		}
		if over.Cmp(f) < 0 {
			break
		}
		over = new(big.Rat).Sub(over, f)
		under.Sub(under, f)
	}
	return moves
}

// ratFloor is floor(x) as a Rat. big.Int's Div is Euclidean, which for the
// positive denominator of a normalised Rat is floor division.
func ratFloor(x *big.Rat) *big.Rat {
	q := new(big.Int).Div(x.Num(), x.Denom())
	return new(big.Rat).SetInt(q)
}

// ratCeil is ceil(x) = -floor(-x).
func ratCeil(x *big.Rat) *big.Rat {
	f := ratFloor(new(big.Rat).Neg(x))
	return f.Neg(f)
}

func ratInt(x *big.Rat) int {
	if !x.IsInt() {
		panic("ratInt of a non-integer " + x.String())
	}
	return int(x.Num().Int64())
}

// refCluster runs the reference for every node of an exact view and
// returns all moves and the loads after them, like policy.PlanCluster.
func refCluster(loads []int, m int, opt refOptions) ([]policy.Move, []int) {
	after := slices.Clone(loads)
	moves := []policy.Move{}
	v := exactView(0, m, loads...)
	for i := range loads {
		v.Self = i
		for _, mv := range refPlan(v, opt) {
			moves = append(moves, mv)
			after[mv.From] -= mv.Count
			after[mv.To] += mv.Count
		}
	}
	return moves, after
}

// quotas is nu-exact's split of the total: floor(S/n) each, plus one for the
// S mod n lowest IDs.
func quotas(loads []int) []int {
	n, S := len(loads), 0
	for _, l := range loads {
		S += l
	}
	q := make([]int, n)
	for i := range q {
		q[i] = S / n
		if i < S%n {
			q[i]++
		}
	}
	return q
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// spread is max - min of a non-empty vector.
func spread(xs []int) int { return slices.Max(xs) - slices.Min(xs) }

// received adds up, per node, the requests it is sent.
func received(n int, moves []policy.Move) []int {
	in := make([]int, n)
	for _, mv := range moves {
		in[mv.To] += mv.Count
	}
	return in
}
