// Package metrics owns the daemon's Prometheus registry and every metric
// family SWD exports. Names and units follow Prometheus conventions; label
// values are bounded (outcomes, directions and peer node names, never
// request paths).
//
// Concurrency: all methods are safe for concurrent use; gauges that mirror
// live state are read through callbacks at scrape time.
package metrics

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Request outcomes, the values of swd_requests_total's "outcome" label.
const (
	OutcomeLocal      = "served_local"
	OutcomeRemote     = "served_remote"
	OutcomeRejected   = "rejected"
	OutcomeTimedOut   = "timed_out"
	OutcomeClientGone = "client_gone"
	OutcomeFailed     = "failed"
)

// Transfer directions and outcomes for swd_transfers_total.
const (
	DirOut = "out"
	DirIn  = "in"

	TransferOK       = "ok"
	TransferRefused  = "refused"
	TransferFailed   = "failed"
	TransferRetried  = "retried_locally"
	TransferRejected = "rejected"
)

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
}

// Metrics holds the daemon's registry and metric families.
type Metrics struct {
	Registry *prometheus.Registry

	Requests         *prometheus.CounterVec
	RequestDuration  prometheus.Histogram
	QueueWait        prometheus.Histogram
	Transfers        *prometheus.CounterVec
	TransferDuration *prometheus.HistogramVec
	PolicyInfo       *prometheus.GaugeVec
	Rejections       *prometheus.CounterVec
	NodeInfo         *prometheus.GaugeVec
}

// Rejection reasons, the values of swd_rejections_total's "reason" label.
var RejectionReasons = []string{
	"queue_full", "queue_timeout", "overloaded", "draining", "body_too_large",
	"bad_request", "transfer_failed", "connect", "no_backend", "refused", "other",
}

// Outcomes lists every swd_requests_total outcome.
var Outcomes = []string{OutcomeLocal, OutcomeRemote, OutcomeRejected, OutcomeTimedOut, OutcomeClientGone, OutcomeFailed}

// New builds a registry with every SWD family plus the Go and process
// collectors. live may have nil fields (those gauges then read 0).
func New(live Live) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_requests_total",
			Help: "Client requests finished, by outcome (served_local, served_remote, rejected, timed_out, client_gone, failed).",
		}, []string{"outcome"}),
		RequestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swd_request_duration_seconds",
			Help:    "Time from a client request's arrival to its answer.",
			Buckets: prometheus.ExponentialBucketsRange(0.0005, 60, 20),
		}),
		QueueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "swd_queue_wait_seconds",
			Help:    "Time requests waited in this node's queue before the app took them.",
			Buckets: prometheus.ExponentialBucketsRange(0.0001, 60, 20),
		}),
		Transfers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_transfers_total",
			Help: "Requests transferred between nodes, by direction (out, in), peer node and outcome.",
		}, []string{"direction", "peer", "outcome"}),
		TransferDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "swd_transfer_duration_seconds",
			Help:    "Duration of outgoing transfers, from hand-off to the end of the peer's answer.",
			Buckets: prometheus.ExponentialBucketsRange(0.0002, 60, 20),
		}, []string{"outcome"}),
		PolicyInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swd_policy_info",
			Help: "The policy this node runs: 1 for the current policy and epoch.",
		}, []string{"policy", "epoch"}),
		NodeInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "swd_node_info",
			Help: "Always 1, labelled with this daemon's node name, role and version.",
		}, []string{"node", "role", "version"}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_rejections_total",
			Help: "Requests answered with an error before reaching the app, by reason.",
		}, []string{"reason"}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		if f == nil {
			f = func() float64 { return 0 }
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	reg.MustRegister(
		m.Requests, m.RequestDuration, m.QueueWait, m.Transfers, m.TransferDuration,
		m.PolicyInfo, m.Rejections, m.NodeInfo,
		gauge("swd_concurrency", "m: the most requests this node's app serves at once.", live.Concurrency),
		&droppedCollector{f: live.GossipDropped},
		gauge("swd_queue_length", "Requests waiting in this node's queue.", live.QueueLength),
		gauge("swd_in_flight", "Requests this node's app is serving.", live.InFlight),
		gauge("swd_cluster_members", "Alive cluster members this node sees, itself included.", live.Members),
		&ageCollector{f: live.ViewAges},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	// Create the known label values up front so sums and rates read 0, not
	// "no data", before the first event.
	for _, o := range Outcomes {
		m.Requests.WithLabelValues(o)
	}
	for _, r := range RejectionReasons {
		m.Rejections.WithLabelValues(r)
	}
	for _, o := range []string{TransferOK, TransferRefused, TransferFailed, TransferRetried} {
		m.TransferDuration.WithLabelValues(o)
	}
	return m
}

// SetNodeInfo records the node's name, role and version in swd_node_info.
func (m *Metrics) SetNodeInfo(node, role, version string) {
	m.NodeInfo.Reset()
	m.NodeInfo.WithLabelValues(node, role, version).Set(1)
}

// SetPolicy records the current policy in swd_policy_info.
func (m *Metrics) SetPolicy(name string, epoch int64) {
	m.PolicyInfo.Reset()
	m.PolicyInfo.WithLabelValues(name, strconv.FormatInt(epoch, 10)).Set(1)
}

// ObserveRequest counts a finished client request.
func (m *Metrics) ObserveRequest(outcome string, d time.Duration) {
	m.Requests.WithLabelValues(outcome).Inc()
	m.RequestDuration.Observe(d.Seconds())
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
