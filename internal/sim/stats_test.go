package sim

import (
	"math"
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

func TestCapacity(t *testing.T) {
	rates := []float64{100, 200, 300, 400}
	prt := []float64{50, 100, 300, 900}
	cases := []struct {
		name  string
		rates []float64
		prt   []float64
		limit float64
		want  float64
		bound Bound
	}{
		// 200 ms lies halfway between 100 ms (200 req/s) and 300 ms
		// (300 req/s): the capacity is 250 req/s.
		{"interpolates the crossing", rates, prt, 200, 250, Exact},
		// Exactly at a measured PRT: that rate is still within the limit.
		{"limit equal to a PRT", rates, prt, 300, 300, Exact},
		{"crossing in the last interval", rates, prt, 600, 350, Exact},
		// Never exceeded: the capacity is at least the highest rate.
		{"never exceeded", rates, prt, 1000, 400, AtLeast},
		// Exceeded from the start: at most the lowest rate.
		{"exceeded at once", rates, prt, 10, 100, AtMost},
		// A PRT that dips back under the limit later does not count: the
		// capacity is where it first crosses (60 % of the way from 50 to 300).
		{"first crossing wins", rates, []float64{50, 300, 100, 900}, 200, 160, Exact},
		{"single rate within", []float64{100}, []float64{50}, 60, 100, AtLeast},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, b, err := Capacity(tc.rates, tc.prt, tc.limit)
			require.NoError(t, err)
			assert.InDelta(t, tc.want, got, 1e-9)
			assert.Equal(t, tc.bound, b)
		})
	}
	_, _, err := Capacity(rates, prt[:2], 100)
	assert.ErrorContains(t, err, "as many")
	_, _, err = Capacity(nil, nil, 100)
	assert.ErrorContains(t, err, "at least one")
	_, _, err = Capacity([]float64{100, 100}, []float64{1, 2}, 100)
	assert.ErrorContains(t, err, "ascending")
	assert.Equal(t, ">=", AtLeast.String())
	assert.Equal(t, "<=", AtMost.String())
	assert.Equal(t, "=", Exact.String())
}
