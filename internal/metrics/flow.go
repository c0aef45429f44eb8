package metrics

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Flow statistics (paper 002): for every edge a request crosses (client →
// node, node → app, node → peer and peer → node), how many requests and how
// many body bytes, and for moves between nodes how long the hand-off takes
// by body size. docs/observability.md lists the families.

// More label names of the flow families.
const (
	labelEdge = "edge"
	labelBody = "body"
	labelSize = "size"
)

// Edge is a flow edge as this node sees it: the "edge" label of the body
// size histograms.
type Edge string

// Flow edges.
const (
	// EdgeClient: a client's request to this node and the answer it got.
	EdgeClient Edge = "client"
	// EdgeApp: a request this node's app served (local or transferred in)
	// and the app's answer.
	EdgeApp Edge = "app"
	// EdgeTransferOut: a request this node moved to a peer and the answer
	// the peer streamed back.
	EdgeTransferOut Edge = "transfer_out"
	// EdgeTransferIn: a request a peer moved here and the answer sent back.
	EdgeTransferIn Edge = "transfer_in"
)

// Edges lists every flow edge.
var Edges = []Edge{EdgeClient, EdgeApp, EdgeTransferOut, EdgeTransferIn}

// Body says which body a byte count is of: swd_transfer_bytes_total's
// "body" label.
type Body string

// Bodies.
const (
	BodyRequest  Body = "request"
	BodyResponse Body = "response"
)

// BodyKinds lists both bodies.
var BodyKinds = []Body{BodyRequest, BodyResponse}

// SizeClass is a request body's size class: the "size" label of
// swd_transfer_handoff_seconds. Each class holds the bodies larger than
// the previous class's bound and at most its own (SizeClassBytes).
type SizeClass string

// Size classes, by their upper bound.
const (
	Size4KiB   SizeClass = "4KiB"
	Size64KiB  SizeClass = "64KiB"
	Size1MiB   SizeClass = "1MiB"
	SizeLarger SizeClass = "larger"
)

// SizeClasses lists the classes, smallest first; SizeClassBytes holds each
// one's upper bound in bytes (the last is unbounded).
var (
	SizeClasses    = []SizeClass{Size4KiB, Size64KiB, Size1MiB, SizeLarger}
	SizeClassBytes = []int64{4 << 10, 64 << 10, 1 << 20, math.MaxInt64}
)

// ClassOf returns the size class of a body of n bytes.
func ClassOf(n int64) SizeClass {
	for i, b := range SizeClassBytes {
		if n <= b {
			return SizeClasses[i]
		}
	}
	return SizeLarger
}

// bodyBuckets cover bodies from 256 bytes to 16 MiB, x16 per bucket: few
// series per edge (every node exports 8 of these histograms).
var bodyBuckets = prometheus.ExponentialBuckets(256, 16, 5)

// flowFamilies are the flow metric families.
type flowFamilies struct {
	reqBytes, respBytes *prometheus.HistogramVec
	transferBytes       *prometheus.CounterVec
	handoff             *prometheus.HistogramVec
}

func newFlowFamilies(reg *prometheus.Registry) *flowFamilies {
	f := &flowFamilies{
		reqBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swd_request_body_bytes",
			Help:    "Request body sizes per flow edge (client, app, transfer_out, transfer_in); the count is the edge's requests.",
			Buckets: bodyBuckets,
		}, []string{labelEdge}),
		respBytes: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swd_response_body_bytes",
			Help:    "Response body sizes per flow edge (client, app, transfer_out, transfer_in).",
			Buckets: bodyBuckets,
		}, []string{labelEdge}),
		transferBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_transfer_bytes_total",
			Help: "Body bytes of transferred requests and their answers, by direction (out, in), peer node and body (request, response).",
		}, []string{labelDirection, labelPeer, labelBody}),
		handoff: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swd_transfer_handoff_seconds",
			Help:    "Outgoing transfers: from the policy's decision until the peer has queued the request, as this node learns it, by request body size class.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 7), // 0.5 ms to 2 s
		}, []string{labelSize}),
	}
	reg.MustRegister(f.reqBytes, f.respBytes, f.transferBytes, f.handoff)
	for _, e := range Edges {
		f.reqBytes.WithLabelValues(string(e))
		f.respBytes.WithLabelValues(string(e))
	}
	for _, c := range SizeClasses {
		f.handoff.WithLabelValues(string(c))
	}
	return f
}

// ObserveFlow records one request crossing the client or app edge (e) with
// its request and response body sizes in bytes.
func (m *Metrics) ObserveFlow(e Edge, req, resp int64) {
	m.flow.reqBytes.WithLabelValues(string(e)).Observe(float64(max(req, 0)))
	m.flow.respBytes.WithLabelValues(string(e)).Observe(float64(max(resp, 0)))
}

// TransferFlow records the bodies of one transfer with peer in direction
// d: the edge's size histograms and the peer's byte counters. peer must be
// a cluster member's name, as for TransferOut and TransferIn.
func (m *Metrics) TransferFlow(d Direction, peer string, req, resp int64) {
	req, resp = max(req, 0), max(resp, 0)
	e := EdgeTransferOut
	if d == DirIn {
		e = EdgeTransferIn
	}
	m.flow.reqBytes.WithLabelValues(string(e)).Observe(float64(req))
	m.flow.respBytes.WithLabelValues(string(e)).Observe(float64(resp))
	m.flow.transferBytes.WithLabelValues(string(d), peer, string(BodyRequest)).Add(float64(req))
	m.flow.transferBytes.WithLabelValues(string(d), peer, string(BodyResponse)).Add(float64(resp))
}

// ObserveHandoff records how long an outgoing transfer of a request with a
// body of bodyBytes took from the policy's decision until the peer had
// queued it.
func (m *Metrics) ObserveHandoff(bodyBytes int64, d time.Duration) {
	m.flow.handoff.WithLabelValues(string(ClassOf(bodyBytes))).Observe(d.Seconds())
}

// SetPeers makes the per-peer series of every member in peers exist (at
// zero until their first event, so rate() and sums work on a fresh node)
// and deletes those of peers that are no longer members, keeping the
// label bounded by the membership. The "unknown" peer of unroutable
// hand-offs is kept. peers are member names, never request data.
func (m *Metrics) SetPeers(peers []string) {
	keep := map[string]bool{unknownPeer: true}
	for _, p := range peers {
		keep[p] = true
		for _, d := range []Direction{DirOut, DirIn} {
			for _, o := range TransferOutcomes {
				m.transfers.WithLabelValues(string(d), p, string(o))
			}
			for _, b := range BodyKinds {
				m.flow.transferBytes.WithLabelValues(string(d), p, string(b))
			}
		}
	}
	for _, vec := range []*prometheus.CounterVec{m.transfers, m.flow.transferBytes} {
		gone := map[string]bool{}
		collect(vec, func(l map[string]string, _ uint64) {
			if !keep[l[labelPeer]] {
				gone[l[labelPeer]] = true
			}
		})
		for p := range gone {
			vec.DeletePartialMatch(prometheus.Labels{labelPeer: p})
		}
	}
}

// Histogram is a histogram series read back: cumulative counts per upper
// bound (the last bound is +Inf), their total and sum.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// Quantile estimates the q-quantile (0 < q < 1) of the observations
// between an earlier reading prev (zero value: none) and h, as PromQL's
// histogram_quantile does on a rate: linear within the bucket that holds
// the rank, the lower bound of the first bucket taken as 0, and the last
// finite bound returned for ranks in the +Inf bucket. It returns 0 when
// nothing was observed in between.
func (h Histogram) Quantile(q float64, prev Histogram) float64 {
	n := len(h.Counts)
	if n == 0 || len(h.Bounds) != n {
		return 0
	}
	delta := func(i int) float64 {
		c := float64(h.Counts[i])
		if len(prev.Counts) == n {
			c -= float64(prev.Counts[i])
		}
		return c
	}
	total := delta(n - 1)
	if total <= 0 {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i := range n {
		c := delta(i)
		if c >= rank {
			if math.IsInf(h.Bounds[i], 1) {
				return lower
			}
			inBucket := c - below
			if inBucket <= 0 {
				return h.Bounds[i]
			}
			return lower + (h.Bounds[i]-lower)*(rank-below)/inBucket
		}
		lower, below = h.Bounds[i], c
	}
	return lower
}

// TransferBytes is one swd_transfer_bytes_total series.
type TransferBytes struct {
	Direction Direction
	Peer      string
	Body      Body
	Bytes     uint64
}

// HandoffSum is the count and total seconds of the hand-offs of one body
// size class (swd_transfer_handoff_seconds).
type HandoffSum struct {
	Count   uint64
	Seconds float64
}

// FlowSnapshot is the flow families' current values (see Snapshot).
type FlowSnapshot struct {
	// Latency is swd_request_duration_seconds.
	Latency Histogram
	// Requests counts the requests that crossed each edge (the count of
	// swd_request_body_bytes).
	Requests map[Edge]uint64
	// Bytes holds every swd_transfer_bytes_total series, zero included.
	Bytes []TransferBytes
	// Handoff holds every size class.
	Handoff map[SizeClass]HandoffSum
}

// flowSnapshot reads the flow families.
func (m *Metrics) flowSnapshot() FlowSnapshot {
	s := FlowSnapshot{Requests: map[Edge]uint64{}, Handoff: map[SizeClass]HandoffSum{}}
	collectHistograms(m.requestDuration, func(_ map[string]string, h Histogram) { s.Latency = h })
	collectHistograms(m.flow.reqBytes, func(l map[string]string, h Histogram) { s.Requests[Edge(l[labelEdge])] = h.Count })
	collectHistograms(m.flow.handoff, func(l map[string]string, h Histogram) {
		s.Handoff[SizeClass(l[labelSize])] = HandoffSum{Count: h.Count, Seconds: h.Sum}
	})
	collect(m.flow.transferBytes, func(l map[string]string, v uint64) {
		s.Bytes = append(s.Bytes, TransferBytes{Direction: Direction(l[labelDirection]), Peer: l[labelPeer], Body: Body(l[labelBody]), Bytes: v})
	})
	return s
}

// collectHistograms calls f with the labels and reading of every series of
// a histogram family.
func collectHistograms(c prometheus.Collector, f func(labels map[string]string, h Histogram)) {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil || d.GetHistogram() == nil {
			continue
		}
		labels := make(map[string]string, len(d.GetLabel()))
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		dh := d.GetHistogram()
		h := Histogram{Count: dh.GetSampleCount(), Sum: dh.GetSampleSum()}
		for _, b := range dh.GetBucket() {
			h.Bounds = append(h.Bounds, b.GetUpperBound())
			h.Counts = append(h.Counts, b.GetCumulativeCount())
		}
		h.Bounds = append(h.Bounds, math.Inf(1))
		h.Counts = append(h.Counts, h.Count)
		f(labels, h)
	}
}
