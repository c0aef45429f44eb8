package cli

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/swd-project/swd/internal/workload"
	"github.com/swd-project/swd/loadgen"
)

// workloadFlags choose the workload.
type workloadFlags struct {
	name   string
	meanMs float64
	cv     float64
	burst  int
	scale  float64
	seed   uint64
}

func (w *workloadFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&w.name, "workload", "standard", "standard, dispersed, burst (the paper's), mixed (90 % light 10 ms, 10 % heavy 310 ms, each class on its own path /work/NAME) or custom (with --mean-ms, --cv, --burst)")
	fs.Float64Var(&w.meanMs, "mean-ms", 40, "custom workload: mean request size (service time) in ms")
	fs.Float64Var(&w.cv, "cv", 2.16, "custom workload: lognormal standard deviation / mean of the sizes")
	fs.IntVar(&w.burst, "burst", 1, "custom workload: requests arriving together (bursts are Poisson at rate/burst)")
	fs.Float64Var(&w.scale, "scale", 1, "multiply every request size (0.5 halves them), for any workload")
	fs.Uint64Var(&w.seed, "seed", 1, "seed of the workload; the same seed gives the same requests (and the simulator's)")
}

func (w *workloadFlags) spec(fs *pflag.FlagSet) (workload.Spec, error) {
	var s workload.Spec
	if w.name == "custom" {
		s = workload.Spec{Name: "custom", MeanMs: w.meanMs, CV: w.cv, Burst: w.burst, Scale: w.scale}
	} else {
		var err error
		if s, err = loadgen.LookupWorkload(w.name); err != nil {
			return s, usagef("%v, or custom", err)
		}
		for _, n := range []string{"mean-ms", "cv", "burst"} {
			if changed(fs, n) {
				return s, usagef("--%s applies only to --workload custom (e.g. --workload custom --mean-ms 40 --cv 3.06 --burst 4)", n)
			}
		}
		s.Scale = w.scale
	}
	if err := s.Validate(); err != nil {
		return s, usageError{err}
	}
	return s, nil
}

// loadFlags shape each run.
type loadFlags struct {
	duration    time.Duration
	warmup      time.Duration
	timeout     time.Duration
	workers     uint64
	maxWorkers  uint64
	connections int
	path        string
}

func (l *loadFlags) add(fs *pflag.FlagSet) {
	d := loadgen.DefaultRunConfig()
	fs.DurationVar(&l.duration, "duration", d.Duration, "measured time of each run (after the warm-up)")
	fs.DurationVar(&l.warmup, "warmup", d.Warmup, "time each run sends before measuring")
	fs.DurationVar(&l.timeout, "timeout", d.Timeout, "longest wait for one response (then it counts as an error)")
	fs.Uint64Var(&l.workers, "workers", d.Workers, "initial vegeta workers")
	fs.Uint64Var(&l.maxWorkers, "max-workers", 0, "most vegeta workers; 0 (no cap) keeps the schedule however slow the cluster")
	fs.IntVar(&l.connections, "connections", d.Connections, "most idle connections kept per target")
	fs.StringVar(&l.path, "path", d.Path, "the application's endpoint; the size goes in ?ms=")
}

func (l *loadFlags) runConfig(spec workload.Spec, seed uint64) (loadgen.RunConfig, error) {
	rc := loadgen.DefaultRunConfig()
	rc.Workload, rc.Seed = spec, seed
	rc.Duration, rc.Warmup, rc.Timeout = l.duration, l.warmup, l.timeout
	rc.Workers, rc.MaxWorkers, rc.Connections, rc.Path = l.workers, l.maxWorkers, l.connections, l.path
	check := rc
	check.Targets = []string{"127.0.0.1:1"}
	if err := check.Validate(); err != nil {
		return rc, usageError{err}
	}
	return rc, nil
}

// clusterFlags say where the cluster is, or start one.
type clusterFlags struct {
	targets           []string
	dispatcher        string
	control           string
	dispatcherControl string
	token             string
	local             int
	swdctl            string
	appMode           string
	concurrency       int
	localTimeout      time.Duration
	noSwitch          bool
	settle            time.Duration
	cooldown          time.Duration
}

func (c *clusterFlags) add(fs *pflag.FlagSet) {
	d := loadgen.DefaultSweepConfig()
	fs.StringSliceVar(&c.targets, "targets", nil, "nodes' HTTP addresses, comma-separated; ll/nu/none spread requests over them round robin")
	fs.StringVar(&c.dispatcher, "dispatcher", "", "dispatcher's HTTP address; rr/ct send every request to it")
	fs.StringVar(&c.control, "control", "", "gRPC address of any node, to switch the cluster's policy (Control.SetPolicy, cluster-wide)")
	fs.StringVar(&c.dispatcherControl, "dispatcher-control", "", "dispatcher's gRPC address, if the cluster-wide switch does not reach it")
	fs.StringVar(&c.token, "token", "", "control API token, sent as 'authorization: Bearer TOKEN'")
	fs.IntVar(&c.local, "local", 0, "start a loopback cluster of N nodes and a dispatcher with swdctl, and stop it afterwards")
	fs.StringVar(&c.swdctl, "swdctl", "bin/swdctl", "swdctl binary for --local")
	fs.StringVar(&c.appMode, "app-mode", "sleep", "dummyapp mode for --local: sleep or busy")
	fs.IntVar(&c.concurrency, "concurrency", 1, "m for --local: every swd's --concurrency and every dummyapp's worker count (and what a peer with a central queue sends each app at once)")
	fs.DurationVar(&c.localTimeout, "local-timeout", 60*time.Second, "longest wait for the --local cluster to be ready")
	fs.BoolVar(&c.noSwitch, "no-switch", false, "do not switch policies: the cluster already runs the one named")
	fs.DurationVar(&c.settle, "settle", d.Settle, "pause after switching the policy")
	fs.DurationVar(&c.cooldown, "cooldown", d.Cooldown, "pause between runs (lets queues drain)")
}

func (c *clusterFlags) check() error {
	if c.local < 0 {
		return usagef("--local must be a node count, got %d", c.local)
	}
	if c.local > 0 && (len(c.targets) > 0 || c.dispatcher != "" || c.control != "" || c.dispatcherControl != "") {
		return usagef("--local starts its own cluster: drop --targets, --dispatcher, --control and --dispatcher-control, or drop --local")
	}
	if c.local == 0 && len(c.targets) == 0 && c.dispatcher == "" {
		return usagef("no cluster: give --targets (nodes' HTTP addresses), --dispatcher, or --local N")
	}
	for _, t := range append(append([]string(nil), c.targets...), c.dispatcher) {
		if t == "" {
			continue
		}
		if _, err := loadgen.NormalizeBase(t); err != nil {
			return usageError{err}
		}
	}
	if c.concurrency < 1 {
		return usagef("--concurrency must be at least 1, got %d", c.concurrency)
	}
	if c.settle < 0 || c.cooldown < 0 {
		return usagef("--settle and --cooldown must not be negative")
	}
	return nil
}

// reportFlags shape the output.
type reportFlags struct {
	percentiles  string
	limit        string
	limitFrom    string
	maxErrorRate float64
	output       string
	out          string
	plots        bool
	progress     string
}

func (r *reportFlags) add(fs *pflag.FlagSet, outDefault string, progress bool) {
	fs.StringVar(&r.percentiles, "percentiles", "95,99,99.5", "percentiles to report and compute capacities for (of 50, 95, 99, 99.5)")
	fs.StringVar(&r.limit, "limit", "", "response-time limit for the capacity: one duration, or one per percentile (e.g. 279ms,517ms,643ms)")
	fs.StringVar(&r.limitFrom, "limit-from", "", "take the limit from a result, as the paper did: POLICY@RATE (e.g. nu@320)")
	fs.Float64Var(&r.maxErrorRate, "max-error-rate", 0.01, "a run with a larger fraction of failed requests is reported as failed")
	fs.StringVarP(&r.output, "output", "o", "table", "report format on stdout: table or json")
	fs.StringVar(&r.out, "out", outDefault, "directory for results.csv, report.json, plots and per-run results.bin (empty: none)")
	fs.BoolVar(&r.plots, "plots", true, "write PNG plots into --out")
	if progress {
		fs.StringVar(&r.progress, "progress", "auto", "progress on stderr: auto (a bar on a terminal, lines otherwise), bar, lines or none")
	}
}

// parsed is the checked report flags.
type parsed struct {
	percentiles []float64
	limits      loadgen.LimitSpec
}

func (r *reportFlags) parse() (parsed, error) {
	var p parsed
	var err error
	if p.percentiles, err = loadgen.ParsePercentiles(r.percentiles); err != nil {
		return p, usageError{err}
	}
	if r.output != "table" && r.output != "json" {
		return p, usagef("unknown output format %q (use -o table or -o json)", r.output)
	}
	if !(r.maxErrorRate >= 0 && r.maxErrorRate <= 1) {
		return p, usagef("--max-error-rate must be a fraction in [0, 1], got %v", r.maxErrorRate)
	}
	if r.limit != "" && r.limitFrom != "" {
		return p, usagef("give either --limit or --limit-from, not both")
	}
	if r.limit != "" {
		if p.limits.Limits, err = loadgen.ParseLimits(r.limit); err != nil {
			return p, usageError{err}
		}
		if n := len(p.limits.Limits); n != 1 && n != len(p.percentiles) {
			return p, usagef("%d limits for %d percentiles: give one limit, or one per percentile in order", n, len(p.percentiles))
		}
	}
	if r.limitFrom != "" {
		if _, _, err := loadgen.ParseLimitFrom(r.limitFrom); err != nil {
			return p, usageError{err}
		}
		p.limits.From = r.limitFrom
	}
	return p, nil
}

// checkLimitSource fails early when --limit-from names a policy or a rate
// the sweep will not measure.
func checkLimitSource(from string, policies []string, rates []float64) error {
	if from == "" {
		return nil
	}
	pol, rate, _ := loadgen.ParseLimitFrom(from)
	okPol := len(policies) == 0 && pol == "current"
	for _, p := range policies {
		okPol = okPol || p == pol
	}
	okRate := false
	for _, r := range rates {
		okRate = okRate || r == rate
	}
	if !okPol || !okRate {
		return usagef("--limit-from %s names a policy or rate this command does not measure (policies %s, rates %s)", from, strings.Join(orCurrent(policies), ","), formatRates(rates))
	}
	return nil
}

func orCurrent(p []string) []string {
	if len(p) == 0 {
		return []string{"current"}
	}
	return p
}

func formatRates(rates []float64) string {
	s := make([]string, len(rates))
	for i, r := range rates {
		s[i] = loadgen.FormatRate(r)
	}
	return strings.Join(s, ",")
}

func parseRate(v float64) ([]float64, error) {
	if !(v > 0) || math.IsInf(v, 0) {
		return nil, usagef("--rate must be a positive number of requests per second, got %v", v)
	}
	return []float64{v}, nil
}

func parsePolicies(list []string) ([]string, error) {
	out, err := uniqueNames(list, nil, "--policies")
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, usagef("no policies given (use e.g. --policies rr,ct,ll,nu)")
	}
	return out, nil
}

// uniqueNames trims the names in list, drops empty ones, and refuses one
// given twice or already among taken (named by flags in the message).
func uniqueNames(list, taken []string, flags string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, p := range taken {
		seen[p] = true
	}
	for _, p := range list {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if seen[p] {
			return nil, usagef("%s is listed twice in %s", p, flags)
		}
		seen[p] = true
		out = append(out, p)
	}
	return out, nil
}

// nodes renders "1 node" or "4 nodes".
func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func title(cmd string, policies []string, rates []float64, where string) string {
	return fmt.Sprintf("loadgen %s: %s × %s req/s %s", cmd, strings.Join(orCurrent(policies), ","), formatRates(rates), where)
}
