package cli

import (
	"fmt"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/sim"
	"github.com/swd-project/swd/loadgen"
)

func newSimCommand(e *env) *cobra.Command {
	var (
		wl       workloadFlags
		rf       reportFlags
		rates    string
		pols     []string
		duration time.Duration
		warmup   time.Duration
		parallel int
		cqAhead  int
		indices  []string
	)
	d := sim.DefaultConfig()
	cfg := d
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "simulate the policies at several rates instead of measuring a cluster",
		Long: `sim runs internal/sim's discrete-event simulator on the same workload, seed, rates and
policies a real sweep would use (the same requests, arrival for arrival) and reports
the same table, CSV, capacities and plots. --duration is measured after --warmup, as
in a real run. The policy "central" (one FIFO queue for the whole cluster, M/G/n) is
the work-conserving limit.`,
		Example: `  loadgen sim --policies rr,ct,ll,nu,central --rates 40,120,200,240,280,320,360 --limit-from nu@320
  loadgen sim --workload burst --nodes 12 --percentiles 99.5 --limit 927ms
  loadgen sim --workload mixed --load-index count,work --policies nu,steal --rates 320
  loadgen sim --policies nu --rates 280 --large-share 0.2 --large-body 1048576 --handoff-per-mib 60ms --transfer-cost`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec, err := wl.spec(cmd.Flags())
			if err != nil {
				return err
			}
			rs, err := loadgen.ParseRates(rates)
			if err != nil {
				return usageError{err}
			}
			ps, err := parsePolicies(pols)
			if err != nil {
				return err
			}
			idx, err := parseLoadIndices(indices)
			if err != nil {
				return err
			}
			if err := cfg.Cost.Validate(); err != nil {
				return usageError{fmt.Errorf("--cost-theta, --cost-weight: %w", err)}
			}
			rep, err := rf.parse()
			if err != nil {
				return err
			}
			labels := simLabels(ps, idx)
			if err := checkLimitSource(rep.limits.From, labelNames(labels), rs); err != nil {
				return err
			}
			if duration <= 0 || warmup < 0 {
				return usagef("--duration must be positive and --warmup not negative")
			}
			if cqAhead < -1 {
				return usagef("--cq-ahead must be -1 (the registered cq's), 0 (never ahead) or a depth per node, got %d", cqAhead)
			}
			var cfgs []sim.Config
			var cfgLabels []string
			for _, l := range labels {
				for _, r := range rs {
					c := cfg
					c.Policy, c.LoadIndex = l.policy, l.index
					if l.policy == "cq" && cqAhead >= 0 {
						c.CQAhead = &cqAhead
					}
					c.Workload, c.Rate, c.Seed = spec, r, wl.seed
					c.Duration, c.Warmup = warmup+duration, warmup
					if err := c.Validate(); err != nil {
						return usageError{fmt.Errorf("%s at %s req/s: %w", l.name, loadgen.FormatRate(r), err)}
					}
					cfgs = append(cfgs, c)
					cfgLabels = append(cfgLabels, l.name)
				}
			}
			if rf.progress != "none" {
				fmt.Fprintf(e.stderr, "simulating %d runs of %v on %s\n", len(cfgs), warmup+duration, nodes(cfg.Nodes))
			}
			results, err := sim.RunGrid(cfgs, parallel)
			if err != nil {
				return err
			}
			report := loadgen.Report{
				Title:        title("sim", labelNames(labels), rs, fmt.Sprintf("on %s, simulated (m = %d)", nodes(cfg.Nodes), cfg.Concurrency)),
				Workload:     &spec,
				Percentiles:  rep.percentiles,
				MaxErrorRate: rf.maxErrorRate,
			}
			tb := loadgen.Block{Title: "transfers per request"}
			held := loadgen.Block{Title: "moves held back by the transfer-cost rule, per request"}
			for i, res := range results {
				row := SimRow(res)
				row.Policy = cfgLabels[i]
				report.Rows = append(report.Rows, row)
				tb.Cells = append(tb.Cells, loadgen.Cell{Policy: cfgLabels[i], Rate: res.Config.Rate, Value: res.TransfersPerRequest})
				held.Cells = append(held.Cells, loadgen.Cell{Policy: cfgLabels[i], Rate: res.Config.Rate, Value: float64(res.HeldBack) / float64(max(res.Requests, 1))})
			}
			report.Blocks = append(report.Blocks, tb)
			if cfg.TransferCost {
				report.Blocks = append(report.Blocks, held)
			}
			report.Blocks = append(report.Blocks, costBlocks(results, cfgLabels)...)
			return finish(e, report, rep.limits, rf, nil, false)
		},
	}
	fs := cmd.Flags()
	wl.add(fs)
	rf.add(fs, "loadgen-sim", true)
	fs.StringVar(&rates, "rates", "40,120,200,240,280,320,360", "arrival rates in requests per second, comma-separated")
	fs.StringSliceVar(&pols, "policies", []string{"rr", "ct", "ll", "nu"}, "policies to simulate, in order (also nu-exact, none, central)")
	fs.DurationVar(&duration, "duration", d.Duration-d.Warmup, "simulated measured time of each run (after the warm-up)")
	fs.DurationVar(&warmup, "warmup", d.Warmup, "simulated time before measuring")
	fs.IntVar(&cfg.Nodes, "nodes", d.Nodes, "simulated nodes")
	fs.IntVar(&cfg.Concurrency, "concurrency", d.Concurrency, "m: requests a node serves at once")
	fs.DurationVar(&cfg.GossipInterval, "gossip-interval", d.GossipInterval, "how often each node publishes its load")
	fs.DurationVar(&cfg.ActivationInterval, "activation-interval", d.ActivationInterval, "how often each node runs a transfer policy")
	fs.DurationVar(&cfg.StaleAfter, "stale-after", d.StaleAfter, "age beyond which a load entry is unknown")
	fs.DurationVar(&cfg.GossipDelay, "gossip-delay", d.GossipDelay, "how long a published load takes to reach the others")
	fs.DurationVar(&cfg.TransferDelay, "transfer-delay", d.TransferDelay, "how long a moved request takes to reach its target")
	fs.DurationVar(&cfg.ControlDelay, "control-delay", d.ControlDelay, "how long a small control message takes one way (a pull's ask or miss, cq's completion notice)")
	fs.IntVar(&cqAhead, "cq-ahead", -1, "cq: FIFO depth per node from which a request goes ahead to a busy node (0: never, HAProxy's maxconn queue; -1: the registered cq's)")
	fs.IntVar(&parallel, "parallel", 0, "simulations run at once (0: GOMAXPROCS)")
	fs.StringSliceVar(&indices, "load-index", []string{"count"}, "load indices transfer policies plan on, each a row of its own: count, work (rows POLICY+work; a node learns each route's cost online, as swd --load-index work)")
	fs.IntVar(&cfg.Cost.Theta, "cost-theta", d.Cost.Theta, "work index: samples averaged before the cost statistic becomes a moving average (as swd --cost-theta)")
	fs.Float64Var(&cfg.Cost.Weight, "cost-weight", d.Cost.Weight, "work index: the moving average's weight of the old value (as swd --cost-weight)")
	fs.Int64Var(&cfg.Bodies.SmallBytes, "small-body", 0, "body bytes of the requests that are not large")
	fs.Int64Var(&cfg.Bodies.LargeBytes, "large-body", 1<<20, "body bytes of the large requests")
	fs.Float64Var(&cfg.Bodies.LargeShare, "large-share", 0, "share of the requests with a large body (0 to 1)")
	fs.DurationVar(&cfg.HandoffPerMiB, "handoff-per-mib", 0, "how much longer than --transfer-delay moving a request takes per MiB of its body")
	fs.BoolVar(&cfg.TransferCost, "transfer-cost", false, "move a request only if the wait it saves exceeds its hand-off time (policy.WorthMoving, as swd --transfer-cost measured)")
	return cmd
}

// simLabel is one row label of a simulation: a policy under a load index.
type simLabel struct {
	name   string
	policy string
	index  policy.LoadIndex
}

// parseLoadIndices parses --load-index.
func parseLoadIndices(list []string) ([]policy.LoadIndex, error) {
	names, err := uniqueNames(list, nil, "--load-index")
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, usagef("no load index given (use --load-index count, work or count,work)")
	}
	out := make([]policy.LoadIndex, len(names))
	for i, n := range names {
		if out[i], err = policy.ParseLoadIndex(n); err != nil {
			return nil, usagef("--load-index: %v", err)
		}
	}
	return out, nil
}

// simLabels pairs every policy with every load index: "nu" under count,
// "nu+work" under work. Policies that plan on no load index (dispatchers,
// none, central) get one row, under count.
func simLabels(ps []string, idx []policy.LoadIndex) []simLabel {
	var out []simLabel
	for _, p := range ps {
		transfer := false
		if pol, err := policy.Lookup(p); err == nil {
			transfer = pol.Kind == policy.KindTransfer
		}
		if !transfer {
			out = append(out, simLabel{name: p, policy: p})
			continue
		}
		for _, x := range idx {
			name := p
			if x != policy.IndexCount {
				name += "+" + x.String()
			}
			out = append(out, simLabel{name: name, policy: p, index: x})
		}
	}
	return out
}

func labelNames(ls []simLabel) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.name
	}
	return out
}

// costBlocks reports, per route, the cost the nodes of each work-index run
// learnt (mean over the nodes, ms).
func costBlocks(results []sim.Result, labels []string) []loadgen.Block {
	var out []loadgen.Block
	for i, res := range results {
		for k, rc := range res.RouteCosts {
			if k >= len(out) {
				route := rc.Route
				if route == "" {
					route = "the one route"
				}
				out = append(out, loadgen.Block{Title: fmt.Sprintf("learnt cost of %s (ms, mean of the nodes; true %.4g)", route, rc.TrueMs)})
			}
			out[k].Cells = append(out[k].Cells, loadgen.Cell{Policy: labels[i], Rate: res.Config.Rate, Value: rc.MeanMs})
		}
	}
	return out
}

// SimRow turns a simulation result into a results row (a simulated
// request never fails).
func SimRow(r sim.Result) loadgen.Row {
	row := loadgen.Row{Policy: r.Config.Policy, Rate: r.Config.Rate, Requests: r.Measured,
		MeanMs: r.MeanMs, P50Ms: r.P50Ms, P95Ms: r.P95Ms, P99Ms: r.P99Ms, P995Ms: r.P995Ms}
	if r.Measured == 0 {
		nan := math.NaN()
		row.MeanMs, row.P50Ms, row.P95Ms, row.P99Ms, row.P995Ms = nan, nan, nan, nan, nan
	}
	return row
}
