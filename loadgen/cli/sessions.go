package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/admission"
	"github.com/swd-project/swd/loadgen"
)

// sessionFlags are loadgen sessions' flags.
type sessionFlags struct {
	local        int
	swdctl       string
	concurrency  int
	localTimeout time.Duration
	targets      []string
	modes        []string
	clients      []int
	duration     time.Duration
	warmup       time.Duration
	cooldown     time.Duration
	pages        []string
	think        time.Duration
	timeout      time.Duration
	backoff      time.Duration
	cookie       string
	appRoutes    []string
	nodeArgs     []string
	output       string
	plot         string
}

// defaultAppRoutes is the thrashing app the sessions workload runs on
// with --local: a login page, a light page and a heavy page whose service
// time grows as the square of its concurrency beyond 2 at once.
var defaultAppRoutes = []string{"/login=20", "/light=10", "/heavy=100,knee=2,power=2"}

func newSessionsCommand(e *env) *cobra.Command {
	var f sessionFlags
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "closed-loop session clients over admission modes and client counts (paper 001)",
		Long: `sessions runs closed-loop clients, each looping over a session: the --pages in order,
with --think before each page after the first and --timeout per request. A session
completes when every page was answered 200 and fails at the first page that was not.
For each admission mode (--admission none,page,sqs; with --local each mode gets its own
loopback cluster whose dummyapps serve --app-route with a contention model) and each
client count (--clients), it reports completed sessions per second, sessions that failed
after their first page, first pages refused, and page throughput per route.

  loadgen sessions --local 1 --admission none,page,sqs --clients 10,30,120 --duration 20s`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSessions(cmd.Context(), e, f)
		},
	}
	fs := cmd.Flags()
	fs.IntVar(&f.local, "local", 0, "start a loopback cluster of N nodes per admission mode with swdctl (no dispatcher), and stop it afterwards")
	fs.StringVar(&f.swdctl, "swdctl", "bin/swdctl", "swdctl binary for --local")
	fs.IntVar(&f.concurrency, "concurrency", 16, "m for --local: every swd's --concurrency (the dummyapps themselves have no worker limit: their routes' contention model is the app)")
	fs.DurationVar(&f.localTimeout, "local-timeout", 60*time.Second, "longest wait for a --local cluster to be ready")
	fs.StringSliceVar(&f.targets, "targets", nil, "nodes' HTTP addresses (without --local: one run per client count against the cluster as it is; --admission names the rows)")
	fs.StringSliceVar(&f.modes, "admission", []string{"none", "page", "sqs"}, "admission modes to compare (with --local: each node's --admission)")
	fs.IntSliceVar(&f.clients, "clients", []int{10, 30, 120}, "client counts to sweep")
	fs.DurationVar(&f.duration, "duration", 20*time.Second, "measured time per run")
	fs.DurationVar(&f.warmup, "warmup", 5*time.Second, "time per run before measuring (limits and the session interval learn)")
	fs.DurationVar(&f.cooldown, "cooldown", 2*time.Second, "pause between runs")
	fs.StringSliceVar(&f.pages, "pages", []string{"/login", "/light", "/light", "/light", "/heavy"}, "a session's pages in order")
	fs.DurationVar(&f.think, "think", 200*time.Millisecond, "think time before each page after the first")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Second, "client timeout per request: a page not answered within it fails its session")
	fs.DurationVar(&f.backoff, "backoff", 500*time.Millisecond, "a client whose first page failed waits this long before its next session")
	fs.StringVar(&f.cookie, "cookie", "SWDSESSION", "session cookie name (the app sets it on the first page; swd's --session-cookie with --local)")
	fs.StringArrayVar(&f.appRoutes, "app-route", defaultAppRoutes, "dummyapp --route for --local: PATH=MS[,knee=K][,power=P] (repeatable)")
	fs.StringArrayVar(&f.nodeArgs, "node-arg", nil, "extra flag for every swd with --local (repeatable)")
	fs.StringVarP(&f.output, "output", "o", "table", "table, json or csv")
	fs.StringVar(&f.plot, "plot", "", "also write a PNG of completed (and failed-after-start) sessions/s against clients, one line per mode, to this file")
	return cmd
}

func (f sessionFlags) check() error {
	switch {
	case f.local < 0:
		return usagef("--local must be a node count, got %d", f.local)
	case f.local > 0 && len(f.targets) > 0:
		return usagef("--local starts its own clusters: drop --targets, or drop --local")
	case f.local == 0 && len(f.targets) == 0:
		return usagef("no cluster: give --targets (nodes' HTTP addresses) or --local N")
	case f.local == 0 && len(f.modes) != 1:
		return usagef("without --local the cluster runs one admission mode: give --admission with the one it runs")
	case len(f.clients) == 0:
		return usagef("--clients: give at least one client count")
	case f.output != "table" && f.output != "json" && f.output != "csv":
		return usagef("--output %q: want table, json or csv", f.output)
	case f.concurrency < 1:
		return usagef("--concurrency must be at least 1, got %d", f.concurrency)
	case f.cooldown < 0:
		return usagef("--cooldown must not be negative")
	}
	for _, m := range f.modes {
		if _, err := admission.ParseMode(m); err != nil {
			return usageError{err}
		}
	}
	for _, c := range f.clients {
		if c < 1 {
			return usagef("--clients: %d is not a client count", c)
		}
	}
	return nil
}

func (f sessionFlags) runConfig(targets []string, clients int) loadgen.SessionConfig {
	return loadgen.SessionConfig{
		Targets: targets, Clients: clients, Duration: f.duration, Warmup: f.warmup,
		Pages: f.pages, Think: f.think, Timeout: f.timeout, Backoff: f.backoff, Cookie: f.cookie,
	}
}

func runSessions(ctx context.Context, e *env, f sessionFlags) error {
	if err := f.check(); err != nil {
		return err
	}
	if err := f.runConfig([]string{"x"}, 1).Validate(); err != nil {
		return usageError{err}
	}
	where := "against " + strings.Join(f.targets, ",")
	if f.local > 0 {
		where = fmt.Sprintf("on a local cluster of %s (m = %d, app routes %s)", nodes(f.local), f.concurrency, strings.Join(f.appRoutes, " "))
	}
	rep := loadgen.SessionReport{Title: fmt.Sprintf("loadgen sessions %s: pages %s, think %s, client timeout %s, %s per run after %s warm-up",
		where, strings.Join(f.pages, ","), f.think, f.timeout, f.duration, f.warmup)}
	first := true
	for _, mode := range f.modes {
		targets := f.targets
		var stop func()
		if f.local > 0 {
			lc := loadgen.DefaultLocalConfig()
			lc.Swdctl, lc.Nodes, lc.ReadyTimeout, lc.Stderr = f.swdctl, f.local, f.localTimeout, e.stderr
			lc.Dispatcher, lc.Concurrency, lc.AppConcurrency = false, f.concurrency, 0
			lc.ExtraArgs = []string{"--node-arg=--admission=" + mode, "--node-arg=--session-cookie=" + f.cookie, "--app-arg=--session-cookie=" + f.cookie}
			for _, r := range f.appRoutes {
				lc.ExtraArgs = append(lc.ExtraArgs, "--app-arg=--route="+r)
			}
			for _, a := range f.nodeArgs {
				lc.ExtraArgs = append(lc.ExtraArgs, "--node-arg="+a)
			}
			if err := lc.Validate(); err != nil {
				return usageError{err}
			}
			fmt.Fprintf(e.stderr, "starting a local cluster of %s for --admission %s: %s %s\n", nodes(lc.Nodes), mode, lc.Swdctl, strings.Join(lc.Args(), " "))
			cluster, err := loadgen.StartLocal(ctx, lc)
			if err != nil {
				return err
			}
			targets = cluster.Targets()
			stop = func() {
				if err := cluster.Close(); err != nil {
					fmt.Fprintf(e.stderr, "loadgen: stopping the local cluster: %v\n", err)
				}
			}
		}
		for _, n := range f.clients {
			if !first && f.cooldown > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(f.cooldown):
				}
			}
			first = false
			fmt.Fprintf(e.stderr, "admission %s, %d clients: %s + %s\n", mode, n, f.warmup, f.duration)
			res, err := loadgen.RunSessions(ctx, f.runConfig(targets, n))
			if err != nil {
				if stop != nil {
					stop()
				}
				return err
			}
			fmt.Fprintf(e.stderr, "  %.2f sessions/s, %d failed after start, %d first pages refused, %d first pages failed\n",
				res.SessionsPerSec, res.FailedAfterStart, res.FirstRefused, res.FirstFailed)
			rep.Rows = append(rep.Rows, loadgen.SessionRow{Mode: mode, SessionResult: res})
		}
		if stop != nil {
			stop()
		}
	}
	if f.plot != "" {
		if err := rep.WritePlot(f.plot); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "plot: %s\n", f.plot)
	}
	switch f.output {
	case "json":
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			loadgen.SessionReport
			Summaries []loadgen.SessionSummary `json:"summaries"`
		}{rep, rep.Summaries()})
	case "csv":
		return rep.WriteCSV(e.stdout)
	}
	return rep.WriteTable(e.stdout)
}
