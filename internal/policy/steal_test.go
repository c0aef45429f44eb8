package policy_test

// Tests of steal (StealPull, StealPushArrival, StealConfig, NewSteal), cq
// (FreeSlot, FreeSlotOrLeast) and the pull what-if PullCluster.

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

const ms = time.Millisecond

// headView is node self's view of a cluster where every entry is known,
// every node serves m at once, node i holds loads[i] and shows heads[i].
func headView(self, m int, loads []int, heads []time.Duration) policy.View {
	v := exactView(self, m, loads...)
	for i := range v.Nodes {
		v.Nodes[i].HeadAge = heads[i]
	}
	return v
}

// oldest: oldest head first, attempts peers at most, no overtaking.
func oldest(attempts int) policy.StealConfig {
	c := policy.DefaultStealConfig()
	c.Order, c.Attempts, c.Overtake = policy.OldestHead, attempts, 0
	return c
}

func overtake(margin time.Duration) policy.StealConfig {
	c := oldest(3)
	c.Overtake = margin
	return c
}

func TestStealPullOldestHeadTable(t *testing.T) {
	cases := []struct {
		name string
		c    policy.StealConfig
		v    policy.View
		want []int
	}{
		// Self (node 0) serves one request with m = 1: no free slot, no pull.
		{"self busy", oldest(3), headView(0, 1, []int{1, 3, 2}, []time.Duration{0, 5 * ms, 2 * ms}), nil},
		// Self idle but nobody shows a head: nothing to ask.
		{"no heads", oldest(3), headView(0, 1, []int{0, 1, 1}, []time.Duration{0, 0, 0}), nil},
		// Heads 5, 20, 10 ms on nodes 1, 2, 3: oldest first is 2, 3, 1.
		{"oldest first", oldest(3), headView(0, 1, []int{0, 2, 3, 2}, []time.Duration{0, 5 * ms, 20 * ms, 10 * ms}), []int{2, 3, 1}},
		// Same view, 2 attempts: the two oldest only.
		{"attempts bound", oldest(2), headView(0, 1, []int{0, 2, 3, 2}, []time.Duration{0, 5 * ms, 20 * ms, 10 * ms}), []int{2, 3}},
		// One attempt: only the oldest.
		{"one attempt", oldest(1), headView(0, 1, []int{0, 2, 3, 2}, []time.Duration{0, 5 * ms, 20 * ms, 10 * ms}), []int{2}},
		// Node 2 has the oldest head but its entry is stale: skipped.
		{"unknown skipped", oldest(3), withUnknown(headView(0, 1, []int{0, 2, 3, 2}, []time.Duration{0, 5 * ms, 20 * ms, 10 * ms}), 2), []int{3, 1}},
		// Self is node 2 of 4; nodes 0, 1 and 3 show the same 7 ms head.
		// Relative IDs: node 1 is 1, node 0 is 2, node 3 is 3: nearer first.
		{"ties by ring distance", oldest(3), headView(2, 1, []int{2, 2, 0, 2}, []time.Duration{7 * ms, 7 * ms, 0, 7 * ms}), []int{1, 0, 3}},
		// m = 2 and self holds 1: one slot is free, so it pulls.
		{"m=2 one free slot", oldest(3), headView(0, 2, []int{1, 4}, []time.Duration{0, 3 * ms}), []int{1}},
		// m = 2 and self holds 2: no free slot.
		{"m=2 full", oldest(3), headView(0, 2, []int{2, 4}, []time.Duration{0, 3 * ms}), nil},
		// Self out of range: nothing.
		{"self out of range", oldest(3), headView(5, 1, []int{0, 3}, []time.Duration{0, 3 * ms}), nil},
		// A single-node cluster has no peer.
		{"alone", oldest(3), headView(0, 1, []int{0}, []time.Duration{0}), nil},
		// Self (m = 1) has a request waiting (load 1, head 10 ms) and
		// overtakes 50 ms: only heads older than 60 ms count: node 2 (80 ms).
		{"overtake: only much older heads", overtake(50 * ms), headView(0, 1, []int{1, 2, 2}, []time.Duration{10 * ms, 40 * ms, 80 * ms}), []int{2}},
		// Same, but no peer head is older than 60 ms: serve the local one.
		{"overtake: none old enough", overtake(50 * ms), headView(0, 1, []int{1, 2, 2}, []time.Duration{10 * ms, 40 * ms, 60 * ms}), nil},
		// Requests wait locally but none is movable (HeadAge 0): nothing to compare, no pull.
		{"overtake: local not movable", overtake(50 * ms), headView(0, 1, []int{1, 2}, []time.Duration{0, 900 * ms}), nil},
		// Without overtaking, a waiting local request means no pull at all.
		{"no overtake with local work", oldest(3), headView(0, 1, []int{1, 2}, []time.Duration{10 * ms, 900 * ms}), nil},
		// A peer showing a head but a load that says nothing waits (the
		// entries disagree, e.g. load read later than the head): HeadAge
		// decides, the peer's answer will tell.
		{"head decides over load", oldest(3), headView(0, 1, []int{0, 1}, []time.Duration{0, 4 * ms}), []int{1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := policy.StealPull(tc.c, tc.v, 1)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestStealPullRandomTopK: the first k asks are the k oldest heads in an
// order that depends on the seed (every order appears), the rest follow
// oldest first, and the same seed gives the same list.
func TestStealPullRandomTopK(t *testing.T) {
	c := policy.StealConfig{Order: policy.RandomTopK, K: 3, Attempts: 5}
	// Heads (ms): node 1: 10, 2: 40, 3: 30, 4: 20, 5: 5, 6: 1.
	v := headView(0, 1, []int{0, 2, 2, 2, 2, 2, 2}, []time.Duration{0, 10 * ms, 40 * ms, 30 * ms, 20 * ms, 5 * ms, 1 * ms})
	orders := map[string]int{}
	for seed := range uint64(600) {
		got := policy.StealPull(c, v, seed)
		require.Len(t, got, 5)
		assert.ElementsMatch(t, []int{2, 3, 4}, got[:3], "seed %d: the 3 oldest first", seed)
		assert.Equal(t, []int{1, 5}, got[3:], "seed %d: then oldest first, cut at 5", seed)
		assert.Equal(t, got, policy.StealPull(c, v, seed), "seed %d: deterministic", seed)
		orders[fmt.Sprint(got[:3])]++
	}
	assert.Len(t, orders, 6, "all 3! orders of the top 3 appear: %v", orders)
	for o, n := range orders {
		assert.Greater(t, n, 60, "order %s is roughly uniform (expect 100 of 600)", o)
	}
}

// TestStealPullPowerOfD: d peers drawn among those with a head, asked
// oldest first; over seeds every candidate gets drawn.
func TestStealPullPowerOfD(t *testing.T) {
	c := policy.StealConfig{Order: policy.PowerOfD, K: 2, Attempts: 3}
	v := headView(0, 1, []int{0, 2, 2, 1, 2, 2}, []time.Duration{0, 10 * ms, 40 * ms, 0, 20 * ms, 5 * ms})
	drawn := map[int]int{}
	for seed := range uint64(400) {
		got := policy.StealPull(c, v, seed)
		require.Len(t, got, 2, "d = 2 of 4 candidates")
		assert.NotEqual(t, got[0], got[1])
		assert.True(t, v.Nodes[got[0]].HeadAge > v.Nodes[got[1]].HeadAge, "seed %d: oldest first: %v", seed, got)
		assert.NotContains(t, got, 3, "node 3 shows no head")
		for _, j := range got {
			drawn[j]++
		}
	}
	// Each of the 4 candidates is in a pair with probability 1/2.
	for _, j := range []int{1, 2, 4, 5} {
		assert.InDelta(t, 200, drawn[j], 60, "node %d drawn about half the time", j)
	}
	// d larger than the candidates: all of them, oldest first.
	c.K = 9
	assert.Equal(t, []int{2, 4, 1}, policy.StealPull(c, v, 7))
}

func TestStealPushArrivalTable(t *testing.T) {
	random := policy.StealConfig{Order: policy.OldestHead, Attempts: 1, PushArrival: true, PushTarget: policy.RandomIdle}
	fresh := random
	fresh.PushTarget = policy.FreshestIdle
	aged := func(v policy.View, ages ...time.Duration) policy.View {
		for i, a := range ages {
			v.Nodes[i].Age = a
		}
		return v
	}
	cases := []struct {
		name string
		c    policy.StealConfig
		v    policy.View
		want int
	}{
		// Self (node 0) is idle: the arrival starts at once, nothing moves.
		{"self has a free slot", random, exactView(0, 1, 0, 0, 0), -1},
		// Self busy, every peer busy: keep it.
		{"nobody idle", random, exactView(0, 1, 1, 1, 3), -1},
		// Self busy, node 2 alone is idle: there, whatever the seed.
		{"one idle peer", random, exactView(0, 1, 2, 1, 0), 2},
		// The only idle peer's entry is stale: keep it.
		{"idle peer unknown", random, withUnknown(exactView(0, 1, 2, 1, 0), 2), -1},
		// m = 2: self holds 2 (full); node 1 holds 1 of 2: idle enough.
		{"m=2 peer with one free slot", random, exactView(0, 2, 2, 1, 2), 1},
		// Freshest: nodes 1 and 2 idle, entries 10 ms and 2 ms old: node 2.
		{"freshest", fresh, aged(exactView(0, 1, 1, 0, 0), 0, 10*ms, 2*ms), 2},
		// Freshest with equal ages: self is node 0 of 4, relative ID 1 is
		// node 3, 2 is node 2: node 3 is nearer.
		{"freshest ties by ring distance", fresh, aged(exactView(0, 1, 1, 9, 0, 0), 0, 0, 3*ms, 3*ms), 3},
		// Self out of range.
		{"self out of range", random, exactView(4, 1, 0, 0), -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(20) {
				assert.Equal(t, tc.want, policy.StealPushArrival(tc.c, tc.v, seed), "seed %d", seed)
			}
		})
	}
}

// TestStealPushArrivalRandomSpreads: with several idle peers the seed
// spreads pushes uniformly over them and never onto a busy one.
func TestStealPushArrivalRandomSpreads(t *testing.T) {
	c := policy.StealConfig{Order: policy.OldestHead, Attempts: 1, PushArrival: true}
	v := exactView(0, 1, 3, 0, 2, 0, 0, 1)
	got := map[int]int{}
	for seed := range uint64(900) {
		got[policy.StealPushArrival(c, v, seed)]++
	}
	assert.Len(t, got, 3, "only the idle nodes 1, 3, 4: %v", got)
	for _, j := range []int{1, 3, 4} {
		assert.InDelta(t, 300, got[j], 60, "node %d", j)
	}
}

func TestGossipPull(t *testing.T) {
	cases := []struct {
		name string
		v    policy.View
		k    int
		want float64 // probability of yes
	}{
		// k = 0: no thinning, every idle node pulls.
		{"k=0", exactView(0, 1, 0, 0, 0, 0), 0, 1},
		// Self and 3 idle peers: 4 idle nodes, k = 1: one in four.
		{"four idle, k=1", exactView(0, 1, 0, 0, 0, 0), 1, 0.25},
		// Same, k = 2: one in two.
		{"four idle, k=2", exactView(0, 1, 0, 0, 0, 0), 2, 0.5},
		// Busy peers do not count: self alone is idle, so it pulls.
		{"alone idle", exactView(0, 1, 0, 1, 3, 1), 1, 1},
		// Unknown idle peers do not count: self and node 2 idle: one in two.
		{"unknown idle ignored", withUnknown(exactView(0, 1, 0, 0, 0, 1), 1), 1, 0.5},
		// k at least the idle count: always.
		{"k covers all", exactView(0, 1, 0, 0, 5), 3, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			yes := 0
			const draws = 4000
			for seed := range uint64(draws) {
				if policy.GossipPull(tc.v, tc.k, seed) {
					yes++
				}
			}
			assert.InDelta(t, tc.want, float64(yes)/draws, 0.03)
			assert.Equal(t, policy.GossipPull(tc.v, tc.k, 77), policy.GossipPull(tc.v, tc.k, 77), "deterministic")
		})
	}
}

func TestStealConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*policy.StealConfig)
		errSub string // "" means valid
	}{
		{"default", func(*policy.StealConfig) {}, ""},                                                        // the registered steal
		{"top-k", func(c *policy.StealConfig) { c.Order, c.K = policy.RandomTopK, 4 }, ""},                   // a valid variant
		{"periodic nu-exact", func(c *policy.StealConfig) { c.Periodic = "nu-exact" }, ""},                   // planners by name
		{"push freshest", func(c *policy.StealConfig) { c.PushArrival, c.PushTarget = true, 1 }, ""},         // a valid push target
		{"oldest ignores k", func(c *policy.StealConfig) { c.Order, c.K = policy.OldestHead, 0 }, ""},        // k unused
		{"bad order", func(c *policy.StealConfig) { c.Order = 7 }, "pull order"},                             // out of the enum
		{"top-k needs k", func(c *policy.StealConfig) { c.Order, c.K = policy.RandomTopK, 0 }, "k must"},     // k = 0
		{"power-of-d huge d", func(c *policy.StealConfig) { c.Order, c.K = policy.PowerOfD, 999 }, "k must"}, // bounded
		{"no attempts", func(c *policy.StealConfig) { c.Attempts = 0 }, "attempts"},                          // must ask someone
		{"too many attempts", func(c *policy.StealConfig) { c.Attempts = policy.MaxPullAttempts + 1 }, "attempts"},
		{"bad push target", func(c *policy.StealConfig) { c.PushTarget = -1 }, "push target"}, // out of the enum
		{"unknown periodic", func(c *policy.StealConfig) { c.Periodic = "rr" }, "periodic"},   // not a planner
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := policy.DefaultStealConfig()
			tc.mutate(&c)
			err := c.Validate()
			_, newErr := policy.NewSteal(c)
			if tc.errSub == "" {
				require.NoError(t, err)
				require.NoError(t, newErr)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.errSub)
			assert.Error(t, newErr, "NewSteal validates")
		})
	}
}

// TestNewSteal: the hooks follow the configuration.
func TestNewSteal(t *testing.T) {
	c := policy.DefaultStealConfig()
	c.PushArrival, c.Periodic, c.Rules = false, "", policy.PullRules{Reserve: true, Overtake: true}
	c.Overtake = 0
	p, err := policy.NewSteal(c)
	require.NoError(t, err)
	assert.False(t, p.Pull.Overtake, "Rules.Overtake follows the Overtake margin")
	assert.Equal(t, "steal", p.Name)
	assert.Equal(t, policy.KindTransfer, p.Kind)
	assert.Nil(t, p.Pusher, "no arrival push")
	assert.Empty(t, p.Planner.Plan(exactView(0, 1, 9, 0)), "no periodic planner: moves nothing")
	assert.Equal(t, policy.PullRules{Reserve: true}, p.Pull)
	c.Overtake = 10 * ms
	p2, err := policy.NewSteal(c)
	require.NoError(t, err)
	assert.True(t, p2.Pull.Overtake)
	v := headView(0, 1, []int{0, 3}, []time.Duration{0, 9 * ms})
	assert.Equal(t, []int{1}, p.Puller.Pull(v, 0))

	c.PushArrival, c.Periodic = true, "nu-exact"
	p, err = policy.NewSteal(c)
	require.NoError(t, err)
	require.NotNil(t, p.Pusher)
	assert.Equal(t, 1, p.Pusher.PushArrival(exactView(0, 1, 2, 0), 0))
	w := exactView(0, 1, 4, 0)
	assert.Equal(t, policy.NearestUnderloadedExact(w), p.Planner.Plan(w), "periodic nu-exact")
	assert.Contains(t, p.Description, "nu-exact")
}

func TestPullOrderNames(t *testing.T) {
	for _, o := range []policy.PullOrder{policy.OldestHead, policy.RandomTopK, policy.PowerOfD} {
		got, err := policy.ParsePullOrder(o.String())
		require.NoError(t, err)
		assert.Equal(t, o, got)
	}
	_, err := policy.ParsePullOrder("newest")
	assert.ErrorContains(t, err, "oldest, random-top-k, power-of-d")
	assert.Equal(t, "PullOrder(9)", policy.PullOrder(9).String())
	assert.Equal(t, "freshest", policy.FreshestIdle.String())
	assert.Equal(t, "PushTarget(5)", policy.PushTarget(5).String())
	assert.Equal(t, "random-top-k(2) x3 +push-random +nu-exact no-reserve no-gossip-pull",
		policy.StealConfig{Order: policy.RandomTopK, K: 2, Attempts: 3, PushArrival: true, Periodic: "nu-exact"}.String())
	assert.Equal(t, "oldest x1 +overtake-50ms +gossip-pull/1 +gossip-on-change",
		policy.StealConfig{Attempts: 1, Overtake: 50 * ms, Rules: policy.PullRules{Reserve: true, OnGossip: true, GossipPullers: 1, GossipOnChange: true}}.String())
}

// TestStealPullProperties: on random views, every ask list holds distinct
// known peers with a head, never Self, at most Attempts of them; it is
// empty exactly when Self has no free slot or nobody shows a head; the
// same seed gives the same list; OldestHead lists are oldest first.
func TestStealPullProperties(t *testing.T) {
	r := newRand(15)
	orders := []policy.PullOrder{policy.OldestHead, policy.RandomTopK, policy.PowerOfD}
	for it := range 3000 {
		v := randomView(r)
		for i := range v.Nodes {
			if v.Nodes[i].Waiting() > 0 && r.IntN(3) > 0 {
				v.Nodes[i].HeadAge = time.Duration(1 + r.Int64N(int64(200*ms)))
			}
		}
		c := policy.StealConfig{Order: orders[r.IntN(3)], K: 1 + r.IntN(6), Attempts: 1 + r.IntN(policy.MaxPullAttempts)}
		seed := r.Uint64()
		got := policy.StealPull(c, v, seed)
		what := fmt.Sprintf("iteration %d, %s, view %+v", it, c, v)
		assert.Equal(t, got, policy.StealPull(c, v, seed), what)
		candidates := 0
		for j, nl := range v.Nodes {
			if j != v.Self && nl.Known && nl.HeadAge > 0 {
				candidates++
			}
		}
		free := v.Self >= 0 && v.Self < len(v.Nodes) && v.Nodes[v.Self].FreeSlots() > 0
		if !free || candidates == 0 {
			require.Empty(t, got, what)
			continue
		}
		require.NotEmpty(t, got, what)
		require.LessOrEqual(t, len(got), c.Attempts, what)
		seen := map[int]bool{}
		for k, j := range got {
			require.NotEqual(t, v.Self, j, what)
			require.True(t, v.Nodes[j].Known && v.Nodes[j].HeadAge > 0, what)
			require.False(t, seen[j], what)
			seen[j] = true
			if c.Order == policy.OldestHead && k > 0 {
				require.GreaterOrEqual(t, v.Nodes[got[k-1]].HeadAge, v.Nodes[j].HeadAge, what)
			}
		}
		if c.Order == policy.OldestHead {
			require.Len(t, got, min(candidates, c.Attempts), what)
		}
	}
}

// TestStealPushArrivalProperties: on random views the push goes to a known
// idle peer other than Self, and happens exactly when Self has no free
// slot and such a peer exists.
func TestStealPushArrivalProperties(t *testing.T) {
	r := newRand(16)
	for it := range 3000 {
		v := randomView(r)
		c := policy.StealConfig{Attempts: 1, PushArrival: true, PushTarget: policy.PushTarget(r.IntN(2))}
		got := policy.StealPushArrival(c, v, r.Uint64())
		what := fmt.Sprintf("iteration %d, %s, view %+v", it, c, v)
		idle := false
		for j, nl := range v.Nodes {
			idle = idle || (j != v.Self && nl.Known && nl.FreeSlots() > 0)
		}
		selfBusy := v.Self >= 0 && v.Self < len(v.Nodes) && v.Nodes[v.Self].FreeSlots() == 0
		if !selfBusy || !idle {
			require.Equal(t, -1, got, what)
			continue
		}
		require.NotEqual(t, v.Self, got, what)
		require.True(t, got >= 0 && got < len(v.Nodes), what)
		require.True(t, v.Nodes[got].Known && v.Nodes[got].FreeSlots() > 0, what)
	}
}

func TestFreeSlotTable(t *testing.T) {
	cases := []pickCase{
		// Every node idle: seq 0 starts at node 0.
		{"all idle seq 0", policy.DispatchView{Outstanding: []int{0, 0, 0, 0}, Seq: 0}, 0},
		// Every node idle: seq 5 starts at 5 mod 4 = 1, so idle nodes share arrivals.
		{"all idle rotates", policy.DispatchView{Outstanding: []int{0, 0, 0, 0}, Seq: 5}, 1},
		// Every node serves its one request (m = 1 by default): hold.
		{"all busy holds", policy.DispatchView{Outstanding: []int{1, 1, 1}, Seq: 2}, -1},
		// Node 2 alone is free, whatever the rotation says.
		{"the free one", policy.DispatchView{Outstanding: []int{1, 1, 0, 1}, Seq: 3}, 2},
		// m = 2 each: node 0 has 1 free, node 1 has 2 free, node 2 none: the most free.
		{"most free slots", policy.DispatchView{Outstanding: []int{1, 0, 2}, Concurrency: []int{2, 2, 2}, Seq: 0}, 1},
		// m differs: node 0 holds 3 of 4 (1 free), node 1 holds 0 of 1 (1 free): tie, seq 0 starts at 0.
		{"heterogeneous tie", policy.DispatchView{Outstanding: []int{3, 0}, Concurrency: []int{4, 1}, Seq: 0}, 0},
		// Concurrency shorter than Outstanding: node 2 counts m = 1 and is full; node 1 holds 1 of 3.
		{"missing m counts as 1", policy.DispatchView{Outstanding: []int{2, 1, 1}, Concurrency: []int{2, 3}, Seq: 2}, 1},
		// Node 1 is free but down: hold.
		{"down node skipped", policy.DispatchView{Outstanding: []int{1, 0}, Up: []bool{true, false}, Seq: 1}, -1},
		// More outstanding than m (a node that was over-full after m shrank): not free.
		{"over-full not free", policy.DispatchView{Outstanding: []int{5, 1}, Concurrency: []int{2, 2}, Seq: 0}, 1},
		// No nodes.
		{"empty", policy.DispatchView{}, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, policy.FreeSlot(tc.view))
			p, err := policy.Lookup("cq")
			require.NoError(t, err)
			assert.Equal(t, tc.want, p.Holder.Place(tc.view), "with nothing held, cq's Holder is FreeSlot")
		})
	}
}

func TestFreeSlotAheadTable(t *testing.T) {
	busy := []int{1, 1, 1, 1}
	cases := []struct {
		name  string
		ahead int
		view  policy.DispatchView
		want  int
	}{
		// A free slot always wins, however deep the FIFO.
		{"free slot first", 2, policy.DispatchView{Outstanding: []int{1, 0, 1, 1}, Held: 100}, 1},
		// Every slot busy, 7 held of the 8 (2 per node) needed: hold.
		{"shallow FIFO holds", 2, policy.DispatchView{Outstanding: busy, Held: 7}, -1},
		// 8 held: ahead to the first busy node at seq mod n.
		{"deep FIFO goes ahead", 2, policy.DispatchView{Outstanding: busy, Held: 8, Seq: 6}, 2},
		// Ahead to the fewest outstanding: node 3 has nobody waiting yet.
		{"fewest outstanding", 2, policy.DispatchView{Outstanding: []int{2, 2, 2, 1}, Held: 8}, 3},
		// Every node has one waiting per slot already (2 × m): hold.
		{"one ahead per slot at most", 2, policy.DispatchView{Outstanding: []int{2, 2, 2, 2}, Held: 100}, -1},
		// m = 2: a node with 3 outstanding still has room for one more ahead.
		{"per slot with m 2", 2, policy.DispatchView{Outstanding: []int{4, 3}, Concurrency: []int{2, 2}, Held: 4}, 1},
		// Per slot, not per node: m = 1 with 1 ahead (1 per slot) loses to m = 4 with 1 ahead (1/4).
		{"ahead per slot", 2, policy.DispatchView{Outstanding: []int{2, 5}, Concurrency: []int{1, 4}, Held: 4}, 1},
		// None ahead anywhere: the node with more slots frees one sooner.
		{"more slots first", 2, policy.DispatchView{Outstanding: []int{1, 4}, Concurrency: []int{1, 4}, Held: 4}, 1},
		// Down nodes neither count toward the depth nor receive: 2 up, 4 held is deep.
		{"down nodes skipped", 2, policy.DispatchView{Outstanding: busy, Up: []bool{false, true, false, true}, Held: 4, Seq: 0}, 1},
		// ahead 0: FreeSlot exactly (HAProxy's maxconn queue).
		{"ahead off", 0, policy.DispatchView{Outstanding: busy, Held: 1000}, -1},
		// Nobody up.
		{"nobody up", 2, policy.DispatchView{Outstanding: []int{1}, Up: []bool{false}, Held: 10}, -1},
		// No nodes.
		{"empty", 2, policy.DispatchView{Held: 10}, -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, policy.FreeSlotAhead(tc.ahead)(tc.view))
		})
	}
	p, err := policy.Lookup("cq")
	require.NoError(t, err)
	assert.Equal(t, 2, p.Holder.Place(policy.DispatchView{Outstanding: busy, Held: 4 * policy.CQAhead, Seq: 2}), "the registered cq sends ahead at CQAhead per node")
	assert.Equal(t, -1, p.Holder.Place(policy.DispatchView{Outstanding: busy, Held: 4*policy.CQAhead - 1}), "and not below")
}

// TestFreeSlotAheadBounds: a dispatcher placing with FreeSlotAhead never
// has more than 2m outstanding on a node (one waiting ahead per slot),
// and a request goes to a node with no free slot only when no node has
// one and the FIFO is deep (ahead per node).
func TestFreeSlotAheadBounds(t *testing.T) {
	r := newRand(23)
	for it := range 2000 {
		n := 1 + r.IntN(8)
		ahead := r.IntN(4)
		out := make([]int, n)
		conc := make([]int, n)
		for i := range conc {
			conc[i] = 1 + r.IntN(3)
		}
		held := 0
		for step := range 80 {
			if r.IntN(2) == 0 {
				held += 1 + r.IntN(3) // arrivals join the FIFO
			} else if i := r.IntN(n); out[i] > 0 {
				out[i]-- // a random node completes one
			}
			for held > 0 {
				d := policy.DispatchView{Outstanding: out, Concurrency: conc, Seq: uint64(step), Held: held}
				i := policy.FreeSlotAhead(ahead)(d)
				if i < 0 {
					break
				}
				free := false
				for j := range out {
					free = free || out[j] < conc[j]
				}
				if out[i] >= conc[i] {
					require.False(t, free, "iteration %d: sent ahead while a slot was free", it)
					require.Positive(t, ahead, "iteration %d: sent ahead with ahead off", it)
					require.GreaterOrEqual(t, held, ahead*n, "iteration %d: sent ahead with a shallow FIFO", it)
				}
				out[i]++
				held--
			}
			for i := range out {
				require.LessOrEqual(t, out[i], 2*conc[i], "iteration %d: node %d beyond one ahead per slot", it, i)
			}
		}
	}
}

func TestFreeSlotOrLeastTable(t *testing.T) {
	runPickCases(t, "cq", []pickCase{
		// A free slot exists: FreeSlot's choice (node 1).
		{"free slot", policy.DispatchView{Outstanding: []int{1, 0, 2}, Seq: 0}, 1},
		// Nothing free: least outstanding (node 2 with 1), like ct.
		{"none free: least outstanding", policy.DispatchView{Outstanding: []int{3, 2, 1}, Seq: 0}, 2},
		// Nothing up: -1.
		{"nobody up", policy.DispatchView{Outstanding: []int{0}, Up: []bool{false}}, -1},
	})
}

// TestFreeSlotNeverOverfills: a dispatcher that places with FreeSlot and
// holds otherwise never has more than m outstanding on any node, and
// never holds while a node has a free slot.
func TestFreeSlotNeverOverfills(t *testing.T) {
	r := newRand(17)
	for it := range 2000 {
		n := 1 + r.IntN(8)
		out := make([]int, n)
		conc := make([]int, n)
		for i := range conc {
			conc[i] = 1 + r.IntN(3)
		}
		held := 0
		for step := range 60 {
			if r.IntN(2) == 0 { // an arrival joins the FIFO
				held++
			} else { // a random node completes one
				i := r.IntN(n)
				if out[i] > 0 {
					out[i]--
				}
			}
			for held > 0 {
				d := policy.DispatchView{Outstanding: out, Concurrency: conc, Seq: uint64(step)}
				i := policy.FreeSlot(d)
				if i < 0 {
					break
				}
				out[i]++
				held--
			}
			for i := range out {
				require.LessOrEqual(t, out[i], conc[i], "iteration %d: node %d over its m", it, i)
				if held > 0 {
					require.Equal(t, conc[i], out[i], "iteration %d: holding while node %d has a free slot", it, i)
				}
			}
		}
	}
}

// oldestPuller is steal's Puller asking the oldest heads first, 3 at most.
func oldestPuller() policy.Puller {
	return policy.PullerFunc(func(v policy.View, seed uint64) []int { return policy.StealPull(oldest(3), v, seed) })
}

func TestPullClusterTable(t *testing.T) {
	pu := oldestPuller()
	cases := []struct {
		name      string
		loads     []int
		heads     []time.Duration
		m         int
		transfers []policy.Move
		misses    int
		after     []int
	}{
		// Node 0 holds 3 (2 waiting, head 30 ms); nodes 1 and 2 are idle,
		// node 3 busy. Both idle nodes ask node 0 and each gets one.
		{"two idle take two", []int{3, 0, 0, 1}, []time.Duration{30 * ms, 0, 0, 0}, 1,
			[]policy.Move{{From: 0, To: 1, Count: 1}, {From: 0, To: 2, Count: 1}}, 0, []int{1, 1, 1, 1}},
		// One waiting request, two idle nodes: node 1 (first in ring
		// order) gets it; node 2 asks node 0 too and misses.
		{"race: one hit, one miss", []int{2, 0, 0}, []time.Duration{10 * ms, 0, 0}, 1,
			[]policy.Move{{From: 0, To: 1, Count: 1}}, 1, []int{1, 1, 0}},
		// Node 1's head (50 ms) is older than node 0's (10 ms): node 2
		// asks node 1 first.
		{"oldest head first", []int{2, 2, 0}, []time.Duration{10 * ms, 50 * ms, 0}, 1,
			[]policy.Move{{From: 1, To: 2, Count: 1}}, 0, []int{2, 1, 1}},
		// m = 2: node 1 holds 0, so two free slots pull; node 0 holds 5
		// (3 waiting).
		{"m=2 two slots", []int{5, 0}, []time.Duration{8 * ms, 0}, 2,
			[]policy.Move{{From: 0, To: 1, Count: 1}, {From: 0, To: 1, Count: 1}}, 0, []int{3, 2}},
		// Nobody waits: the idle slots ask nobody.
		{"nothing waits", []int{1, 0, 0}, []time.Duration{0, 0, 0}, 1, []policy.Move{}, 0, []int{1, 0, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pp, err := policy.PullCluster(pu, tc.loads, tc.heads, tc.m, 1)
			require.NoError(t, err)
			assert.Equal(t, tc.transfers, pp.Transfers)
			assert.Equal(t, tc.misses, pp.Misses)
			assert.Equal(t, tc.after, pp.After)
			assert.Equal(t, sum(tc.loads), sum(pp.After), "pulls conserve requests")
			slots := 0
			for _, l := range tc.loads {
				slots += max(tc.m-l, 0)
			}
			assert.Len(t, pp.Pulls, slots, "one pull per free slot")
		})
	}
}

func TestPullClusterErrorsAndShape(t *testing.T) {
	pu := oldestPuller()
	cases := []struct {
		name  string
		loads []int
		heads []time.Duration
		m     int
		msg   string
	}{
		{"m zero", []int{1}, []time.Duration{0}, 0, "concurrency"},                          // m must be at least 1
		{"length mismatch", []int{1, 2}, []time.Duration{0}, 1, "one head age per load"},    // a head per node
		{"negative load", []int{1, -1}, []time.Duration{0, 0}, 1, "node 1"},                 // names the node
		{"negative head", []int{3, 0}, []time.Duration{-ms, 0}, 1, "head age of node 0"},    // ages are ages
		{"head without waiting", []int{1, 0}, []time.Duration{ms, 0}, 1, "nothing waiting"}, // load 1 = m
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.PullCluster(pu, tc.loads, tc.heads, tc.m, 0)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	// A puller breaking its contract is an error, not a bogus plan.
	bad := policy.PullerFunc(func(v policy.View, _ uint64) []int { return []int{v.Self} })
	_, err := policy.PullCluster(bad, []int{0, 2}, []time.Duration{0, ms}, 1, 0)
	assert.ErrorContains(t, err, "puller asked")

	pp, err := policy.PullCluster(pu, []int{2, 0}, []time.Duration{ms, 0}, 1, 0)
	require.NoError(t, err)
	out, err := json.Marshal(pp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"pulls":[{"node":1,"ask":[0],"from":0}],"transfers":[{"from":0,"to":1,"count":1}],"misses":0,"after":[1,1]}`, string(out))
	pp, err = policy.PullCluster(pu, nil, nil, 1, 0)
	require.NoError(t, err)
	out, err = json.Marshal(pp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"pulls":[],"transfers":[],"misses":0,"after":[]}`, string(out), "empty lists, not null")
	assert.True(t, slices.Equal([]int{}, pp.After))
}
