// Command simstudy runs the simulator studies behind docs/sim.md: the
// paper's grid (and its wall time), the paper's Tables 2-4 next to the
// simulated means, x-th percentile capacities against the central limit,
// sensitivity to the gossip interval and the transfer delay, and scaling
// from 16 to 1024 nodes. It writes docs/sim-results.md and the PNG plots
// in docs/img/. The study "hypotheses" (not run by default) tests the
// explanations docs/sim.md gives for where the simulator and the paper
// differ and writes docs/sim-hypotheses.md.
//
//	go run ./test/study/simstudy [-out docs] [-workers 2] [-quick] [-only grid,tables,capacity,sensitivity,scale]
//	go run ./test/study/simstudy -only hypotheses
//
// -quick shortens every horizon (for checking the program, not for
// numbers). Everything is deterministic except the wall times.
package main

import (
	"flag"
	"fmt"
	"image/color"
	"log"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/swd-project/swd/internal/sim"
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/workload"
)

var (
	workloads = []string{"standard", "dispersed", "burst"}
	gridPols  = []string{"rr", "ct", "ll", "nu", "nu-exact", sim.Central}
	gridRates = []float64{40, 120, 200, 240, 280, 320, 360}
	// The paper's Tables 2-4 (mean response time, ms); NaN: LL failed.
	paperMeans = map[string]map[string][]float64{
		"standard": {
			"rr": {41.6, 64.88, 105.68, 139.73, 198.63, 345.53, 728.39},
			"ct": {39.16, 40.03, 41.36, 44.29, 50.08, 62.09, 97.01},
			"ll": {41.68, 51.53, 60.92, 67.83, 79.84, 112.13, math.NaN()},
			"nu": {39.8, 43.53, 50.87, 59, 70.99, 94.55, 162.17},
		},
		"dispersed": {
			"rr": {44.53, 93.09, 165.11, 223.2, 327.89, 610.25, 1253.95},
			"ct": {38.8, 39.81, 42.31, 45.74, 53.38, 71.56, 119.59},
			"ll": {43.22, 55.52, 65.37, 72.54, 88.12, math.NaN(), math.NaN()},
			"nu": {39.79, 44.05, 52.51, 62.08, 77.39, 109.95, 210.84},
		},
		"burst": {
			"rr": {52.86, 108.24, 202.57, 273.44, 378.96, 568.99, 1156.83},
			"ct": {39.99, 44.75, 55.26, 64.74, 78.15, 100.45, 157.49},
			"ll": {46.42, 57.16, 69.5, 81.05, 101.83, math.NaN(), math.NaN()},
			"nu": {41, 45.12, 56.84, 69.88, 87.5, 123.91, 226.31},
		},
	}
	percentiles = []float64{95, 99, 99.5}
	// The paper's PRT limits (ms): N's x-th PRT on 16 nodes at 320 req/s.
	paperLimits = map[string][]float64{
		"standard":  {279, 517, 643},
		"dispersed": {341, 700, 900},
		"burst":     {391, 737, 927},
	}
)

type opts struct {
	out     string
	workers int
	quick   bool
	md      strings.Builder
}

// summary is what a study keeps of a run (not the response times).
type summary struct {
	cfg                           sim.Config
	mean, p50, p95, p99, p995, tp float64
	wall                          time.Duration
	events                        int
}

func (s summary) prt(x float64) float64 {
	switch x {
	case 95:
		return s.p95
	case 99:
		return s.p99
	default:
		return s.p995
	}
}

// run runs cfgs in chunks (so that at most a chunk's response times are
// held at once) and keeps their summaries, in order.
func (o *opts) run(cfgs []sim.Config) []summary {
	out := make([]summary, 0, len(cfgs))
	chunk := 8 * max(o.workers, 1)
	for i := 0; i < len(cfgs); i += chunk {
		res, err := sim.RunGrid(cfgs[i:min(i+chunk, len(cfgs))], o.workers)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range res {
			out = append(out, summary{r.Config, r.MeanMs, r.P50Ms, r.P95Ms, r.P99Ms, r.P995Ms, r.TransfersPerRequest, r.Wall, r.Events})
		}
	}
	return out
}

func (o *opts) horizon(d, warm time.Duration) (time.Duration, time.Duration) {
	if o.quick {
		return d / 20, warm / 20
	}
	return d, warm
}

func base(wl string, pol string, rate float64) sim.Config {
	c := sim.DefaultConfig()
	spec, err := workload.Lookup(wl)
	if err != nil {
		log.Fatal(err)
	}
	c.Workload, c.Policy, c.Rate = spec, pol, rate
	return c
}

func (o *opts) printf(format string, a ...any) { fmt.Fprintf(&o.md, format, a...) }

func main() {
	var o opts
	only := flag.String("only", "grid,tables,capacity,sensitivity,scale", "studies to run")
	flag.StringVar(&o.out, "out", "docs", "directory for sim-results.md, sim-hypotheses.md and img/")
	flag.IntVar(&o.workers, "workers", runtime.GOMAXPROCS(0), "parallel runs")
	flag.BoolVar(&o.quick, "quick", false, "short horizons (checks the program; numbers are noise)")
	flag.Parse()
	if err := os.MkdirAll(filepath.Join(o.out, "img"), 0o755); err != nil {
		log.Fatal(err)
	}
	// The studies that make up sim-results.md; hypotheses writes its own
	// document.
	studies := map[string]func(){
		"grid": o.grid, "tables": o.tables, "capacity": o.capacity,
		"sensitivity": o.sensitivity, "scale": o.scale,
	}
	var results []string
	for _, name := range strings.Split(*only, ",") {
		if _, ok := studies[name]; ok {
			results = append(results, name)
		} else if name != "hypotheses" {
			log.Fatalf("unknown study %q", name)
		}
	}
	o.printf("# Simulator study results\n\nGenerated by `go run ./test/study/simstudy -only %s%s` (%s, %d CPUs, %d workers); do not edit by hand. Commentary: [sim.md](sim.md).\n",
		strings.Join(results, ","), map[bool]string{true: " -quick"}[o.quick], runtime.Version(), runtime.NumCPU(), o.workers)
	studies["hypotheses"] = o.hypotheses
	for _, name := range strings.Split(*only, ",") {
		start := time.Now()
		studies[name]()
		log.Printf("%s done in %v", name, time.Since(start).Round(time.Millisecond))
	}
	if len(results) == 0 {
		return
	}
	path := filepath.Join(o.out, "sim-results.md")
	if err := os.WriteFile(path, []byte(o.md.String()), 0o644); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s", path)
}

// grid times the paper's grid: 3 workloads x 6 policies x 7 rates x 200 s
// on 16 nodes, on o.workers goroutines, three times.
func (o *opts) grid() {
	var cfgs []sim.Config
	for _, wl := range workloads {
		for _, p := range gridPols {
			for _, r := range gridRates {
				c := base(wl, p, r)
				c.Duration, c.Warmup = o.horizon(c.Duration, c.Warmup)
				cfgs = append(cfgs, c)
			}
		}
	}
	o.printf("\n## The paper's grid: wall time\n\n%d runs (3 workloads x %d policies x %d rates), %v simulated each (%v warm-up), 16 nodes, m = 1, seed 1, %d workers.\n\n",
		len(cfgs), len(gridPols), len(gridRates), cfgs[0].Duration, cfgs[0].Warmup, o.workers)
	o.printf("| attempt | wall | events | events/s (all workers) | sum of per-run walls |\n|---|---|---|---|---|\n")
	for k := range 3 {
		start := time.Now()
		res, err := sim.RunGrid(cfgs, o.workers)
		wall := time.Since(start)
		if err != nil {
			log.Fatal(err)
		}
		events, cpu := 0, time.Duration(0)
		for _, r := range res {
			events += r.Events
			cpu += r.Wall
		}
		o.printf("| %d | %.2f s | %d | %.1f M | %.2f s |\n", k+1, wall.Seconds(), events, float64(events)/wall.Seconds()/1e6, cpu.Seconds())
		log.Printf("grid attempt %d: %v", k+1, wall)
	}
}

// tables reproduces Tables 2-4: 8 seeds x 200 s per cell.
func (o *opts) tables() {
	const seeds = 8
	var cfgs []sim.Config
	for _, wl := range workloads {
		for _, p := range gridPols {
			for _, r := range gridRates {
				for s := range seeds {
					c := base(wl, p, r)
					c.Seed = uint64(s + 1)
					c.Duration, c.Warmup = o.horizon(c.Duration, c.Warmup)
					cfgs = append(cfgs, c)
				}
			}
		}
	}
	res := o.run(cfgs)
	o.printf("\n## The paper's Tables 2-4 next to the simulator\n\nMean response time (ms), 16 nodes. Each simulated cell is the mean over %d seeds of %v runs (the paper's protocol, %v warm-up); in brackets the lowest and highest of the %d. `paper` is the paper's measurement, `dev` the simulator's deviation from it.\n",
		seeds, cfgs[0].Duration, cfgs[0].Warmup, seeds)
	k := 0
	for _, wl := range workloads {
		o.printf("\n### %s\n\n| policy | |", wl)
		for _, r := range gridRates {
			o.printf(" %g |", r)
		}
		o.printf("\n|---|---|%s\n", strings.Repeat("---|", len(gridRates)))
		var series []series
		for _, p := range gridPols {
			sims := make([]float64, len(gridRates))
			lo := make([]float64, len(gridRates))
			hi := make([]float64, len(gridRates))
			for i := range gridRates {
				lo[i], hi[i] = math.Inf(1), math.Inf(-1)
				for range seeds {
					m := res[k].mean
					sims[i] += m / seeds
					lo[i], hi[i] = math.Min(lo[i], m), math.Max(hi[i], m)
					k++
				}
			}
			paper, inPaper := paperMeans[wl][p]
			o.printf("| %s | sim |", p)
			for i := range gridRates {
				o.printf(" %.1f (%.0f-%.0f) |", sims[i], lo[i], hi[i])
			}
			o.printf("\n")
			if inPaper {
				o.printf("| | paper |")
				for i := range gridRates {
					o.printf(" %s |", fmtMs(paper[i]))
				}
				o.printf("\n| | dev |")
				for i := range gridRates {
					if math.IsNaN(paper[i]) {
						o.printf(" - |")
					} else {
						o.printf(" %+.0f %% |", 100*(sims[i]/paper[i]-1))
					}
				}
				o.printf("\n")
			}
			series = append(series, line(p, gridRates, sims, solid))
			if inPaper {
				series = append(series, line(p+" (paper)", gridRates, paper, points))
			}
		}
		pl := linePlot(fmt.Sprintf("Mean response time, %s workload, 16 nodes", wl), "arrival rate (req/s)", "mean response time (ms)", series, true)
		pl.X.Tick.Marker = plot.ConstantTicks(ticksAt(gridRates))
		o.save(pl, "sim-mean-"+wl+".png", 6, 4.5)
		o.printf("\n![mean response time, %s](img/sim-mean-%s.png)\n", wl, wl)
	}
}

func fmtMs(v float64) string {
	if math.IsNaN(v) {
		return "failed"
	}
	return fmt.Sprintf("%.1f", v)
}

var (
	capRates16 = []float64{40, 80, 120, 160, 200, 240, 280, 320, 360, 370, 380, 390}
	capNodes   = []int{8, 10, 12, 14, 16}
	capPols    = []string{"rr", "ct", "ll", "nu", "nu-exact", sim.Central}
)

// capacity computes x-th percentile capacities on 8-16 nodes (the paper's
// Figures 3-11) from one 800 s run per cell, against the paper's limits and
// against the simulator's own limits (N's PRT at 320 req/s on 16 nodes).
func (o *opts) capacity() {
	dur, warm := o.horizon(820*time.Second, 20*time.Second)
	var cfgs []sim.Config
	for _, wl := range workloads {
		for _, p := range capPols {
			for _, n := range capNodes {
				for _, r16 := range capRates16 {
					c := base(wl, p, r16*float64(n)/16)
					c.Nodes, c.Duration, c.Warmup = n, dur, warm
					cfgs = append(cfgs, c)
				}
			}
		}
	}
	res := o.run(cfgs)
	// cell returns the summaries of (wl, p, n) over capRates16.
	cell := func(wl, p string, n int) []summary {
		i := slices.Index(workloads, wl)*len(capPols)*len(capNodes) + slices.Index(capPols, p)*len(capNodes) + slices.Index(capNodes, n)
		return res[i*len(capRates16) : (i+1)*len(capRates16)]
	}
	type capKey struct {
		wl, p string
		n     int
		x     float64
		own   bool
	}
	caps := map[capKey]float64{}
	bounds := map[capKey]stats.Bound{}
	ownLimit := map[string][]float64{}
	for _, wl := range workloads {
		nu := cell(wl, "nu", 16)
		i320 := slices.Index(capRates16, 320)
		for _, x := range percentiles {
			ownLimit[wl] = append(ownLimit[wl], nu[i320].prt(x))
		}
	}
	for _, wl := range workloads {
		for _, p := range capPols {
			for _, n := range capNodes {
				ss := cell(wl, p, n)
				for xi, x := range percentiles {
					for _, own := range []bool{false, true} {
						lim := paperLimits[wl][xi]
						if own {
							lim = ownLimit[wl][xi]
						}
						k := capKey{wl, p, n, x, own}
						caps[k], bounds[k] = capacityOf(ss, x, lim)
					}
				}
			}
		}
	}
	o.printf("\n## Capacity against the central limit\n\nx-th percentile capacity (docs/algorithms.md: PRT per rate, linear interpolation where it crosses the limit) from one %v run (%v warm-up) per rate; rates %v req/s scaled by n/16 on n nodes. `>=` marks a PRT still within the limit at the highest rate.\n",
		dur, warm, capRates16)
	o.printf("\nLimits (ms): the paper's (N's PRT on its 16-node cluster at 320 req/s), and the simulator's own (N's simulated PRT on 16 nodes at 320 req/s, the same definition):\n\n| workload | 95th paper | 95th own | 99th paper | 99th own | 99.5th paper | 99.5th own |\n|---|---|---|---|---|---|---|\n")
	for _, wl := range workloads {
		o.printf("| %s |", wl)
		for xi := range percentiles {
			o.printf(" %.0f | %.0f |", paperLimits[wl][xi], ownLimit[wl][xi])
		}
		o.printf("\n")
	}
	for _, own := range []bool{false, true} {
		name := "the paper's limits"
		if own {
			name = "the simulator's own limits"
		}
		o.printf("\n### 16 nodes, %s: capacity (req/s) and fraction of central\n\n| workload | x |", name)
		for _, p := range capPols {
			o.printf(" %s |", p)
		}
		o.printf("\n|---|---|%s\n", strings.Repeat("---|", len(capPols)))
		for _, wl := range workloads {
			for _, x := range percentiles {
				o.printf("| %s | %g |", wl, x)
				cen := caps[capKey{wl, sim.Central, 16, x, own}]
				for _, p := range capPols {
					k := capKey{wl, p, 16, x, own}
					o.printf(" %s%.0f (%.2f) |", boundMark(bounds[k]), caps[k], caps[k]/cen)
				}
				o.printf("\n")
			}
		}
	}
	claim := func(wl string, x float64, a string, na int, b string, nb int, own bool) string {
		ka, kb := capKey{wl, a, na, x, own}, capKey{wl, b, nb, x, own}
		s := fmt.Sprintf("%+.1f %%", 100*(caps[ka]/caps[kb]-1))
		if bounds[ka] != stats.Interpolated || bounds[kb] != stats.Interpolated {
			s += " (censored)"
		}
		return s
	}
	o.printf("\n### The paper's capacity claims\n\n| claim | paper | sim, paper's limits | sim, own limits |\n|---|---|---|---|\n")
	claims := []struct {
		text  string
		paper string
		wl    string
		x     float64
		a     string
		na    int
		b     string
		nb    int
	}{
		{"standard 95th: CT above N", "+4.7 %", "standard", 95, "ct", 16, "nu", 16},
		{"standard 95th: N above LL", "+8.8 %", "standard", 95, "nu", 16, "ll", 16},
		{"burst 99th: N above CT", "+21.9 %", "burst", 99, "nu", 16, "ct", 16},
		{"burst 99.5th: N above CT", "+44.6 %", "burst", 99.5, "nu", 16, "ct", 16},
		{"burst 99.5th: N on 12 nodes vs CT on 16", "about 0 %", "burst", 99.5, "nu", 12, "ct", 16},
		{"standard 99th: N above CT", "N highest", "standard", 99, "nu", 16, "ct", 16},
		{"standard 99th: N above LL", "N highest", "standard", 99, "nu", 16, "ll", 16},
		{"burst 95th: N vs CT", "about 0 %", "burst", 95, "nu", 16, "ct", 16},
	}
	for _, c := range claims {
		o.printf("| %s | %s | %s | %s |\n", c.text, c.paper, claim(c.wl, c.x, c.a, c.na, c.b, c.nb, false), claim(c.wl, c.x, c.a, c.na, c.b, c.nb, true))
	}
	// PRT curves at 16 nodes, and capacity against nodes (Figures 3-11).
	var rows [][]*plot.Plot
	for _, wl := range workloads {
		var row []*plot.Plot
		for xi, x := range percentiles {
			var ss []series
			for _, p := range capPols {
				ys := make([]float64, len(capNodes))
				for i, n := range capNodes {
					ys[i] = caps[capKey{wl, p, n, x, false}]
				}
				ss = append(ss, line(p, intsToFloats(capNodes), ys, solid))
			}
			row = append(row, linePlot(fmt.Sprintf("%s, %gth PC (limit %.0f ms)", wl, x, paperLimits[wl][xi]), "nodes", "capacity (req/s)", ss, false))
		}
		rows = append(rows, row)
	}
	o.saveGrid(rows, "sim-capacity-nodes.png", 15, 12)
	o.printf("\n### Capacity against cluster size (the paper's Figures 3-11, paper's limits)\n\n![capacity vs nodes](img/sim-capacity-nodes.png)\n")
	o.printf("\n| workload | x | policy |")
	for _, n := range capNodes {
		o.printf(" %d nodes |", n)
	}
	o.printf("\n|---|---|---|%s\n", strings.Repeat("---|", len(capNodes)))
	for _, wl := range workloads {
		for _, x := range percentiles {
			for _, p := range []string{"ct", "ll", "nu", sim.Central} {
				o.printf("| %s | %g | %s |", wl, x, p)
				for _, n := range capNodes {
					k := capKey{wl, p, n, x, false}
					o.printf(" %s%.0f |", boundMark(bounds[k]), caps[k])
				}
				o.printf("\n")
			}
		}
	}
	rows = nil
	for _, wl := range workloads {
		var row []*plot.Plot
		for xi, x := range percentiles {
			var ss []series
			for _, p := range capPols {
				sum := cell(wl, p, 16)
				ys := make([]float64, len(sum))
				for i, s := range sum {
					ys[i] = s.prt(x)
				}
				ss = append(ss, line(p, capRates16, ys, solid))
			}
			ss = append(ss, line("paper limit", []float64{capRates16[0], capRates16[len(capRates16)-1]}, []float64{paperLimits[wl][xi], paperLimits[wl][xi]}, dashed))
			row = append(row, linePlot(fmt.Sprintf("%s, %gth PRT, 16 nodes", wl, x), "arrival rate (req/s)", "response time (ms)", ss, true))
		}
		rows = append(rows, row)
	}
	o.saveGrid(rows, "sim-prt.png", 15, 12)
	o.printf("\n### Percentile response times on 16 nodes\n\n![PRT vs rate](img/sim-prt.png)\n")
}

// capacityOf is the x-th percentile capacity of ss (one run per rate)
// against limitMs.
func capacityOf(ss []summary, x, limitMs float64) (float64, stats.Bound) {
	pts := make([]stats.Point, len(ss))
	for i, s := range ss {
		pts[i] = stats.Point{Rate: s.cfg.Rate, PRTMs: s.prt(x)}
	}
	c, b, err := stats.CapacityAt(pts, limitMs)
	if err != nil {
		log.Fatal(err)
	}
	return c, b
}

// boundMark marks a capacity that is only a bound: ">=" (within the limit
// at the highest rate), "<=" (over it at the lowest).
func boundMark(b stats.Bound) string {
	switch b {
	case stats.AtLeast:
		return ">="
	case stats.Below:
		return "<="
	}
	return ""
}

func intsToFloats(xs []int) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = float64(x)
	}
	return out
}

// sensitivity varies the gossip interval (with the activation interval
// fixed at 40 ms, and at twice the gossip interval) and the transfer delay,
// at 320 req/s on 16 nodes.
func (o *opts) sensitivity() {
	dur, warm := o.horizon(820*time.Second, 20*time.Second)
	gossips := []time.Duration{5, 10, 20, 40, 60, 100}
	delays := []float64{0, 0.5, 1, 2, 5, 10, 20, 40}
	pols := []string{"ll", "nu", "nu-exact"}
	wls := []string{"standard", "burst"}
	type variant struct {
		name string
		set  func(c *sim.Config, v float64)
		xs   []float64
		unit string
	}
	gms := make([]float64, len(gossips))
	for i, g := range gossips {
		gms[i] = float64(g)
	}
	stale := func(g time.Duration) time.Duration { return max(100*time.Millisecond, 5*g) }
	variants := []variant{
		{"gossip interval, activation every 40 ms", func(c *sim.Config, v float64) {
			c.GossipInterval = time.Duration(v * float64(time.Millisecond))
			c.StaleAfter = stale(c.GossipInterval)
		}, gms, "gossip interval (ms)"},
		{"gossip interval, activation every 2 gossip intervals", func(c *sim.Config, v float64) {
			c.GossipInterval = time.Duration(v * float64(time.Millisecond))
			c.ActivationInterval = 2 * c.GossipInterval
			c.StaleAfter = stale(c.GossipInterval)
		}, gms, "gossip interval (ms)"},
		{"transfer delay", func(c *sim.Config, v float64) {
			c.TransferDelay = time.Duration(v * float64(time.Millisecond))
		}, delays, "transfer delay (ms)"},
	}
	var cfgs []sim.Config
	for _, wl := range wls {
		for _, v := range variants {
			for _, p := range pols {
				for _, x := range v.xs {
					c := base(wl, p, 320)
					c.Duration, c.Warmup = dur, warm
					v.set(&c, x)
					cfgs = append(cfgs, c)
				}
			}
		}
		for _, p := range []string{"ct", sim.Central} {
			c := base(wl, p, 320)
			c.Duration, c.Warmup = dur, warm
			cfgs = append(cfgs, c)
		}
	}
	res := o.run(cfgs)
	o.printf("\n## Sensitivity (16 nodes, 320 req/s = 80 %% load, %v per run)\n\nStale-after is max(100 ms, 5 x gossip interval) so that slow gossip is not simply discarded. Cells: mean / 99th percentile (ms) / transfers per request. CT and central do not gossip; they are the reference lines in the plots.\n", dur)
	k := 0
	var rows [][]*plot.Plot
	perWorkload := 0
	for _, v := range variants {
		perWorkload += len(pols) * len(v.xs)
	}
	for _, wl := range wls {
		ct, cen := res[k+perWorkload], res[k+perWorkload+1] // the references follow the variants
		var row []*plot.Plot
		for _, v := range variants {
			o.printf("\n### %s workload: %s\n\n| policy |", wl, v.name)
			for _, x := range v.xs {
				o.printf(" %g |", x)
			}
			o.printf("\n|---|%s\n", strings.Repeat("---|", len(v.xs)))
			var ss []series
			for _, p := range pols {
				o.printf("| %s |", p)
				ys := make([]float64, len(v.xs))
				for i := range v.xs {
					s := res[k]
					k++
					ys[i] = s.p99
					o.printf(" %.1f / %.0f / %.2f |", s.mean, s.p99, s.tp)
				}
				o.printf("\n")
				ss = append(ss, line(p, v.xs, ys, solid))
			}
			xr := []float64{v.xs[0], v.xs[len(v.xs)-1]}
			ss = append(ss, line("ct", xr, []float64{ct.p99, ct.p99}, dashed), line(sim.Central, xr, []float64{cen.p99, cen.p99}, dashed))
			o.printf("| ct (reference) | %.1f / %.0f / 0 |\n| central (reference) | %.1f / %.0f / 0 |\n", ct.mean, ct.p99, cen.mean, cen.p99)
			row = append(row, linePlot(fmt.Sprintf("%s: %s", wl, v.name), v.unit, "99th percentile response time (ms)", ss, false))
		}
		k += 2
		rows = append(rows, row)
	}
	o.saveGrid(rows, "sim-sensitivity.png", 16, 9)
	o.printf("\n![sensitivity](img/sim-sensitivity.png)\n")
}

// scale runs 16 to 1024 nodes at 80 % load.
func (o *opts) scale() {
	nodes := []int{16, 64, 256, 1024}
	durs := map[int][2]time.Duration{16: {820 * time.Second, 20 * time.Second}, 64: {220 * time.Second, 20 * time.Second}, 256: {70 * time.Second, 10 * time.Second}, 1024: {30 * time.Second, 5 * time.Second}}
	wls := []string{"standard", "burst"}
	var cfgs []sim.Config
	for _, wl := range wls {
		for _, n := range nodes {
			for _, p := range gridPols {
				c := base(wl, p, 20*float64(n))
				c.Nodes = n
				c.Duration, c.Warmup = o.horizon(durs[n][0], durs[n][1])
				cfgs = append(cfgs, c)
			}
		}
	}
	res := o.run(cfgs)
	o.printf("\n## From 16 to 1024 nodes at 80 %% load (rate = 20 req/s per node)\n\nHorizons: 16 nodes %v, 64 %v, 256 %v, 1024 %v (all several hundred thousand requests). Cells: mean / 99th percentile (ms), transfers per request, and the wall time of the run.\n",
		durs[16][0], durs[64][0], durs[256][0], durs[1024][0])
	k := 0
	var row []*plot.Plot
	for _, wl := range wls {
		o.printf("\n### %s\n\n| policy |", wl)
		for _, n := range nodes {
			o.printf(" %d nodes |", n)
		}
		o.printf("\n|---|%s\n", strings.Repeat("---|", len(nodes)))
		table := map[string][]summary{}
		for range nodes {
			for _, p := range gridPols {
				table[p] = append(table[p], res[k])
				k++
			}
		}
		var ss []series
		for _, p := range gridPols {
			o.printf("| %s |", p)
			ys := make([]float64, len(nodes))
			for i, s := range table[p] {
				o.printf(" %.1f / %.0f, %.2f, %.1f s |", s.mean, s.p99, s.tp, s.wall.Seconds())
				ys[i] = s.p99 / table[sim.Central][i].p99
			}
			o.printf("\n")
			ss = append(ss, line(p, intsToFloats(nodes), ys, solid))
		}
		pl := linePlot(fmt.Sprintf("%s, 80%% load: 99th PRT / central's", wl), "nodes", "p99 relative to central", ss, true)
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.ConstantTicks(ticksAt(intsToFloats(nodes)))
		row = append(row, pl)
	}
	o.saveGrid([][]*plot.Plot{row}, "sim-scale.png", 12, 5)
	o.printf("\n![scaling](img/sim-scale.png)\n")
}

func ticksAt(xs []float64) []plot.Tick {
	out := make([]plot.Tick, len(xs))
	for i, x := range xs {
		out[i] = plot.Tick{Value: x, Label: fmt.Sprintf("%g", x)}
	}
	return out
}

// --- plotting ---

type style int

const (
	solid  style = iota
	dashed       // reference lines
	points       // the paper's values
)

type series struct {
	name   string
	xs, ys []float64
	style  style
}

func line(name string, xs, ys []float64, st style) series { return series{name, xs, ys, st} }

var policyColor = map[string]color.Color{
	"rr":          color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"ct":          color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	"ll":          color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"nu":          color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	"nu-exact":    color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	sim.Central:   color.Black,
	"paper limit": color.Gray{Y: 0x80},
}

func colorFor(name string) color.Color {
	if c, ok := policyColor[strings.TrimSuffix(name, " (paper)")]; ok {
		return c
	}
	return color.Gray{Y: 0x40}
}

// logTicks labels 1-2-5 steps, which a response-time axis spanning one or
// two decades needs (plot.LogTicks labels only powers of ten).
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for d := math.Pow(10, math.Floor(math.Log10(lo))); d <= hi; d *= 10 {
		for _, m := range []float64{1, 2, 3, 4, 5, 6, 7, 8, 9} {
			v := d * m
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = fmt.Sprintf("%g", v)
			}
			out = append(out, t)
		}
	}
	return out
}

func linePlot(title, xl, yl string, ss []series, logY bool) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xl
	p.Y.Label.Text = yl
	p.Legend.Top = true
	p.Legend.Left = true
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	for _, s := range ss {
		var pts plotter.XYs
		for i := range s.xs {
			if math.IsNaN(s.ys[i]) || math.IsInf(s.ys[i], 0) || (logY && s.ys[i] <= 0) {
				continue
			}
			pts = append(pts, plotter.XY{X: s.xs[i], Y: s.ys[i]})
		}
		if len(pts) == 0 {
			continue
		}
		c := colorFor(s.name)
		if s.style == points {
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				log.Fatal(err)
			}
			sc.GlyphStyle.Color = c
			sc.GlyphStyle.Shape = draw.CrossGlyph{}
			sc.GlyphStyle.Radius = vg.Points(4)
			p.Add(sc)
			p.Legend.Add(s.name, sc)
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			log.Fatal(err)
		}
		l.Color = c
		l.Width = vg.Points(1.5)
		if s.style == dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p
}

func (o *opts) save(p *plot.Plot, name string, wIn, hIn float64) {
	if err := p.Save(vg.Length(wIn)*vg.Inch, vg.Length(hIn)*vg.Inch, filepath.Join(o.out, "img", name)); err != nil {
		log.Fatal(err)
	}
}

func (o *opts) saveGrid(rows [][]*plot.Plot, name string, wIn, hIn float64) {
	img := vgimg.New(vg.Length(wIn)*vg.Inch, vg.Length(hIn)*vg.Inch)
	dc := draw.New(img)
	t := draw.Tiles{Rows: len(rows), Cols: len(rows[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(rows, t, dc)
	for j := range rows {
		for i := range rows[j] {
			if rows[j][i] != nil {
				rows[j][i].Draw(canvases[j][i])
			}
		}
	}
	f, err := os.Create(filepath.Join(o.out, "img", name))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		log.Fatal(err)
	}
}
