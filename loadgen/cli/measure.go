package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/loadgen"
)

// measureFlags are the flags of run, sweep and compare.
type measureFlags struct {
	wl      workloadFlags
	load    loadFlags
	cluster clusterFlags
	report  reportFlags
	keys    keyFlags
}

func (m *measureFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	m.wl.add(fs)
	m.load.add(fs)
	m.cluster.add(fs)
	m.report.add(fs, "loadgen-out", true)
	m.keys.add(fs)
}

func newRunCommand(e *env) *cobra.Command {
	var m measureFlags
	var rate float64
	var pol string
	cmd := &cobra.Command{
		Use:   "run",
		Short: "offer one workload at one rate and report response times",
		Example: `  loadgen run --targets 127.0.0.1:8080,127.0.0.1:8081 --rate 120 --duration 60s
  loadgen run --local 4 --policy nu --rate 40 --workload burst`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rates, err := parseRate(rate)
			if err != nil {
				return err
			}
			var pols []string
			if pol != "" {
				pols = []string{pol}
			}
			return m.measure(cmd.Context(), e, cmd, "run", pols, peerFlags{}, rates)
		},
	}
	m.add(cmd)
	cmd.Flags().Float64Var(&rate, "rate", 40, "offered load in requests per second")
	cmd.Flags().StringVar(&pol, "policy", "", "switch the cluster to this policy first (needs --control or --local); empty: measure the current one")
	return cmd
}

func newSweepCommand(e *env) *cobra.Command {
	var m measureFlags
	var rates, pol string
	cmd := &cobra.Command{
		Use:     "sweep",
		Short:   "measure one policy at several rates",
		Example: `  loadgen sweep --targets 127.0.0.1:8080,127.0.0.1:8081 --rates 40,120,200 --warmup 10s --duration 60s`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := loadgen.ParseRates(rates)
			if err != nil {
				return usageError{err}
			}
			var pols []string
			if pol != "" {
				pols = []string{pol}
			}
			return m.measure(cmd.Context(), e, cmd, "sweep", pols, peerFlags{}, rs)
		},
	}
	m.add(cmd)
	cmd.Flags().StringVar(&rates, "rates", "40,120,200,240,280,320,360", "offered loads in requests per second, comma-separated")
	cmd.Flags().StringVar(&pol, "policy", "", "switch the cluster to this policy first (needs --control or --local); empty: measure the current one")
	return cmd
}

func newCompareCommand(e *env) *cobra.Command {
	var m measureFlags
	var rates string
	var pols []string
	var pf peerFlags
	cmd := &cobra.Command{
		Use:   "compare",
		Short: "for each policy, switch the cluster live and sweep the rates; then the same for other balancers",
		Long: `compare switches the whole cluster to each policy in turn (Control.SetPolicy with
cluster=true on the --control node) and sweeps the rates. Transfer policies (ll, nu,
nu-exact) get requests spread over --targets round robin, as the paper's clients did;
dispatch policies (rr, ct) get every request sent to --dispatcher.

With --local, --peers adds the balancers users deploy instead (` + strings.Join(loadgen.PeerNames(), ", ") + `):
each is started as a child process in front of the same apps, gets the same
requests, and is stopped after its runs. A peer whose program is not installed is
skipped with a message (scripts/ensure-<program>.sh installs it). Capacities are
also shown as ratios to --reference (haproxy-cq when it is measured).`,
		Example: `  loadgen compare --local 16 --policies rr,ct,ll,nu --rates 40,120,200,240,280,320,360 --limit-from nu@320
  loadgen compare --targets a:8080,b:8080 --dispatcher d:8080 --control a:7070 --workload burst
  loadgen compare --local 8 --workload burst --scale 0.5 --policies rr,ct,nu,nu-exact \
      --peers haproxy-cq,haproxy-leastconn,nginx-leastconn,caddy-leastconn --rates 200,240,280,320,360`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := loadgen.ParseRates(rates)
			if err != nil {
				return usageError{err}
			}
			ps, err := parsePolicies(pols)
			if err != nil {
				return err
			}
			return m.measure(cmd.Context(), e, cmd, "compare", ps, pf, rs)
		},
	}
	m.add(cmd)
	pf.add(cmd.Flags())
	cmd.Flags().StringVar(&rates, "rates", "40,120,200,240,280,320,360", "offered loads in requests per second, comma-separated")
	cmd.Flags().StringSliceVar(&pols, "policies", []string{"rr", "ct", "ll", "nu"}, "policies to compare, in order")
	return cmd
}

// peerFlags choose the other balancers compare measures.
type peerFlags struct {
	peers     []string
	reference string
}

func (p *peerFlags) add(fs *pflag.FlagSet) {
	fs.StringSliceVar(&p.peers, "peers", nil, "other balancers to measure after the policies, in order, each in front of the --local cluster's apps: "+strings.Join(loadgen.PeerNames(), ", "))
	fs.StringVar(&p.reference, "reference", "", "show every capacity as a ratio to this system's (default: haproxy-cq when it is measured)")
}

// resolve checks the peer names, drops (with a message each) those whose
// program is missing, and settles the reference.
func (p peerFlags) resolve(e *env, pols []string, local bool) (peers []string, skipped []string, reference string, err error) {
	names, err := uniqueNames(p.peers, pols, "--policies and --peers")
	if err != nil {
		return nil, nil, "", err
	}
	if len(names) > 0 && !local {
		return nil, nil, "", usagef("--peers needs --local N: each peer is started in front of the local cluster's apps")
	}
	peers, skipped, err = loadgen.CheckPeers(names)
	if err != nil {
		return nil, nil, "", usageError{err}
	}
	for _, s := range skipped {
		fmt.Fprintf(e.stderr, "loadgen: %s\n", s)
	}
	all := append(append([]string(nil), pols...), peers...)
	reference = p.reference
	switch {
	case reference == "":
		if slices.Contains(peers, "haproxy-cq") {
			reference = "haproxy-cq"
		}
	case !slices.Contains(all, reference) && slices.Contains(names, reference):
		fmt.Fprintf(e.stderr, "loadgen: no ratios: the reference %s is skipped\n", reference)
		reference = ""
	case !slices.Contains(all, reference):
		return nil, nil, "", usagef("--reference %s is not among the measured policies and peers (%s)", reference, strings.Join(all, ","))
	}
	return peers, skipped, reference, nil
}

// measure is run, sweep and compare: check everything, start a local
// cluster if asked, sweep, then report (also after a failure, with what was
// measured).
func (m *measureFlags) measure(ctx context.Context, e *env, cmd *cobra.Command, name string, pols []string, pf peerFlags, rates []float64) error {
	fs := cmd.Flags()
	spec, err := m.wl.spec(fs)
	if err != nil {
		return err
	}
	rc, err := m.load.runConfig(spec, m.wl.seed)
	if err != nil {
		return err
	}
	if err := m.cluster.check(); err != nil {
		return err
	}
	if rc.Keys, err = m.keys.spec(fs, m.cluster.local > 0); err != nil {
		return err
	}
	rc.Apps = m.keys.apps
	rep, err := m.report.parse()
	if err != nil {
		return err
	}
	for _, p := range pols {
		if _, err := policy.Lookup(p); err != nil {
			return usageError{err}
		}
	}
	peers, skipped, reference, err := pf.resolve(e, pols, m.cluster.local > 0)
	if err != nil {
		return err
	}
	if slices.Contains(pf.peers, "haproxy-hash") && rc.Keys.Header != loadgen.HashPeerHeader {
		return usagef("haproxy-hash hashes the %s header: use --key-header %s", loadgen.HashPeerHeader, loadgen.HashPeerHeader)
	}
	systems := append(append([]string(nil), pols...), peers...)
	if from := rep.limits.From; from != "" {
		if src, _, _ := loadgen.ParseLimitFrom(from); slices.Contains(pf.peers, src) && !slices.Contains(peers, src) {
			msg := "no capacities: the limit source " + src + " is skipped"
			fmt.Fprintf(e.stderr, "loadgen: %s\n", msg)
			skipped = append(skipped, msg)
			rep.limits.From = ""
		}
	}
	if err := checkLimitSource(rep.limits.From, systems, rates); err != nil {
		return err
	}
	progress, err := loadgen.NewProgress(e.stderr, m.report.progress)
	if err != nil {
		return usageError{err}
	}
	sc := loadgen.DefaultSweepConfig()
	sc.Run, sc.Policies, sc.Rates = rc, pols, rates
	sc.Settle, sc.Cooldown, sc.NoSwitch = m.cluster.settle, m.cluster.cooldown, m.cluster.noSwitch
	sc.OutDir, sc.Progress = m.report.out, progress

	where := ""
	if m.cluster.local > 0 {
		lc := loadgen.DefaultLocalConfig()
		lc.Swdctl, lc.Nodes, lc.AppMode, lc.ReadyTimeout, lc.Stderr = m.cluster.swdctl, m.cluster.local, m.cluster.appMode, m.cluster.localTimeout, e.stderr
		lc.Concurrency, lc.AppConcurrency = m.cluster.concurrency, m.cluster.concurrency
		lc.ExtraArgs = m.keys.localArgs()
		if err := lc.Validate(); err != nil {
			return usageError{err}
		}
		fmt.Fprintf(e.stderr, "starting a local cluster of %s: %s %s\n", nodes(lc.Nodes), lc.Swdctl, strings.Join(lc.Args(), " "))
		cluster, err := loadgen.StartLocal(ctx, lc)
		if err != nil {
			return err
		}
		defer func() {
			fmt.Fprintln(e.stderr, "stopping the local cluster")
			if err := cluster.Close(); err != nil {
				fmt.Fprintf(e.stderr, "loadgen: stopping the local cluster: %v\n", err)
			}
		}()
		sc.Endpoints = loadgen.Endpoints{Targets: cluster.Targets(), Dispatcher: cluster.DispatcherHTTP()}
		if m.keys.cacheN > 0 {
			if sc.Run.Apps, err = cluster.Apps(); err != nil {
				return err
			}
		}
		sc.Switcher = &loadgen.GRPCSwitcher{Control: cluster.Control(), DispatcherControl: cluster.DispatcherGRPC(), Token: m.cluster.token}
		where = "on a local cluster of " + nodes(lc.Nodes)
		if len(peers) > 0 {
			apps, err := cluster.Apps()
			if err != nil {
				return err
			}
			sc.Peers, sc.PeerStarter = peers, loadgen.PeerLauncher{Apps: apps, Concurrency: lc.Concurrency, ReadyPath: "/healthz"}
		}
	} else {
		sc.Endpoints = loadgen.Endpoints{Targets: m.cluster.targets, Dispatcher: m.cluster.dispatcher}
		if m.cluster.control != "" {
			sc.Switcher = &loadgen.GRPCSwitcher{Control: m.cluster.control, DispatcherControl: m.cluster.dispatcherControl, Token: m.cluster.token}
		}
		where = "on " + nodes(len(m.cluster.targets))
		if len(m.cluster.targets) == 0 {
			where = "through the dispatcher"
		}
	}
	if err := sc.Validate(); err != nil {
		return usageError{err}
	}

	res, sweepErr := loadgen.Sweep(ctx, sc)
	report := loadgen.Report{
		Title:        title(name, systems, rates, where),
		Workload:     &spec,
		Rows:         res.Rows,
		Percentiles:  rep.percentiles,
		MaxErrorRate: m.report.maxErrorRate,
		Reference:    reference,
		Notes:        skipped,
	}
	if hits := hitBlock(res.Runs); hits != nil {
		report.Blocks = append(report.Blocks, *hits)
	}
	for _, r := range res.Runs {
		if r.CacheErr != nil {
			report.Notes = append(report.Notes, fmt.Sprintf("no hit ratio for %s at %s req/s: %v", r.Row.Policy, loadgen.FormatRate(r.Row.Rate), r.CacheErr))
		}
	}
	if lag := lagBlock(res.Runs); lag != nil {
		report.Blocks = append(report.Blocks, *lag)
		report.Notes = append(report.Notes, "this machine fell behind the schedule (max send lag above); response times still count from the scheduled times")
	}
	return finish(e, report, rep.limits, m.report, sweepErr, true)
}

// lagBlock reports the send lag when any run fell more than 10 ms behind.
func lagBlock(runs []loadgen.RunResult) *loadgen.Block {
	b := loadgen.Block{Title: "max send lag (ms)"}
	late := false
	for _, r := range runs {
		late = late || r.MaxSendLag > 10*time.Millisecond
		b.Cells = append(b.Cells, loadgen.Cell{Policy: r.Row.Policy, Rate: r.Row.Rate, Value: float64(r.MaxSendLag) / float64(time.Millisecond)})
	}
	if !late {
		return nil
	}
	return &b
}

// finish computes capacities, writes the files into rf.out and prints the
// report. prior is an error that already happened: the report is still
// printed with whatever rows were measured. runFiles says whether
// per-run results.bin files exist.
func finish(e *env, report loadgen.Report, limits loadgen.LimitSpec, rf reportFlags, prior error, runFiles bool) error {
	var errs []error
	if prior != nil {
		errs = append(errs, prior)
	}
	if report.Reference != "" && !slices.Contains(loadgen.Policies(report.Rows), report.Reference) {
		report.Notes = append(report.Notes, "no ratios: the reference "+report.Reference+" was not measured")
		report.Reference = ""
	}
	if len(report.Rows) > 0 {
		if limits.Empty() {
			report.Notes = append(report.Notes, "capacity: add --limit DURATION or --limit-from POLICY@RATE")
		} else if withCaps, err := report.WithCapacities(limits); err != nil {
			report.Notes = append(report.Notes, "capacity not computed: "+err.Error())
			if prior == nil {
				errs = append(errs, fmt.Errorf("capacity: %w", err))
			}
		} else {
			report = withCaps
		}
	}
	if rf.out != "" && len(report.Rows) > 0 {
		files := []string{"results.csv", "report.json"}
		if err := loadgen.WriteCSVFile(filepath.Join(rf.out, "results.csv"), report.Rows); err != nil {
			errs = append(errs, err)
		}
		if err := report.WriteJSONFile(filepath.Join(rf.out, "report.json")); err != nil {
			errs = append(errs, err)
		}
		if rf.plots {
			if _, err := report.WritePlots(rf.out); err != nil {
				errs = append(errs, err)
			}
			files = append(files, "*.png")
		}
		if runFiles {
			files = append(files, "<policy>_<rate>/results.bin (for `vegeta report` and `vegeta plot`)")
		}
		report.Notes = append(report.Notes, fmt.Sprintf("files in %s: %s", rf.out, strings.Join(files, ", ")))
	}
	if len(report.Rows) > 0 || prior == nil {
		if err := report.Write(e.stdout, rf.output); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
