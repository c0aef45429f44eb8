// Command steal runs the simulator studies behind the "steal and cq"
// section of docs/sim.md and prints their tables as markdown:
//
//   - capacity: x-th percentile capacity on 16 nodes (standard, dispersed,
//     burst × 95th, 99th, 99.5th; the paper's limits, as docs/sim.md) of
//     central, cq, ct, nu, nu-exact and steal, and each as a fraction of
//     central's; transfers, pulls and misses per request at 320 req/s.
//   - design: the same capacities, as fractions of central's, for steal
//     designs that differ from the registered one in one respect each
//     (what paid and what did not).
//   - scale: 16 to 1,024 nodes at 80 % load: p99 of central, cq, ct,
//     nu-exact and steal (direct gossip up to 64 nodes, piggyback gossip
//     beyond, as the daemon), relative to central's; gossip bytes per node
//     per second.
//
// Usage:
//
//	go run ./test/study/steal [-only capacity,design,scale] [-workers 2] [-seeds 2] [-quick]
//
// -quick shortens every horizon twentyfold (for checking the program, not
// for figures). Everything printed is deterministic except wall times.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/sim"
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/workload"
)

var (
	workloads   = []string{"standard", "dispersed", "burst"}
	percentiles = []float64{95, 99, 99.5}
	// The paper's PRT limits (ms), as docs/sim.md uses them: N's x-th PRT
	// on its 16-node cluster at 320 req/s.
	paperLimits = map[string][]float64{
		"standard":  {279, 517, 643},
		"dispersed": {341, 700, 900},
		"burst":     {391, 737, 927},
	}
	// Capacity rates (req/s, 16 nodes): the paper's 40-step rates, then
	// 10-step near saturation, where central and steal cross the limits.
	capRates    = []float64{40, 80, 120, 160, 200, 240, 280, 320, 330, 340, 350, 360, 370, 380, 390}
	designRates = []float64{280, 320, 330, 340, 350, 360, 370, 380, 390}
	// Every capacity point: 800 s measured after 20 s of warm-up.
	capHorizon, capWarmup = 820 * time.Second, 20 * time.Second
)

type opts struct {
	workers int
	seeds   int
	quick   bool
	specs   map[string]workload.Spec // the workloads, by name
	out     strings.Builder
}

func (o *opts) printf(format string, a ...any) { fmt.Fprintf(&o.out, format, a...) }

// point is what a study keeps of the runs of one configuration over seeds:
// percentiles averaged over seeds, counts summed.
type point struct {
	cfg  sim.Config
	mean float64
	// pct holds the x-th percentiles of percentiles, in that order.
	pct              [3]float64
	requests         int
	transfers, pulls int
	misses, pushes   int
	moves            int
	gossipBps        float64
	wall             time.Duration
}

func (p point) per(k int) float64 { return float64(k) / float64(max(p.requests, 1)) }

// run runs every config over o.seeds seeds (seed 1, 2, ...) and returns
// one point per config, in order.
func (o *opts) run(cfgs []sim.Config) []point {
	var all []sim.Config
	for _, c := range cfgs {
		for s := range o.seeds {
			c.Seed = uint64(s + 1)
			all = append(all, c)
		}
	}
	out := make([]point, len(cfgs))
	chunk := 4 * o.seeds * max(o.workers, 1)
	for i := 0; i < len(all); i += chunk {
		res, err := sim.RunGrid(all[i:min(i+chunk, len(all))], o.workers)
		if err != nil {
			log.Fatal(err)
		}
		for k, r := range res {
			p := &out[(i+k)/o.seeds]
			f := float64(o.seeds)
			p.cfg = r.Config
			p.mean += r.MeanMs / f
			for xi, v := range [3]float64{r.P95Ms, r.P99Ms, r.P995Ms} {
				p.pct[xi] += v / f
			}
			p.requests += r.Requests
			p.transfers += r.Transfers
			p.pulls += r.Pulls
			p.misses += r.PullMisses
			p.pushes += r.ArrivalPushes
			p.moves += r.Moves
			p.gossipBps += r.GossipBytesPerNodeSec / f
			p.wall += r.Wall
		}
	}
	return out
}

// config is the default config running variant v (or policy pol) on
// workload wl at rate for d simulated seconds of which warm are warm-up,
// both shortened twentyfold with -quick.
func (o *opts) config(wl, pol string, rate float64, d, warm time.Duration) sim.Config {
	c := sim.DefaultConfig()
	c.Workload, c.Policy, c.Rate = o.specs[wl], pol, rate
	c.Duration, c.Warmup = d, warm
	if o.quick {
		c.Duration, c.Warmup = d/20, warm/20
	}
	return c
}

// variant is a policy as the studies run it: a registered name, or steal
// with a configuration of its own.
type variant struct {
	label string
	pol   string
	steal *policy.StealConfig
}

// apply sets c's policy to v.
func (v variant) apply(c sim.Config) sim.Config {
	c.Policy, c.Steal = v.pol, v.steal
	return c
}

func named(p string) variant { return variant{label: p, pol: p} }

func stealWith(label string, mutate func(*policy.StealConfig)) variant {
	c := policy.DefaultStealConfig()
	mutate(&c)
	if err := c.Validate(); err != nil {
		log.Fatalf("%s: %v", label, err)
	}
	return variant{label: label, pol: "steal", steal: &c}
}

// capacities runs every variant on 16 nodes at rates and returns, per
// variant, workload and percentile, the capacity and its bound.
type capKey struct {
	v, wl string
	x     float64
}

type capacity struct {
	rate  float64
	bound stats.Bound
}

func (o *opts) capacities(vs []variant, rates []float64) (map[capKey]capacity, map[string][]point) {
	var cfgs []sim.Config
	for _, wl := range workloads {
		for _, v := range vs {
			for _, r := range rates {
				cfgs = append(cfgs, v.apply(o.config(wl, "", r, capHorizon, capWarmup)))
			}
		}
	}
	res := o.run(cfgs)
	caps := map[capKey]capacity{}
	curves := map[string][]point{}
	k := 0
	for _, wl := range workloads {
		for _, v := range vs {
			pts := res[k : k+len(rates)]
			k += len(rates)
			curves[v.label+"/"+wl] = pts
			for xi, x := range percentiles {
				prt := make([]stats.Point, len(pts))
				for i, p := range pts {
					prt[i] = stats.Point{Rate: rates[i], PRTMs: p.pct[xi]}
				}
				c, b, err := stats.CapacityAt(prt, paperLimits[wl][xi])
				if err != nil {
					log.Fatal(err)
				}
				caps[capKey{v.label, wl, x}] = capacity{c, b}
			}
		}
	}
	return caps, curves
}

func boundMark(b stats.Bound) string {
	switch b {
	case stats.AtLeast:
		return "≥"
	case stats.Below:
		return "≤"
	}
	return ""
}

// capacityStudy: the nine cells for the registered policies.
func (o *opts) capacityStudy() {
	vs := []variant{named(sim.Central), named("cq"), named("ct"), named("nu"), named("nu-exact"), named("steal")}
	caps, curves := o.capacities(vs, capRates)
	dur := o.config("standard", "", 1, capHorizon, capWarmup).Duration
	o.printf("\n## Capacity on 16 nodes against central\n\nx-th percentile capacity (req/s; the paper's limits, as docs/sim.md) and, in brackets, the fraction of central's; rates %v req/s, %d seeds × %v per rate (PRT averaged over seeds). steal is the registered design: %s.\n\n",
		capRates, o.seeds, dur, policy.DefaultStealConfig())
	o.printf("| workload | x |")
	for _, v := range vs {
		o.printf(" %s |", v.label)
	}
	o.printf("\n|---|---|%s\n", strings.Repeat("---|", len(vs)))
	worst := 2.0
	for _, wl := range workloads {
		for _, x := range percentiles {
			o.printf("| %s | %g |", wl, x)
			cen := caps[capKey{sim.Central, wl, x}]
			for _, v := range vs {
				c := caps[capKey{v.label, wl, x}]
				o.printf(" %s%.0f (%.3f) |", boundMark(c.bound), c.rate, c.rate/cen.rate)
				if v.label == "steal" {
					worst = min(worst, c.rate/cen.rate)
				}
			}
			o.printf("\n")
		}
	}
	o.printf("\nsteal's lowest fraction of central: **%.3f**.\n", worst)
	i320 := slices.Index(capRates, 320)
	o.printf("\n### Moves per request at 320 req/s (16 nodes)\n\n| workload | policy | transfers / request | pulls | misses | arrival pushes | periodic moves | mean (ms) | p99 (ms) | gossip (bytes / node / s) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, wl := range workloads {
		for _, p := range []string{"nu", "nu-exact", "steal"} {
			pt := curves[p+"/"+wl][i320]
			o.printf("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.0f | %.0f |\n", wl, p, pt.per(pt.transfers), pt.per(pt.pulls), pt.per(pt.misses), pt.per(pt.pushes), pt.per(pt.moves), pt.mean, pt.pct[1], pt.gossipBps)
		}
	}
}

// designs are the steal variants the design study compares, each one
// change away from the registered design.
func designs() []variant {
	return []variant{
		stealWith("registered steal", func(*policy.StealConfig) {}),
		stealWith("pull on idle alone (oldest head, no gossip pull, no news, no overtake)", func(c *policy.StealConfig) {
			c.Order, c.Overtake = policy.OldestHead, 0
			c.Rules = policy.PullRules{Reserve: true}
		}),
		stealWith("no head news (GossipOnChange off)", func(c *policy.StealConfig) { c.Rules.GossipOnChange = false }),
		stealWith("no gossip-triggered pull (OnGossip off)", func(c *policy.StealConfig) { c.Rules.OnGossip = false }),
		stealWith("gossip-triggered pull by every idle node (GossipPullers 0)", func(c *policy.StealConfig) { c.Rules.GossipPullers = 0 }),
		stealWith("no overtake", func(c *policy.StealConfig) { c.Overtake = 0 }),
		stealWith("no overtake, no reservation", func(c *policy.StealConfig) { c.Overtake, c.Rules.Reserve = 0, false }),
		stealWith("overtake 50 ms", func(c *policy.StealConfig) { c.Overtake = 50 * time.Millisecond }),
		stealWith("overtake 100 ms", func(c *policy.StealConfig) { c.Overtake = 100 * time.Millisecond }),
		stealWith("overtake 300 ms", func(c *policy.StealConfig) { c.Overtake = 300 * time.Millisecond }),
		stealWith("overtake 500 ms", func(c *policy.StealConfig) { c.Overtake = 500 * time.Millisecond }),
		stealWith("order: oldest head", func(c *policy.StealConfig) { c.Order = policy.OldestHead }),
		stealWith("order: random among top 2", func(c *policy.StealConfig) { c.Order, c.K = policy.RandomTopK, 2 }),
		stealWith("order: uniform (random top 64)", func(c *policy.StealConfig) { c.Order, c.K = policy.RandomTopK, 64 }),
		stealWith("attempts 1", func(c *policy.StealConfig) { c.Attempts = 1 }),
		stealWith("attempts 6", func(c *policy.StealConfig) { c.Attempts = 6 }),
		stealWith("+ arrival push to a peer seen idle", func(c *policy.StealConfig) { c.PushArrival = true }),
		stealWith("+ periodic nu-exact", func(c *policy.StealConfig) { c.Periodic = "nu-exact" }),
	}
}

func (o *opts) designStudy() {
	vs := append([]variant{named(sim.Central)}, designs()...)
	caps, curves := o.capacities(vs, designRates)
	dur := o.config("standard", "", 1, capHorizon, capWarmup).Duration
	o.printf("\n## steal designs on 16 nodes\n\nCapacity as a fraction of central's (same limits, rates %v req/s, %d seeds × %v per rate; ≤ marks a capacity below the lowest rate). Registered design: %s. Per request at 320 req/s on the standard workload: transfers, misses.\n\n",
		designRates, o.seeds, dur, policy.DefaultStealConfig())
	o.printf("| design | standard 95 | 99 | 99.5 | dispersed 95 | 99 | 99.5 | burst 95 | 99 | 99.5 | lowest | transfers / req | misses / req |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	i320 := slices.Index(designRates, 320)
	for _, v := range vs[1:] {
		o.printf("| %s |", v.label)
		worst := 2.0
		for _, wl := range workloads {
			for _, x := range percentiles {
				c, cen := caps[capKey{v.label, wl, x}], caps[capKey{sim.Central, wl, x}]
				o.printf(" %s%.3f |", boundMark(c.bound), c.rate/cen.rate)
				worst = min(worst, c.rate/cen.rate)
			}
		}
		pt := curves[v.label+"/standard"][i320]
		o.printf(" **%.3f** | %.3f | %.3f |\n", worst, pt.per(pt.transfers), pt.per(pt.misses))
	}
}

// scaleStudy: 16 to 1,024 nodes at 80 % load.
func (o *opts) scaleStudy() {
	nodes := []int{16, 64, 256, 1024}
	durs := map[int][2]time.Duration{16: {420 * time.Second, 20 * time.Second}, 64: {120 * time.Second, 10 * time.Second}, 256: {40 * time.Second, 5 * time.Second}, 1024: {25 * time.Second, 5 * time.Second}}
	type row struct {
		label  string
		pol    string
		gossip string
		relay  string
		steal  *policy.StealConfig
	}
	oldestFirst := policy.DefaultStealConfig()
	oldestFirst.Order = policy.OldestHead
	noGossipPull := policy.DefaultStealConfig()
	noGossipPull.Rules.OnGossip = false
	rows := []row{
		{"central", sim.Central, "", "", nil},
		{"cq", "cq", "", "", nil},
		{"ct", "ct", "", "", nil},
		{"nu-exact, direct gossip", "nu-exact", sim.GossipDirect, "", nil},
		{"steal, direct gossip", "steal", sim.GossipDirect, "", nil},
		{"steal asking the oldest head first, direct gossip", "steal", sim.GossipDirect, "", &oldestFirst},
		{"steal, piggyback, relay in rotation (today's daemon)", "steal", sim.GossipPiggyback, sim.RelayRotate, nil},
		{"steal, piggyback, head news relayed first", "steal", sim.GossipPiggyback, sim.RelayHeads, nil},
		{"steal asking the oldest head first, piggyback, head news first", "steal", sim.GossipPiggyback, sim.RelayHeads, &oldestFirst},
		{"steal without pull on gossip, piggyback, head news first", "steal", sim.GossipPiggyback, sim.RelayHeads, &noGossipPull},
	}
	skip := func(r row, n int) bool {
		// steal runs direct gossip where the daemon does (up to 64 nodes)
		// and piggyback from 64 nodes on. nu-exact keeps direct gossip
		// everywhere, as in docs/sim.md's scaling table (its cost beyond
		// 64 nodes is not bounded).
		switch {
		case r.pol == "steal" && r.gossip == sim.GossipDirect:
			return n > 64
		case r.gossip == sim.GossipPiggyback:
			return n < 64
		}
		return false
	}
	var cfgs []sim.Config
	for _, wl := range []string{"standard", "burst"} {
		for _, n := range nodes {
			for _, r := range rows {
				if skip(r, n) {
					continue
				}
				c := o.config(wl, r.pol, 20*float64(n), durs[n][0], durs[n][1])
				c.Nodes, c.Steal = n, r.steal
				if r.gossip != "" {
					c.Gossip, c.Relay = r.gossip, r.relay
				}
				cfgs = append(cfgs, c)
			}
		}
	}
	saved := o.seeds
	o.seeds = 1
	res := o.run(cfgs)
	o.seeds = saved
	o.printf("\n## From 16 to 1,024 nodes at 80 %% load\n\nRate 20 req/s per node, one seed; horizons 16: %v, 64: %v, 256: %v, 1,024: %v. Cells: p99 (ms) and, in brackets, relative to central's; then mean (ms), transfers and misses per request, gossip bytes sent per node per second (wire bytes: IP/UDP and memberlist framing included). Direct gossip is what the daemon runs up to 64 nodes (O(n) datagrams per node per tick); beyond, piggyback (fanout %d, %d-byte datagrams: bounded).\n",
		durs[16][0], durs[64][0], durs[256][0], durs[1024][0], sim.DefaultConfig().Fanout, sim.DefaultConfig().DatagramBytes)
	k := 0
	for _, wl := range []string{"standard", "burst"} {
		o.printf("\n### %s\n\n| policy | nodes | p99 (× central) | mean | transfers / req | misses / req | gossip B/node/s | wall |\n|---|---|---|---|---|---|---|---|\n", wl)
		for _, n := range nodes {
			var cen point
			for _, r := range rows {
				if skip(r, n) {
					continue
				}
				p := res[k]
				k++
				if r.pol == sim.Central {
					cen = p
				}
				o.printf("| %s | %d | %.0f (%.3f) | %.1f | %.3f | %.3f | %.0f | %.1f s |\n", r.label, n, p.pct[1], p.pct[1]/cen.pct[1], p.mean, p.per(p.transfers), p.per(p.misses), p.gossipBps, p.wall.Seconds())
			}
		}
	}
}

func main() {
	o := &opts{specs: map[string]workload.Spec{}}
	for _, wl := range workloads {
		spec, err := workload.Lookup(wl)
		if err != nil {
			log.Fatal(err)
		}
		o.specs[wl] = spec
	}
	only := flag.String("only", "capacity,design,scale", "studies to run, comma-separated: capacity, design, scale")
	flag.IntVar(&o.workers, "workers", 2, "simulations run at once")
	flag.IntVar(&o.seeds, "seeds", 2, "seeds per capacity point (percentiles averaged)")
	flag.BoolVar(&o.quick, "quick", false, "shorten every horizon twentyfold (checks the program; no figures)")
	flag.Parse()
	if o.seeds < 1 || o.workers < 1 {
		log.Fatal("-seeds and -workers must be at least 1")
	}
	studies := map[string]func(){"capacity": o.capacityStudy, "design": o.designStudy, "scale": o.scaleStudy}
	start := time.Now()
	for _, name := range strings.Split(*only, ",") {
		f, ok := studies[name]
		if !ok {
			log.Fatalf("-only: unknown study %q (known: capacity, design, scale)", name)
		}
		f()
	}
	o.printf("\n(Generated by `go run ./test/study/steal -only %s -seeds %d%s` in %s of wall time.)\n", *only, o.seeds, map[bool]string{true: " -quick", false: ""}[o.quick], time.Since(start).Round(time.Second))
	if _, err := os.Stdout.WriteString(o.out.String()); err != nil {
		log.Fatal(err)
	}
}
