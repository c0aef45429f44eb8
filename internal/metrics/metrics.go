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
	GossipDropped    *prometheus.CounterVec
	Rejections       *prometheus.CounterVec
}

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
		GossipDropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "swd_gossip_dropped_total",
			Help: "Gossip messages dropped, by reason.",
		}, []string{"reason"}),
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
		m.PolicyInfo, m.GossipDropped, m.Rejections,
		gauge("swd_queue_length", "Requests waiting in this node's queue.", live.QueueLength),
		gauge("swd_in_flight", "Requests this node's app is serving.", live.InFlight),
		gauge("swd_cluster_members", "Alive cluster members this node sees, itself included.", live.Members),
		&ageCollector{f: live.ViewAges},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
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
