package loadgen

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/stats"
)

func TestRatioOf(t *testing.T) {
	capOf := func(pol string, rate float64, b stats.Bound) Capacity {
		return Capacity{Policy: pol, Percentile: 99, Rate: rate, Bound: b}
	}
	ref := capOf("ref", 300, stats.Interpolated)
	cases := []struct {
		name string
		c    Capacity
		ref  Capacity
		want string
	}{
		// both interpolated: an exact ratio
		{"exact", capOf("a", 240, stats.Interpolated), ref, "0.80"},
		// the reference against itself is 1, even when open-ended
		{"self", capOf("ref", 360, stats.AtLeast), capOf("ref", 360, stats.AtLeast), "1.00"},
		// at least 360 against 300: at least 1.2
		{"at least", capOf("a", 360, stats.AtLeast), ref, "≥ 1.20"},
		// below 200 against 300: under 0.67
		{"below", capOf("a", 200, stats.Below), ref, "≤ 0.67"},
		// 240 against at least 360: at most 0.67
		{"reference open above", capOf("a", 240, stats.Interpolated), capOf("ref", 360, stats.AtLeast), "≤ 0.67"},
		// 240 against below 200: above 1.2
		{"reference below", capOf("a", 240, stats.Interpolated), capOf("ref", 200, stats.Below), "≥ 1.20"},
		// both at least the highest rate: unknown
		{"both open above", capOf("a", 360, stats.AtLeast), capOf("ref", 360, stats.AtLeast), "?"},
		// both below the lowest rate: unknown
		{"both below", capOf("a", 200, stats.Below), capOf("ref", 200, stats.Below), "?"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := RatioOf(c.c, c.ref)
			assert.Equal(t, c.want, r.String())
			assert.Equal(t, c.ref.Policy, r.Reference)
		})
	}
}

func TestRatiosNeedTheReference(t *testing.T) {
	caps := []Capacity{{Policy: "a", Percentile: 99, Rate: 100}, {Policy: "b", Percentile: 99, Rate: 50}}
	rs, err := Ratios(caps, "a")
	require.NoError(t, err)
	require.Len(t, rs, 2)
	assert.Equal(t, "0.50", rs[1].String())
	_, err = Ratios(caps, "haproxy-cq")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "haproxy-cq")
}
