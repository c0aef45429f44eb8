// Command affinity measures key affinity and the cache-aware cohort order
// (paper 000; docs/affinity.md) on a local cluster of real processes: N
// nodes (m = 1) whose dummyapps keep an LRU of --cache keys each and charge
// --miss-ms per miss, under a keyed workload (uniform keys, in X-User) with
// as many keys as the total cache divided by each --ratios value.
//
// For each cache ratio it runs these systems on the same requests (same
// seed: same arrivals, sizes and keys) at rates that are fractions of the
// all-hit-at-that-ratio capacity:
//
//   - fifo: swd, policy nu, no affinity: the plain FIFO order, clients
//     spread round robin;
//   - affinity: swd --affinity header:X-User (keyed requests run on their
//     home node), FIFO order;
//   - cohort: --affinity and --cohort (cached keys first, one request per
//     key at the app);
//   - haproxy-hash: HAProxy in front of the same apps, balance
//     hdr(X-User), hash-type consistent, hash-balance-factor 125.
//
// It prints, per ratio, response times, the apps' cache hit ratio and the
// share of keyed requests swd spilled past the load bound, per system and
// rate, and the capacity at the --limit on the 99th percentile response
// time with its ratio to fifo's. A system's sweep stops after the first
// rate over twice the limit (its capacity is then known). Last, on a fresh
// 4-node affinity cluster, it sends every key once, kills one node, sends
// every key again and counts the keys whose serving node changed.
//
//	go run ./test/bench/affinity --bin-dir bin [--ratios 0.5,0.9] [--duration 20s]
//
// Client, daemons and apps share this machine's cores (and other
// engineers' builds may run meanwhile): compare the systems with each
// other within one run, not with other machines.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/workload"
	"github.com/swd-project/swd/loadgen"
)

type config struct {
	binDir    string
	nodes     int
	cache     int
	missMs    float64
	meanMs    float64
	cv        float64
	ratios    []float64
	fractions []float64
	systems   []string
	warmup    time.Duration
	duration  time.Duration
	cooldown  time.Duration
	limit     time.Duration
	seed      uint64
	remap     bool
}

var allSystems = []string{"fifo", "affinity", "cohort", "haproxy-hash"}

func main() {
	var c config
	var ratios, fractions, systems string
	flag.StringVar(&c.binDir, "bin-dir", "bin", "directory holding swd, swdctl and dummyapp (make build)")
	flag.IntVar(&c.nodes, "nodes", 4, "nodes in the local cluster")
	flag.IntVar(&c.cache, "cache", 50, "keys each app's cache holds (dummyapp --cache-size, swd --cohort-cache)")
	flag.Float64Var(&c.missMs, "miss-ms", 40, "extra service time of a cache miss (dummyapp --miss-ms)")
	flag.Float64Var(&c.meanMs, "mean-ms", 10, "mean service time of a request whose key is cached")
	flag.Float64Var(&c.cv, "cv", 1, "SD/mean of the (lognormal) service times")
	flag.StringVar(&ratios, "ratios", "0.5,0.9", "cache ratios: total cache / keys")
	flag.StringVar(&fractions, "rates", "0.25,0.4,0.55,0.7,0.85,1,1.15", "rates as fractions of the all-hit capacity at each ratio: nodes × 1000 / (mean-ms + miss-ms × (1 - ratio))")
	flag.StringVar(&systems, "systems", strings.Join(allSystems, ","), "systems to measure: "+strings.Join(allSystems, ", ")+` ("": only the remap measurement)`)
	flag.DurationVar(&c.warmup, "warmup", 5*time.Second, "warm-up of each run (fills the caches; not measured)")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "measured time of each run")
	flag.DurationVar(&c.cooldown, "cooldown", 3*time.Second, "pause between runs")
	flag.DurationVar(&c.limit, "limit", 500*time.Millisecond, "limit on the 99th percentile response time for the capacity")
	flag.Uint64Var(&c.seed, "seed", 1, "workload seed (arrivals, sizes, keys)")
	flag.BoolVar(&c.remap, "remap", true, "also measure the keys remapped when one node dies")
	flag.Parse()
	var err error
	if c.ratios, err = floats(ratios); err == nil {
		c.fractions, err = floats(fractions)
	}
	for _, s := range strings.Split(systems, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if !slices.Contains(allSystems, s) {
				err = fmt.Errorf("unknown system %q (known: %s)", s, strings.Join(allSystems, ", "))
			}
			c.systems = append(c.systems, s)
		}
	}
	if err == nil {
		err = c.validate()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench affinity:", err)
		os.Exit(2)
	}
	if err := run(context.Background(), c); err != nil {
		fmt.Fprintln(os.Stderr, "bench affinity:", err)
		os.Exit(1)
	}
}

func floats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func (c config) validate() error {
	switch {
	case c.nodes < 2:
		return errors.New("--nodes must be at least 2")
	case c.cache < 1 || c.missMs < 0 || c.meanMs <= 0 || c.cv < 0:
		return errors.New("--cache must be at least 1, --mean-ms positive, --miss-ms and --cv not negative")
	case c.duration <= 0 || c.warmup <= 0 || c.limit <= 0:
		return errors.New("--duration, --warmup and --limit must be positive")
	}
	for _, r := range c.ratios {
		if r > 1 {
			return fmt.Errorf("cache ratio %v is above 1", r)
		}
	}
	return nil
}

// spec is the workload of cached requests; misses add miss-ms at the app.
func (c config) spec() workload.Spec {
	return workload.Spec{Name: "custom", MeanMs: c.meanMs, CV: c.cv, Burst: 1, Scale: 1}
}

func run(ctx context.Context, c config) error {
	fmt.Printf("key affinity and cohort order: %d nodes (m = 1), %d keys cached per app (total %d), miss +%g ms, service lognormal mean %g ms SD/mean %g, uniform keys\n",
		c.nodes, c.cache, c.nodes*c.cache, c.missMs, c.meanMs, c.cv)
	fmt.Printf("runs: %s warm-up + %s measured, seed %d; capacity: highest rate whose p99 stays within %s\n",
		c.warmup, c.duration, c.seed, c.limit)
	for _, ratio := range c.ratios {
		if len(c.systems) == 0 {
			break // --systems "": only the remap measurement
		}
		if err := c.measureRatio(ctx, ratio); err != nil {
			return err
		}
	}
	if c.remap {
		return c.measureRemap(ctx, int(math.Round(float64(c.nodes*c.cache)/c.ratios[0])))
	}
	return nil
}

// system is one system's cluster flags.
func (c config) clusterFor(system string) localcluster.Config {
	cfg := localcluster.DefaultConfig()
	cfg.Nodes, cfg.BinDir, cfg.Policy = c.nodes, c.binDir, "nu"
	cfg.AppConcurrency = 1 // the apps serve one request at a time whoever sends (HAProxy has no maxconn)
	cfg.ReadyTimeout = 60 * time.Second
	// Past capacity, requests are refused early rather than queued for 30 s.
	cfg.SwdArgs = []string{"--queue-timeout=5s"}
	cfg.AppArgs = []string{"--cache-size=" + strconv.Itoa(c.cache), "--miss-ms=" + strconv.FormatFloat(c.missMs, 'g', -1, 64), "--cache-header=X-User"}
	switch system {
	case "affinity":
		cfg.NodeArgs = []string{"--affinity=header:X-User"}
	case "cohort":
		cfg.NodeArgs = []string{"--affinity=header:X-User", "--cohort", "--cohort-cache=" + strconv.Itoa(c.cache)}
	}
	return cfg
}

// result is one run of one system.
type result struct {
	row     loadgen.Row
	hit     float64 // NaN: unknown
	spilled float64 // share of keyed arrivals spilled; NaN: no affinity
}

func (c config) measureRatio(ctx context.Context, ratio float64) error {
	keys := int(math.Round(float64(c.nodes*c.cache) / ratio))
	best := float64(c.nodes) * 1000 / (c.meanMs + c.missMs*(1-ratio))
	var rates []float64
	for _, f := range c.fractions {
		rates = append(rates, math.Round(f*best))
	}
	slices.Sort(rates)
	rates = slices.Compact(rates)
	fmt.Printf("\n== cache ratio %.3g: %d keys over %d cached; all-hit capacity %.0f req/s; rates %v\n", float64(c.nodes*c.cache)/float64(keys), keys, c.nodes*c.cache, best, rates)
	var all []result
	for _, sys := range c.systems {
		res, err := c.measureSystem(ctx, sys, keys, rates)
		if err != nil {
			return fmt.Errorf("%s at ratio %v: %w", sys, ratio, err)
		}
		all = append(all, res...)
	}
	return c.report(os.Stdout, ratio, all)
}

// measureSystem starts the system's cluster (and peer) and runs the rates
// in ascending order until one is over twice the limit.
func (c config) measureSystem(ctx context.Context, sys string, keys int, rates []float64) ([]result, error) {
	lc := c.clusterFor(sys)
	cl, err := localcluster.Start(ctx, lc)
	if err != nil {
		return nil, err
	}
	defer cl.Stop(20 * time.Second)
	var apps, targets, admins []string
	for _, nd := range cl.Info.Nodes {
		apps, targets, admins = append(apps, nd.App), append(targets, nd.HTTP), append(admins, nd.Admin)
	}
	if sys == "haproxy-hash" {
		addr, stop, err := loadgen.PeerLauncher{Apps: apps, Concurrency: 1, ReadyPath: "/healthz"}.StartPeer(ctx, sys)
		if err != nil {
			return nil, err
		}
		defer func() { _ = stop() }()
		targets, admins = []string{addr}, nil
	}
	var out []result
	for i, rate := range rates {
		if i > 0 {
			time.Sleep(c.cooldown)
		}
		rc := loadgen.DefaultRunConfig()
		rc.Policy, rc.Targets, rc.Rate, rc.Workload, rc.Seed = sys, targets, rate, c.spec(), c.seed
		rc.Warmup, rc.Duration, rc.Timeout = c.warmup, c.duration, 10*time.Second
		rc.Keys.N, rc.Apps = keys, apps
		before, _ := placements(admins)
		res, err := loadgen.Run(ctx, rc)
		if err != nil {
			return nil, err
		}
		after, _ := placements(admins)
		r := result{row: res.Row, hit: math.NaN(), spilled: math.NaN()}
		if res.Cache != nil {
			r.hit = res.Cache.HitRatio()
		}
		if home, spill := after[0]-before[0], after[1]-before[1]; home+spill > 0 && sys != "fifo" {
			r.spilled = spill / (home + spill)
		}
		out = append(out, r)
		fmt.Fprintf(os.Stderr, "  %-12s %4.0f req/s: mean %7.1f ms, p99 %8.1f ms, errors %d/%d, hit ratio %.3f, spilled %.3f\n",
			sys, rate, res.Row.MeanMs, res.Row.P99Ms, res.Row.Errors, res.Row.Requests, r.hit, r.spilled)
		if res.Row.Failed(0.01) || res.Row.P99Ms > 2*float64(c.limit)/float64(time.Millisecond) {
			break
		}
	}
	return out, nil
}

// placements sums swd_affinity_placements_total{home, spilled} over the
// nodes' admin addresses.
func placements(admins []string) ([2]float64, error) {
	var sum [2]float64
	for _, a := range admins {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			return sum, err
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return sum, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			for i, p := range []string{"home", "spilled"} {
				if v, ok := strings.CutPrefix(line, `swd_affinity_placements_total{placement="`+p+`"} `); ok {
					f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					sum[i] += f
				}
			}
		}
	}
	return sum, nil
}

// report prints one ratio's tables through loadgen's report (capacities
// and ratios to fifo), then the gains the issue asks for.
func (c config) report(w io.Writer, ratio float64, res []result) error {
	rep := loadgen.Report{
		Title:        fmt.Sprintf("cache ratio %g", ratio),
		Percentiles:  []float64{50, 99},
		MaxErrorRate: 0.01,
	}
	hit := loadgen.Block{Title: "cache hit ratio in the measured window (apps' /stats)"}
	spill := loadgen.Block{Title: "keyed requests spilled past the load bound (share of arrivals)"}
	for _, r := range res {
		rep.Rows = append(rep.Rows, r.row)
		if !math.IsNaN(r.hit) {
			hit.Cells = append(hit.Cells, loadgen.Cell{Policy: r.row.Policy, Rate: r.row.Rate, Value: r.hit})
		}
		if !math.IsNaN(r.spilled) {
			spill.Cells = append(spill.Cells, loadgen.Cell{Policy: r.row.Policy, Rate: r.row.Rate, Value: r.spilled})
		}
	}
	rep.Blocks = []loadgen.Block{hit, spill}
	if slices.Contains(c.systems, "fifo") {
		rep.Reference = "fifo"
	}
	rep, err := rep.WithCapacities(loadgen.LimitSpec{Limits: []time.Duration{c.limit, c.limit}})
	if err != nil {
		return err
	}
	if err := rep.Write(w, "table"); err != nil {
		return err
	}
	caps := map[string]loadgen.Capacity{}
	for _, cp := range rep.Capacities {
		if cp.Percentile == 99 {
			caps[cp.Policy] = cp
		}
	}
	for _, pair := range [][2]string{{"cohort", "fifo"}, {"cohort", "haproxy-hash"}, {"affinity", "fifo"}, {"cohort", "affinity"}} {
		a, ok1 := caps[pair[0]]
		b, ok2 := caps[pair[1]]
		if ok1 && ok2 {
			fmt.Fprintf(w, "capacity at p99 ≤ %s: %s / %s = %s\n", c.limit, pair[0], pair[1], loadgen.RatioOf(a, b))
		}
	}
	return nil
}

// measureRemap sends each of keys keys once to a fresh affinity cluster
// (one at a time, so nothing spills), kills the last node, waits until the
// others no longer count it, sends every key again and counts the keys
// whose serving node changed.
func (c config) measureRemap(ctx context.Context, keys int) error {
	lc := c.clusterFor("affinity")
	lc.Nodes = 4
	lc.NodeArgs = append(lc.NodeArgs, "--stale-after=1s")
	cl, err := localcluster.Start(ctx, lc)
	if err != nil {
		return err
	}
	defer cl.Stop(20 * time.Second)
	nodes := cl.Info.Nodes
	hc := &http.Client{Timeout: 10 * time.Second}
	served := func(via []localcluster.NodeInfo) ([]string, error) {
		out := make([]string, keys)
		for i := range out {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+via[i%len(via)].HTTP+"/work?ms=0", nil)
			req.Header.Set("X-User", loadgen.KeyName(i))
			resp, err := hc.Do(req)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out[i] = resp.Header.Get("X-Served-By")
		}
		return out, nil
	}
	before, err := served(nodes)
	if err != nil {
		return err
	}
	dead := nodes[len(nodes)-1].Name
	if err := cl.Kill(dead); err != nil {
		return err
	}
	if err := cl.Kill("app-" + strings.TrimPrefix(dead, "node-")); err != nil {
		return err
	}
	time.Sleep(3 * time.Second) // past --stale-after on every survivor
	after, err := served(nodes[:len(nodes)-1])
	if err != nil {
		return err
	}
	names := make([]string, len(nodes))
	for i, nd := range nodes {
		names[i] = nd.Name
	}
	changed, wasDead, other := 0, 0, 0
	for i := range before {
		if before[i] == dead {
			wasDead++
		}
		if before[i] != after[i] {
			changed++
			if before[i] != dead {
				other++
			}
		}
	}
	homedDead := 0
	for i := range keys {
		if names[affinity.Home(loadgen.KeyName(i), names)] == dead {
			homedDead++
		}
	}
	fmt.Printf("\n== one of 4 nodes dies (%s, %d keys, each sent once before and once after)\n", dead, keys)
	fmt.Printf("keys whose serving node changed: %d of %d (%.1f %%); served by %s before: %d; moved although their node lived: %d\n",
		changed, keys, 100*float64(changed)/float64(keys), dead, wasDead, other)
	fmt.Printf("rendezvous hash, computed: %d of %d keys homed on %s (%.1f %%)\n", homedDead, keys, dead, 100*float64(homedDead)/float64(keys))
	return nil
}
