package loadgen

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	// 1..100 ms in reverse order: mean 50.5; percentiles interpolate between
	// closest ranks (rank p/100*99): p50 50.5, p95 95.05, p99 99.01, p99.5 99.505.
	var ok []time.Duration
	for i := 100; i >= 1; i-- {
		ok = append(ok, time.Duration(i)*time.Millisecond)
	}
	r := Summarize("nu", 40, 103, 3, ok)
	assert.Equal(t, "nu", r.Policy)
	assert.Equal(t, 40.0, r.Rate)
	assert.Equal(t, 103, r.Requests)
	assert.Equal(t, 3, r.Errors)
	assert.InDelta(t, 50.5, r.MeanMs, 1e-9)
	assert.InDelta(t, 50.5, r.P50Ms, 1e-9)
	assert.InDelta(t, 95.05, r.P95Ms, 1e-9)
	assert.InDelta(t, 99.01, r.P99Ms, 1e-9)
	assert.InDelta(t, 99.505, r.P995Ms, 1e-9)

	empty := Summarize("ll", 360, 5, 5, nil)
	assert.True(t, math.IsNaN(empty.MeanMs) && math.IsNaN(empty.P99Ms), "no successes, no statistics")
	assert.True(t, empty.Failed(1), "a row without successes always failed")
}

func TestRowFailed(t *testing.T) {
	cases := []struct {
		name string
		row  Row
		max  float64
		want bool
	}{
		// No errors.
		{"clean", Row{Requests: 100, MeanMs: 1}, 0.01, false},
		// Exactly at the threshold is still fine.
		{"at threshold", Row{Requests: 100, Errors: 1, MeanMs: 1}, 0.01, false},
		// Above it: failed.
		{"above threshold", Row{Requests: 100, Errors: 2, MeanMs: 1}, 0.01, true},
		// No requests at all says nothing.
		{"no requests", Row{MeanMs: 1}, 0.01, true},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.row.Failed(c.max), c.name)
	}
}

func TestRowJSONNaNIsNull(t *testing.T) {
	r := Row{Policy: "ll", Rate: 360, Requests: 2, Errors: 2, MeanMs: math.NaN(), P50Ms: math.NaN(), P95Ms: 1, P99Ms: math.Inf(1), P995Ms: 3}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"policy":"ll","rate":360,"requests":2,"errors":2,"mean_ms":null,"p50_ms":null,"p95_ms":1,"p99_ms":null,"p995_ms":3}`, string(b))
	var back Row
	require.NoError(t, json.Unmarshal(b, &back))
	assert.True(t, math.IsNaN(back.MeanMs))
	assert.Equal(t, 1.0, back.P95Ms)
}

func TestParsePercentilesAndRates(t *testing.T) {
	ps, err := ParsePercentiles("99, 95,99,99.5")
	require.NoError(t, err)
	assert.Equal(t, []float64{99, 95, 99.5}, ps, "order kept, duplicates dropped")
	for _, bad := range []string{"", "90", "x"} {
		_, err := ParsePercentiles(bad)
		assert.Error(t, err, bad)
	}
	rs, err := ParseRates("200,40, 120")
	require.NoError(t, err)
	assert.Equal(t, []float64{40, 120, 200}, rs, "rates sorted ascending")
	for _, bad := range []string{"", "0", "-5", "40,40", "x", "Inf"} {
		_, err := ParseRates(bad)
		assert.Error(t, err, bad)
	}
	assert.Equal(t, "99.5th", PercentileName(99.5))
	assert.Equal(t, "95th", PercentileName(95))
}
