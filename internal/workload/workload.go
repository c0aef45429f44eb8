// Package workload generates the paper's workloads (section 4.1.2 of the
// source paper; docs/algorithms.md): request sizes (service times)
// drawn from a lognormal distribution with a given mean and SD/mean, arriving
// as a Poisson process one at a time or in bursts. The load generator and the
// simulator draw from this same code, so a seed gives both the same requests.
//
// Concurrency: a Spec is a value; a Generator is not safe for concurrent use
// (give each goroutine its own, or guard it).
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Spec describes a workload.
type Spec struct {
	// Name is the preset's name, or "custom".
	Name string `json:"name"`
	// MeanMs is the mean request size (service time) in milliseconds.
	MeanMs float64 `json:"mean_ms"`
	// CV is the lognormal's standard deviation divided by its mean; 0 gives
	// every request exactly MeanMs.
	CV float64 `json:"cv"`
	// Burst is how many requests arrive together; bursts arrive as a
	// Poisson process at rate/Burst. 1 is plain Poisson arrivals.
	Burst int `json:"burst"`
	// Scale multiplies every request size (0.5 halves them), for shorter
	// runs on a scaled-up rate. 1 is the paper's sizes.
	Scale float64 `json:"scale"`
	// Exponential, when true, draws sizes from an exponential distribution
	// with mean MeanMs instead of the lognormal (CV is then 1); used for
	// queueing sanity checks (M/M/n).
	Exponential bool `json:"exponential,omitempty"`
}

// The paper's three workloads.
var presets = map[string]Spec{
	"standard":  {Name: "standard", MeanMs: 40, CV: 2.16, Burst: 1, Scale: 1},
	"dispersed": {Name: "dispersed", MeanMs: 40, CV: 3.06, Burst: 1, Scale: 1},
	"burst":     {Name: "burst", MeanMs: 40, CV: 3.06, Burst: 4, Scale: 1},
}

// Presets lists the preset names, sorted.
func Presets() []string {
	out := make([]string, 0, len(presets))
	for k := range presets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Lookup returns the named preset.
func Lookup(name string) (Spec, error) {
	s, ok := presets[name]
	if !ok {
		return Spec{}, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(Presets(), ", "))
	}
	return s, nil
}

// Validate reports the first problem with s.
func (s Spec) Validate() error {
	switch {
	case !(s.MeanMs > 0) || math.IsInf(s.MeanMs, 0):
		return fmt.Errorf("workload mean must be a positive number of ms, got %v", s.MeanMs)
	case s.CV < 0 || math.IsNaN(s.CV) || math.IsInf(s.CV, 0):
		return fmt.Errorf("workload SD/mean must be a non-negative number, got %v", s.CV)
	case s.Burst < 1:
		return fmt.Errorf("workload burst size must be at least 1, got %d", s.Burst)
	case !(s.Scale > 0) || math.IsInf(s.Scale, 0):
		return fmt.Errorf("workload scale must be positive, got %v", s.Scale)
	}
	return nil
}

// MeanServiceMs is the mean size after scaling.
func (s Spec) MeanServiceMs() float64 { return s.MeanMs * s.Scale }

// String describes the workload in one line.
func (s Spec) String() string {
	return fmt.Sprintf("%s (mean %.4gms, SD/mean %.3g, burst %d, scale %.3g)", s.Name, s.MeanMs, s.CV, s.Burst, s.Scale)
}

// Arrival is one request of a workload.
type Arrival struct {
	// At is the arrival time as an offset from the start of the run.
	At time.Duration
	// SizeMs is the request's service time in milliseconds.
	SizeMs float64
}

// Generator draws a workload's arrivals in time order.
type Generator struct {
	spec     Spec
	rate     float64 // requests per second
	rng      *rand.Rand
	mu, sig  float64 // lognormal parameters
	now      float64 // seconds, time of the current burst
	leftover int     // requests left in the current burst
}

// NewGenerator returns a generator of spec at rate requests per second,
// seeded for reproducibility.
func NewGenerator(spec Spec, rate float64, seed uint64) (*Generator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if !(rate > 0) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("rate must be a positive number of requests per second, got %v", rate)
	}
	sig2 := math.Log1p(spec.CV * spec.CV)
	g := &Generator{
		spec: spec,
		rate: rate,
		rng:  rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		sig:  math.Sqrt(sig2),
	}
	g.mu = math.Log(spec.MeanMs*spec.Scale) - sig2/2
	return g, nil
}

// Size draws one request size in milliseconds.
func (g *Generator) Size() float64 {
	if g.spec.Exponential {
		return g.rng.ExpFloat64() * g.spec.MeanMs * g.spec.Scale
	}
	if g.sig == 0 {
		return g.spec.MeanMs * g.spec.Scale
	}
	return math.Exp(g.mu + g.sig*g.rng.NormFloat64())
}

// Next returns the next arrival. Requests of one burst share an arrival time.
func (g *Generator) Next() Arrival {
	if g.leftover == 0 {
		burstRate := g.rate / float64(g.spec.Burst)
		g.now += g.rng.ExpFloat64() / burstRate
		g.leftover = g.spec.Burst
	}
	g.leftover--
	return Arrival{At: time.Duration(g.now * float64(time.Second)), SizeMs: g.Size()}
}
