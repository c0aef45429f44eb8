package loadgen

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// paperRows is a slice of the paper's Table 2 (standard workload, mean
// response time) with made-up percentiles, plus LL's "failed" run.
func paperRows() []Row {
	return []Row{
		{Policy: "rr", Rate: 40, Requests: 2400, MeanMs: 41.6, P50Ms: 20, P95Ms: 150, P99Ms: 400, P995Ms: 500},
		{Policy: "rr", Rate: 360, Requests: 21600, MeanMs: 728.39, P50Ms: 500, P95Ms: 2000, P99Ms: 4000, P995Ms: 5000},
		{Policy: "ct", Rate: 40, Requests: 2400, MeanMs: 39.16, P50Ms: 20, P95Ms: 140, P99Ms: 380, P995Ms: 480},
		{Policy: "ct", Rate: 360, Requests: 21600, MeanMs: 97.01, P50Ms: 40, P95Ms: 300, P99Ms: 600, P995Ms: 700},
		{Policy: "ll", Rate: 40, Requests: 2400, MeanMs: 41.68, P50Ms: 20, P95Ms: 150, P99Ms: 400, P995Ms: 500},
		{Policy: "ll", Rate: 360, Requests: 21600, Errors: 5000, MeanMs: 900, P50Ms: 800, P95Ms: 3000, P99Ms: 5000, P995Ms: 6000},
		{Policy: "nu", Rate: 40, Requests: 2400, MeanMs: 39.8, P50Ms: 20, P95Ms: 145, P99Ms: 390, P995Ms: 490},
	}
}

func TestWriteTableGolden(t *testing.T) {
	rep := Report{Title: "compare", Rows: paperRows(), Percentiles: []float64{99}, MaxErrorRate: 0.01}
	rep, err := rep.WithCapacities(LimitSpec{From: "ct@360"})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	// rr crosses 600 ms between 40 (400 ms) and 360 (4000 ms):
	// 40 + (600-400)/(4000-400)*320 = 57.8. ll failed at 360, so its
	// capacity sits at 40. nu was only measured at 40.
	want := `compare

mean response time (ms), policies × rate (req/s)
  policy     40     360
  rr      41.60  728.39
  ct      39.16   97.01
  ll      41.68  failed
  nu      39.80       -

99th percentile response time (ms)
  policy      40      360
  rr      400.00  4000.00
  ct      380.00   600.00
  ll      400.00   failed
  nu      390.00        -

errors / requests
  policy      40         360
  rr      0/2400     0/21600
  ct      0/2400     0/21600
  ll      0/2400  5000/21600
  nu      0/2400           -

capacity (req/s): highest rate whose PRT stays within the limit
  policy  99th ≤ 600.00ms
  rr                 57.8
  ct                ≥ 360
  ll                 40.0
  nu                 ≥ 40
limits: ct's PRT at 360 req/s
`
	assert.Equal(t, want, buf.String())
}

// With a reference, every capacity is also shown as a ratio to its, after
// the capacities.
func TestWriteTableRatios(t *testing.T) {
	rep := Report{Rows: paperRows()[:4], Percentiles: []float64{95, 99}, MaxErrorRate: 0.01, Reference: "ct"}
	rep, err := rep.WithCapacities(LimitSpec{Limits: []time.Duration{200 * time.Millisecond, 500 * time.Millisecond}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.WriteTable(&buf))
	// rr: 95th crosses 200 ms at 40 + 50/1850*320 = 48.6, 99th 500 ms at
	// 40 + 100/3600*320 = 48.9; ct: 40 + 60/160*320 = 160, 40 + 120/220*320
	// = 214.5.
	assert.Contains(t, buf.String(), `capacity (req/s): highest rate whose PRT stays within the limit
  policy  95th ≤ 200.00ms  99th ≤ 500.00ms
  rr                 48.6             48.9
  ct                160.0            214.5

capacity / ct's capacity
  policy  95th  99th
  rr      0.30  0.23
  ct      1.00  1.00
`)
	require.Len(t, rep.Ratios, 4)

	rep.Reference = "nu"
	_, err = rep.WithCapacities(LimitSpec{Limits: []time.Duration{time.Second}})
	require.Error(t, err, "a reference that was not measured")
}

func TestWriteTableEmptyAndNotes(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, Report{Notes: []string{"a note"}}.WriteTable(&buf))
	assert.Contains(t, buf.String(), "no results")
	assert.Contains(t, buf.String(), "a note")
}

func TestReportJSON(t *testing.T) {
	w := spec(t, "burst")
	rep := Report{Workload: &w, Rows: paperRows(), Percentiles: []float64{95, 99}, MaxErrorRate: 0.01,
		Blocks: []Block{{Title: "x", Cells: []Cell{{Policy: "nu", Rate: 40, Value: 0.5}}}}}
	rep, err := rep.WithCapacities(LimitSpec{Limits: []time.Duration{300 * time.Millisecond, 600 * time.Millisecond}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, rep.Write(&buf, "json"))
	var back Report
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.Equal(t, "burst", back.Workload.Name)
	assert.Len(t, back.Rows, len(rep.Rows))
	assert.Equal(t, rep.Capacities, back.Capacities)
	assert.Equal(t, rep.Blocks, back.Blocks)
	assert.Error(t, rep.Write(&buf, "yaml"))
}

func TestWritePlots(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plots")
	w := spec(t, "standard")
	rows := paperRows()
	rows = append(rows, Row{Policy: "nu", Rate: 360, Requests: 1, MeanMs: math.NaN(), P50Ms: math.NaN(), P95Ms: math.NaN(), P99Ms: math.NaN(), P995Ms: math.NaN()})
	rep := Report{Workload: &w, Rows: rows, Percentiles: []float64{95, 99.5}, MaxErrorRate: 0.01}
	rep, err := rep.WithCapacities(LimitSpec{From: "ct@360"})
	require.NoError(t, err)
	files, err := rep.WritePlots(dir)
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.Greater(t, len(b), 8)
		assert.Equal(t, []byte("\x89PNG\r\n\x1a\n"), b[:8], "%s is a PNG", f)
	}
	assert.Equal(t, []string{"rt_mean.png", "rt_p95.png", "rt_p995.png", "capacity.png"}, names)

	none, err := Report{}.WritePlots(dir)
	require.NoError(t, err)
	assert.Empty(t, none, "no rows, no plots")
}
