// Package flow turns a node's cumulative metrics into flow statistics over
// time (paper 002: per-edge event frequency and size between stages): once
// a second the daemon hands a Sampler a Reading (its metrics.Snapshot and
// live queue), and the Sampler keeps a bounded history of Samples (client
// requests per second, p50/p99 response time, app requests per second, and
// per peer and direction the transfers and bytes per second) and derives
// the hand-off cost per request body size class that the transfer-cost rule
// (policy.WorthMoving) uses. The /ui page and Control.Status read the
// history; no sample is taken from a clock here: the caller passes the time.
//
// Concurrency: a Sampler is safe for concurrent use; Tick is meant to be
// called from one goroutine, the readers from any. Samples handed out are
// copies the caller owns.
package flow

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
)

// Config configures a Sampler.
type Config struct {
	// History is how many samples are kept (one per Tick): at one Tick a
	// second, the last History seconds. Default 300 (5 minutes).
	History int
	// CostWindow is how far back the hand-off cost is averaged; a size
	// class with no hand-off in it falls back to its whole-life mean.
	// Default 1 minute.
	CostWindow time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{History: 300, CostWindow: time.Minute} }

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.History < 2 || c.History > 100_000:
		return fmt.Errorf("flow: history must be 2 to 100000 samples, got %d", c.History)
	case c.CostWindow <= 0:
		return fmt.Errorf("flow: cost window must be positive, got %s", c.CostWindow)
	}
	return nil
}

// Reading is what the daemon reads at a Tick.
type Reading struct {
	Metrics                      metrics.Snapshot
	Queue, InFlight, Concurrency int
}

// EdgeRate is the flow between the node and one peer in one direction
// during a sample's interval.
type EdgeRate struct {
	Peer      string            `json:"peer"`
	Direction metrics.Direction `json:"direction"`
	// PerSecond counts transfers with outcome ok, FailedPerSecond the
	// others (refused, failed, retried locally).
	PerSecond       float64 `json:"per_second"`
	FailedPerSecond float64 `json:"failed_per_second"`
	// BytesPerSecond is the request and response bodies carried.
	BytesPerSecond float64 `json:"bytes_per_second"`
	// Total is the transfers with outcome ok so far.
	Total uint64 `json:"total"`
}

// Sample is one interval of the node's flows.
type Sample struct {
	// At is the interval's end, Seconds its length.
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
	// Queue, InFlight and Concurrency are the node's at At.
	Queue       int `json:"queue"`
	InFlight    int `json:"in_flight"`
	Concurrency int `json:"concurrency"`
	// Requests is the client requests answered per second; P50 and P99
	// their response times in seconds (0 when none finished), estimated
	// from swd_request_duration_seconds' buckets as histogram_quantile.
	Requests float64 `json:"requests"`
	P50      float64 `json:"p50"`
	P99      float64 `json:"p99"`
	// App is the requests the node's app served per second.
	App float64 `json:"app"`
	// Edges holds every peer and direction with a series (members,
	// zero-rate ones included), sorted by direction and peer.
	Edges []EdgeRate `json:"edges"`
}

// Cost is the measured hand-off cost of one body size class.
type Cost struct {
	// MaxBytes bounds the class (metrics.SizeClassBytes).
	MaxBytes int64
	// Mean is the mean hand-off time; Samples how many hand-offs it is
	// of (0: none measured, Mean is 0).
	Mean    time.Duration
	Samples uint64
}

// mark is what a Tick keeps of a reading to difference the next against.
type mark struct {
	at      time.Time
	latency metrics.Histogram
	app     uint64
	answers uint64
	edges   map[edgeKey]edgeCount
	handoff map[metrics.SizeClass]metrics.HandoffSum
}

type edgeKey struct {
	peer string
	dir  metrics.Direction
}

type edgeCount struct{ ok, other, bytes uint64 }

// Sampler keeps a node's flow history.
type Sampler struct {
	cfg Config

	mu      sync.Mutex
	samples []Sample // ring, oldest at start when full
	start   int
	last    *mark
	marks   []mark // hand-off sums, oldest first, within CostWindow
}

// NewSampler returns a Sampler with no history.
func NewSampler(cfg Config) (*Sampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sampler{cfg: cfg}, nil
}

func newMark(at time.Time, r Reading) mark {
	m := mark{
		at: at, latency: r.Metrics.Flow.Latency, app: r.Metrics.Flow.Requests[metrics.EdgeApp],
		edges: map[edgeKey]edgeCount{}, handoff: r.Metrics.Flow.Handoff,
	}
	for _, v := range r.Metrics.Requests {
		m.answers += v
	}
	for _, t := range r.Metrics.Transfers {
		k := edgeKey{t.Peer, t.Direction}
		c := m.edges[k]
		if t.Outcome == metrics.TransferOK {
			c.ok += t.Count
		} else {
			c.other += t.Count
		}
		m.edges[k] = c
	}
	for _, b := range r.Metrics.Flow.Bytes {
		k := edgeKey{b.Peer, b.Direction}
		c := m.edges[k]
		c.bytes += b.Bytes
		m.edges[k] = c
	}
	return m
}

// rate is the per-second increase of a counter, 0 when it went down (a
// series pruned and made again).
func rate(now, before uint64, secs float64) float64 {
	if now < before || secs <= 0 {
		return 0
	}
	return float64(now-before) / secs
}

// Tick takes a reading at now and, from the second one on, appends the
// sample of the interval since the previous Tick. A Tick not after the
// previous one is ignored.
func (s *Sampler) Tick(now time.Time, r Reading) {
	cur := newMark(now, r)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.last
	if prev != nil && !now.After(prev.at) {
		return
	}
	s.last = &cur
	s.marks = append(s.marks, mark{at: now, handoff: cur.handoff})
	cut := 0
	for cut < len(s.marks)-1 && now.Sub(s.marks[cut+1].at) >= s.cfg.CostWindow {
		cut++
	}
	s.marks = slices.Delete(s.marks, 0, cut)
	if prev == nil {
		return
	}
	secs := now.Sub(prev.at).Seconds()
	smp := Sample{
		At: now, Seconds: secs, Queue: r.Queue, InFlight: r.InFlight, Concurrency: r.Concurrency,
		Requests: rate(cur.answers, prev.answers, secs),
		P50:      cur.latency.Quantile(0.5, prev.latency),
		P99:      cur.latency.Quantile(0.99, prev.latency),
		App:      rate(cur.app, prev.app, secs),
	}
	for k, c := range cur.edges {
		p := prev.edges[k]
		smp.Edges = append(smp.Edges, EdgeRate{
			Peer: k.peer, Direction: k.dir, Total: c.ok,
			PerSecond: rate(c.ok, p.ok, secs), FailedPerSecond: rate(c.other, p.other, secs),
			BytesPerSecond: rate(c.bytes, p.bytes, secs),
		})
	}
	sort.Slice(smp.Edges, func(i, j int) bool {
		a, b := smp.Edges[i], smp.Edges[j]
		if a.Direction != b.Direction {
			return a.Direction > b.Direction // out first
		}
		return a.Peer < b.Peer
	})
	if len(s.samples) < s.cfg.History {
		s.samples = append(s.samples, smp)
		return
	}
	s.samples[s.start] = smp
	s.start = (s.start + 1) % len(s.samples)
}

// Since returns the samples whose interval ended after t, oldest first
// (the zero time: all of them).
func (s *Sampler) Since(t time.Time) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sample
	for i := range s.samples {
		smp := s.samples[(s.start+i)%len(s.samples)]
		if smp.At.After(t) {
			smp.Edges = slices.Clone(smp.Edges)
			out = append(out, smp)
		}
	}
	return out
}

// Costs returns the measured hand-off cost of every size class, smallest
// first: the mean over the last CostWindow, else over the node's life,
// else none (Samples 0).
func (s *Sampler) Costs() []Cost {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Cost, len(metrics.SizeClasses))
	for i, cl := range metrics.SizeClasses {
		out[i].MaxBytes = metrics.SizeClassBytes[i]
		if s.last == nil {
			continue
		}
		now := s.last.handoff[cl]
		old := s.marks[0].handoff[cl]
		n, sum := now.Count-old.Count, now.Seconds-old.Seconds
		if now.Count < old.Count || n == 0 {
			n, sum = now.Count, now.Seconds
		}
		if n > 0 {
			out[i].Mean = time.Duration(sum / float64(n) * float64(time.Second))
			out[i].Samples = n
		}
	}
	return out
}

// TransferCost is the rule's input: service as given (the app's mean
// service time, measured by the caller), and the hand-off cost of every
// class measured so far. A class never measured takes the cost of the
// nearest smaller measured class (moving a body costs at least what a
// smaller one does; 0 when none is measured), so a request is never held
// back by a cost nobody measured.
func (s *Sampler) TransferCost(service time.Duration) policy.TransferCost {
	c := policy.TransferCost{Service: service}
	var known time.Duration
	for _, k := range s.Costs() {
		if k.Samples > 0 {
			known = k.Mean
		}
		c.Handoff = append(c.Handoff, policy.SizeCost{MaxBytes: k.MaxBytes, Cost: known})
	}
	return c
}
