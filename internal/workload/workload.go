// Package workload generates the paper's workloads (section 4.1.2 of the
// source paper; docs/algorithms.md): request sizes (service times)
// drawn from a lognormal distribution with a given mean and SD/mean, arriving
// as a Poisson process one at a time or in bursts. The load generator and the
// simulator draw from this same code, so a seed gives both the same requests.
//
// A workload may also be a mix of classes (routes) of different sizes, such
// as the preset "mixed" (90 % light 10 ms, 10 % heavy 310 ms, mean 40 ms):
// each arrival then draws its class by share, and its size from the class.
// The load generator sends class k to its own path (dummyapp's
// /work/NAME), so swd learns one cost per class.
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
	// Classes, when set, makes the workload a mix: each arrival is of
	// class k with probability Classes[k].Share and its size is drawn from
	// that class (CV and Exponential above are then unused, and MeanMs
	// must be the classes' mean, sum of Share × MeanMs).
	Classes []Class `json:"classes,omitempty"`
}

// Class is one kind of request of a mixed workload (a route).
type Class struct {
	// Name is the class's route name: the load generator sends it to
	// /work/NAME. Lower-case letters, digits and dashes.
	Name string `json:"name"`
	// Share is the fraction of arrivals of this class, in (0, 1].
	Share float64 `json:"share"`
	// MeanMs is the class's mean size in milliseconds.
	MeanMs float64 `json:"mean_ms"`
	// CV is the class's lognormal SD/mean; 0 gives every request of the
	// class exactly MeanMs.
	CV float64 `json:"cv"`
}

// The paper's three workloads.
// The paper's three workloads, and "mixed" (two routes of different sizes,
// the work load index's test case: paper 003).
var presets = map[string]Spec{
	"standard":  {Name: "standard", MeanMs: 40, CV: 2.16, Burst: 1, Scale: 1},
	"dispersed": {Name: "dispersed", MeanMs: 40, CV: 3.06, Burst: 1, Scale: 1},
	"burst":     {Name: "burst", MeanMs: 40, CV: 3.06, Burst: 4, Scale: 1},
	"mixed": {Name: "mixed", MeanMs: 40, Burst: 1, Scale: 1, Classes: []Class{
		{Name: "light", Share: 0.9, MeanMs: 10},
		{Name: "heavy", Share: 0.1, MeanMs: 310},
	}},
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

// Lookup returns the named preset (a copy: changing it changes no preset).
func Lookup(name string) (Spec, error) {
	s, ok := presets[name]
	if !ok {
		return Spec{}, fmt.Errorf("unknown workload %q (known: %s)", name, strings.Join(Presets(), ", "))
	}
	s.Classes = append([]Class(nil), s.Classes...)
	return s, nil
}

// maxClasses bounds a mix (each class is a route of its own).
const maxClasses = 64

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
	return s.validateClasses()
}

func (s Spec) validateClasses() error {
	if len(s.Classes) == 0 {
		return nil
	}
	if len(s.Classes) > maxClasses {
		return fmt.Errorf("workload has %d classes, at most %d", len(s.Classes), maxClasses)
	}
	seen := map[string]bool{}
	share, mean := 0.0, 0.0
	for _, c := range s.Classes {
		switch {
		case !validClassName(c.Name):
			return fmt.Errorf("workload class name %q: want 1-32 lower-case letters, digits or dashes", c.Name)
		case seen[c.Name]:
			return fmt.Errorf("workload class %q appears twice", c.Name)
		case !(c.Share > 0 && c.Share <= 1):
			return fmt.Errorf("workload class %q: share must be in (0, 1], got %v", c.Name, c.Share)
		case !(c.MeanMs > 0) || math.IsInf(c.MeanMs, 0):
			return fmt.Errorf("workload class %q: mean must be a positive number of ms, got %v", c.Name, c.MeanMs)
		case c.CV < 0 || math.IsNaN(c.CV) || math.IsInf(c.CV, 0):
			return fmt.Errorf("workload class %q: SD/mean must be a non-negative number, got %v", c.Name, c.CV)
		}
		seen[c.Name] = true
		share += c.Share
		mean += c.Share * c.MeanMs
	}
	if math.Abs(share-1) > 1e-9 {
		return fmt.Errorf("workload class shares must add up to 1, got %v", share)
	}
	if math.Abs(mean-s.MeanMs) > 1e-6*s.MeanMs {
		return fmt.Errorf("workload mean %v ms is not its classes' mean %v ms", s.MeanMs, mean)
	}
	return nil
}

func validClassName(n string) bool {
	if n == "" || len(n) > 32 {
		return false
	}
	for _, r := range n {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}

// MeanServiceMs is the mean size after scaling.
func (s Spec) MeanServiceMs() float64 { return s.MeanMs * s.Scale }

// String describes the workload in one line.
func (s Spec) String() string {
	if len(s.Classes) > 0 {
		parts := make([]string, len(s.Classes))
		for i, c := range s.Classes {
			parts[i] = fmt.Sprintf("%.3g%% %s %.4gms", c.Share*100, c.Name, c.MeanMs)
			if c.CV > 0 {
				parts[i] += fmt.Sprintf(" SD/mean %.3g", c.CV)
			}
		}
		return fmt.Sprintf("%s (%s; mean %.4gms, burst %d, scale %.3g)", s.Name, strings.Join(parts, ", "), s.MeanMs, s.Burst, s.Scale)
	}
	return fmt.Sprintf("%s (mean %.4gms, SD/mean %.3g, burst %d, scale %.3g)", s.Name, s.MeanMs, s.CV, s.Burst, s.Scale)
}

// Arrival is one request of a workload.
type Arrival struct {
	// At is the arrival time as an offset from the start of the run.
	At time.Duration
	// SizeMs is the request's service time in milliseconds.
	SizeMs float64
	// Class is the request's index in Spec.Classes (0 without classes).
	Class int
}

// Generator draws a workload's arrivals in time order.
type Generator struct {
	spec     Spec
	rate     float64 // requests per second
	rng      *rand.Rand
	mu, sig  float64 // lognormal parameters
	now      float64 // seconds, time of the current burst
	leftover int     // requests left in the current burst
	classes  []classGen
}

// classGen draws one class's sizes.
type classGen struct {
	cum     float64 // cumulative share up to and including this class
	meanMs  float64 // scaled
	mu, sig float64 // lognormal parameters; sig 0: every size is meanMs
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
	cum := 0.0
	for _, c := range spec.Classes {
		cum += c.Share
		s2 := math.Log1p(c.CV * c.CV)
		m := c.MeanMs * spec.Scale
		g.classes = append(g.classes, classGen{cum: cum, meanMs: m, sig: math.Sqrt(s2), mu: math.Log(m) - s2/2})
	}
	return g, nil
}

// size draws one request's size and class.
func (g *Generator) size() (float64, int) {
	if len(g.classes) > 0 {
		u := g.rng.Float64()
		k := len(g.classes) - 1
		for i, c := range g.classes {
			if u < c.cum {
				k = i
				break
			}
		}
		c := g.classes[k]
		if c.sig == 0 {
			return c.meanMs, k
		}
		return math.Exp(c.mu + c.sig*g.rng.NormFloat64()), k
	}
	return g.plainSize(), 0
}

func (g *Generator) plainSize() float64 {
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
	ms, class := g.size()
	return Arrival{At: time.Duration(g.now * float64(time.Second)), SizeMs: ms, Class: class}
}
