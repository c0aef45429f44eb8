package loadgen

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/stats"
)

// Row is one measured (policy, rate) point: one line of the results CSV.
// Response times are in milliseconds; a statistic with no successful
// request to compute it from is NaN (written as NaN in CSV, null in JSON).
type Row struct {
	Policy   string  `json:"policy"`
	Rate     float64 `json:"rate"`
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	MeanMs   float64 `json:"mean_ms"`
	P50Ms    float64 `json:"p50_ms"`
	P95Ms    float64 `json:"p95_ms"`
	P99Ms    float64 `json:"p99_ms"`
	P995Ms   float64 `json:"p995_ms"`
}

// SupportedPercentiles are the percentiles a Row (and the CSV) holds.
var SupportedPercentiles = []float64{50, 95, 99, 99.5}

// PRT returns the row's p-th percentile response time in ms; ok is false
// when p is not one of SupportedPercentiles.
func (r Row) PRT(p float64) (ms float64, ok bool) {
	switch p {
	case 50:
		return r.P50Ms, true
	case 95:
		return r.P95Ms, true
	case 99:
		return r.P99Ms, true
	case 99.5:
		return r.P995Ms, true
	}
	return 0, false
}

// ErrorRate is Errors/Requests (0 for a row without requests).
func (r Row) ErrorRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Errors) / float64(r.Requests)
}

// Failed reports whether the row cannot stand for a response time: its
// error fraction exceeds maxErrorRate, or no request succeeded.
func (r Row) Failed(maxErrorRate float64) bool {
	return r.Requests == 0 || r.Errors >= r.Requests || r.ErrorRate() > maxErrorRate || math.IsNaN(r.MeanMs)
}

// rowJSON is a Row on the wire: statistics that are NaN are null.
type rowJSON struct {
	Policy   string   `json:"policy"`
	Rate     float64  `json:"rate"`
	Requests int      `json:"requests"`
	Errors   int      `json:"errors"`
	MeanMs   *float64 `json:"mean_ms"`
	P50Ms    *float64 `json:"p50_ms"`
	P95Ms    *float64 `json:"p95_ms"`
	P99Ms    *float64 `json:"p99_ms"`
	P995Ms   *float64 `json:"p995_ms"`
}

// MarshalJSON writes NaN statistics as null.
func (r Row) MarshalJSON() ([]byte, error) {
	return json.Marshal(rowJSON{r.Policy, r.Rate, r.Requests, r.Errors,
		finite(r.MeanMs), finite(r.P50Ms), finite(r.P95Ms), finite(r.P99Ms), finite(r.P995Ms)})
}

// UnmarshalJSON reads null statistics as NaN.
func (r *Row) UnmarshalJSON(b []byte) error {
	var v rowJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Row{Policy: v.Policy, Rate: v.Rate, Requests: v.Requests, Errors: v.Errors,
		MeanMs: orNaN(v.MeanMs), P50Ms: orNaN(v.P50Ms), P95Ms: orNaN(v.P95Ms), P99Ms: orNaN(v.P99Ms), P995Ms: orNaN(v.P995Ms)}
	return nil
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// Summarize builds a Row from the response times of the successful
// requests (in any order) and the counts. Percentiles are stats.Percentile's
// (linear interpolation between closest ranks), the simulator's definition
// too, so a simulated row and a measured one mean the same.
func Summarize(policy string, rate float64, requests, errors int, ok []time.Duration) Row {
	r := Row{Policy: policy, Rate: rate, Requests: requests, Errors: errors}
	v := make([]float64, len(ok))
	for i, d := range ok {
		v[i] = ms(d)
	}
	s := stats.Summarize(v)
	r.MeanMs, r.P50Ms, r.P95Ms, r.P99Ms, r.P995Ms = s.Mean, s.P50, s.P95, s.P99, s.P995
	return r
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// ParsePercentiles parses "95,99,99.5"; every value must be one of
// SupportedPercentiles. Duplicates are dropped; order is kept.
func ParsePercentiles(s string) ([]float64, error) {
	var out []float64
	seen := map[float64]bool{}
	for _, f := range splitList(s) {
		p, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return nil, fmt.Errorf("percentile %q is not a number (use e.g. 95,99,99.5)", f)
		}
		if _, ok := (Row{}).PRT(p); !ok {
			return nil, fmt.Errorf("percentile %v is not supported (choose from 50, 95, 99, 99.5)", p)
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no percentiles given (use e.g. 95,99,99.5)")
	}
	return out, nil
}

// ParseRates parses "40,120,200" into ascending, distinct positive rates.
func ParseRates(s string) ([]float64, error) {
	var out []float64
	for _, f := range splitList(s) {
		r, err := strconv.ParseFloat(f, 64)
		if err != nil || !(r > 0) || math.IsInf(r, 0) {
			return nil, fmt.Errorf("rate %q is not a positive number of requests per second (use e.g. 40,120,200)", f)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no rates given (use e.g. 40,120,200)")
	}
	sort.Float64s(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, fmt.Errorf("rate %v is listed twice", out[i])
		}
	}
	return out, nil
}

// PercentileName renders 95 as "95th" and 99.5 as "99.5th".
func PercentileName(p float64) string {
	return strconv.FormatFloat(p, 'f', -1, 64) + "th"
}

// FormatRate renders a rate without trailing zeros.
func FormatRate(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
