package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/workload"
)

func preset(t testing.TB, name string) workload.Spec {
	t.Helper()
	s, err := workload.Lookup(name)
	require.NoError(t, err)
	return s
}

// short returns the default config shortened to d of arrivals, 10 % warm-up.
func short(d time.Duration) Config {
	c := DefaultConfig()
	c.Duration, c.Warmup = d, d/10
	return c
}

var (
	expo = workload.Spec{Name: "exp", MeanMs: 40, CV: 1, Burst: 1, Scale: 1, Exponential: true}
	det  = workload.Spec{Name: "det", MeanMs: 40, CV: 0, Burst: 1, Scale: 1}
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	require.NoError(t, c.Validate())
	assert.Equal(t, 16, c.Nodes)
	assert.Equal(t, 1, c.Concurrency)
	assert.Equal(t, "nu", c.Policy)
	assert.Equal(t, "standard", c.Workload.Name)
	assert.Equal(t, 200*time.Second, c.Duration)
	assert.Equal(t, 20*time.Second, c.Warmup)
	assert.Equal(t, 20*time.Millisecond, c.GossipInterval)
	assert.Equal(t, 40*time.Millisecond, c.ActivationInterval)
	assert.Equal(t, 100*time.Millisecond, c.StaleAfter)
	assert.Equal(t, 500*time.Microsecond, c.GossipDelay)
	assert.Equal(t, time.Millisecond, c.TransferDelay)
	assert.Equal(t, 500*time.Microsecond, c.ControlDelay)
	assert.Equal(t, GossipDirect, c.Gossip)
	assert.Equal(t, 3, c.Fanout)
	assert.Equal(t, 1400, c.DatagramBytes)
	assert.Equal(t, RelayRotate, c.Relay)
	assert.Nil(t, c.Steal, "the registered steal")
	assert.InDelta(t, 0.8, c.Load(), 1e-9)
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		errSub string // "" means valid
	}{
		// Every registered policy and the reference are accepted.
		{"central", func(c *Config) { c.Policy = Central }, ""},
		{"rr", func(c *Config) { c.Policy = "rr" }, ""},
		{"none", func(c *Config) { c.Policy = "none" }, ""},
		// Zero delays are a legitimate idealisation.
		{"zero delays", func(c *Config) { c.GossipDelay, c.TransferDelay = 0, 0 }, ""},
		// No warm-up is fine.
		{"no warmup", func(c *Config) { c.Warmup = 0 }, ""},
		// An unknown policy is named in the error.
		{"unknown policy", func(c *Config) { c.Policy = "magic" }, "unknown policy"},
		{"no nodes", func(c *Config) { c.Nodes = 0 }, "nodes must be at least 1"},
		{"no slots", func(c *Config) { c.Concurrency = 0 }, "concurrency must be at least 1"},
		// n*m must fit the simulator's 32-bit node and slot indices.
		{"huge cluster", func(c *Config) { c.Nodes, c.Concurrency = 1<<20, 1<<12 }, "32 bits"},
		{"zero rate", func(c *Config) { c.Rate = 0 }, "rate must be"},
		{"NaN rate", func(c *Config) { c.Rate = math.NaN() }, "rate must be"},
		{"infinite rate", func(c *Config) { c.Rate = math.Inf(1) }, "rate must be"},
		{"zero duration", func(c *Config) { c.Duration = 0 }, "duration must be positive"},
		// A warm-up as long as the run would measure nothing.
		{"warmup too long", func(c *Config) { c.Warmup = c.Duration }, "warm-up must be"},
		{"negative warmup", func(c *Config) { c.Warmup = -time.Second }, "warm-up must be"},
		{"zero gossip interval", func(c *Config) { c.GossipInterval = 0 }, "gossip interval"},
		{"zero activation interval", func(c *Config) { c.ActivationInterval = 0 }, "activation interval"},
		{"zero stale-after", func(c *Config) { c.StaleAfter = 0 }, "stale-after"},
		{"negative gossip delay", func(c *Config) { c.GossipDelay = -1 }, "gossip delay"},
		{"negative transfer delay", func(c *Config) { c.TransferDelay = -1 }, "transfer delay"},
		// The workload's own validation applies.
		{"bad workload", func(c *Config) { c.Workload.Burst = 0 }, "burst size"},
		{"negative size cap", func(c *Config) { c.SizeCap = -1 }, "size cap"},
		// A cap is a valid study knob.
		{"size cap", func(c *Config) { c.SizeCap = 2 * time.Second }, ""},
		// steal and cq are registered.
		{"steal", func(c *Config) { c.Policy = "steal" }, ""},
		{"cq", func(c *Config) { c.Policy = "cq" }, ""},
		// A steal design of its own.
		{"steal config", func(c *Config) { sc := policy.DefaultStealConfig(); c.Policy, c.Steal = "steal", &sc }, ""},
		// Piggyback gossip with head news first.
		{"piggyback", func(c *Config) { c.Gossip, c.Relay = GossipPiggyback, RelayHeads }, ""},
		// Empty mechanism and relay mean the defaults.
		{"empty gossip and relay", func(c *Config) { c.Gossip, c.Relay = "", "" }, ""},
		{"negative control delay", func(c *Config) { c.ControlDelay = -1 }, "control delay"},
		{"unknown gossip", func(c *Config) { c.Gossip = "shout" }, "gossip must be"},
		{"unknown relay", func(c *Config) { c.Relay = "random" }, "relay must be"},
		{"zero fanout", func(c *Config) { c.Gossip, c.Fanout = GossipPiggyback, 0 }, "fanout"},
		{"tiny datagram", func(c *Config) { c.Gossip, c.DatagramBytes = GossipPiggyback, 100 }, "datagram bytes"},
		// Fanout and datagram size only matter for piggyback.
		{"direct ignores fanout", func(c *Config) { c.Fanout, c.DatagramBytes = 0, 0 }, ""},
		// A steal design needs the steal policy.
		{"steal config on nu", func(c *Config) { sc := policy.DefaultStealConfig(); c.Steal = &sc }, "needs policy steal"},
		// An invalid steal design is named.
		{"bad steal config", func(c *Config) {
			sc := policy.DefaultStealConfig()
			sc.Attempts = 0
			c.Policy, c.Steal = "steal", &sc
		}, "attempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mutate(&c)
			err := c.Validate()
			if tc.errSub == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.errSub)
			assert.True(t, unicode.IsLower([]rune(err.Error())[0]), "errors start lower-case: %v", err)
			_, runErr := Run(c)
			assert.Error(t, runErr, "Run validates too")
		})
	}
}

// erlangC is the mean response time of M/M/n with mean size s at per-server
// load rho.
func erlangC(n int, rho, s float64) float64 {
	a := rho * float64(n)
	term, sum := 1.0, 0.0
	for k := range n {
		if k > 0 {
			term *= a / float64(k)
		}
		sum += term
	}
	last := term * a / float64(n) / (1 - rho)
	pWait := last / (sum + last)
	return s + pWait*s/(float64(n)*(1-rho))
}

func TestQueueingClosedForms(t *testing.T) {
	cases := []struct {
		name  string
		nodes int
		conc  int
		pol   string
		spec  workload.Spec
		rho   float64
		want  float64 // ms
		tol   float64 // relative
		dur   time.Duration
	}{
		// M/M/1 at half load: E[T] = S/(1-rho) = 80 ms.
		{"M/M/1 rho=0.5", 1, 1, "none", expo, 0.5, 40 / 0.5, 0.03, 10000 * time.Second},
		// M/M/1 at 70 %: 133.3 ms, slower to converge.
		{"M/M/1 rho=0.7", 1, 1, "none", expo, 0.7, 40 / 0.3, 0.04, 10000 * time.Second},
		// M/D/1 (Pollaczek-Khinchine): S + rho*S/(2(1-rho)) = 86.7 ms.
		{"M/D/1 rho=0.7", 1, 1, "none", det, 0.7, 40 + 0.7*40/(2*0.3), 0.02, 10000 * time.Second},
		// The central reference on 16 nodes is M/M/16: Erlang C.
		{"M/M/16 central rho=0.8", 16, 1, Central, expo, 0.8, erlangC(16, 0.8, 40), 0.02, 1000 * time.Second},
		// m slots on one node are the same M/M/4 as central over 4 nodes.
		{"M/M/4 one node m=4 rho=0.7", 1, 4, "none", expo, 0.7, erlangC(4, 0.7, 40), 0.03, 3000 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Nodes, c.Concurrency, c.Policy, c.Workload = tc.nodes, tc.conc, tc.pol, tc.spec
			slots := float64(c.Nodes * c.Concurrency)
			c.Rate = tc.rho * slots * 1000 / tc.spec.MeanMs
			c.Duration, c.Warmup = tc.dur, 100*time.Second
			r, err := Run(c)
			require.NoError(t, err)
			assert.InEpsilon(t, tc.want, r.MeanMs, tc.tol, "mean response time")
		})
	}
}

func TestCentralNeverWorseThanCT(t *testing.T) {
	for _, wl := range []string{"standard", "dispersed", "burst"} {
		for _, rate := range []float64{120, 280, 360} {
			c := short(60 * time.Second)
			c.Workload, c.Rate = preset(t, wl), rate
			c.Policy = "ct"
			ct, err := Run(c)
			require.NoError(t, err)
			c.Policy = Central
			central, err := Run(c)
			require.NoError(t, err)
			// Same seed, same requests: the work-conserving FIFO is at
			// least as good on the mean and on the tail.
			assert.Equal(t, ct.Requests, central.Requests)
			assert.LessOrEqual(t, central.MeanMs, ct.MeanMs, "%s at %v: mean", wl, rate)
			assert.LessOrEqual(t, central.P99Ms, ct.P99Ms, "%s at %v: p99", wl, rate)
			assert.LessOrEqual(t, central.P995Ms, ct.P995Ms, "%s at %v: p99.5", wl, rate)
		}
	}
}

// randomSteal draws a steal design: any order, k, attempts, rules,
// overtake, arrival push and periodic planner the policy accepts.
func randomSteal(rng *rand.Rand) *policy.StealConfig {
	c := policy.StealConfig{
		Order:       policy.PullOrder(rng.IntN(3)),
		K:           1 + rng.IntN(6),
		Attempts:    1 + rng.IntN(policy.MaxPullAttempts),
		PushArrival: rng.IntN(3) == 0,
		PushTarget:  policy.PushTarget(rng.IntN(2)),
		Periodic:    []string{"", "", "nu-exact", "nu", "ll"}[rng.IntN(5)],
		Rules:       policy.PullRules{Reserve: rng.IntN(2) == 0, OnGossip: rng.IntN(2) == 0, GossipPullers: rng.IntN(3), GossipOnChange: rng.IntN(2) == 0},
	}
	if c.Rules.Reserve && rng.IntN(2) == 0 {
		c.Overtake = time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
	}
	return &c
}

// TestConservation is a property test: on random configs (every policy,
// random steal designs, both gossip mechanisms) every request completes
// exactly once, is handed to a slot exactly once, never moves once in
// service and moves at most once (hop limit 1, whether by a periodic move,
// a pull or an arrival push); no node holds anything at the end, no pull is
// left in flight, and cq's dispatcher ends empty with its counts at zero.
func TestConservation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	policies := append(policy.Names(), Central, "steal-random", "steal-random")
	wls := workload.Presets()
	runs := 60
	if testing.Short() {
		runs = 15
	}
	for k := range runs {
		c := DefaultConfig()
		c.Nodes = 1 + rng.IntN(24)
		c.Concurrency = 1 + rng.IntN(3)
		c.Policy = policies[rng.IntN(len(policies))]
		if c.Policy == "steal-random" {
			c.Policy, c.Steal = "steal", randomSteal(rng)
		}
		c.Workload = preset(t, wls[rng.IntN(len(wls))])
		c.Rate = float64(c.Nodes*c.Concurrency) * 25 * (0.1 + rng.Float64()) // up to 110 % load
		c.Duration = time.Duration(1+rng.IntN(20)) * time.Second
		c.Warmup = time.Duration(rng.Int64N(int64(c.Duration)))
		c.GossipInterval = time.Duration(1+rng.IntN(50)) * time.Millisecond
		c.ActivationInterval = time.Duration(1+rng.IntN(80)) * time.Millisecond
		c.StaleAfter = time.Duration(1+rng.IntN(200)) * time.Millisecond
		c.GossipDelay = time.Duration(rng.Int64N(int64(40 * time.Millisecond)))
		c.TransferDelay = time.Duration(rng.Int64N(int64(5 * time.Millisecond)))
		c.ControlDelay = time.Duration(rng.Int64N(int64(3 * time.Millisecond)))
		if rng.IntN(3) == 0 {
			c.Gossip, c.Relay = GossipPiggyback, []string{RelayRotate, RelayHeads}[rng.IntN(2)]
			c.Fanout, c.DatagramBytes = 1+rng.IntN(4), 200+rng.IntN(1300)
		}
		c.Seed = rng.Uint64()
		if rng.IntN(3) == 0 { // bodies, their hand-off time and the transfer-cost rule
			c.Bodies = BodyMix{SmallBytes: rng.Int64N(4096), LargeBytes: rng.Int64N(4 << 20), LargeShare: rng.Float64()}
			c.HandoffPerMiB = time.Duration(rng.Int64N(int64(100 * time.Millisecond)))
			c.TransferCost = rng.IntN(2) == 0
		}
		c.LoadIndex = policy.LoadIndex(rng.IntN(2))

		var seen, started, moved []int
		grow := func(xs *[]int, seq int64) {
			for int64(len(*xs)) <= seq {
				*xs = append(*xs, 0)
			}
		}
		e, err := newEngine(c)
		require.NoError(t, err, "run %d", k)
		e.onDone = func(seq int64, _ int, rt time.Duration) {
			grow(&seen, seq)
			seen[seq]++
			if rt < 0 {
				t.Errorf("run %d: negative response time %v", k, rt)
			}
		}
		e.onStart = func(seq int64, _ int) {
			grow(&started, seq)
			started[seq]++
			if started[seq] > 1 {
				t.Errorf("run %d: request %d handed to a slot twice", k, seq)
			}
		}
		e.onMove = func(seq int64, from, to int) {
			grow(&started, seq)
			grow(&moved, seq)
			if started[seq] > 0 {
				t.Errorf("run %d (%s): request %d moved from %d to %d while in service", k, c.Policy, seq, from, to)
			}
			if moved[seq] > 0 {
				t.Errorf("run %d (%s): request %d moved a second time", k, c.Policy, seq)
			}
			if from == to {
				t.Errorf("run %d: request %d moved to the node it was on", k, seq)
			}
			moved[seq]++
		}
		e.run()
		require.NoError(t, e.err, "run %d", k)
		r := e.result()
		require.Len(t, seen, r.Requests, "run %d (%+v): every arrival completes", k, c)
		for seq, n := range seen {
			require.Equal(t, 1, n, "run %d: request %d completed %d times", k, seq, n)
			require.Equal(t, 1, started[seq], "run %d: request %d started %d times", k, seq, started[seq])
		}
		assert.Zero(t, e.inSystem, "run %d", k)
		assert.Equal(t, e.gossipInFlight, len(e.heap), "run %d: only gossip left in flight", k)
		for i := range e.load {
			assert.Zero(t, e.load[i], "run %d node %d load", k, i)
			assert.Zero(t, e.busy[i], "run %d node %d busy", k, i)
			assert.Zero(t, e.q[i].len(), "run %d node %d queue", k, i)
			assert.Zero(t, e.movable[i], "run %d node %d movable", k, i)
			assert.Zero(t, e.inflight[i], "run %d node %d pulls in flight", k, i)
			assert.Zero(t, e.reserved[i], "run %d node %d reserved slots", k, i)
			if e.work != nil {
				assert.Zero(t, e.work.waitW[i], "run %d node %d waiting work", k, i)
				assert.Empty(t, e.work.serve[i], "run %d node %d requests in service", k, i)
			}
		}
		assert.Zero(t, e.dq.len(), "run %d: cq's FIFO", k)
		for i, o := range e.dOut {
			assert.Zero(t, o, "run %d: cq's count of node %d", k, i)
		}
		assert.Equal(t, r.Measured, len(r.ResponseTimes))
		for _, d := range r.ResponseTimes {
			require.Positive(t, d, "run %d: every measured request has a response time", k)
		}
		if c.Policy == "none" || c.Policy == Central || c.Policy == "rr" || c.Policy == "ct" || c.Policy == "cq" {
			assert.Zero(t, r.Transfers, "run %d: %s moves nothing", k, c.Policy)
		}
		assert.Equal(t, r.Moves+r.Pulls+r.ArrivalPushes, r.Transfers, "run %d: every transfer is a move, a pull or a push", k)
		total := 0
		for _, n := range moved {
			total += n
		}
		assert.Equal(t, r.Transfers, total, "run %d: the hook saw every transfer", k)
		assert.LessOrEqual(t, r.Transfers, r.Requests, "run %d: hop limit 1", k)
	}
}

func TestDeterminism(t *testing.T) {
	for _, p := range append(policy.Names(), Central) {
		t.Run(p, func(t *testing.T) {
			c := short(20 * time.Second)
			c.Policy, c.Workload, c.Rate = p, preset(t, "burst"), 300
			a, err := Run(c)
			require.NoError(t, err)
			b, err := Run(c)
			require.NoError(t, err)
			a.Wall, b.Wall = 0, 0
			assert.Equal(t, a, b, "same seed, same result")
			c.Seed++
			d, err := Run(c)
			require.NoError(t, err)
			assert.NotEqual(t, a.ResponseTimes, d.ResponseTimes, "another seed, other requests")
		})
	}
}

func TestRunGrid(t *testing.T) {
	var cfgs []Config
	for _, p := range []string{"rr", "ct", "nu", Central, "ll"} {
		c := short(10 * time.Second)
		c.Policy = p
		cfgs = append(cfgs, c)
	}
	got, err := RunGrid(cfgs, 3)
	require.NoError(t, err)
	require.Len(t, got, len(cfgs))
	for i, c := range cfgs {
		want, err := Run(c)
		require.NoError(t, err)
		assert.Equal(t, c, got[i].Config, "results in input order")
		assert.Equal(t, want.ResponseTimes, got[i].ResponseTimes, "parallel runs are independent")
	}

	bad := append(slices.Clone(cfgs), Config{})
	_, err = RunGrid(bad, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config 5")

	empty, err := RunGrid(nil, 4)
	require.NoError(t, err)
	assert.Empty(t, empty)
}

// paperTable2 is the paper's Table 2 (standard workload, 16 nodes, mean ms).
var paperTable2 = map[string]map[float64]float64{
	"rr": {120: 64.88, 200: 105.68, 240: 139.73, 280: 198.63},
	"ct": {120: 40.03, 200: 41.36, 240: 44.29, 280: 50.08},
	"nu": {120: 43.53, 200: 50.87, 240: 59, 280: 70.99},
}

// paperMean averages the simulated mean response time over seeds of
// duration d each.
func paperMean(t *testing.T, p string, rate float64, seeds int, d time.Duration, sizeCap time.Duration) float64 {
	t.Helper()
	var cfgs []Config
	for seed := range seeds {
		c := short(d)
		c.Policy, c.Rate, c.Seed, c.SizeCap = p, rate, uint64(seed+1), sizeCap
		cfgs = append(cfgs, c)
	}
	res, err := RunGrid(cfgs, 0)
	require.NoError(t, err)
	mean := 0.0
	for _, r := range res {
		mean += r.MeanMs / float64(len(res))
	}
	return mean
}

// TestAgainstPaperTable2 compares the simulator with the paper's measured
// means (Table 2: standard workload, 16 nodes) on shortened horizons.
func TestAgainstPaperTable2(t *testing.T) {
	cases := []struct {
		policy  string
		rate    float64
		tol     float64
		seeds   int
		sizeCap time.Duration
	}{
		// CT and N: within 15 % from 120 to 280 req/s.
		{"ct", 120, 0.15, 2, 0}, {"ct", 200, 0.15, 2, 0}, {"ct", 240, 0.15, 2, 0}, {"ct", 280, 0.15, 2, 0},
		{"nu", 120, 0.15, 2, 0}, {"nu", 200, 0.15, 2, 0}, {"nu", 240, 0.15, 2, 0}, {"nu", 280, 0.15, 2, 0},
		// RR: within 25 % at 120 and 200 req/s. Its mean is dominated by
		// E[S^2] and noisy, hence more seeds.
		{"rr", 120, 0.25, 8, 0}, {"rr", 200, 0.25, 8, 0},
		// At 240 and 280 req/s the model's long-run RR mean (8 x 1000 s)
		// is 24 % and 26 % above the paper: 30 % is what the model can
		// promise. docs/sim.md explains the gap (the paper's realised
		// sizes were lighter tailed than the nominal lognormal) ...
		{"rr", 240, 0.30, 8, 0}, {"rr", 280, 0.30, 8, 0},
		// ... and with sizes capped at 2 s, which trims E[S^2] of the
		// standard lognormal by 10 % and its mean by 0.3 %, RR is within
		// 25 % over the whole range.
		{"rr", 120, 0.25, 8, 2 * time.Second}, {"rr", 200, 0.25, 8, 2 * time.Second},
		{"rr", 240, 0.25, 8, 2 * time.Second}, {"rr", 280, 0.25, 8, 2 * time.Second},
	}
	for _, tc := range cases {
		got := paperMean(t, tc.policy, tc.rate, tc.seeds, 100*time.Second, tc.sizeCap)
		want := paperTable2[tc.policy][tc.rate]
		t.Logf("%s at %v req/s (cap %v): sim %.1f ms, paper %.1f ms (%+.0f%%)", tc.policy, tc.rate, tc.sizeCap, got, want, 100*(got/want-1))
		assert.InEpsilon(t, want, got, tc.tol, "%s at %v req/s (cap %v): sim %.1f ms, paper %.1f ms", tc.policy, tc.rate, tc.sizeCap, got, want)
	}
}

// TestTransfersHelp checks the transfer policies do what they are for:
// at 70 % load they beat no balancing and RR by far, stay above the
// central limit, and move a modest fraction of the requests.
func TestTransfersHelp(t *testing.T) {
	run := func(p string) Result {
		c := short(60 * time.Second)
		c.Policy, c.Rate = p, 280
		r, err := Run(c)
		require.NoError(t, err)
		return r
	}
	none, rr, central := run("none"), run("rr"), run(Central)
	for _, p := range []string{"ll", "nu", "nu-exact"} {
		r := run(p)
		assert.Less(t, r.MeanMs, none.MeanMs/2, p)
		assert.Less(t, r.MeanMs, rr.MeanMs/2, p)
		assert.Greater(t, r.MeanMs, central.MeanMs, p)
		assert.Greater(t, r.TransfersPerRequest, 0.05, p)
		assert.Less(t, r.TransfersPerRequest, 1.0, p)
	}
}

func TestEventHeapOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h eventHeap
	var seq uint64
	var want []event
	for range 5000 {
		// Few distinct times, so ties (broken by seq) are common.
		e := event{t: rng.Int64N(50), seq: seq}
		seq++
		h.push(e)
		want = append(want, e)
		if rng.IntN(3) == 0 {
			h.pop() // interleave pops; the order check below still holds
			want = want[:0]
			for _, x := range h {
				want = append(want, x)
			}
		}
	}
	slices.SortFunc(want, func(a, b event) int {
		if a.before(b) {
			return -1
		}
		return 1
	})
	for i := range want {
		require.Equal(t, want[i], h.pop(), "pop %d", i)
	}
	assert.Empty(t, h)
}

// TestMoveTakesTheTail: a move takes the newest movable requests, skips
// ones that already moved, keeps their order and leaves the rest in order.
func TestMoveTakesTheTail(t *testing.T) {
	c := DefaultConfig()
	c.Nodes, c.TransferDelay = 2, 5*time.Millisecond
	e, err := newEngine(c)
	require.NoError(t, err)
	e.hasArr = false
	// Node 0: slot 0 in service, then 1..6 waiting; 4 has already moved.
	for s := range int32(7) {
		e.alloc()
		e.rSize[s] = int64(time.Second)
		e.rHop[s] = s == 4
		e.enqueue(0, s)
	}
	require.Equal(t, 7, e.load[0])
	require.Equal(t, 5, e.movable[0])
	e.move(0, 1, 3)
	assert.Equal(t, []int32{1, 2, 4}, e.q[0].buf[e.q[0].head:], "the tail's movable requests left, the moved one stayed")
	assert.Equal(t, 4, e.load[0])
	assert.Equal(t, 2, e.movable[0])
	assert.Equal(t, 3, e.transfers)
	var arrivals []int32
	for len(e.heap) > 0 {
		ev := e.heap.pop()
		if ev.kind == evXfer {
			assert.Equal(t, int64(5*time.Millisecond), ev.t)
			assert.Equal(t, int32(1), ev.node)
			arrivals = append(arrivals, ev.slot)
		}
	}
	assert.Equal(t, []int32{3, 5, 6}, arrivals, "oldest first, so they reach the target in queue order")
	for _, s := range arrivals {
		assert.True(t, e.rHop[s], "moved requests never move again")
	}
}

// TestViewFromGossip checks what a planner sees: its own live load, the
// others' last published loads once GossipDelay has passed, and unknown
// entries once older than StaleAfter.
func TestViewFromGossip(t *testing.T) {
	c := DefaultConfig()
	c.Nodes = 3
	c.GossipDelay, c.StaleAfter = 2*time.Millisecond, 30*time.Millisecond
	e, err := newEngine(c)
	require.NoError(t, err)
	var got []policy.View
	e.planner = policy.PlannerFunc(func(v policy.View) []policy.Move {
		got = append(got, policy.View{Self: v.Self, Nodes: slices.Clone(v.Nodes)})
		return nil
	})
	ms := func(x float64) int64 { return int64(x * float64(time.Millisecond)) }
	e.load = []int{5, 2, 7}
	e.movable[0] = 1 // so node 0 plans

	e.now = ms(10)
	e.publish(1) // node 1 says 2 at 10 ms
	e.now = ms(11)
	e.activateNode(0) // too early: not yet visible
	e.now = ms(12)
	e.activateNode(0) // visible now
	e.load[1] = 9
	e.publish(1) // node 1 says 9 at 12 ms, visible at 14 ms
	e.now = ms(13)
	e.activateNode(0) // still the old entry
	e.now = ms(41)
	e.activateNode(0) // the 12 ms entry, 29 ms old
	e.now = ms(43)
	e.activateNode(0) // 31 ms old: stale

	require.Len(t, got, 5)
	for _, v := range got {
		assert.Equal(t, 0, v.Self)
		assert.Equal(t, policy.NodeLoad{Load: 5, Concurrency: 1, Known: true}, v.Nodes[0], "self is live")
		assert.False(t, v.Nodes[2].Known, "node 2 never published")
	}
	n1 := func(i int) policy.NodeLoad { return got[i].Nodes[1] }
	assert.False(t, n1(0).Known)
	assert.Equal(t, policy.NodeLoad{Load: 2, Concurrency: 1, Known: true, Age: 2 * time.Millisecond}, n1(1))
	assert.Equal(t, policy.NodeLoad{Load: 2, Concurrency: 1, Known: true, Age: 3 * time.Millisecond}, n1(2))
	assert.Equal(t, policy.NodeLoad{Load: 9, Concurrency: 1, Known: true, Age: 29 * time.Millisecond}, n1(3))
	assert.False(t, n1(4).Known)
	assert.Equal(t, 9, n1(4).Load, "the stale entry keeps its last value")
}

// TestInvalidPlanIsAnError: a planner breaking its contract stops the run
// with an error instead of corrupting the model.
func TestInvalidPlanIsAnError(t *testing.T) {
	c := short(5 * time.Second)
	c.Rate = 380
	e, err := newEngine(c)
	require.NoError(t, err)
	e.planner = policy.PlannerFunc(func(v policy.View) []policy.Move {
		return []policy.Move{{From: v.Self, To: v.Self, Count: 1}}
	})
	e.run()
	require.Error(t, e.err)
	assert.Contains(t, e.err.Error(), "invalid move")
}

func BenchmarkRun(b *testing.B) {
	for _, p := range []string{"ct", "nu", Central} {
		b.Run(p, func(b *testing.B) {
			c := DefaultConfig()
			c.Policy = p
			events := 0
			for b.Loop() {
				r, err := Run(c)
				if err != nil {
					b.Fatal(err)
				}
				events += r.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// TestSnapshotBursts checks the study variant of the CT dispatcher
// (Config.SnapshotBursts): with
// one snapshot per burst, all four requests of a burst go to the one node
// that was least loaded when it arrived; with exact counts they spread.
func TestSnapshotBursts(t *testing.T) {
	for _, snap := range []bool{false, true} {
		c := short(10 * time.Second)
		c.Policy, c.Workload, c.Rate, c.SnapshotBursts = "ct", preset(t, "burst"), 300, snap
		e, err := newEngine(c)
		require.NoError(t, err)
		// Node 3 alone is idle; every other node serves one request, so
		// after one arrival on node 3 all nodes tie.
		for i := range e.load {
			if i != 3 {
				e.load[i], e.busy[i] = 1, 1
			}
		}
		for range 4 { // one burst
			e.now = int64(e.arr.At)
			e.arrive()
		}
		if snap {
			assert.Equal(t, 4, e.load[3], "the whole burst on the snapshot's least-loaded node")
		} else {
			assert.LessOrEqual(t, e.load[3], 2, "exact counts spread the burst")
		}
	}
}
