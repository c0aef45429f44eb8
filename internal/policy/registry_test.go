package policy_test

// Tests of the registry, Kind, NodeLoad.Waiting and PlanCluster's errors
// and output shape.

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
)

// TestRegistry: every policy of the spec is registered under its name with
// the right kind, and exactly one of Planner and Picker set (neither for none).
func TestRegistry(t *testing.T) {
	cases := []struct {
		name string
		kind policy.Kind
	}{
		{"none", policy.KindNone},         // moves and dispatches nothing
		{"rr", policy.KindDispatch},       // round robin from the dispatcher
		{"ct", policy.KindDispatch},       // least outstanding, exact counts
		{"ll", policy.KindTransfer},       // least loaded, timer-driven transfers
		{"nu", policy.KindTransfer},       // nearest underloaded
		{"nu-exact", policy.KindTransfer}, // integer-quota N
		{"steal", policy.KindTransfer},    // pull on idle, beyond the paper
		{"cq", policy.KindDispatch},       // one central FIFO at the dispatcher
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := policy.Lookup(tc.name)
			require.NoError(t, err)
			assert.Equal(t, tc.name, p.Name)
			assert.Equal(t, tc.kind, p.Kind)
			assert.NotEmpty(t, p.Description)
			assert.Equal(t, tc.kind == policy.KindTransfer, p.Planner != nil, "planner set iff transfer")
			assert.Equal(t, tc.kind == policy.KindDispatch, p.Picker != nil, "picker set iff dispatch")
		})
	}
}

// TestNames: sorted, and exactly the registered policies.
func TestNames(t *testing.T) {
	names := policy.Names()
	assert.True(t, slices.IsSorted(names), "%v", names)
	assert.Equal(t, []string{"cq", "ct", "ll", "none", "nu", "nu-exact", "rr", "steal"}, names)
	// A fresh slice each call: changing it does not change the registry.
	names[0] = "zzz"
	assert.Equal(t, "cq", policy.Names()[0])
}

// TestLookupUnknown: unknown names give an error that wraps
// swderr.ErrUnknownPolicy and lists the known names.
func TestLookupUnknown(t *testing.T) {
	for _, name := range []string{
		"bogus", // never registered
		"",      // empty
		"NU",    // names are case-sensitive
		"nu ",   // no trimming
		"n",     // no prefix matching
	} {
		t.Run(name, func(t *testing.T) {
			p, err := policy.Lookup(name)
			require.Error(t, err)
			assert.ErrorIs(t, err, swderr.ErrUnknownPolicy)
			assert.Equal(t, policy.Policy{}, p)
			assert.Contains(t, err.Error(), `"`+name+`"`)
			assert.Contains(t, err.Error(), strings.Join(policy.Names(), ", "))
		})
	}
}

// TestRegisterRejects: a duplicate or a policy lacking the planner or picker
// its kind needs is a programming error; Register panics without changing
// the registry.
func TestRegisterRejects(t *testing.T) {
	before := policy.Names()
	cases := []struct {
		name string
		p    policy.Policy
	}{
		{"duplicate", policy.Policy{Name: "nu", Kind: policy.KindNone}},
		{"transfer without planner", policy.Policy{Name: "test-no-planner", Kind: policy.KindTransfer}},
		{"dispatch without picker", policy.Policy{Name: "test-no-picker", Kind: policy.KindDispatch}},
		// Pulling and pushing arrivals are transfer hooks; holding is a dispatch hook.
		{"puller on a dispatcher", policy.Policy{Name: "test-pull-dispatch", Kind: policy.KindDispatch,
			Picker: policy.PickerFunc(policy.RoundRobin), Puller: policy.PullerFunc(func(policy.View, uint64) []int { return nil })}},
		{"pusher on none", policy.Policy{Name: "test-push-none", Kind: policy.KindNone,
			Pusher: policy.ArrivalPusherFunc(func(policy.View, uint64) int { return -1 })}},
		{"holder on a transfer policy", policy.Policy{Name: "test-hold-transfer", Kind: policy.KindTransfer,
			Planner: policy.PlannerFunc(policy.NearestUnderloaded), Holder: policy.HolderFunc(policy.FreeSlot)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Panics(t, func() { policy.Register(tc.p) })
		})
	}
	assert.Equal(t, before, policy.Names())
}

func TestKindString(t *testing.T) {
	assert.Equal(t, "none", policy.KindNone.String())
	assert.Equal(t, "transfer", policy.KindTransfer.String())
	assert.Equal(t, "dispatch", policy.KindDispatch.String())
	assert.Equal(t, "none", policy.Kind(42).String()) // unknown kinds print as none
}

// TestFuncAdapters: PlannerFunc and PickerFunc call the function they wrap.
func TestFuncAdapters(t *testing.T) {
	want := []policy.Move{{From: 1, To: 0, Count: 2}}
	var seen policy.View
	pl := policy.PlannerFunc(func(v policy.View) []policy.Move { seen = v; return want })
	v := exactView(1, 1, 0, 5)
	assert.Equal(t, want, pl.Plan(v))
	assert.Equal(t, v, seen)

	pk := policy.PickerFunc(func(d policy.DispatchView) int { return int(d.Seq) * 2 })
	assert.Equal(t, 14, pk.Pick(policy.DispatchView{Seq: 7}))

	pu := policy.PullerFunc(func(v policy.View, seed uint64) []int { return []int{v.Self, int(seed)} })
	assert.Equal(t, []int{1, 9}, pu.Pull(v, 9))
	ap := policy.ArrivalPusherFunc(func(v policy.View, seed uint64) int { return v.Self + int(seed) })
	assert.Equal(t, 4, ap.PushArrival(v, 3))
	h := policy.HolderFunc(func(d policy.DispatchView) int { return int(d.Seq) + 1 })
	assert.Equal(t, 8, h.Place(policy.DispatchView{Seq: 7}))
}

// TestHooksOnlyWhereExpected: the older policies have no hooks (so callers
// that know the hooks treat them exactly as before); steal has a Puller
// and rules, cq a Holder and a Picker for dispatchers that cannot hold.
func TestHooksOnlyWhereExpected(t *testing.T) {
	for _, name := range policy.Names() {
		p, err := policy.Lookup(name)
		require.NoError(t, err)
		switch name {
		case "steal":
			assert.NotNil(t, p.Puller, name)
			want := policy.DefaultStealConfig().Rules
			want.Overtake = policy.DefaultStealConfig().Overtake > 0
			assert.Equal(t, want, p.Pull, name)
			assert.Equal(t, policy.DefaultStealConfig().PushArrival, p.Pusher != nil, name)
			assert.Nil(t, p.Holder, name)
		case "cq":
			assert.NotNil(t, p.Holder, name)
			assert.NotNil(t, p.Picker, name)
			assert.Nil(t, p.Puller, name)
			assert.Nil(t, p.Pusher, name)
		default:
			assert.Nil(t, p.Puller, name)
			assert.Nil(t, p.Pusher, name)
			assert.Nil(t, p.Holder, name)
			assert.Equal(t, policy.PullRules{}, p.Pull, name)
		}
	}
}

func TestWaiting(t *testing.T) {
	cases := []struct {
		name string
		n    policy.NodeLoad
		want int
	}{
		{"idle", policy.NodeLoad{Load: 0, Concurrency: 1}, 0},                    // nothing held
		{"one in service", policy.NodeLoad{Load: 1, Concurrency: 1}, 0},          // 1 - 1
		{"m=1", policy.NodeLoad{Load: 5, Concurrency: 1}, 4},                     // 5 - 1
		{"m=3", policy.NodeLoad{Load: 5, Concurrency: 3}, 2},                     // 5 - 3
		{"fewer than m", policy.NodeLoad{Load: 2, Concurrency: 3}, 0},            // all in service
		{"m=0 counts as 1", policy.NodeLoad{Load: 5, Concurrency: 0}, 4},         // unset m
		{"negative m counts as 1", policy.NodeLoad{Load: 5, Concurrency: -2}, 4}, // nonsense m
		{"negative load", policy.NodeLoad{Load: -3, Concurrency: 1}, 0},          // never negative
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.n.Waiting())
		})
	}
}

func TestFreeSlots(t *testing.T) {
	cases := []struct {
		name string
		n    policy.NodeLoad
		want int
	}{
		{"idle m=1", policy.NodeLoad{Load: 0, Concurrency: 1}, 1},           // the one slot is free
		{"busy m=1", policy.NodeLoad{Load: 1, Concurrency: 1}, 0},           // 1 - 1
		{"queue m=1", policy.NodeLoad{Load: 4, Concurrency: 1}, 0},          // never negative
		{"m=3 one busy", policy.NodeLoad{Load: 1, Concurrency: 3}, 2},       // 3 - 1
		{"m=0 counts as 1", policy.NodeLoad{Load: 0, Concurrency: 0}, 1},    // unset m
		{"negative load", policy.NodeLoad{Load: -2, Concurrency: 2}, 2},     // nonsense load counts as 0
		{"m=3 full", policy.NodeLoad{Load: 3, Concurrency: 3}, 0},           // every slot busy
		{"negative m", policy.NodeLoad{Load: 0, Concurrency: -4}, 1},        // nonsense m counts as 1
		{"m=2 with queue", policy.NodeLoad{Load: 7, Concurrency: 2}, 0},     // waiting means no free slot
		{"m=5 two busy", policy.NodeLoad{Load: 2, Concurrency: 5}, 3},       // 5 - 2
		{"m=1 negative load", policy.NodeLoad{Load: -1, Concurrency: 1}, 1}, // clamp
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.n.FreeSlots())
		})
	}
}

// TestPlanClusterErrors: bad concurrency or a negative load is an error.
func TestPlanClusterErrors(t *testing.T) {
	pl := planner(t, "nu")
	cases := []struct {
		name  string
		loads []int
		m     int
		msg   string
	}{
		{"m zero", []int{1, 2}, 0, "concurrency"},       // m must be at least 1
		{"m negative", []int{1, 2}, -1, "concurrency"},  // likewise
		{"negative load", []int{1, -2, 3}, 1, "node 1"}, // names the node
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.PlanCluster(pl, tc.loads, tc.m)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// TestPlanClusterShape: what `swdctl plan -o json` prints. No transfers is
// [] (not null); After is a copy, not the caller's slice.
func TestPlanClusterShape(t *testing.T) {
	pl := planner(t, "nu")

	cp, err := policy.PlanCluster(pl, []int{2, 2}, 1)
	require.NoError(t, err)
	out, err := json.Marshal(cp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"transfers":[],"after":[2,2]}`, string(out))

	// mean 2, node 0 over 2: t=1 node 2 (under 2) takes both.
	loads := []int{4, 2, 0}
	cp, err = policy.PlanCluster(pl, loads, 1)
	require.NoError(t, err)
	out, err = json.Marshal(cp)
	require.NoError(t, err)
	assert.JSONEq(t, `{"transfers":[{"from":0,"to":2,"count":2}],"after":[2,2,2]}`, string(out))
	cp.After[0] = 99
	assert.Equal(t, []int{4, 2, 0}, loads)

	cp, err = policy.PlanCluster(pl, nil, 1)
	require.NoError(t, err)
	assert.Empty(t, cp.Transfers)
	assert.Empty(t, cp.After)
}
