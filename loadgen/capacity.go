package loadgen

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/stats"
)

// Capacity is one policy's x-th percentile capacity.
type Capacity struct {
	Policy     string  `json:"policy"`
	Percentile float64 `json:"percentile"`
	LimitMs    float64 `json:"limit_ms"`
	// Rate is the capacity in requests per second, read with Bound.
	Rate  float64     `json:"rate"`
	Bound stats.Bound `json:"bound"`
}

// String renders the capacity: "287.3", "≥ 360" or "< 40".
func (c Capacity) String() string {
	r := strconv.FormatFloat(c.Rate, 'f', 1, 64)
	switch c.Bound {
	case stats.AtLeast:
		return "≥ " + FormatRate(c.Rate)
	case stats.Below:
		return "< " + FormatRate(c.Rate)
	}
	return r
}

// Limit is the PRT limit for one percentile.
type Limit struct {
	Percentile float64
	Ms         float64
	// From names where the limit came from ("nu@320"), or "" if given.
	From string
}

// LimitSpec is how the user gave limits: explicit durations (one for every
// percentile, or one per percentile in order), or POLICY@RATE (the limit is
// that policy's x-th PRT at that rate, as in the paper).
type LimitSpec struct {
	Limits []time.Duration
	From   string
}

// Empty reports whether no limit was given.
func (s LimitSpec) Empty() bool { return len(s.Limits) == 0 && s.From == "" }

// ParseLimits parses "500ms" or "279ms,517ms,643ms".
func ParseLimits(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range splitList(s) {
		d, err := time.ParseDuration(f)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("limit %q is not a positive duration (use e.g. 500ms)", f)
		}
		out = append(out, d)
	}
	return out, nil
}

// ParseLimitFrom parses "nu@320".
func ParseLimitFrom(s string) (policy string, rate float64, err error) {
	p, r, ok := strings.Cut(strings.TrimSpace(s), "@")
	if !ok || strings.TrimSpace(p) == "" {
		return "", 0, fmt.Errorf("limit source %q must be POLICY@RATE, e.g. nu@320", s)
	}
	rate, err = strconv.ParseFloat(strings.TrimSpace(r), 64)
	if err != nil || !(rate > 0) {
		return "", 0, fmt.Errorf("limit source %q must be POLICY@RATE with a positive rate, e.g. nu@320", s)
	}
	return strings.TrimSpace(p), rate, nil
}

// ResolveLimits turns spec into one Limit per percentile, reading
// POLICY@RATE limits from rows.
func ResolveLimits(spec LimitSpec, percentiles []float64, rows []Row, maxErrorRate float64) ([]Limit, error) {
	switch {
	case spec.Empty():
		return nil, errors.New("no limit: give --limit DURATION or --limit-from POLICY@RATE")
	case len(spec.Limits) > 0 && spec.From != "":
		return nil, errors.New("give either --limit or --limit-from, not both")
	}
	out := make([]Limit, len(percentiles))
	if len(spec.Limits) > 0 {
		if len(spec.Limits) != 1 && len(spec.Limits) != len(percentiles) {
			return nil, fmt.Errorf("%d limits for %d percentiles: give one limit, or one per percentile in order", len(spec.Limits), len(percentiles))
		}
		for i, p := range percentiles {
			d := spec.Limits[0]
			if len(spec.Limits) > 1 {
				d = spec.Limits[i]
			}
			out[i] = Limit{Percentile: p, Ms: ms(d)}
		}
		return out, nil
	}
	pol, rate, err := ParseLimitFrom(spec.From)
	if err != nil {
		return nil, err
	}
	var src *Row
	for i := range rows {
		if rows[i].Policy == pol && rows[i].Rate == rate {
			src = &rows[i]
			break
		}
	}
	if src == nil {
		return nil, fmt.Errorf("limit source %s@%s is not among the results (measure that policy at that rate, or give --limit)", pol, FormatRate(rate))
	}
	if src.Failed(maxErrorRate) {
		return nil, fmt.Errorf("limit source %s@%s failed (%d of %d requests in error); choose another or give --limit", pol, FormatRate(rate), src.Errors, src.Requests)
	}
	for i, p := range percentiles {
		v, ok := src.PRT(p)
		if !ok {
			return nil, fmt.Errorf("percentile %v is not supported (choose from 50, 95, 99, 99.5)", p)
		}
		out[i] = Limit{Percentile: p, Ms: v, From: pol + "@" + FormatRate(rate)}
	}
	return out, nil
}

// Capacities computes every policy's capacity for every limit, policies in
// order of first appearance in rows. Rows failing maxErrorRate count as
// over the limit.
func Capacities(rows []Row, limits []Limit, maxErrorRate float64) ([]Capacity, error) {
	var out []Capacity
	for _, pol := range Policies(rows) {
		for _, l := range limits {
			var pts []stats.Point
			for _, r := range rows {
				if r.Policy != pol {
					continue
				}
				v, ok := r.PRT(l.Percentile)
				if !ok {
					return nil, fmt.Errorf("percentile %v is not supported (choose from 50, 95, 99, 99.5)", l.Percentile)
				}
				if r.Failed(maxErrorRate) {
					v = math.Inf(1)
				}
				pts = append(pts, stats.Point{Rate: r.Rate, PRTMs: v})
			}
			rate, bound, err := stats.CapacityAt(pts, l.Ms)
			if err != nil {
				return nil, fmt.Errorf("policy %s: %w", pol, err)
			}
			out = append(out, Capacity{Policy: pol, Percentile: l.Percentile, LimitMs: l.Ms, Rate: rate, Bound: bound})
		}
	}
	return out, nil
}

// Policies lists the policies in rows in order of first appearance.
func Policies(rows []Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Policy] {
			seen[r.Policy] = true
			out = append(out, r.Policy)
		}
	}
	return out
}

// Rates lists the distinct rates in rows, ascending.
func Rates(rows []Row) []float64 {
	seen := map[float64]bool{}
	var out []float64
	for _, r := range rows {
		if !seen[r.Rate] {
			seen[r.Rate] = true
			out = append(out, r.Rate)
		}
	}
	sort.Float64s(out)
	return out
}
