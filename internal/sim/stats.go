package sim

import (
	"fmt"
	"math"
)

// Percentile returns the p-th percentile (0 <= p <= 100) of sorted, an
// ascending slice, by linear interpolation between closest ranks: the value
// at fractional rank p/100*(len-1), so Percentile(s, 0) is the minimum,
// Percentile(s, 100) the maximum and Percentile(s, 50) the usual median. It
// returns NaN for an empty slice or a p outside [0, 100].
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 || !(p >= 0 && p <= 100) {
		return math.NaN()
	}
	r := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(r))
	if lo >= len(sorted)-1 {
		return sorted[len(sorted)-1]
	}
	f := r - float64(lo)
	return sorted[lo] + f*(sorted[lo+1]-sorted[lo])
}

// Bound says how a capacity estimate relates to the true capacity.
type Bound int

const (
	// Exact: the limit was crossed between two measured rates and the
	// estimate is the interpolated crossing.
	Exact Bound = iota
	// AtLeast: the percentile stayed within the limit at every measured
	// rate; the estimate is the highest rate measured.
	AtLeast
	// AtMost: the percentile exceeded the limit already at the lowest rate;
	// the estimate is that rate.
	AtMost
)

func (b Bound) String() string {
	switch b {
	case AtLeast:
		return ">="
	case AtMost:
		return "<="
	default:
		return "="
	}
}

// Capacity is the x-th percentile capacity of the spec
// (../shared/spec/algorithms.md): given ascending rates and the x-th
// percentile response time prt measured at each, the highest rate at which
// prt stays within limit, assuming prt grows linearly with the rate between
// two adjacent measured rates. It interpolates at the first rate whose prt
// exceeds limit. This is the simulator's own small helper for its studies;
// the load generator has the user-facing one.
func Capacity(rates, prt []float64, limit float64) (float64, Bound, error) {
	if len(rates) == 0 || len(rates) != len(prt) {
		return 0, Exact, fmt.Errorf("need as many percentiles as rates (at least one), got %d and %d", len(prt), len(rates))
	}
	for i := 1; i < len(rates); i++ {
		if !(rates[i] > rates[i-1]) {
			return 0, Exact, fmt.Errorf("rates must be strictly ascending, got %v after %v", rates[i], rates[i-1])
		}
	}
	if prt[0] > limit {
		return rates[0], AtMost, nil
	}
	for i := 1; i < len(rates); i++ {
		if prt[i] > limit {
			// prt[i-1] <= limit < prt[i]
			f := (limit - prt[i-1]) / (prt[i] - prt[i-1])
			return rates[i-1] + f*(rates[i]-rates[i-1]), Exact, nil
		}
	}
	return rates[len(rates)-1], AtLeast, nil
}
