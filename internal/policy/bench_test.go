package policy_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/swd-project/swd/internal/policy"
)

// benchSizes are the cluster sizes every planner is benchmarked at.
var benchSizes = []int{16, 64, 1024}

// benchViews returns two views of n nodes, both planned by the busiest node:
// "uniform" has loads uniform in 0..19, a typical busy cluster; "hotspot"
// has one node holding 10n requests on an idle ring, so N walks the whole
// ring and moves to every other node (the worst case for time and
// allocations).
func benchViews(n int) map[string]policy.View {
	r := newRand(uint64(n))
	loads := make([]int, n)
	for i := range loads {
		loads[i] = r.IntN(20)
	}
	uniform := exactView(0, 1, loads...)
	uniform.Self = slices.Index(loads, slices.Max(loads))

	hot := make([]int, n)
	hot[n/2] = 10 * n
	hotspot := exactView(n/2, 1, hot...)
	return map[string]policy.View{"uniform": uniform, "hotspot": hotspot}
}

func benchPlanner(b *testing.B, name string) {
	pl := planner(b, name)
	for _, n := range benchSizes {
		views := benchViews(n)
		for _, shape := range []string{"uniform", "hotspot"} {
			v := views[shape]
			b.Run(fmt.Sprintf("n=%d/%s", n, shape), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					pl.Plan(v)
				}
			})
		}
	}
}

func BenchmarkPlanLL(b *testing.B)      { benchPlanner(b, "ll") }
func BenchmarkPlanNU(b *testing.B)      { benchPlanner(b, "nu") }
func BenchmarkPlanNUExact(b *testing.B) { benchPlanner(b, "nu-exact") }

// BenchmarkPlanCluster: every node planning on the same exact view, what
// `swdctl plan` and the simulator do each round (uniform loads).
func BenchmarkPlanCluster(b *testing.B) {
	for _, name := range transferPolicies {
		pl := planner(b, name)
		for _, n := range benchSizes {
			loads := benchViews(n)["uniform"].Nodes
			ls := make([]int, n)
			for i, nd := range loads {
				ls[i] = nd.Load
			}
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := policy.PlanCluster(pl, ls, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPick: the dispatch pickers, every node up but the first.
func BenchmarkPick(b *testing.B) {
	for _, name := range []string{"rr", "ct"} {
		pk := picker(b, name)
		for _, n := range benchSizes {
			d := policy.DispatchView{Outstanding: make([]int, n), Up: make([]bool, n)}
			for i := range d.Up {
				d.Up[i] = i > 0
				d.Outstanding[i] = i % 7
			}
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					d.Seq++
					pk.Pick(d)
				}
			})
		}
	}
}
