package loadgen

import (
	"fmt"
	"math"
	"strconv"

	"github.com/swd-project/swd/internal/stats"
)

// Ratio is one system's capacity divided by the reference system's at the
// same percentile. A capacity known only as a bound ("≥ 360", "< 40") gives
// a ratio known only as a bound.
type Ratio struct {
	Policy     string  `json:"policy"`
	Percentile float64 `json:"percentile"`
	Reference  string  `json:"reference"`
	// Rel says how the true ratio relates to Value: "=" (both capacities
	// interpolated), "≥", "≤", or "?" (both bounds open the same way:
	// unknown, Value 0).
	Rel   string  `json:"rel"`
	Value float64 `json:"value"`
}

// String renders the ratio: "0.93", "≥ 1.12", "≤ 0.50" or "?".
func (r Ratio) String() string {
	v := strconv.FormatFloat(r.Value, 'f', 2, 64)
	switch r.Rel {
	case "=":
		return v
	case "?":
		return "?"
	}
	return r.Rel + " " + v
}

// capRange is the interval a capacity is known to lie in.
func capRange(c Capacity) (lo, hi float64) {
	switch c.Bound {
	case stats.AtLeast:
		return c.Rate, math.Inf(1)
	case stats.Below:
		return 0, c.Rate
	}
	return c.Rate, c.Rate
}

// RatioOf divides c by ref (the reference system's capacity at the same
// percentile). The reference's own ratio is exactly 1.
func RatioOf(c, ref Capacity) Ratio {
	r := Ratio{Policy: c.Policy, Percentile: c.Percentile, Reference: ref.Policy}
	if c.Policy == ref.Policy {
		r.Rel, r.Value = "=", 1
		return r
	}
	cLo, cHi := capRange(c)
	rLo, rHi := capRange(ref)
	lo, hi := 0.0, math.Inf(1)
	if !math.IsInf(rHi, 1) && rHi > 0 {
		lo = cLo / rHi
	}
	if rLo > 0 {
		hi = cHi / rLo
	}
	switch {
	case lo == hi:
		r.Rel, r.Value = "=", lo
	case math.IsInf(hi, 1) && lo > 0:
		r.Rel, r.Value = "≥", lo
	case lo == 0 && !math.IsInf(hi, 1):
		r.Rel, r.Value = "≤", hi
	default:
		r.Rel = "?"
	}
	return r
}

// Ratios divides every capacity by reference's at the same percentile. It
// fails when the reference has no capacity for a percentile (it was not
// measured).
func Ratios(caps []Capacity, reference string) ([]Ratio, error) {
	ref := map[float64]Capacity{}
	for _, c := range caps {
		if c.Policy == reference {
			ref[c.Percentile] = c
		}
	}
	var out []Ratio
	for _, c := range caps {
		rc, ok := ref[c.Percentile]
		if !ok {
			return nil, fmt.Errorf("the reference %s has no %s percentile capacity (was it measured?)", reference, PercentileName(c.Percentile))
		}
		out = append(out, RatioOf(c, rc))
	}
	return out, nil
}
