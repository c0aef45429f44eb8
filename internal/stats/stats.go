// Package stats holds the statistics the simulator and the load generator
// share, so that a simulated row and a measured one mean the same thing:
// Percentile, the percentile of a sample (and Summarize, a sample's mean and
// the percentiles SWD reports), and CapacityAt, the x-th percentile capacity
// of docs/algorithms.md (the highest arrival rate whose x-th percentile
// response time stays within a limit).
//
// Concurrency: pure functions of their arguments; safe for concurrent use.
package stats

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
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

// Summary is what SWD reports of a sample of response times: the mean and
// the 50th, 95th, 99th and 99.5th percentiles.
type Summary struct {
	Mean, P50, P95, P99, P995 float64
}

// Summarize returns values' Summary (Percentile's definition), summing
// them in the order given, then sorting values in place. With no values,
// every field is NaN.
func Summarize(values []float64) Summary {
	if len(values) == 0 {
		nan := math.NaN()
		return Summary{nan, nan, nan, nan, nan}
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	slices.Sort(values)
	return Summary{
		Mean: sum / float64(len(values)),
		P50:  Percentile(values, 50),
		P95:  Percentile(values, 95),
		P99:  Percentile(values, 99),
		P995: Percentile(values, 99.5),
	}
}

// Bound says how a capacity relates to the measured rates.
type Bound int

const (
	// Interpolated: the PRT crosses the limit between two measured rates
	// (or reaches it exactly at one); the capacity is where.
	Interpolated Bound = iota
	// AtLeast: the PRT stays within the limit at every measured rate; the
	// capacity is at least the highest one.
	AtLeast
	// Below: the PRT is already over the limit at the lowest measured
	// rate; the capacity is below it.
	Below
)

// String is the bound's name as report files write it: "interpolated",
// "at_least" or "below".
func (b Bound) String() string {
	switch b {
	case AtLeast:
		return "at_least"
	case Below:
		return "below"
	default:
		return "interpolated"
	}
}

// MarshalText writes the bound's name.
func (b Bound) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText reads a bound's name.
func (b *Bound) UnmarshalText(t []byte) error {
	for _, c := range []Bound{Interpolated, AtLeast, Below} {
		if c.String() == string(t) {
			*b = c
			return nil
		}
	}
	return fmt.Errorf("unknown capacity bound %q", t)
}

// Point is one measured rate (requests per second) and its x-th percentile
// response time in ms (+Inf or NaN: the rate failed).
type Point struct {
	Rate  float64
	PRTMs float64
}

// CapacityAt returns the x-th percentile capacity of points against
// limitMs, by the linear interpolation of docs/algorithms.md: points are
// taken in rate order; the PRT is assumed linear in the rate between
// adjacent points; the capacity is where that line first rises above the
// limit. A PRT equal to the limit is within it.
//
// Non-monotone inputs: the first crossing counts. A PRT that rises above
// the limit and comes back under it at a higher rate does not raise the
// capacity (a capacity is a rate up to which the PRT stays within the
// limit). A failed point (PRT +Inf or NaN) is over any limit, and a
// crossing into one sits at the previous rate.
//
// It returns AtLeast with the highest rate when the PRT never crosses, and
// Below with the lowest rate when the first point is already over.
func CapacityAt(points []Point, limitMs float64) (rate float64, bound Bound, err error) {
	if len(points) == 0 {
		return 0, 0, errors.New("no measured rates to compute a capacity from")
	}
	if !(limitMs > 0) || math.IsInf(limitMs, 0) {
		return 0, 0, fmt.Errorf("limit must be a positive response time, got %v ms", limitMs)
	}
	ps := append([]Point(nil), points...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Rate < ps[j].Rate })
	for i := range ps {
		if i > 0 && ps[i].Rate == ps[i-1].Rate {
			return 0, 0, fmt.Errorf("rate %v is measured twice", ps[i].Rate)
		}
		if math.IsNaN(ps[i].PRTMs) {
			ps[i].PRTMs = math.Inf(1)
		}
	}
	if ps[0].PRTMs > limitMs {
		return ps[0].Rate, Below, nil
	}
	for i := 1; i < len(ps); i++ {
		a, b := ps[i-1], ps[i]
		if b.PRTMs <= limitMs {
			continue
		}
		if math.IsInf(b.PRTMs, 1) {
			return a.Rate, Interpolated, nil
		}
		// a.PRT <= limit < b.PRT, so the slope is positive.
		return a.Rate + (limitMs-a.PRTMs)*(b.Rate-a.Rate)/(b.PRTMs-a.PRTMs), Interpolated, nil
	}
	return ps[len(ps)-1].Rate, AtLeast, nil
}
