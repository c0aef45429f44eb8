package loadgen

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/stats"
)

func TestCapacityString(t *testing.T) {
	assert.Equal(t, "287.7", Capacity{Rate: 287.73}.String())
	assert.Equal(t, "≥ 360", Capacity{Rate: 360, Bound: stats.AtLeast}.String())
	assert.Equal(t, "< 40", Capacity{Rate: 40, Bound: stats.Below}.String())
	b, err := json.Marshal(Capacity{Policy: "nu", Rate: 40, Bound: stats.Below})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"bound":"below"`)
	var c Capacity
	require.NoError(t, json.Unmarshal(b, &c))
	assert.Equal(t, stats.Below, c.Bound)
}

// rowsFor builds rows of one policy with the given p95 PRTs (other
// statistics derived from it).
func rowsFor(pol string, rates, p95 []float64) []Row {
	var out []Row
	for i := range rates {
		out = append(out, Row{Policy: pol, Rate: rates[i], Requests: 1000, MeanMs: p95[i] / 3, P50Ms: p95[i] / 4, P95Ms: p95[i], P99Ms: 2 * p95[i], P995Ms: 3 * p95[i]})
	}
	return out
}

func TestResolveLimits(t *testing.T) {
	rows := append(rowsFor("ct", []float64{40, 320}, []float64{100, 200}), rowsFor("nu", []float64{40, 320}, []float64{110, 279})...)
	cases := []struct {
		name string
		spec LimitSpec
		ps   []float64
		want []float64 // ms per percentile
		err  string
	}{
		// One explicit limit applies to every percentile.
		{"one limit", LimitSpec{Limits: []time.Duration{500 * time.Millisecond}}, []float64{95, 99}, []float64{500, 500}, ""},
		// One limit per percentile, in order.
		{"per percentile", LimitSpec{Limits: []time.Duration{279 * time.Millisecond, 517 * time.Millisecond}}, []float64{95, 99}, []float64{279, 517}, ""},
		// The paper's way: nu's PRTs at 320 req/s.
		{"from nu@320", LimitSpec{From: "nu@320"}, []float64{95, 99, 99.5}, []float64{279, 558, 837}, ""},
		// Two limits for three percentiles is ambiguous.
		{"count mismatch", LimitSpec{Limits: []time.Duration{1, 2}}, []float64{95, 99, 99.5}, nil, "2 limits for 3 percentiles"},
		// The source must have been measured.
		{"missing source", LimitSpec{From: "ll@320"}, []float64{95}, nil, "not among the results"},
		// Nothing given.
		{"empty", LimitSpec{}, []float64{95}, nil, "no limit"},
		// Both given.
		{"both", LimitSpec{From: "nu@320", Limits: []time.Duration{1}}, []float64{95}, nil, "not both"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ls, err := ResolveLimits(c.spec, c.ps, rows, 0.01)
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				return
			}
			require.NoError(t, err)
			require.Len(t, ls, len(c.want))
			for i := range ls {
				assert.Equal(t, c.ps[i], ls[i].Percentile)
				assert.InDelta(t, c.want[i], ls[i].Ms, 1e-9)
			}
		})
	}
}

func TestResolveLimitsFailedSource(t *testing.T) {
	rows := rowsFor("nu", []float64{320}, []float64{279})
	rows[0].Errors = 500
	_, err := ResolveLimits(LimitSpec{From: "nu@320"}, []float64{95}, rows, 0.01)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "failed")
}

func TestCapacitiesTreatFailedRowsAsOver(t *testing.T) {
	rows := rowsFor("ll", []float64{40, 120, 200}, []float64{100, 200, 250})
	// ll at 200 lost 5 % of its requests: it "failed", as in the paper.
	rows[2].Errors = 50
	rows = append(rows, rowsFor("nu", []float64{40, 120, 200}, []float64{100, 200, 250})...)
	caps, err := Capacities(rows, []Limit{{Percentile: 95, Ms: 300}}, 0.01)
	require.NoError(t, err)
	require.Len(t, caps, 2)
	assert.Equal(t, Capacity{Policy: "ll", Percentile: 95, LimitMs: 300, Rate: 120, Bound: stats.Interpolated}, caps[0])
	assert.Equal(t, Capacity{Policy: "nu", Percentile: 95, LimitMs: 300, Rate: 200, Bound: stats.AtLeast}, caps[1])
}

func TestParseLimitFrom(t *testing.T) {
	cases := []struct {
		in   string
		pol  string
		rate float64
		ok   bool
	}{
		// The paper's source.
		{"nu@320", "nu", 320, true},
		// Spaces are trimmed; fractional rates are fine.
		{" ct @ 12.5 ", "ct", 12.5, true},
		// No @.
		{"nu", "", 0, false},
		// No policy.
		{"@320", "", 0, false},
		// Not a rate.
		{"nu@fast", "", 0, false},
		// Not a positive rate.
		{"nu@0", "", 0, false},
	}
	for _, c := range cases {
		pol, rate, err := ParseLimitFrom(c.in)
		if !c.ok {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.pol, pol)
		assert.Equal(t, c.rate, rate)
	}
}
