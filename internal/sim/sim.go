// Package sim is SWD's discrete-event simulator: a cluster of nodes, each
// with m application slots in front of a FIFO queue, running the very policy
// code the daemon runs (internal/policy's registry, Planners and Pickers) on
// the very workloads the load generator sends (internal/workload).
//
// The model (docs/sim.md has the long version):
//
//   - Arrivals come from workload.Generator. With a dispatch policy (rr, ct)
//     a dispatcher calls the policy's Picker for every arrival with the exact
//     outstanding count of every node (policy.DispatchView). With any other
//     policy (none, ll, nu, nu-exact) arrivals are spread over the nodes
//     round robin, as the paper's load generator did.
//   - A node serves at most Concurrency requests at once, in FIFO order.
//   - Every node publishes its load (waiting + in service) every
//     GossipInterval at its own random phase; an entry becomes visible to the
//     others GossipDelay later and counts as unknown once older than
//     StaleAfter.
//   - With a transfer policy every node, every ActivationInterval at its own
//     random phase, builds a policy.View from the latest visible entries of
//     the others and its own live load, calls the Planner, and moves the
//     planned number of requests from the tail of its waiting queue to each
//     target. A moved request reaches the target's queue tail TransferDelay
//     later and is never moved again (hop limit 1).
//   - With a policy that has a Puller (steal), a node whose slot frees with
//     nothing waiting locally (and, with PullRules.OnGossip, an idle node
//     that sees an entry showing a head) asks the peers the Puller lists,
//     one at a time: the request takes ControlDelay to reach the peer, the
//     peer hands over its oldest movable waiting request, which reaches the
//     puller TransferDelay later, or answers "nothing movable", which takes
//     ControlDelay back, and the next peer is asked. With PullRules.Reserve
//     the slot waits for the pulled request; with PullRules.Overtake a slot
//     that frees while requests wait locally asks the Puller too; with
//     PullRules.GossipOnChange a node publishes at once when it gets or
//     loses a head; under direct gossip PullRules.GossipPullers thins the
//     idle nodes that pull on one entry. A policy with an ArrivalPusher
//     decides for every arrival that finds no free slot whether it goes at
//     once to a peer (TransferDelay). Moved requests never move again.
//   - With a policy that has a Holder (cq), a dispatcher holds arrivals in
//     one FIFO and sends the head to the node the Holder names: it arrives
//     TransferDelay later; the dispatcher learns of each completion
//     ControlDelay after it.
//   - Gossip is "direct" (every node's entry reaches every other node
//     GossipDelay after each tick: the daemon's default, O(n) datagrams per
//     node per tick) or "piggyback" (each tick a node sends one datagram of
//     at most DatagramBytes to Fanout random peers, with its own entry and
//     relayed ones: bounded cost per node; see gossip.go). Either way the
//     run counts the bytes every node sends with the daemon's wire sizes.
//   - The reference policy "central" is one FIFO queue feeding every free
//     slot of the cluster (M/G/n): the work-conserving limit no dispatching
//     or transfer policy can beat.
//
// Time is simulated in integer nanoseconds; events at the same instant are
// handled in a fixed order (completions and transfer arrivals in the order
// they were scheduled, then the arrival, then gossip, then activations), so
// a Config, seed included, always gives the same Result, bit for bit.
// Requests arriving in [Warmup, Duration) are measured; arrivals stop at
// Duration and the run continues until every request has completed.
//
// Concurrency: Run is safe for concurrent use (each run owns all of its
// state); RunGrid runs many configs on a pool of goroutines. Results are
// values owned by the caller.
package sim

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/internal/workload"
)

// Central is the name of the reference policy: a single FIFO queue feeding
// every slot of the cluster. It is not in the policy registry because no
// real cluster can run it.
const Central = "central"

// Gossip mechanisms (Config.Gossip), named as in internal/cluster.
const (
	// GossipDirect: every tick a node's entry goes to every other node.
	GossipDirect = "direct"
	// GossipPiggyback: every tick a node sends one datagram to Fanout
	// random peers holding its own entry and relayed ones.
	GossipPiggyback = "piggyback"
)

// Relay orders for piggyback gossip (Config.Relay).
const (
	// RelayRotate relays fresh entries in ring order from where the
	// previous datagram stopped, as internal/cluster does today.
	RelayRotate = "rotate"
	// RelayHeads relays first the entries whose head state is news (a head
	// shown, or a head gone since the previous entry), youngest first,
	// then rotates through the rest.
	RelayHeads = "heads"
)

// Config describes one simulated run.
type Config struct {
	// Nodes is the number of nodes, n.
	Nodes int
	// Concurrency is m, the requests a node serves at once.
	Concurrency int
	// Policy is a name from the policy registry (none, rr, ct, ll, nu,
	// nu-exact, ...) or Central.
	Policy string
	// Workload gives request sizes and the arrival process.
	Workload workload.Spec
	// Rate is the arrival rate in requests per second.
	Rate float64
	// Duration is how long (simulated) requests arrive, warm-up included.
	Duration time.Duration
	// Warmup is the start of the run whose requests are not measured.
	Warmup time.Duration
	// Seed fixes the workload and the nodes' gossip and activation phases.
	Seed uint64
	// GossipInterval is how often each node publishes its load.
	GossipInterval time.Duration
	// ActivationInterval is how often each node runs a transfer policy.
	ActivationInterval time.Duration
	// StaleAfter is the age beyond which a gossiped entry is unknown.
	StaleAfter time.Duration
	// GossipDelay is how long a published entry takes to reach the others.
	GossipDelay time.Duration
	// TransferDelay is how long a moved request takes to reach its target
	// (a push, a pulled request on its way to the puller, a request sent
	// by cq's dispatcher).
	TransferDelay time.Duration
	// ControlDelay is how long a small control message takes one way: a
	// pull request to the asked peer, a miss back to the puller, a
	// completion notice to cq's dispatcher.
	ControlDelay time.Duration
	// Gossip is the gossip mechanism: GossipDirect ("" too) or
	// GossipPiggyback.
	Gossip string
	// Fanout is how many random peers receive each piggyback datagram.
	Fanout int
	// DatagramBytes bounds a piggyback datagram (memberlist's UDP buffer,
	// 1400 bytes, framing included).
	DatagramBytes int
	// Relay is the piggyback relay order: RelayRotate ("" too) or
	// RelayHeads.
	Relay string
	// Steal, when set, replaces the registered steal's configuration (a
	// design study knob); Policy must then be "steal". nil runs the
	// registered steal.
	Steal *policy.StealConfig
	// CQAhead, when set, replaces the registered cq's lookahead
	// (policy.FreeSlotAhead; 0: never ahead, HAProxy's maxconn queue), a
	// design study knob; Policy must then be "cq". nil runs the registered
	// cq (policy.CQAhead).
	CQAhead *int
	// SizeCap, when positive, clips every request size to at most SizeCap.
	// Zero (the default) keeps the sizes exactly as the workload draws
	// them. It is a study knob: docs/sim.md uses it to test whether the
	// paper's realised sizes were lighter tailed than its lognormal.
	SizeCap time.Duration
	// SnapshotBursts, with a dispatch policy, places every request of a
	// burst (same arrival instant) on the outstanding counts the dispatcher
	// had when the burst arrived, as a dispatcher issuing a burst's requests
	// in parallel would. False (the default) updates the counts between
	// them. A study knob (docs/sim-hypotheses.md).
	SnapshotBursts bool
	// LoadIndex is what transfer policies plan on: policy.IndexCount (the
	// default: requests) or policy.IndexWork (predicted work, as swd
	// --load-index work; see work.go). Under work every node learns each
	// route's cost online from the requests it served, with Cost's
	// statistic, exactly as swd's internal/cost does.
	LoadIndex policy.LoadIndex
	// Cost is the cost statistic's configuration under the work index
	// (swd --cost-theta, --cost-weight).
	Cost cost.Config
	// Bodies gives requests bodies (cost.go); the zero value: none.
	Bodies BodyMix
	// HandoffPerMiB is how much longer than TransferDelay moving a
	// request takes per MiB of its body (0: bodies move for free).
	HandoffPerMiB time.Duration
	// TransferCost filters every planner's moves through the transfer-cost
	// rule (policy.WorthMoving) with the model's hand-off times and the
	// workload's mean size as the service time, as a daemon with
	// --transfer-cost measured would measure them.
	TransferCost bool
}

// DefaultConfig returns the paper's setting: 16 nodes, m = 1, nu, the
// standard workload at 320 req/s (80 % load), 200 s with 20 s warm-up,
// direct gossip every 20 ms, activation every 40 ms, entries stale after
// 100 ms, 0.5 ms gossip delay, 1 ms transfer delay, 0.5 ms control delay;
// for piggyback gossip, fanout 3 and 1400-byte datagrams relayed in
// rotation (as internal/cluster).
func DefaultConfig() Config {
	std, err := workload.Lookup("standard")
	if err != nil {
		panic(err) // the preset is compiled in
	}
	return Config{
		Nodes:              16,
		Concurrency:        1,
		Policy:             "nu",
		Workload:           std,
		Rate:               320,
		Duration:           200 * time.Second,
		Warmup:             20 * time.Second,
		Seed:               1,
		GossipInterval:     20 * time.Millisecond,
		ActivationInterval: 40 * time.Millisecond,
		StaleAfter:         100 * time.Millisecond,
		GossipDelay:        500 * time.Microsecond,
		TransferDelay:      time.Millisecond,
		ControlDelay:       500 * time.Microsecond,
		Gossip:             GossipDirect,
		Fanout:             3,
		DatagramBytes:      1400,
		Relay:              RelayRotate,
		Cost:               cost.DefaultConfig(),
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("nodes must be at least 1, got %d", c.Nodes)
	case c.Concurrency < 1:
		return fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.Nodes > math.MaxInt32/c.Concurrency:
		return fmt.Errorf("nodes times concurrency must fit in 32 bits, got %d x %d", c.Nodes, c.Concurrency)
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a positive number of requests per second, got %v", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %s", c.Duration)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return fmt.Errorf("warm-up must be in [0, duration), got %s of %s", c.Warmup, c.Duration)
	case c.GossipInterval <= 0:
		return fmt.Errorf("gossip interval must be positive, got %s", c.GossipInterval)
	case c.ActivationInterval <= 0:
		return fmt.Errorf("activation interval must be positive, got %s", c.ActivationInterval)
	case c.StaleAfter <= 0:
		return fmt.Errorf("stale-after must be positive, got %s", c.StaleAfter)
	case c.GossipDelay < 0:
		return fmt.Errorf("gossip delay must not be negative, got %s", c.GossipDelay)
	case c.TransferDelay < 0:
		return fmt.Errorf("transfer delay must not be negative, got %s", c.TransferDelay)
	case c.SizeCap < 0:
		return fmt.Errorf("size cap must not be negative, got %s", c.SizeCap)
	case c.ControlDelay < 0:
		return fmt.Errorf("control delay must not be negative, got %s", c.ControlDelay)
	case c.Gossip != "" && c.Gossip != GossipDirect && c.Gossip != GossipPiggyback:
		return fmt.Errorf("gossip must be %q or %q, got %q", GossipDirect, GossipPiggyback, c.Gossip)
	case c.Relay != "" && c.Relay != RelayRotate && c.Relay != RelayHeads:
		return fmt.Errorf("relay must be %q or %q, got %q", RelayRotate, RelayHeads, c.Relay)
	case c.Gossip == GossipPiggyback && (c.Fanout < 1 || c.Fanout > 64):
		return fmt.Errorf("fanout must be in [1, 64] for piggyback gossip, got %d", c.Fanout)
	case c.Gossip == GossipPiggyback && (c.DatagramBytes < 200 || c.DatagramBytes > 65000):
		return fmt.Errorf("datagram bytes must be in [200, 65000] for piggyback gossip, got %d", c.DatagramBytes)
	case c.Steal != nil && c.Policy != "steal":
		return fmt.Errorf("a steal configuration needs policy steal, got %q", c.Policy)
	case c.CQAhead != nil && c.Policy != "cq":
		return fmt.Errorf("a cq lookahead needs policy cq, got %q", c.Policy)
	case c.CQAhead != nil && (*c.CQAhead < 0 || *c.CQAhead > 1000):
		return fmt.Errorf("cq lookahead must be in [0, 1000] requests per node, got %d", *c.CQAhead)
	case c.LoadIndex != policy.IndexCount && c.LoadIndex != policy.IndexWork:
		return fmt.Errorf("unknown load index %d", int(c.LoadIndex))
	}
	if c.LoadIndex == policy.IndexWork {
		if err := c.Cost.Validate(); err != nil {
			return err
		}
	}
	if err := c.Workload.Validate(); err != nil {
		return err
	}
	if err := c.validateCost(); err != nil {
		return err
	}
	if c.Policy != Central {
		if _, err := c.policy(); err != nil {
			return fmt.Errorf("policy: %w", err)
		}
	}
	return nil
}

// policy resolves c.Policy: the registry's entry, or steal built from
// c.Steal when that is set.
func (c Config) policy() (policy.Policy, error) {
	if c.Steal != nil {
		return policy.NewSteal(*c.Steal)
	}
	p, err := policy.Lookup(c.Policy)
	if err != nil || c.CQAhead == nil {
		return p, err
	}
	p.Holder = policy.FreeSlotAhead(*c.CQAhead)
	return p, nil
}

// Load is the offered load per slot: Rate times the mean request size over
// Nodes*Concurrency. At 1 or more no policy keeps up.
func (c Config) Load() float64 {
	return c.Rate * c.Workload.MeanServiceMs() / 1000 / float64(c.Nodes*c.Concurrency)
}

// Result is the outcome of one run.
type Result struct {
	// Config is the run's configuration.
	Config Config
	// ResponseTimes holds the response time (completion minus arrival,
	// transfer delays included) of every measured request, in arrival order.
	ResponseTimes []time.Duration
	// Requests is how many requests arrived (warm-up included); each
	// completed exactly once.
	Requests int
	// Measured is len(ResponseTimes): the requests that arrived after the
	// warm-up.
	Measured int
	// Transfers is how many times a request was moved between nodes:
	// Moves + Pulls + ArrivalPushes. cq's dispatches are not transfers (as
	// for rr and ct, every request passes the dispatcher once).
	Transfers int
	// TransfersPerRequest is Transfers / Requests.
	TransfersPerRequest float64
	// Moves counts requests moved by a Planner (periodic pushes).
	Moves int
	// Pulls counts requests handed to a puller; PullMisses the asks that
	// found nothing movable.
	Pulls, PullMisses int
	// ArrivalPushes counts arrivals an ArrivalPusher sent on at once.
	ArrivalPushes int
	// HeldBack counts requests a Planner moved that the transfer-cost
	// rule kept home (Config.TransferCost); MovedBytes the body bytes of
	// every moved request.
	HeldBack   int
	MovedBytes int64
	// GossipBytesPerNodeSec is the gossip every node sends, in wire bytes
	// per second (IP/UDP and memberlist framing included, see wireSizes),
	// averaged over nodes and the whole run; 0 without a transfer policy.
	GossipBytesPerNodeSec float64
	// MeanMs and the percentiles (stats.Percentile's definition) summarise
	// ResponseTimes in milliseconds.
	MeanMs, P50Ms, P95Ms, P99Ms, P995Ms float64
	// RouteCosts is what the nodes learnt of each route's cost (work load
	// index only; nil under count).
	RouteCosts []RouteCost
	// Wall is the wall-clock time the run took (not part of the model).
	Wall time.Duration
	// Events is how many events the run handled.
	Events int
}

// Run simulates cfg.
func Run(cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	e, err := newEngine(cfg)
	if err != nil {
		return Result{}, err
	}
	e.run()
	if e.err != nil {
		return Result{}, e.err
	}
	res := e.result()
	res.Wall = time.Since(start)
	return res, nil
}

// RunGrid runs every config on up to workers goroutines (GOMAXPROCS when
// workers < 1) and returns the results in the order of cfgs. Every config is
// validated first; the first invalid one fails the whole grid before any run.
func RunGrid(cfgs []Config, workers int) ([]Result, error) {
	var errs []error
	for i, c := range cfgs {
		if err := c.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("config %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = min(workers, len(cfgs))
	out := make([]Result, len(cfgs))
	runErrs := make([]error, len(cfgs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(cfgs) {
					return
				}
				out[i], runErrs[i] = Run(cfgs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(runErrs...); err != nil {
		return nil, err
	}
	return out, nil
}

// summarise fills the statistics of r from r.ResponseTimes.
func (r *Result) summarise() {
	r.Measured = len(r.ResponseTimes)
	if r.Requests > 0 {
		r.TransfersPerRequest = float64(r.Transfers) / float64(r.Requests)
	}
	if r.Measured == 0 {
		return
	}
	ms := make([]float64, r.Measured)
	for i, d := range r.ResponseTimes {
		ms[i] = float64(d) / 1e6
	}
	s := stats.Summarize(ms)
	r.MeanMs, r.P50Ms, r.P95Ms, r.P99Ms, r.P995Ms = s.Mean, s.P50, s.P95, s.P99, s.P995
}
