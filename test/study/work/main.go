// Command work (test/study/work) is the simulator study behind docs/sim.md's
// "The work load index" section: for each workload (mixed and the paper's
// three) and transfer policy, the response times under --load-index count
// and work on the same requests (16 nodes, 80 % load, several seeds), the
// p99 ratio work / count with its spread over seeds (the percentiles pool
// every seed's requests), and how well the nodes learnt each route's cost.
// It prints markdown tables on stdout; docs/sim.md shows them.
//
//	go run ./test/study/work [-seeds 5] [-duration 200s] [-workloads mixed,standard] [-policies nu,steal]
//
// Everything is deterministic (the wall time aside).
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/sim"
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/workload"
)

func main() {
	seeds := flag.Int("seeds", 5, "seeds per cell (1..seeds)")
	duration := flag.Duration("duration", 200*time.Second, "simulated time per run, 20 s warm-up included")
	wls := flag.String("workloads", "mixed,standard,dispersed,burst", "workloads")
	pols := flag.String("policies", "ll,nu,nu-exact,steal", "transfer policies")
	load := flag.Float64("load", 0.8, "offered load per slot")
	nodes := flag.Int("nodes", 16, "nodes")
	theta := flag.Int("theta", cost.DefaultConfig().Theta, "cost theta")
	weight := flag.Float64("weight", cost.DefaultConfig().Weight, "cost weight")
	workers := flag.Int("workers", runtime.GOMAXPROCS(0), "simulations at once")
	flag.Parse()
	if err := run(*seeds, *duration, strings.Split(*wls, ","), strings.Split(*pols, ","), *load, *nodes, *theta, *weight, *workers); err != nil {
		log.Fatal(err)
	}
}

type cell struct {
	wl, pol string
	idx     policy.LoadIndex
}

func run(seeds int, duration time.Duration, wls, pols []string, load float64, nodes, theta int, weight float64, workers int) error {
	start := time.Now()
	var cfgs []sim.Config
	var cells []cell
	for _, wl := range wls {
		spec, err := workload.Lookup(wl)
		if err != nil {
			return err
		}
		rate := load * float64(nodes) * 1000 / spec.MeanServiceMs()
		for _, p := range append(append([]string{}, pols...), sim.Central) {
			for _, idx := range []policy.LoadIndex{policy.IndexCount, policy.IndexWork} {
				if p == sim.Central && idx == policy.IndexWork {
					continue
				}
				for s := 1; s <= seeds; s++ {
					c := sim.DefaultConfig()
					c.Nodes, c.Policy, c.Workload, c.Rate, c.Seed = nodes, p, spec, rate, uint64(s)
					c.Duration, c.Warmup = duration, 20*time.Second
					c.LoadIndex = idx
					c.Cost.Theta, c.Cost.Weight = theta, weight
					cfgs = append(cfgs, c)
				}
				cells = append(cells, cell{wl, p, idx})
			}
		}
	}
	res, err := sim.RunGrid(cfgs, workers)
	if err != nil {
		return err
	}
	fmt.Printf("%d nodes, m = 1, load %.0f %%, %s per run (20 s warm-up), seeds 1-%d; cost theta %d, weight %g\n\n",
		nodes, load*100, duration, seeds, theta, weight)
	k := 0
	byCell := map[cell][]sim.Result{}
	for _, c := range cells {
		byCell[c] = res[k : k+seeds]
		k += seeds
	}
	for _, wl := range wls {
		fmt.Printf("### %s\n\n", wl)
		fmt.Printf("| policy | p99 count (ms) | p99 work (ms) | work / count p99 (min-max over seeds) | p50 count | p50 work | mean count | mean work | p99.5 count | p99.5 work |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range append(append([]string{}, pols...), sim.Central) {
			cr := byCell[cell{wl, p, policy.IndexCount}]
			if p == sim.Central {
				fmt.Printf("| central | %.1f | | | %.1f | | %.1f | | %.1f | |\n", pooled(cr, 99), pooled(cr, 50), mean(cr), pooled(cr, 99.5))
				continue
			}
			wr := byCell[cell{wl, p, policy.IndexWork}]
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := range cr {
				r := wr[i].P99Ms / cr[i].P99Ms
				lo, hi = min(lo, r), max(hi, r)
			}
			fmt.Printf("| %s | %.1f | %.1f | %.3f (%.3f-%.3f) | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", p,
				pooled(cr, 99), pooled(wr, 99), pooled(wr, 99)/pooled(cr, 99), lo, hi, pooled(cr, 50), pooled(wr, 50),
				mean(cr), mean(wr), pooled(cr, 99.5), pooled(wr, 99.5))
		}
		fmt.Println()
		if rc := byCell[cell{wl, pols[len(pols)-1], policy.IndexWork}][0].RouteCosts; rc != nil {
			fmt.Printf("learnt cost (%s, seed 1): ", pols[len(pols)-1])
			for _, r := range rc {
				fmt.Printf("%s true %.1f ms, nodes %.1f-%.1f ms, worst error at theta %.1f %%; ", name(r.Route), r.TrueMs, r.MinMs, r.MaxMs, r.ErrAtTheta*100)
			}
			fmt.Printf("\n\n")
		}
	}
	fmt.Fprintf(os.Stderr, "%d runs in %s\n", len(cfgs), time.Since(start).Round(time.Second))
	return nil
}

func name(s string) string {
	if s == "" {
		return "(one route)"
	}
	return s
}

// pooled is the percentile over every seed's response times together.
func pooled(rs []sim.Result, p float64) float64 {
	var ms []float64
	for _, r := range rs {
		for _, d := range r.ResponseTimes {
			ms = append(ms, float64(d)/1e6)
		}
	}
	slices.Sort(ms)
	return stats.Percentile(ms, p)
}

func mean(rs []sim.Result) float64 {
	s, n := 0.0, 0
	for _, r := range rs {
		s += r.MeanMs * float64(r.Measured)
		n += r.Measured
	}
	return s / float64(n)
}
