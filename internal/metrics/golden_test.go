package metrics_test

import (
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/metrics"
)

// family is one metric family's pinned shape: its type and its label names
// (sorted), as a scrape of /metrics shows them.
type family struct {
	Type   dto.MetricType
	Labels []string
}

// golden pins every swd_* family the daemon exports. Dashboards, alerts
// and docs/observability.md depend on these names, types and label sets:
// renaming one, changing its type or adding a label is a breaking change
// for every Prometheus and Grafana set up on SWD. Update this list (and
// deploy/grafana, docs/observability.md) on purpose only.
var golden = map[string]family{
	"swd_requests_total":            {dto.MetricType_COUNTER, []string{"outcome"}},
	"swd_request_duration_seconds":  {dto.MetricType_HISTOGRAM, nil},
	"swd_queue_wait_seconds":        {dto.MetricType_HISTOGRAM, nil},
	"swd_transfers_total":           {dto.MetricType_COUNTER, []string{"direction", "outcome", "peer"}},
	"swd_transfer_duration_seconds": {dto.MetricType_HISTOGRAM, []string{"outcome"}},
	"swd_policy_info":               {dto.MetricType_GAUGE, []string{"epoch", "policy"}},
	"swd_gossip_dropped_total":      {dto.MetricType_COUNTER, []string{"reason"}},
	"swd_rejections_total":          {dto.MetricType_COUNTER, []string{"reason"}},
	"swd_queue_length":              {dto.MetricType_GAUGE, nil},
	"swd_in_flight":                 {dto.MetricType_GAUGE, nil},
	"swd_cluster_members":           {dto.MetricType_GAUGE, nil},
	"swd_gossip_view_age_seconds":   {dto.MetricType_GAUGE, []string{"peer"}},
	"swd_node_info":                 {dto.MetricType_GAUGE, []string{"node", "role", "version"}},
	"swd_concurrency":               {dto.MetricType_GAUGE, nil},
	"swd_affinity_placements_total": {dto.MetricType_COUNTER, []string{"placement"}},
	"swd_cohort_picks_total":        {dto.MetricType_COUNTER, []string{"class"}},
	"swd_pulls_total":               {dto.MetricType_COUNTER, []string{"result"}},
	"swd_pull_idle_seconds":         {dto.MetricType_HISTOGRAM, []string{"filled"}},
	"swd_request_body_bytes":        {dto.MetricType_HISTOGRAM, []string{"edge"}},
	"swd_response_body_bytes":       {dto.MetricType_HISTOGRAM, []string{"edge"}},
	"swd_transfer_bytes_total":      {dto.MetricType_COUNTER, []string{"body", "direction", "peer"}},
	"swd_transfer_handoff_seconds":  {dto.MetricType_HISTOGRAM, []string{"size"}},
	"swd_work_seconds":              {dto.MetricType_GAUGE, nil},
	"swd_route_cost_seconds":        {dto.MetricType_GAUGE, []string{"route"}},
}

// goldenRuntime pins the Go and process collector families SWD's docs and
// dashboard use. Those collectors export more (their set follows the Go
// and client_golang versions); only these are promised.
var goldenRuntime = map[string]family{
	"go_goroutines":                 {dto.MetricType_GAUGE, nil},
	"go_threads":                    {dto.MetricType_GAUGE, nil},
	"go_info":                       {dto.MetricType_GAUGE, []string{"version"}},
	"go_gc_duration_seconds":        {dto.MetricType_SUMMARY, nil},
	"go_memstats_heap_alloc_bytes":  {dto.MetricType_GAUGE, nil},
	"process_cpu_seconds_total":     {dto.MetricType_COUNTER, nil},
	"process_resident_memory_bytes": {dto.MetricType_GAUGE, nil},
	"process_open_fds":              {dto.MetricType_GAUGE, nil},
	"process_max_fds":               {dto.MetricType_GAUGE, nil},
	"process_start_time_seconds":    {dto.MetricType_GAUGE, nil},
}

// boundedValues lists, per family and label, every value the label may
// take. "<node>" stands for a cluster member's node name (bounded by the
// cluster's size), "<epoch>" for the one current policy epoch, "<route>"
// for a route's name (bounded by the route table: the operator's patterns,
// at most route.Config.MaxLearnt learnt ones, and "other").
var boundedValues = map[string]map[string][]string{
	"swd_requests_total": {"outcome": strs(
		metrics.OutcomeLocal, metrics.OutcomeRemote, metrics.OutcomeRejected,
		metrics.OutcomeTimedOut, metrics.OutcomeClientGone, metrics.OutcomeFailed,
	)},
	"swd_transfers_total": {
		"direction": strs(metrics.DirIn, metrics.DirOut),
		"outcome": strs(
			metrics.TransferOK, metrics.TransferRefused, metrics.TransferFailed,
			metrics.TransferRetried,
		),
		"peer": {"<node>", "unknown"},
	},
	"swd_transfer_duration_seconds": {"outcome": strs(
		metrics.TransferOK, metrics.TransferRefused, metrics.TransferFailed,
		metrics.TransferRetried,
	)},
	"swd_rejections_total":        {"reason": metrics.RejectionReasons},
	"swd_node_info":               {"node": {"<node>"}, "role": {"node", "dispatcher"}, "version": {"<version>"}},
	"swd_gossip_dropped_total":    {"reason": {"malformed", "foreign"}},
	"swd_gossip_view_age_seconds": {"peer": {"<node>"}},
	"swd_policy_info":             {"policy": {"<policy>"}, "epoch": {"<epoch>"}},
	"swd_request_body_bytes":      {"edge": strs(metrics.Edges...)},
	"swd_response_body_bytes":     {"edge": strs(metrics.Edges...)},
	"swd_transfer_bytes_total": {
		"direction": strs(metrics.DirIn, metrics.DirOut),
		"peer":      {"<node>"},
		"body":      strs(metrics.BodyKinds...),
	},
	"swd_transfer_handoff_seconds":  {"size": strs(metrics.SizeClasses...)},
	"swd_affinity_placements_total": {"placement": strs(metrics.Placements...)},
	"swd_cohort_picks_total":        {"class": metrics.CohortClasses},
	"swd_pulls_total":               {"result": strs(metrics.PullResults...)},
	"swd_pull_idle_seconds":         {"filled": {"true", "false"}},
	"swd_route_cost_seconds":        {"route": {"<route>"}},
}

// strs lists label values of one of the label types as strings.
func strs[T ~string](vs ...T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// exercised builds a Metrics whose every family has at least one series,
// with live gauges that read the given values.
func exercised(t *testing.T) *metrics.Metrics {
	t.Helper()
	m := metrics.New(metrics.Live{
		QueueLength: func() float64 { return 7 },
		InFlight:    func() float64 { return 2 },
		Members:     func() float64 { return 4 },
		ViewAges:    func() map[string]float64 { return map[string]float64{"node-1": 0.02, "node-2": 0.04} },
		Concurrency: func() float64 { return 1 },
		RouteCosts:  func() map[string]float64 { return map[string]float64{"GET /work/light": 0.01, "GET /work/heavy": 0.31} },
		Work:        func() float64 { return 0.64 },
		GossipDropped: func() map[string]float64 {
			return map[string]float64{"malformed": 1, "foreign": 0}
		},
		CohortPicks: func() map[string]float64 { return map[string]float64{"cached": 3, "uncached": 1} },
	})
	m.Placed(metrics.PlacementSpilled)
	m.Pulled(metrics.PullMiss)
	m.PullIdle(2*time.Millisecond, true)
	m.SetNodeInfo("node-0", "node", "test")
	m.ObserveRequest(metrics.OutcomeLocal, 12*time.Millisecond)
	m.ObserveRequest(metrics.OutcomeRemote, 30*time.Millisecond)
	m.ObserveQueueWait(5 * time.Millisecond)
	m.TransferOut("node-1", metrics.TransferOK, 20*time.Millisecond)
	m.TransferIn("node-2", metrics.TransferRefused)
	m.SetPolicy("nu", 5)
	m.Reject(metrics.ReasonQueueFull)
	m.ObserveFlow(metrics.EdgeClient, 100, 2000)
	m.TransferFlow(metrics.DirOut, "node-1", 100, 2000)
	m.ObserveHandoff(100, time.Millisecond)
	return m
}

// scrape fetches /metrics through the daemon's handler and parses the text
// exposition, as Prometheus would.
func scrape(t *testing.T, m *metrics.Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "the /metrics answer must parse as Prometheus text exposition")
	return mfs
}

func shape(mf *dto.MetricFamily) family {
	names := map[string]bool{}
	for _, s := range mf.GetMetric() {
		for _, l := range s.GetLabel() {
			names[l.GetName()] = true
		}
	}
	f := family{Type: mf.GetType()}
	if len(names) > 0 {
		f.Labels = slices.Sorted(maps.Keys(names))
	}
	return f
}

// Every swd_* family exists with the pinned type and label set, and there
// is no swd_* family the golden list does not know.
func TestGoldenMetricFamilies(t *testing.T) {
	mfs := scrape(t, exercised(t))
	got := map[string]family{}
	for name, mf := range mfs {
		if strings.HasPrefix(name, "swd_") {
			got[name] = shape(mf)
		}
	}
	assert.Equal(t, golden, got, "swd_* families changed: update golden (and deploy/grafana, docs/observability.md) only on purpose")
	for name, mf := range mfs {
		if strings.HasPrefix(name, "swd_") {
			assert.NotEmpty(t, mf.GetHelp(), "%s has no help text", name)
		}
	}
}

func TestGoldenRuntimeFamilies(t *testing.T) {
	mfs := scrape(t, exercised(t))
	for name, want := range goldenRuntime {
		if strings.HasPrefix(name, "process_") && runtime.GOOS != "linux" {
			continue // the process collector reads /proc
		}
		mf, ok := mfs[name]
		if !assert.True(t, ok, "%s missing from /metrics", name) {
			continue
		}
		assert.Equal(t, want, shape(mf), name)
	}
}

// The live gauges read their callbacks at scrape time; nil callbacks read 0
// and a nil view-age callback exports no series.
func TestLiveGauges(t *testing.T) {
	value := func(mfs map[string]*dto.MetricFamily, name string) float64 {
		t.Helper()
		mf, ok := mfs[name]
		require.True(t, ok, "%s missing", name)
		require.Len(t, mf.GetMetric(), 1, name)
		return mf.GetMetric()[0].GetGauge().GetValue()
	}
	mfs := scrape(t, exercised(t))
	assert.InDelta(t, 7.0, value(mfs, "swd_queue_length"), 0)
	assert.InDelta(t, 2.0, value(mfs, "swd_in_flight"), 0)
	assert.InDelta(t, 4.0, value(mfs, "swd_cluster_members"), 0)
	ages := map[string]float64{}
	for _, s := range mfs["swd_gossip_view_age_seconds"].GetMetric() {
		ages[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
	}
	assert.Equal(t, map[string]float64{"node-1": 0.02, "node-2": 0.04}, ages)
	assert.InDelta(t, 0.64, value(mfs, "swd_work_seconds"), 0)
	costs := map[string]float64{}
	for _, s := range mfs["swd_route_cost_seconds"].GetMetric() {
		costs[s.GetLabel()[0].GetValue()] = s.GetGauge().GetValue()
	}
	assert.Equal(t, map[string]float64{"GET /work/light": 0.01, "GET /work/heavy": 0.31}, costs)

	mfs = scrape(t, metrics.New(metrics.Live{}))
	assert.InDelta(t, 0.0, value(mfs, "swd_queue_length"), 0)
	assert.InDelta(t, 0.0, value(mfs, "swd_in_flight"), 0)
	assert.InDelta(t, 0.0, value(mfs, "swd_cluster_members"), 0)
	assert.InDelta(t, 0.0, value(mfs, "swd_work_seconds"), 0)
	assert.NotContains(t, mfs, "swd_gossip_view_age_seconds")
	assert.NotContains(t, mfs, "swd_route_cost_seconds")
}

// swd_policy_info keeps exactly one series however often the policy
// changes: the epoch label never accumulates.
func TestPolicyInfoKeepsOneSeries(t *testing.T) {
	m := metrics.New(metrics.Live{})
	for e := int64(1); e <= 100; e++ {
		m.SetPolicy([]string{"nu", "ll", "rr"}[e%3], e)
	}
	mf := scrape(t, m)["swd_policy_info"]
	require.NotNil(t, mf)
	require.Len(t, mf.GetMetric(), 1)
	labels := map[string]string{}
	for _, l := range mf.GetMetric()[0].GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	assert.Equal(t, map[string]string{"policy": "ll", "epoch": "100"}, labels)
	assert.InDelta(t, 1.0, mf.GetMetric()[0].GetGauge().GetValue(), 0)
}

// Views come and go: the age gauge shows only the peers of the current
// view, never a departed one.
func TestViewAgesFollowTheView(t *testing.T) {
	view := map[string]float64{"node-1": 0.01, "node-2": 0.01, "node-3": 0.01}
	m := metrics.New(metrics.Live{ViewAges: func() map[string]float64 { return view }})
	assert.Len(t, scrape(t, m)["swd_gossip_view_age_seconds"].GetMetric(), 3)
	view = map[string]float64{"node-1": 0.01}
	assert.Len(t, scrape(t, m)["swd_gossip_view_age_seconds"].GetMetric(), 1)
}

// Every request outcome is a fixed value, and each lands in both the
// counter and the duration histogram.
func TestObserveRequestOutcomes(t *testing.T) {
	m := metrics.New(metrics.Live{})
	outcomes := boundedValues["swd_requests_total"]["outcome"]
	for i, o := range outcomes {
		for j := 0; j <= i; j++ {
			m.ObserveRequest(metrics.Outcome(o), time.Millisecond)
		}
	}
	mfs := scrape(t, m)
	got := map[string]float64{}
	for _, s := range mfs["swd_requests_total"].GetMetric() {
		got[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
	}
	want := map[string]float64{}
	total := 0
	for i, o := range outcomes {
		want[o] = float64(i + 1)
		total += i + 1
	}
	assert.Equal(t, want, got)
	h := mfs["swd_request_duration_seconds"].GetMetric()[0].GetHistogram()
	assert.EqualValues(t, total, h.GetSampleCount())
}

// The duration histograms' buckets are ascending and cover 1 ms to 1 min,
// so histogram_quantile gives useful p50/p99 for SWD's latencies.
func TestHistogramBucketsCoverLatencies(t *testing.T) {
	mfs := scrape(t, exercised(t))
	for _, name := range []string{"swd_request_duration_seconds", "swd_queue_wait_seconds", "swd_transfer_duration_seconds"} {
		h := mfs[name].GetMetric()[0].GetHistogram()
		var bounds []float64
		for _, b := range h.GetBucket() {
			bounds = append(bounds, b.GetUpperBound())
		}
		require.NotEmpty(t, bounds, name)
		assert.True(t, sort.Float64sAreSorted(bounds), "%s buckets not ascending: %v", name, bounds)
		assert.LessOrEqual(t, bounds[0], 0.001, "%s: first bucket above 1 ms", name)
		assert.GreaterOrEqual(t, bounds[len(bounds)-1], 60.0, "%s: last finite bucket below 1 min", name)
		assert.LessOrEqual(t, len(bounds), 30, "%s: too many buckets for a per-node series", name)
	}
}

// The swd_* families follow Prometheus naming conventions (promlint).
func TestMetricNamesLint(t *testing.T) {
	mfs := scrape(t, exercised(t))
	var list []*dto.MetricFamily
	for name, mf := range mfs {
		if strings.HasPrefix(name, "swd_") {
			list = append(list, mf)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(list).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// The Metrics struct exports only its registry: families are recorded
// through the typed methods and pinned by golden above, so a new exported
// field (a way around them) must be a decision.
func TestMetricsStructFields(t *testing.T) {
	var fields []string
	typ := reflect.TypeFor[metrics.Metrics]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.IsExported() {
			fields = append(fields, f.Name)
		}
	}
	assert.ElementsMatch(t, []string{"Registry"}, fields, "metrics.Metrics changed: record through typed methods, pin families in golden and exercised()")
}

// Snapshot reads back exactly what was recorded: every request outcome and
// rejection reason (zero included) and every transfer series, sorted.
func TestSnapshot(t *testing.T) {
	m := metrics.New(metrics.Live{})
	empty := m.Snapshot()
	assert.Len(t, empty.Requests, len(metrics.Outcomes), "outcomes exist before the first event")
	assert.Len(t, empty.Rejections, len(metrics.Reasons))
	assert.Empty(t, empty.Transfers)

	m.ObserveRequest(metrics.OutcomeLocal, time.Millisecond)
	m.ObserveRequest(metrics.OutcomeLocal, time.Millisecond)
	m.ObserveRequest(metrics.OutcomeClientGone, time.Millisecond)
	m.Reject(metrics.ReasonQueueFull)
	m.TransferOut("node-2", metrics.TransferOK, time.Millisecond)
	m.TransferOut("node-2", metrics.TransferOK, time.Millisecond)
	m.TransferOut("node-1", metrics.TransferRefused, time.Millisecond)
	m.TransferUnroutable()
	m.TransferIn("node-3", metrics.TransferFailed)

	s := m.Snapshot()
	assert.Equal(t, uint64(2), s.Requests[metrics.OutcomeLocal])
	assert.Equal(t, uint64(1), s.Requests[metrics.OutcomeClientGone])
	assert.Equal(t, uint64(0), s.Requests[metrics.OutcomeFailed])
	assert.Equal(t, uint64(1), s.Rejections[metrics.ReasonQueueFull])
	assert.Equal(t, []metrics.TransferCount{
		{Direction: metrics.DirIn, Peer: "node-3", Outcome: metrics.TransferFailed, Count: 1},
		{Direction: metrics.DirOut, Peer: "node-1", Outcome: metrics.TransferRefused, Count: 1},
		{Direction: metrics.DirOut, Peer: "node-2", Outcome: metrics.TransferOK, Count: 2},
		{Direction: metrics.DirOut, Peer: "unknown", Outcome: metrics.TransferRefused, Count: 1},
	}, s.Transfers)

	// The snapshot and a scrape agree (same families, same series).
	mfs := scrape(t, m)
	var scraped float64
	for _, s := range mfs["swd_transfers_total"].GetMetric() {
		scraped += s.GetCounter().GetValue()
	}
	assert.InDelta(t, 5.0, scraped, 0)
	h := mfs["swd_transfer_duration_seconds"]
	var observed uint64
	for _, s := range h.GetMetric() {
		observed += s.GetHistogram().GetSampleCount()
	}
	assert.EqualValues(t, 3, observed, "every forward observed once, unroutable hand-offs not")
}
