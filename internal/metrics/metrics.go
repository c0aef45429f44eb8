// Package metrics owns the daemon's Prometheus registry and every metric
// family SWD exports. Names and units follow Prometheus conventions; label
// values are bounded (outcomes, directions and peer node names, never
// request paths). Code records through typed methods (ObserveRequest,
// Reject, TransferOut, ...) whose arguments are the label types below, so
// no caller spells a label order; Snapshot reads the counters back for
// swdctl status and the /ui page. flow.go holds the per-edge flow
// families (requests and body bytes per edge, hand-off time by body size),
// and SetPeers keeps the per-peer series to the current members.
//
// Concurrency: all methods are safe for concurrent use; gauges that mirror
// live state are read through callbacks at scrape time.
package metrics

import (
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// The label names of SWD's families. Snapshot reads series by these same
// names, so a renamed label cannot silently break swdctl status or /ui.
const (
	labelOutcome   = "outcome"
	labelDirection = "direction"
	labelPeer      = "peer"
	labelReason    = "reason"
)

// Outcome is how a client request finished: swd_requests_total's
// "outcome" label.
type Outcome string

// Request outcomes.
const (
	OutcomeLocal      Outcome = "served_local"
	OutcomeRemote     Outcome = "served_remote"
	OutcomeRejected   Outcome = "rejected"
	OutcomeTimedOut   Outcome = "timed_out"
	OutcomeClientGone Outcome = "client_gone"
	OutcomeFailed     Outcome = "failed"
)

// Outcomes lists every request outcome.
var Outcomes = []Outcome{OutcomeLocal, OutcomeRemote, OutcomeRejected, OutcomeTimedOut, OutcomeClientGone, OutcomeFailed}

// Direction is a transfer's direction: swd_transfers_total's "direction".
type Direction string

// Transfer directions.
const (
	DirOut Direction = "out"
	DirIn  Direction = "in"
)

// TransferOutcome is what became of a transfer: the "outcome" label of
// swd_transfers_total and swd_transfer_duration_seconds.
type TransferOutcome string

// Transfer outcomes.
const (
	TransferOK      TransferOutcome = "ok"
	TransferRefused TransferOutcome = "refused"
	TransferFailed  TransferOutcome = "failed"
	TransferRetried TransferOutcome = "retried_locally"
)

// TransferOutcomes lists every transfer outcome.
var TransferOutcomes = []TransferOutcome{TransferOK, TransferRefused, TransferFailed, TransferRetried}

// Reason is why a request was answered with an error before reaching the
// app: swd_rejections_total's "reason" label.
type Reason string

// Rejection reasons.
const (
	ReasonQueueFull      Reason = "queue_full"
	ReasonQueueTimeout   Reason = "queue_timeout"
	ReasonOverloaded     Reason = "overloaded"
	ReasonDraining       Reason = "draining"
	ReasonBodyTooLarge   Reason = "body_too_large"
	ReasonBadRequest     Reason = "bad_request"
	ReasonTransferFailed Reason = "transfer_failed"
	ReasonConnect        Reason = "connect"
	ReasonNoBackend      Reason = "no_backend"
	ReasonRefused        Reason = "refused"
	ReasonOther          Reason = "other"
)

// Reasons lists every rejection reason.
var Reasons = []Reason{
	ReasonQueueFull, ReasonQueueTimeout, ReasonOverloaded, ReasonDraining, ReasonBodyTooLarge,
	ReasonBadRequest, ReasonTransferFailed, ReasonConnect, ReasonNoBackend, ReasonRefused, ReasonOther,
}

// RejectionReasons lists every rejection reason as the label value it is.
var RejectionReasons = func() []string {
	out := make([]string, len(Reasons))
	for i, r := range Reasons {
		out[i] = string(r)
	}
	return out
}()

// unknownPeer is the peer label of a hand-off whose target left the view
// before it could be sent (see TransferUnroutable).
const unknownPeer = "unknown"

// Live reads state that gauges mirror at scrape time.
type Live struct {
	QueueLength func() float64
	InFlight    func() float64
	Members     func() float64
	// Concurrency is the node's m.
	Concurrency func() float64
	// GossipDropped returns the gossip messages dropped so far, by reason.
	GossipDropped func() map[string]float64
	// ViewAges returns each peer's entry age in seconds, by peer name.
	ViewAges func() map[string]float64
	// RouteCosts returns each learnt route's cost in seconds, by route
	// name (bounded: the route table's patterns and learnt routes, capped).
	RouteCosts func() map[string]float64
	// Work is the node's predicted work in seconds (internal/cost).
	Work func() float64
	// CohortPicks returns the cohort order's grants by class (nil: off).
	CohortPicks func() map[string]float64
}

// Metrics holds the daemon's registry and its metric families, which are
// recorded only through the typed methods below.
type Metrics struct {
	// Registry is what /metrics serves (Handler).
	Registry *prometheus.Registry

	requests         *prometheus.CounterVec
	requestDuration  prometheus.Histogram
	queueWait        prometheus.Histogram
	transfers        *prometheus.CounterVec
	transferDuration *prometheus.HistogramVec
	policyInfo       *prometheus.GaugeVec
	rejections       *prometheus.CounterVec
	nodeInfo         *prometheus.GaugeVec
	placements       *prometheus.CounterVec
	pulls            *prometheus.CounterVec
	pullIdle         *prometheus.HistogramVec
	flow             *flowFamilies
}

// New builds a registry with every SWD family plus the Go and process
// collectors. live may have nil fields (those gauges then read 0).
func New(live Live) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_requests_total",
			Help: "Client requests finished, by outcome (served_local, served_remote, rejected, timed_out, client_gone, failed).",
		}, []string{labelOutcome}),
		requestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swd_request_duration_seconds",
			Help:    "Time from a client request's arrival to its answer.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 60, 20),
		}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swd_queue_wait_seconds",
			Help:    "Time requests waited in this node's queue before the app took them.",
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 60, 20),
		}),
		transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_transfers_total",
			Help: "Requests transferred between nodes, by direction (out, in), peer node and outcome.",
		}, []string{labelDirection, labelPeer, labelOutcome}),
		transferDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swd_transfer_duration_seconds",
			Help:    "Duration of outgoing transfers, from hand-off to the end of the peer's answer.",
			Buckets: prometheus.ExponentialBucketsRange(0.0002, 60, 20),
		}, []string{labelOutcome}),
		policyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swd_policy_info",
			Help: "The policy this node runs: 1 for the current policy and epoch.",
		}, []string{"policy", "epoch"}),
		nodeInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swd_node_info",
			Help: "Always 1, labelled with this daemon's node name, role and version.",
		}, []string{"node", "role", "version"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_rejections_total",
			Help: "Requests answered with an error before reaching the app, by reason.",
		}, []string{labelReason}),
		placements: newPlacements(),
		pulls:      newPulls(),
		pullIdle:   newPullIdle(),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		if f == nil {
			f = func() float64 { return 0 }
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		m.requests, m.requestDuration, m.queueWait, m.transfers, m.transferDuration,
		m.policyInfo, m.rejections, m.nodeInfo,
		gauge("swd_concurrency", "m: the most requests this node's app serves at once.", live.Concurrency),
		&droppedCollector{f: live.GossipDropped},
		gauge("swd_queue_length", "Requests waiting in this node's queue.", live.QueueLength),
		gauge("swd_in_flight", "Requests this node's app is serving.", live.InFlight),
		gauge("swd_cluster_members", "Alive cluster members this node sees, itself included.", live.Members),
		&ageCollector{f: live.ViewAges},
		gauge("swd_work_seconds", "Predicted work this node holds: its waiting requests' learnt costs plus the predicted rest of those in service (the work load index).", live.Work),
		&routeCostCollector{f: live.RouteCosts},
		m.placements, m.pulls, m.pullIdle, &cohortCollector{f: live.CohortPicks},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Create the known label values up front so sums and rates read 0, not
	// "no data", before the first event.
	for _, o := range Outcomes {
		m.requests.WithLabelValues(string(o))
	}
	for _, r := range Reasons {
		m.rejections.WithLabelValues(string(r))
	}
	for _, o := range TransferOutcomes {
		m.transferDuration.WithLabelValues(string(o))
	}
	m.flow = newFlowFamilies(reg)
	return m
}

// SetNodeInfo records the node's name, role and version in swd_node_info.
func (m *Metrics) SetNodeInfo(node, role, version string) {
	m.nodeInfo.Reset()
	m.nodeInfo.WithLabelValues(node, role, version).Set(1)
}

// SetPolicy records the current policy in swd_policy_info.
func (m *Metrics) SetPolicy(name string, epoch int64) {
	m.policyInfo.Reset()
	m.policyInfo.WithLabelValues(name, strconv.FormatInt(epoch, 10)).Set(1)
}

// ObserveRequest counts a finished client request and its duration.
func (m *Metrics) ObserveRequest(o Outcome, d time.Duration) {
	m.requests.WithLabelValues(string(o)).Inc()
	m.requestDuration.Observe(d.Seconds())
}

// Reject counts a request answered with an error before reaching the app.
func (m *Metrics) Reject(r Reason) {
	m.rejections.WithLabelValues(string(r)).Inc()
}

// ObserveQueueWait records how long a request waited in this node's queue
// before the app took it.
func (m *Metrics) ObserveQueueWait(d time.Duration) {
	m.queueWait.Observe(d.Seconds())
}

// TransferOut counts one forward to peer (a node's transfer, a
// dispatcher's dispatch) under its outcome, and how long it took. peer must
// be a cluster member's name, never request data.
func (m *Metrics) TransferOut(peer string, o TransferOutcome, took time.Duration) {
	m.transfers.WithLabelValues(string(DirOut), peer, string(o)).Inc()
	m.transferDuration.WithLabelValues(string(o)).Observe(took.Seconds())
}

// TransferUnroutable counts a hand-off whose target left the view before
// it could be sent: refused (the request went back), peer "unknown", no
// duration (nothing was sent).
func (m *Metrics) TransferUnroutable() {
	m.transfers.WithLabelValues(string(DirOut), unknownPeer, string(TransferRefused)).Inc()
}

// TransferIn counts one request peer transferred to this node, under its
// outcome here. peer must be a member's name the transfer server admitted.
func (m *Metrics) TransferIn(peer string, o TransferOutcome) {
	m.transfers.WithLabelValues(string(DirIn), peer, string(o)).Inc()
}

// Snapshot is the counters' current values, for swdctl status and /ui.
type Snapshot struct {
	// Requests and Rejections hold every outcome and reason, zero included.
	Requests   map[Outcome]uint64
	Rejections map[Reason]uint64
	// Transfers holds every transfer series that saw an event, sorted by
	// direction, peer and outcome.
	Transfers []TransferCount
	// Flow holds the flow families (flow.go).
	Flow FlowSnapshot
	// Pulls holds swd_pulls_total by result, zero included.
	Pulls map[PullResult]uint64
}

// TransferCount is one swd_transfers_total series.
type TransferCount struct {
	Direction Direction
	Peer      string
	Outcome   TransferOutcome
	Count     uint64
}

// Snapshot reads the counters' current values. It is safe to call while
// they are being recorded; each value is read once, so a snapshot taken
// under traffic need not be consistent across counters.
func (m *Metrics) Snapshot() Snapshot {
	s := Snapshot{Requests: map[Outcome]uint64{}, Rejections: map[Reason]uint64{}, Pulls: map[PullResult]uint64{}}
	collect(m.pulls, func(l map[string]string, v uint64) { s.Pulls[PullResult(l["result"])] = v })
	collect(m.requests, func(l map[string]string, v uint64) { s.Requests[Outcome(l[labelOutcome])] = v })
	collect(m.rejections, func(l map[string]string, v uint64) { s.Rejections[Reason(l[labelReason])] = v })
	collect(m.transfers, func(l map[string]string, v uint64) {
		if v == 0 {
			return // a member's series made ahead of its first event (SetPeers)
		}
		s.Transfers = append(s.Transfers, TransferCount{
			Direction: Direction(l[labelDirection]), Peer: l[labelPeer], Outcome: TransferOutcome(l[labelOutcome]), Count: v,
		})
	})
	sort.Slice(s.Transfers, func(i, j int) bool {
		a, b := s.Transfers[i], s.Transfers[j]
		if a.Direction != b.Direction {
			return a.Direction < b.Direction
		}
		if a.Peer != b.Peer {
			return a.Peer < b.Peer
		}
		return a.Outcome < b.Outcome
	})
	s.Flow = m.flowSnapshot()
	return s
}

// collect calls f with the labels and value of every series of a counter
// family.
func collect(c prometheus.Collector, f func(labels map[string]string, v uint64)) {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		labels := make(map[string]string, len(d.GetLabel()))
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		f(labels, uint64(d.GetCounter().GetValue()))
	}
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

var droppedDesc = prometheus.NewDesc("swd_gossip_dropped_total",
	"Gossip messages dropped, by reason (malformed, foreign).", []string{"reason"}, nil)

type droppedCollector struct{ f func() map[string]float64 }

func (c *droppedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- droppedDesc }

func (c *droppedCollector) Collect(ch chan<- prometheus.Metric) {
	if c.f == nil {
		return
	}
	for reason, v := range c.f() {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, v, reason)
	}
}

var ageDesc = prometheus.NewDesc("swd_gossip_view_age_seconds",
	"Age of each peer's load entry in this node's view.", []string{"peer"}, nil)

type ageCollector struct{ f func() map[string]float64 }

func (c *ageCollector) Describe(ch chan<- *prometheus.Desc) { ch <- ageDesc }

func (c *ageCollector) Collect(ch chan<- prometheus.Metric) {
	if c.f == nil {
		return
	}
	for peer, age := range c.f() {
		ch <- prometheus.MustNewConstMetric(ageDesc, prometheus.GaugeValue, age, peer)
	}
}

var routeCostDesc = prometheus.NewDesc("swd_route_cost_seconds",
	"Learnt service time at the app of each route (SPLiT's statistic: mean, then moving average).", []string{"route"}, nil)

type routeCostCollector struct{ f func() map[string]float64 }

func (c *routeCostCollector) Describe(ch chan<- *prometheus.Desc) { ch <- routeCostDesc }

func (c *routeCostCollector) Collect(ch chan<- prometheus.Metric) {
	if c.f == nil {
		return
	}
	for route, v := range c.f() {
		ch <- prometheus.MustNewConstMetric(routeCostDesc, prometheus.GaugeValue, v, route)
	}
}
