package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"time"

	"github.com/swd-project/swd/internal/policy"
)

// PolicySwitcher switches the whole cluster to a policy, live.
type PolicySwitcher interface {
	SetPolicy(ctx context.Context, name string) error
}

// PeerStarter starts the other balancers a sweep measures beside SWD's
// policies (HAProxy, nginx, Caddy: internal/peers), each in front of the
// cluster's apps.
type PeerStarter interface {
	// StartPeer starts the peer called name and returns the HTTP address
	// it serves on and a function that stops it.
	StartPeer(ctx context.Context, name string) (addr string, stop func() error, err error)
}

// Endpoints are where a sweep sends requests.
type Endpoints struct {
	// Targets are the nodes' HTTP addresses; transfer policies (ll, nu,
	// nu-exact) and none get requests spread over them round robin, as the
	// paper's clients did.
	Targets []string
	// Dispatcher is the dispatcher's HTTP address; dispatch policies (rr,
	// ct) get every request sent to it.
	Dispatcher string
}

// For returns the base URLs a run of pol sends to. The empty policy (the
// cluster's current one) uses Targets, or Dispatcher when there are none.
func (e Endpoints) For(pol string) ([]string, error) {
	if pol == "" {
		switch {
		case len(e.Targets) > 0:
			return e.Targets, nil
		case e.Dispatcher != "":
			return []string{e.Dispatcher}, nil
		}
		return nil, errors.New("no targets: give node addresses (--targets), a dispatcher (--dispatcher) or --local N")
	}
	p, err := policy.Lookup(pol)
	if err != nil {
		return nil, err
	}
	if p.Kind == policy.KindDispatch {
		if e.Dispatcher == "" {
			return nil, fmt.Errorf("policy %s dispatches from a central node: give the dispatcher's HTTP address (--dispatcher) or use --local N", pol)
		}
		return []string{e.Dispatcher}, nil
	}
	if len(e.Targets) == 0 {
		return nil, fmt.Errorf("policy %s needs the nodes' HTTP addresses (--targets) or --local N", pol)
	}
	return e.Targets, nil
}

// SweepConfig measures every policy at every rate.
type SweepConfig struct {
	// Run is the template of every run: workload, durations, seed, timeout,
	// workers, path. Its Policy, Targets, Rate and ResultsFile are set per
	// run.
	Run RunConfig
	// Policies are measured in order; empty measures the cluster's current
	// policy once per rate (label "current").
	Policies []string
	// Rates are measured in ascending order for each policy.
	Rates     []float64
	Endpoints Endpoints
	// Switcher switches the cluster before each policy's runs. Nil is
	// allowed only with NoSwitch (or no Policies).
	Switcher PolicySwitcher
	// Peers are other balancers measured after the policies, each row
	// labelled with its name: PeerStarter starts each before its runs (all
	// its requests go to it) and it is stopped after them.
	Peers       []string
	PeerStarter PeerStarter
	// NoSwitch trusts the labels: the cluster already runs each policy.
	NoSwitch bool
	// Settle is the pause after a switch; Cooldown the pause between runs
	// (lets the queues drain).
	Settle   time.Duration
	Cooldown time.Duration
	// OutDir, if set, receives OUT/<policy>_<rate>/results.bin per run and
	// OUT/results.csv, rewritten after each run.
	OutDir string
	// Progress hears about the sweep; nil is silent.
	Progress Progress
}

// DefaultSweepConfig is the paper's rates (40 to 360 req/s) and four
// policies with DefaultRunConfig's runs.
func DefaultSweepConfig() SweepConfig {
	return SweepConfig{
		Run:      DefaultRunConfig(),
		Policies: []string{"rr", "ct", "ll", "nu"},
		Rates:    []float64{40, 120, 200, 240, 280, 320, 360},
		Settle:   time.Second,
		Cooldown: 2 * time.Second,
	}
}

// Validate reports the first problem with c, including policies the
// endpoints cannot serve.
func (c SweepConfig) Validate() error {
	if len(c.Rates) == 0 {
		return errors.New("no rates to measure (use e.g. --rates 40,120,200)")
	}
	for i, r := range c.Rates {
		if !(r > 0) || math.IsInf(r, 0) {
			return fmt.Errorf("rate must be a positive number of requests per second, got %v", r)
		}
		if i > 0 && r <= c.Rates[i-1] {
			return errors.New("rates must be distinct and ascending")
		}
	}
	if c.Settle < 0 || c.Cooldown < 0 {
		return errors.New("settle and cooldown must not be negative")
	}
	seen := map[string]bool{}
	for i, p := range append(append([]string(nil), c.Policies...), c.Peers...) {
		if p == "" {
			return errors.New("empty name in the policy or peer list")
		}
		if seen[p] {
			return fmt.Errorf("%s is listed twice among the policies and peers", p)
		}
		seen[p] = true
		if i < len(c.Policies) {
			if _, err := c.Endpoints.For(p); err != nil {
				return err
			}
		}
	}
	if len(c.Peers) > 0 && c.PeerStarter == nil {
		return errors.New("measuring peers needs something to start them (--local N)")
	}
	if len(c.Policies) == 0 && len(c.Peers) == 0 {
		if _, err := c.Endpoints.For(""); err != nil {
			return err
		}
	}
	if len(c.Policies) > 0 && c.Switcher == nil && !c.NoSwitch {
		return errors.New("switching policies needs a node's control address (--control ADDR, or --local N); or pass --no-switch if the cluster already runs the policy")
	}
	rc := c.Run
	rc.Targets = []string{"placeholder:1"}
	return rc.Validate()
}

// SweepResult is a sweep's measurements, in run order.
type SweepResult struct {
	Rows []Row
	Runs []RunResult
}

// RunDir is the directory of one run's files under out.
func RunDir(out, label string, rate float64) string {
	return filepath.Join(out, label+"_"+FormatRate(rate))
}

// Sweep measures c.Policies × c.Rates, then c.Peers × c.Rates: for each
// policy it switches the cluster (unless NoSwitch), for each peer it starts
// the peer; it waits Settle, then runs every rate, pausing Cooldown between
// runs, and stops the peer. It stops at the first error (a failed switch,
// a peer that would not start or stop cleanly, a file it cannot write, ctx
// ending) and returns what it measured so far.
func Sweep(ctx context.Context, c SweepConfig) (SweepResult, error) {
	var out SweepResult
	if err := c.Validate(); err != nil {
		return out, err
	}
	prog := c.Progress
	if prog == nil {
		prog = nopProgress{}
	}
	pols := c.Policies
	if len(pols) == 0 && len(c.Peers) == 0 {
		pols = []string{""}
	}
	systems := len(pols) + len(c.Peers)
	total := time.Duration(systems*len(c.Rates)) * (c.Run.Warmup + c.Run.Duration)
	prog.SweepStarted(systems*len(c.Rates), total)
	defer prog.SweepFinished()
	i := 0
	for _, pol := range pols {
		targets, err := c.Endpoints.For(pol)
		if err != nil {
			return out, err
		}
		if pol != "" && !c.NoSwitch {
			prog.Note(fmt.Sprintf("switching the cluster to %s", pol))
			if err := c.Switcher.SetPolicy(ctx, pol); err != nil {
				return out, fmt.Errorf("switch the cluster to %s: %w", pol, err)
			}
			if err := sleep(ctx, c.Settle); err != nil {
				return out, err
			}
		}
		if err := c.sweepRates(ctx, prog, pol, targets, &i, &out); err != nil {
			return out, err
		}
	}
	for _, peer := range c.Peers {
		if err := c.sweepPeer(ctx, prog, peer, &i, &out); err != nil {
			return out, err
		}
	}
	return out, nil
}

// sweepPeer starts peer, runs every rate against it and stops it.
func (c SweepConfig) sweepPeer(ctx context.Context, prog Progress, peer string, i *int, out *SweepResult) (err error) {
	prog.Note(fmt.Sprintf("starting %s in front of the apps", peer))
	addr, stop, err := c.PeerStarter.StartPeer(ctx, peer)
	if err != nil {
		return fmt.Errorf("start %s: %w", peer, err)
	}
	defer func() {
		if serr := stop(); serr != nil && err == nil {
			err = fmt.Errorf("stop %s: %w", peer, serr)
		}
	}()
	if err := sleep(ctx, c.Settle); err != nil {
		return err
	}
	return c.sweepRates(ctx, prog, peer, []string{addr}, i, out)
}

// sweepRates runs every rate for one system (label pol) against targets;
// i counts runs across the sweep.
func (c SweepConfig) sweepRates(ctx context.Context, prog Progress, pol string, targets []string, i *int, out *SweepResult) error {
	for _, rate := range c.Rates {
		if *i > 0 {
			if err := sleep(ctx, c.Cooldown); err != nil {
				return err
			}
		}
		rc := c.Run
		rc.Policy, rc.Targets, rc.Rate = pol, targets, rate
		rc.ResultsFile = ""
		if c.OutDir != "" {
			rc.ResultsFile = filepath.Join(RunDir(c.OutDir, rc.Label(), rate), "results.bin")
		}
		prog.RunStarted(*i, rc.Label(), rate, rc.Warmup+rc.Duration)
		res, err := Run(ctx, rc)
		prog.RunFinished(*i, res, err)
		*i++
		if err != nil {
			return fmt.Errorf("%s at %s req/s: %w", rc.Label(), FormatRate(rate), err)
		}
		out.Rows = append(out.Rows, res.Row)
		out.Runs = append(out.Runs, res)
		if c.OutDir != "" {
			if err := WriteCSVFile(filepath.Join(c.OutDir, "results.csv"), out.Rows); err != nil {
				return err
			}
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
