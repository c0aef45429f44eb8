package flow_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/flow"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
)

var t0 = time.Unix(1_700_000_000, 0)

func sampler(t *testing.T, cfg flow.Config) *flow.Sampler {
	t.Helper()
	s, err := flow.NewSampler(cfg)
	require.NoError(t, err)
	return s
}

func reading(m *metrics.Metrics, queue int) flow.Reading {
	return flow.Reading{Metrics: m.Snapshot(), Queue: queue, InFlight: 1, Concurrency: 1}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, flow.DefaultConfig().Validate())
	for _, c := range []flow.Config{
		{History: 1, CostWindow: time.Minute},         // too short to difference
		{History: 1_000_000, CostWindow: time.Minute}, // unbounded memory
		{History: 10}, // no window
	} {
		assert.Error(t, c.Validate(), "%+v", c)
	}
}

// Two ticks two seconds apart with traffic in between: the sample holds
// per-second rates of every edge, the interval's p50/p99, the queue.
func TestSampleRates(t *testing.T) {
	m := metrics.New(metrics.Live{})
	m.SetPeers([]string{"node-1", "node-2"})
	s := sampler(t, flow.DefaultConfig())
	s.Tick(t0, reading(m, 0))
	assert.Empty(t, s.Since(time.Time{}), "one reading is no interval yet")

	for range 90 {
		m.ObserveRequest(metrics.OutcomeLocal, 10*time.Millisecond)
		m.ObserveFlow(metrics.EdgeApp, 0, 100)
	}
	for range 10 {
		m.ObserveRequest(metrics.OutcomeRemote, 2*time.Second)
	}
	for range 8 {
		m.TransferOut("node-1", metrics.TransferOK, time.Millisecond)
		m.TransferFlow(metrics.DirOut, "node-1", 1000, 500)
	}
	m.TransferOut("node-1", metrics.TransferRefused, time.Millisecond)
	m.TransferOut("node-1", metrics.TransferRefused, time.Millisecond)
	m.TransferIn("node-2", metrics.TransferOK)
	s.Tick(t0.Add(2*time.Second), reading(m, 7))

	got := s.Since(time.Time{})
	require.Len(t, got, 1)
	smp := got[0]
	assert.Equal(t, t0.Add(2*time.Second), smp.At)
	assert.InDelta(t, 2, smp.Seconds, 1e-9)
	assert.Equal(t, 7, smp.Queue)
	assert.InDelta(t, 50, smp.Requests, 1e-9, "100 answers in 2 s")
	assert.InDelta(t, 45, smp.App, 1e-9)
	assert.True(t, smp.P50 > 0.005 && smp.P50 <= 0.011, "p50 %v in the 10 ms bucket", smp.P50)
	assert.True(t, smp.P99 > 1.4 && smp.P99 <= 2.8, "p99 %v in the bucket of 2 s (1.49 s to 2.76 s)", smp.P99)
	edges := map[string]flow.EdgeRate{}
	for _, e := range smp.Edges {
		edges[string(e.Direction)+"/"+e.Peer] = e
	}
	require.Len(t, edges, 4, "every member in both directions, idle ones too: %v", smp.Edges)
	assert.Equal(t, flow.EdgeRate{Peer: "node-1", Direction: metrics.DirOut, PerSecond: 4, FailedPerSecond: 1, BytesPerSecond: 6000, Total: 8}, edges["out/node-1"])
	assert.Equal(t, flow.EdgeRate{Peer: "node-2", Direction: metrics.DirIn, PerSecond: 0.5, Total: 1}, edges["in/node-2"])
	assert.Zero(t, edges["out/node-2"].PerSecond)
	assert.Equal(t, metrics.DirOut, smp.Edges[0].Direction, "out edges first")

	// A quiet second: zero rates and no latency, totals kept.
	s.Tick(t0.Add(3*time.Second), reading(m, 0))
	last := s.Since(t0.Add(2 * time.Second))
	require.Len(t, last, 1)
	assert.Zero(t, last[0].Requests)
	assert.Zero(t, last[0].P99)
	for _, e := range last[0].Edges {
		assert.Zero(t, e.PerSecond)
		if e.Peer == "node-1" && e.Direction == metrics.DirOut {
			assert.Equal(t, uint64(8), e.Total)
		}
	}
	// A tick that does not move time forward is ignored.
	s.Tick(t0.Add(3*time.Second), reading(m, 0))
	assert.Len(t, s.Since(time.Time{}), 2)
}

// The history is a ring of History samples: the oldest go first, Since
// returns them in order.
func TestHistoryIsBounded(t *testing.T) {
	m := metrics.New(metrics.Live{})
	s := sampler(t, flow.Config{History: 5, CostWindow: time.Minute})
	for i := range 20 {
		s.Tick(t0.Add(time.Duration(i)*time.Second), reading(m, i))
	}
	got := s.Since(time.Time{})
	require.Len(t, got, 5)
	for i, smp := range got {
		assert.Equal(t, 15+i, smp.Queue)
	}
	assert.Len(t, s.Since(t0.Add(17*time.Second)), 2)
}

// Hand-off costs: the mean over the window where there were hand-offs in
// it, else the whole-life mean, else unknown; the rule's table fills an
// unknown class with the nearest smaller measured one.
func TestCosts(t *testing.T) {
	m := metrics.New(metrics.Live{})
	s := sampler(t, flow.Config{History: 10, CostWindow: 10 * time.Second})
	assert.Equal(t, policy.TransferCost{Service: time.Second, Handoff: []policy.SizeCost{
		{MaxBytes: 4 << 10}, {MaxBytes: 64 << 10}, {MaxBytes: 1 << 20}, {MaxBytes: metrics.SizeClassBytes[3]},
	}}, s.TransferCost(time.Second), "nothing measured: free")

	m.ObserveHandoff(100, 10*time.Millisecond) // an old slow one
	s.Tick(t0, reading(m, 0))
	m.ObserveHandoff(100, time.Millisecond)
	m.ObserveHandoff(100, 3*time.Millisecond)
	m.ObserveHandoff(1<<20, 20*time.Millisecond)
	s.Tick(t0.Add(20*time.Second), reading(m, 0))
	s.Tick(t0.Add(30*time.Second), reading(m, 0)) // the window now starts at t0+20s
	costs := s.Costs()
	require.Len(t, costs, len(metrics.SizeClasses))
	// No hand-off in the window for any class: whole-life means.
	assert.Equal(t, flow.Cost{MaxBytes: 4 << 10, Mean: 14 * time.Millisecond / 3, Samples: 3}, costs[0])
	assert.Equal(t, flow.Cost{MaxBytes: 1 << 20, Mean: 20 * time.Millisecond, Samples: 1}, costs[2])

	m.ObserveHandoff(100, 2*time.Millisecond)
	s.Tick(t0.Add(35*time.Second), reading(m, 0))
	costs = s.Costs()
	assert.Equal(t, flow.Cost{MaxBytes: 4 << 10, Mean: 2 * time.Millisecond, Samples: 1}, costs[0], "the window's own mean")
	assert.Zero(t, costs[1].Samples)

	tc := s.TransferCost(40 * time.Millisecond)
	assert.Equal(t, 40*time.Millisecond, tc.Service)
	assert.Equal(t, []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond},
		[]time.Duration{tc.Of(0), tc.Of(10 << 10), tc.Of(200 << 10), tc.Of(1 << 20), tc.Of(5 << 20)})
	require.NoError(t, tc.Validate())
}
