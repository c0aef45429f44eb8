package stats

import (
	"encoding/json"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	s := []float64{10, 20, 30, 40, 50}
	cases := []struct {
		name   string
		sorted []float64
		p      float64
		want   float64
	}{
		// The ends are the minimum and the maximum.
		{"p0 is the minimum", s, 0, 10},
		{"p100 is the maximum", s, 100, 50},
		// An odd count's median is the middle value.
		{"median", s, 50, 30},
		// Between ranks: rank 0.95*4 = 3.8, 80 % of the way from 40 to 50.
		{"p95 interpolates", s, 95, 48},
		{"p25 lands on a rank", s, 25, 20},
		// An even count's median is the mean of the middle two.
		{"even median", []float64{1, 2, 3, 4}, 50, 2.5},
		{"single value", []float64{7}, 99.5, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, Percentile(tc.sorted, tc.p), 1e-9)
		})
	}
	// No data, or p outside [0, 100], has no percentile.
	assert.True(t, math.IsNaN(Percentile(nil, 50)))
	assert.True(t, math.IsNaN(Percentile(s, -1)))
	assert.True(t, math.IsNaN(Percentile(s, 100.1)))
	assert.True(t, math.IsNaN(Percentile(s, math.NaN())))
}

func TestCapacityAt(t *testing.T) {
	inf := math.Inf(1)
	cases := []struct {
		name   string
		points []Point
		limit  float64
		rate   float64
		bound  Bound
	}{
		// Crosses between 120 (200 ms) and 200 (400 ms): 120 + (300-200)/(400-200)*80 = 160.
		{"crossing", []Point{{40, 100}, {120, 200}, {200, 400}}, 300, 160, Interpolated},
		// A PRT equal to the limit is within it; the line leaves it right there: 120.
		{"equal at a point", []Point{{40, 100}, {120, 200}, {200, 400}}, 200, 120, Interpolated},
		// Never crosses: at least the highest rate.
		{"never crosses", []Point{{40, 100}, {120, 200}, {200, 400}}, 500, 200, AtLeast},
		// Over already at the lowest rate: below it.
		{"over at lowest", []Point{{40, 100}, {120, 200}, {200, 400}}, 50, 40, Below},
		// Non-monotone: over at 120, back under at 200; the first crossing
		// counts: 40 + (250-100)/(300-100)*80 = 100.
		{"non-monotone, first crossing", []Point{{40, 100}, {120, 300}, {200, 200}, {240, 600}}, 250, 100, Interpolated},
		// Non-monotone dip below the limit, then a crossing:
		// 120 + (250-90)/(400-90)*80 = 161.290...
		{"dip then cross", []Point{{40, 100}, {120, 90}, {200, 400}}, 250, 120 + 160.0*80/310, Interpolated},
		// A failed rate is over any limit; the crossing sits at the previous rate.
		{"failed point", []Point{{40, 100}, {120, inf}}, 250, 40, Interpolated},
		// NaN (no successful request) counts as failed.
		{"NaN point", []Point{{40, 100}, {120, 200}, {200, math.NaN()}}, 250, 120, Interpolated},
		// Input order does not matter: points are sorted by rate (case 1 shuffled).
		{"unsorted", []Point{{200, 400}, {40, 100}, {120, 200}}, 300, 160, Interpolated},
		// One point within: at least that rate.
		{"single within", []Point{{80, 100}}, 200, 80, AtLeast},
		// One point over: below that rate.
		{"single over", []Point{{80, 300}}, 200, 80, Below},
		// From the simulator's study: 200 ms lies halfway between 100 ms
		// (200 req/s) and 300 ms (300 req/s): 250 req/s.
		{"halfway", []Point{{100, 50}, {200, 100}, {300, 300}, {400, 900}}, 200, 250, Interpolated},
		// Crossing in the last interval: 300 + (600-300)/(900-300)*100 = 350.
		{"crossing in the last interval", []Point{{100, 50}, {200, 100}, {300, 300}, {400, 900}}, 600, 350, Interpolated},
		// The paper's shape: flat then steep. 280 + (279-250)/(400-250)*40 = 287.733...
		{"paper-like", []Point{{40, 150}, {120, 160}, {200, 190}, {240, 210}, {280, 250}, {320, 400}}, 279, 280 + 29.0*40/150, Interpolated},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rate, bound, err := CapacityAt(c.points, c.limit)
			require.NoError(t, err)
			assert.Equal(t, c.bound, bound)
			assert.InDelta(t, c.rate, rate, 1e-9)
		})
	}
}

func TestCapacityAtErrors(t *testing.T) {
	cases := []struct {
		name   string
		points []Point
		limit  float64
		want   string
	}{
		// Nothing to interpolate.
		{"no points", nil, 100, "no measured rates"},
		// The same rate twice is ambiguous.
		{"duplicate rate", []Point{{40, 1}, {40, 2}}, 100, "measured twice"},
		// A limit must be a positive time.
		{"zero limit", []Point{{40, 1}}, 0, "limit must be"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := CapacityAt(c.points, c.limit)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestBoundText(t *testing.T) {
	cases := []struct {
		bound Bound
		name  string
	}{
		// The names report.json carries; a change breaks readers of old files.
		{Interpolated, "interpolated"},
		{AtLeast, "at_least"},
		{Below, "below"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.name, c.bound.String())
			b, err := json.Marshal(c.bound)
			require.NoError(t, err)
			assert.Equal(t, `"`+c.name+`"`, string(b))
			var got Bound
			require.NoError(t, json.Unmarshal(b, &got))
			assert.Equal(t, c.bound, got)
		})
	}
	// An unknown name is refused, not read as Interpolated.
	var b Bound
	assert.ErrorContains(t, b.UnmarshalText([]byte("exact")), "unknown capacity bound")
}

func TestSummarize(t *testing.T) {
	cases := []struct {
		name   string
		values []float64
		want   Summary
	}{
		// Mean 30; p50 the middle value; p95 at rank 3.8: 40 + 0.8*10 = 48;
		// p99 at rank 3.96: 49.6; p99.5 at rank 3.98: 49.8.
		{"five values", []float64{50, 10, 40, 20, 30}, Summary{30, 30, 48, 49.6, 49.8}},
		// One value is every statistic.
		{"one value", []float64{7}, Summary{7, 7, 7, 7, 7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Summarize(c.values)
			assert.InDelta(t, c.want.Mean, got.Mean, 1e-9)
			assert.InDelta(t, c.want.P50, got.P50, 1e-9)
			assert.InDelta(t, c.want.P95, got.P95, 1e-9)
			assert.InDelta(t, c.want.P99, got.P99, 1e-9)
			assert.InDelta(t, c.want.P995, got.P995, 1e-9)
			assert.True(t, sort.Float64sAreSorted(c.values), "sorted in place")
		})
	}
	// No values: nothing to summarise, NaN everywhere.
	e := Summarize(nil)
	for _, v := range []float64{e.Mean, e.P50, e.P95, e.P99, e.P995} {
		assert.True(t, math.IsNaN(v))
	}
}
