package policy_test

// Tests of the dispatch pickers rr (RoundRobin) and ct (LeastOutstanding),
// called through the registry.

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

func picker(tb testing.TB, name string) policy.Picker {
	tb.Helper()
	p, err := policy.Lookup(name)
	require.NoError(tb, err)
	require.Equal(tb, policy.KindDispatch, p.Kind, "policy %s", name)
	require.NotNil(tb, p.Picker, "policy %s", name)
	return p.Picker
}

type pickCase struct {
	name string
	view policy.DispatchView
	want int
}

func runPickCases(t *testing.T, policyName string, cases []pickCase) {
	t.Helper()
	pk := picker(t, policyName)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, pk.Pick(tc.view))
		})
	}
}

func TestRoundRobinTable(t *testing.T) {
	four := []int{0, 0, 0, 0}
	cases := []pickCase{
		// Seq 0 goes to node 0 mod 4 = 0.
		{"first arrival", policy.DispatchView{Outstanding: four, Seq: 0}, 0},
		// Seq 6: 6 mod 4 = 2.
		{"turn is seq mod n", policy.DispatchView{Outstanding: four, Seq: 6}, 2},
		// Outstanding counts play no part: seq 1 goes to node 1 although it is the busiest.
		{"ignores load", policy.DispatchView{Outstanding: []int{0, 9, 0, 0}, Seq: 1}, 1},
		// Node 1 is down: the turn runs over the 3 up nodes [0 2 3]; seq 5 mod 3 = 2 picks the third, node 3.
		{"down node skipped", policy.DispatchView{Outstanding: four, Up: []bool{true, false, true, true}, Seq: 5}, 3},
		// Seq 2: nodes 2 and 3 down, 2 mod 2 = 0 picks the first up node, node 0.
		{"skip wraps around", policy.DispatchView{Outstanding: four, Up: []bool{true, true, false, false}, Seq: 2}, 0},
		// Up nil: every node is up.
		{"nil Up means all up", policy.DispatchView{Outstanding: four, Up: nil, Seq: 3}, 3},
		// 2^63 + 1 mod 3: 2^63 = (-1)^63 = 2 mod 3, plus 1 is 0. Converting Seq
		// to int before the mod would go negative.
		{"huge seq", policy.DispatchView{Outstanding: []int{0, 0, 0}, Seq: 1<<63 + 1}, 0},
		// Nobody up.
		{"none up", policy.DispatchView{Outstanding: four, Up: []bool{false, false, false, false}, Seq: 1}, -1},
		// No nodes at all.
		{"no nodes", policy.DispatchView{Seq: 7}, -1},
	}
	runPickCases(t, "rr", cases)
}

// TestRoundRobinStrictTurn: with every node up, k rounds of n arrivals give
// every node exactly k, in order 0, 1, ..., n-1; with some nodes down, each
// arrival goes to the first up node at or after Seq mod n.
func TestRoundRobinStrictTurn(t *testing.T) {
	pk := picker(t, "rr")
	for n := 1; n <= 9; n++ {
		d := policy.DispatchView{Outstanding: make([]int, n)}
		var got, want []int
		for seq := range uint64(3 * n) {
			d.Seq = seq
			got = append(got, pk.Pick(d))
			want = append(want, int(seq)%n)
		}
		assert.Equal(t, want, got, "n=%d", n)
	}

	r := newRand(10)
	for range iterations {
		n := 1 + r.IntN(16)
		d := policy.DispatchView{Outstanding: make([]int, n), Up: make([]bool, n), Seq: r.Uint64()}
		for i := range d.Up {
			d.Up[i] = r.IntN(3) > 0
		}
		// The (Seq mod k)-th of the k up nodes, so every up node gets an
		// equal share however many are down.
		var up []int
		for i, u := range d.Up {
			if u {
				up = append(up, i)
			}
		}
		want := -1
		if len(up) > 0 {
			want = up[d.Seq%uint64(len(up))]
		}
		require.Equal(t, want, pk.Pick(d), "%+v", d)
	}
}

func TestLeastOutstandingTable(t *testing.T) {
	cases := []pickCase{
		// Minimum 1 at node 1.
		{"picks the minimum", policy.DispatchView{Outstanding: []int{3, 1, 2}, Seq: 0}, 1},
		// Seq does not override a strict minimum: seq 2 starts at node 2, yet node 1 wins.
		{"minimum beats turn", policy.DispatchView{Outstanding: []int{3, 1, 2}, Seq: 2}, 1},
		// All tied at 2: the first at or after seq mod n, 4 mod 3 = 1.
		{"tie goes to seq mod n", policy.DispatchView{Outstanding: []int{2, 2, 2}, Seq: 4}, 1},
		// Tie between nodes 0 and 2 (both 1); seq 1 starts at node 1 (5), next is node 2.
		{"tie, first at or after start", policy.DispatchView{Outstanding: []int{1, 5, 1, 5}, Seq: 1}, 2},
		// Seq 3 starts at node 3 (5), wraps to node 0 (1), node 2 ties but comes later.
		{"tie, wraps", policy.DispatchView{Outstanding: []int{1, 5, 1, 5}, Seq: 3}, 0},
		// Node 0 has the fewest but is down: node 2 (2) is the least among the up.
		{"down minimum skipped", policy.DispatchView{Outstanding: []int{0, 4, 2}, Up: []bool{false, true, true}}, 2},
		// Nobody up.
		{"none up", policy.DispatchView{Outstanding: []int{0, 0}, Up: []bool{false, false}}, -1},
		// No nodes.
		{"no nodes", policy.DispatchView{Outstanding: []int{}}, -1},
		// 2^64 - 1 mod 2 = 1: the tie goes to node 1.
		{"huge seq", policy.DispatchView{Outstanding: []int{0, 0}, Seq: ^uint64(0)}, 1},
	}
	runPickCases(t, "ct", cases)
}

// TestLeastOutstandingProperties: on random views the pick is always an up
// node with the fewest outstanding among the up nodes, the first such at or
// after Seq mod n; with all nodes tied, n consecutive arrivals visit every
// node once (ties rotate instead of piling on node 0).
func TestLeastOutstandingProperties(t *testing.T) {
	pk := picker(t, "ct")
	r := newRand(11)
	for range iterations {
		n := 1 + r.IntN(16)
		d := policy.DispatchView{Outstanding: make([]int, n), Seq: r.Uint64()}
		for i := range d.Outstanding {
			d.Outstanding[i] = r.IntN(4)
		}
		if r.IntN(2) == 0 {
			d.Up = make([]bool, n)
			for i := range d.Up {
				d.Up[i] = r.IntN(4) > 0
			}
		}
		up := func(i int) bool { return d.Up == nil || d.Up[i] }
		best := -1
		for i := range n {
			if up(i) && (best < 0 || d.Outstanding[i] < best) {
				best = d.Outstanding[i]
			}
		}
		want := -1
		for k := range n {
			if i := (int(d.Seq%uint64(n)) + k) % n; up(i) && d.Outstanding[i] == best {
				want = i
				break
			}
		}
		got := pk.Pick(d)
		require.Equal(t, want, got, "%+v", d)
		if got >= 0 {
			require.True(t, up(got))
			require.Equal(t, best, d.Outstanding[got])
		}
	}

	for n := 1; n <= 9; n++ {
		d := policy.DispatchView{Outstanding: slices.Repeat([]int{3}, n)}
		var got []int
		for seq := range uint64(n) {
			d.Seq = seq + 100
			got = append(got, pk.Pick(d))
		}
		slices.Sort(got)
		assert.Equal(t, seqInts(n), got, "n=%d: tied nodes do not share arrivals in turn", n)
	}
}

// TestLeastOutstandingFillsEvenly: a dispatcher that counts each dispatched
// request as outstanding and never completes any keeps every node within 1
// of every other, whatever the starting sequence number.
func TestLeastOutstandingFillsEvenly(t *testing.T) {
	pk := picker(t, "ct")
	d := policy.DispatchView{Outstanding: []int{4, 0, 2, 0, 1}}
	for seq := range uint64(100) {
		d.Seq = seq + 7
		i := pk.Pick(d)
		require.GreaterOrEqual(t, i, 0)
		d.Outstanding[i]++
		// {4 0 2 0 1} needs 3+1+3+2 = 9 arrivals to reach [4 3 3 3 3]; from
		// then on no node is ever more than 1 ahead of another.
		if seq+1 >= 9 {
			require.LessOrEqual(t, spread(d.Outstanding), 1, "after %d arrivals: %v", seq+1, d.Outstanding)
		}
	}
}

func seqInts(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
