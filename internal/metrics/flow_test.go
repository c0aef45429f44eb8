package metrics_test

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/metrics"
)

// seriesByPeer counts a family's series per peer label in a scrape.
func seriesByPeer(t *testing.T, m *metrics.Metrics, family string) map[string]int {
	t.Helper()
	out := map[string]int{}
	mf, ok := scrape(t, m)[family]
	if !ok {
		return out
	}
	for _, s := range mf.GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "peer" {
				out[l.GetValue()]++
			}
		}
	}
	return out
}

// A fresh node's per-peer series exist at zero for every member (so
// rate(swd_transfers_total[1m]) is 0, not "no data"), and a member that
// leaves takes its series with it: the peer label stays bounded by the
// membership. The "unknown" peer of unroutable hand-offs stays.
func TestSetPeersMakesZeroSeriesAndPrunesLeavers(t *testing.T) {
	m := metrics.New(metrics.Live{})
	assert.Empty(t, seriesByPeer(t, m, "swd_transfers_total"), "no member known yet")

	m.SetPeers([]string{"node-1", "node-2"})
	perPeer := 2 * len(metrics.TransferOutcomes) // out and in, every outcome
	assert.Equal(t, map[string]int{"node-1": perPeer, "node-2": perPeer}, seriesByPeer(t, m, "swd_transfers_total"))
	assert.Equal(t, map[string]int{"node-1": 4, "node-2": 4}, seriesByPeer(t, m, "swd_transfer_bytes_total"))
	for _, s := range scrape(t, m)["swd_transfers_total"].GetMetric() {
		assert.Zero(t, s.GetCounter().GetValue())
	}
	assert.Empty(t, m.Snapshot().Transfers, "zero series are not events: swdctl status lists none")

	m.TransferOut("node-2", metrics.TransferOK, time.Millisecond)
	m.TransferFlow(metrics.DirOut, "node-2", 10, 20)
	m.TransferUnroutable()
	m.SetPeers([]string{"node-1", "node-3"}) // node-2 left, node-3 joined
	assert.Equal(t, map[string]int{"node-1": perPeer, "node-3": perPeer, "unknown": 1}, seriesByPeer(t, m, "swd_transfers_total"))
	assert.Equal(t, map[string]int{"node-1": 4, "node-3": 4}, seriesByPeer(t, m, "swd_transfer_bytes_total"))

	m.SetPeers(nil)
	assert.Equal(t, map[string]int{"unknown": 1}, seriesByPeer(t, m, "swd_transfers_total"))
	assert.Empty(t, seriesByPeer(t, m, "swd_transfer_bytes_total"))
}

// ClassOf puts each body in the smallest class whose bound holds it.
func TestClassOf(t *testing.T) {
	for _, tt := range []struct {
		bytes int64
		want  metrics.SizeClass
	}{
		{0, metrics.Size4KiB},           // no body
		{4096, metrics.Size4KiB},        // the bound itself
		{4097, metrics.Size64KiB},       // one byte over
		{200 << 10, metrics.Size1MiB},   // in between
		{1 << 20, metrics.Size1MiB},     // the default --max-transfer-body
		{1<<20 + 1, metrics.SizeLarger}, // beyond it
		{-5, metrics.Size4KiB},          // nonsense counts as empty
	} {
		assert.Equal(t, tt.want, metrics.ClassOf(tt.bytes), "%d bytes", tt.bytes)
	}
	require.Len(t, metrics.SizeClassBytes, len(metrics.SizeClasses))
	assert.True(t, sort.SliceIsSorted(metrics.SizeClassBytes, func(i, j int) bool { return metrics.SizeClassBytes[i] < metrics.SizeClassBytes[j] }))
}

// The flow recorders read back through Snapshot: requests per edge, bytes
// per peer and direction, hand-offs per size class, the latency histogram.
func TestFlowSnapshot(t *testing.T) {
	m := metrics.New(metrics.Live{})
	m.SetPeers([]string{"node-1"})
	m.ObserveRequest(metrics.OutcomeLocal, 3*time.Millisecond)
	m.ObserveFlow(metrics.EdgeClient, 100, 5000)
	m.ObserveFlow(metrics.EdgeApp, 100, 5000)
	m.ObserveFlow(metrics.EdgeApp, 0, 10)
	m.TransferFlow(metrics.DirOut, "node-1", 1<<20, 7)
	m.TransferFlow(metrics.DirIn, "node-1", 3, 4)
	m.ObserveHandoff(1<<20, 4*time.Millisecond)
	m.ObserveHandoff(1<<20, 6*time.Millisecond)
	m.ObserveHandoff(10, time.Millisecond)

	f := m.Snapshot().Flow
	assert.Equal(t, map[metrics.Edge]uint64{
		metrics.EdgeClient: 1, metrics.EdgeApp: 2, metrics.EdgeTransferOut: 1, metrics.EdgeTransferIn: 1,
	}, f.Requests)
	bytes := map[string]uint64{}
	for _, b := range f.Bytes {
		bytes[string(b.Direction)+"/"+b.Peer+"/"+string(b.Body)] = b.Bytes
	}
	assert.Equal(t, map[string]uint64{
		"out/node-1/request": 1 << 20, "out/node-1/response": 7, "in/node-1/request": 3, "in/node-1/response": 4,
	}, bytes)
	require.Len(t, f.Handoff, len(metrics.SizeClasses), "every class exists at zero")
	assert.Equal(t, uint64(2), f.Handoff[metrics.Size1MiB].Count)
	assert.InDelta(t, 0.010, f.Handoff[metrics.Size1MiB].Seconds, 1e-9)
	assert.Equal(t, uint64(1), f.Handoff[metrics.Size4KiB].Count)
	assert.Zero(t, f.Handoff[metrics.Size64KiB].Count)
	assert.Equal(t, uint64(1), f.Latency.Count)
	assert.True(t, math.IsInf(f.Latency.Bounds[len(f.Latency.Bounds)-1], 1), "the last bound is +Inf")
}

// Quantile interpolates as histogram_quantile does, over the observations
// since an earlier reading: checked against the exact quantile of known
// samples, which it must place inside the right bucket.
func TestHistogramQuantile(t *testing.T) {
	h := func(bounds []float64, obs []float64) metrics.Histogram {
		out := metrics.Histogram{Bounds: append(append([]float64{}, bounds...), math.Inf(1))}
		out.Counts = make([]uint64, len(out.Bounds))
		for _, o := range obs {
			for i, b := range out.Bounds {
				if o <= b {
					out.Counts[i]++
				}
			}
			out.Count++
			out.Sum += o
		}
		return out
	}
	bounds := []float64{1, 2, 4, 8}
	for _, tt := range []struct {
		name string
		obs  []float64
		q    float64
		want float64
	}{
		// four observations in (1, 2]: the median is half way into the bucket
		{"one bucket", []float64{1.5, 1.5, 1.5, 1.5}, 0.5, 1.5},
		// two in [0, 1], two in (2, 4]: rank 2 ends the first bucket
		{"bucket edge", []float64{0.5, 0.5, 3, 3}, 0.5, 1},
		// rank 99 of 100 is the last of 99 zeros: the end of [0, 1]
		{"tail", append(make([]float64, 99), 7), 0.99, 1},
		// above the last finite bound: that bound, as PromQL answers
		{"overflow", []float64{100, 100}, 0.5, 8},
		// nothing observed
		{"empty", nil, 0.5, 0},
	} {
		got := h(bounds, tt.obs).Quantile(tt.q, metrics.Histogram{})
		assert.InDelta(t, tt.want, got, 1e-9, tt.name)
	}

	// Since an earlier reading: only the new observations count.
	before := h(bounds, []float64{7, 7, 7})
	after := h(bounds, []float64{7, 7, 7, 0.5, 0.5, 0.5})
	assert.InDelta(t, 0.5, after.Quantile(0.5, before), 1e-9, "rank 1.5 of the three new ones in [0, 1]")
	assert.Zero(t, before.Quantile(0.5, before), "no new observation")

	// Property: for random samples the estimate lies in the bucket that
	// holds the exact quantile.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(200)
		obs := make([]float64, n)
		for i := range obs {
			obs[i] = rng.ExpFloat64() * 2
		}
		q := 0.01 + 0.98*rng.Float64()
		sorted := append([]float64{}, obs...)
		sort.Float64s(sorted)
		exact := sorted[int(math.Ceil(q*float64(n)))-1]
		got := h(bounds, obs).Quantile(q, metrics.Histogram{})
		lo, hi := 0.0, math.Inf(1)
		for _, b := range bounds {
			if exact <= b {
				hi = b
				break
			}
			lo = b
		}
		if math.IsInf(hi, 1) {
			assert.InDelta(t, bounds[len(bounds)-1], got, 1e-9)
			continue
		}
		assert.True(t, got >= lo-1e-9 && got <= hi+1e-9, "q=%v exact %v in (%v, %v], estimate %v", q, exact, lo, hi, got)
	}
}
