package loadgen

import (
	"bytes"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sameRows(t *testing.T, want, got []Row) {
	t.Helper()
	require.Len(t, got, len(want))
	for i := range want {
		w, g := want[i], got[i]
		for _, f := range []*float64{&w.MeanMs, &w.P50Ms, &w.P95Ms, &w.P99Ms, &w.P995Ms, &g.MeanMs, &g.P50Ms, &g.P95Ms, &g.P99Ms, &g.P995Ms} {
			if math.IsNaN(*f) {
				*f = -1 // NaN != NaN; compare as a marker
			}
		}
		assert.Equal(t, w, g, "row %d", i)
	}
}

func TestCSVRoundTrip(t *testing.T) {
	nan := math.NaN()
	rows := []Row{
		{Policy: "rr", Rate: 40, Requests: 2400, Errors: 0, MeanMs: 41.6, P50Ms: 20.125, P95Ms: 150.0000001, P99Ms: 517, P995Ms: 643.25},
		{Policy: "nu-exact", Rate: 12.5, Requests: 10, Errors: 3, MeanMs: 1.0 / 3, P50Ms: 0, P95Ms: 1e-9, P99Ms: 1e9, P995Ms: 2},
		// A run where nothing succeeded.
		{Policy: "ll", Rate: 360, Requests: 5, Errors: 5, MeanMs: nan, P50Ms: nan, P95Ms: nan, P99Ms: nan, P995Ms: nan},
	}
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, rows))
	first, _, _ := strings.Cut(buf.String(), "\n")
	assert.Equal(t, "policy,rate,requests,errors,mean_ms,p50_ms,p95_ms,p99_ms,p995_ms", first)
	got, err := ReadCSV(&buf)
	require.NoError(t, err)
	sameRows(t, rows, got)

	path := filepath.Join(t.TempDir(), "sub", "results.csv")
	require.NoError(t, WriteCSVFile(path, rows))
	got, err = ReadCSVFile(path)
	require.NoError(t, err)
	sameRows(t, rows, got)
}

func TestReadCSV(t *testing.T) {
	head := "policy,rate,requests,errors,mean_ms,p50_ms,p95_ms,p99_ms,p995_ms\n"
	cases := []struct {
		name string
		in   string
		rows int
		err  string
	}{
		// Only a header: no rows, no error.
		{"header only", head, 0, ""},
		// Extra trailing columns (another tool's additions) are ignored.
		{"extra columns", strings.TrimSuffix(head, "\n") + ",transfers\nnu,40,10,0,1,1,1,1,1,0.2\n", 1, ""},
		// A spreadsheet's byte-order mark is tolerated.
		{"BOM", "\ufeff" + head + "nu,40,10,0,1,1,1,1,1\n", 1, ""},
		// Nothing at all.
		{"empty", "", 0, "empty"},
		// Columns in another order are refused.
		{"wrong header", "rate,policy\n", 0, "must start with"},
		// A short record.
		{"short line", head + "nu,40,10\n", 0, "line 2"},
		// A rate that is not a number.
		{"bad rate", head + "nu,fast,10,0,1,1,1,1,1\n", 0, "rate"},
		// More errors than requests is impossible.
		{"errors > requests", head + "nu,40,1,2,1,1,1,1,1\n", 0, "exceed"},
		// A negative count.
		{"negative requests", head + "nu,40,-1,0,1,1,1,1,1\n", 0, "requests"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, err := ReadCSV(strings.NewReader(c.in))
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			assert.Len(t, rows, c.rows)
		})
	}
}
