package policy_test

// Fuzz targets. In a normal `go test` run only the seeds run (f.Add below
// and testdata/fuzz/<Target>/); `go test -fuzz FuzzPlanners ./internal/policy/`
// explores further.

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

// maxFuzzLoad bounds the loads the fuzzers build ("a few hundred").
const maxFuzzLoad = 400

// decodeView turns arbitrary bytes into a view:
//
//	byte 0: n = 1 + b%64 nodes
//	byte 1: self; b < 0xf0 gives self = b % n, larger values give a self out
//	        of range (-1, n, or n + b) to exercise the invalid-view path
//	byte 2: m = 1 + b%4, the self node's concurrency
//	then 3 bytes per node: load = (b0<<8 | b1) % 400; b2 bit 0 set marks the
//	entry stale, bits 1-3 give the node's concurrency 0..7 (self keeps m).
//
// Missing bytes read as 0: a short input gives known, idle nodes.
func decodeView(data []byte) policy.View {
	at := func(i int) int {
		if i < len(data) {
			return int(data[i])
		}
		return 0
	}
	n := 1 + at(0)%64
	self := at(1) % n
	switch b := at(1); {
	case b >= 0xfa:
		self = n + b
	case b >= 0xf5:
		self = n
	case b >= 0xf0:
		self = -1
	}
	m := 1 + at(2)%4
	v := policy.View{Self: self, Nodes: make([]policy.NodeLoad, n)}
	for i := range v.Nodes {
		o := 3 + 3*i
		v.Nodes[i] = policy.NodeLoad{
			Load:        (at(o)<<8 | at(o+1)) % maxFuzzLoad,
			Known:       at(o+2)&1 == 0,
			Concurrency: (at(o+2) >> 1) & 7,
		}
		if i == self {
			v.Nodes[i].Concurrency = m
		}
	}
	return v
}

// FuzzPlanners: for every transfer policy, on any view, no panic, every move
// well formed (from Self to a known node in range, positive counts adding up
// to at most Self's waiting requests), unknown entries ignored, and nu and
// nu-exact identical to the spec's reference.
func FuzzPlanners(f *testing.F) {
	f.Add([]byte{})                                                                                // one idle node
	f.Add([]byte{7, 1, 0, 0, 0, 0, 0, 8, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 7, 0, 0, 3, 0, 0, 0, 0}) // Figure 2 from node 1
	f.Add([]byte{6, 0xf1, 0, 0, 9, 0})                                                             // self out of range
	refs := map[string]refOptions{"nu": {}, "nu-exact": {quotas: true}}
	f.Fuzz(func(t *testing.T, data []byte) {
		v := decodeView(data)
		r := rand.New(rand.NewPCG(uint64(len(data)), 1))
		for _, name := range transferPolicies {
			pl := planner(t, name)
			var moves []policy.Move
			require.NotPanics(t, func() { moves = pl.Plan(v) }, "%s on %+v", name, v)
			checkMoves(t, name, v, moves)
			checkStaleIgnored(t, name, pl, v, r)
			if opt, ok := refs[name]; ok {
				require.Equal(t, refPlan(v, opt), moves, "%s on %+v", name, v)
			}
		}
	})
}

// FuzzPlanCluster: on any load vector (up to 64 nodes) and any m, PlanCluster
// either rejects m < 1 or, for every transfer policy, conserves requests,
// never moves what is in service, and matches the per-node plans; nu-exact
// lands on its quotas whenever no quota is below m (and within 1 for m = 1),
// and nu matches the reference.
//
//	byte 0: n = b%65 nodes (0 allowed); byte 1: m = int8(b)%5 (-4..4);
//	then 2 bytes per node: load = (b0<<8 | b1) % 400.
func FuzzPlanCluster(f *testing.F) {
	f.Add([]byte{4, 1, 0, 5, 0, 0, 0, 3, 0, 8})                   // swdctl's example: 5,0,3,8
	f.Add([]byte{7, 1, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0}) // N's herd: 0,2,0,2,0,2,0
	f.Add([]byte{3, 0, 0, 1})                                     // m = 0: rejected
	f.Fuzz(func(t *testing.T, data []byte) {
		at := func(i int) int {
			if i < len(data) {
				return int(data[i])
			}
			return 0
		}
		n := at(0) % 65
		m := int(int8(at(1))) % 5
		loads := make([]int, n)
		for i := range loads {
			loads[i] = (at(2+2*i)<<8 | at(3+2*i)) % maxFuzzLoad
		}
		if m < 1 {
			_, err := policy.PlanCluster(planner(t, "nu"), loads, m)
			require.Error(t, err)
			return
		}
		for _, name := range transferPolicies {
			cp := checkCluster(t, name, planner(t, name), loads, m)
			switch name {
			case "nu":
				ref, _ := refCluster(loads, m, refOptions{})
				require.Equal(t, ref, cp.Transfers, "nu on %v (m=%d)", loads, m)
			case "nu-exact":
				if n > 0 && sum(loads) >= m*n {
					require.Equal(t, quotas(loads), cp.After, "nu-exact on %v (m=%d)", loads, m)
				}
				if n > 0 && m == 1 {
					require.LessOrEqual(t, spread(cp.After), 1, "nu-exact on %v (m=1): %v", loads, cp.After)
				}
			}
		}
	})
}
