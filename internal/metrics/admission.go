package metrics

import "github.com/prometheus/client_golang/prometheus"

// AdmissionLive reads admission control's state (--admission page|sqs,
// internal/admission) at scrape time.
type AdmissionLive struct {
	// RouteLimits returns each route's learnt limit, by route name
	// (bounded by the route table).
	RouteLimits func() map[string]float64
	// Sessions returns the session gate's state; ok is false without sqs.
	Sessions func() (SessionStats, bool)
}

// SessionStats is the session gate's state.
type SessionStats struct {
	// Admitted and Refused count new sessions.
	Admitted, Refused uint64
	// Queue is the new sessions waiting; Interval the session interval in
	// seconds.
	Queue    int
	Interval float64
}

var (
	routeLimitDesc = prometheus.NewDesc("swd_route_limit",
		"Learnt most requests of a route at the app at once (--admission page|sqs).", []string{"route"}, nil)
	sessionsDesc = prometheus.NewDesc("swd_sessions_total",
		"New sessions by result: admitted or refused (--admission sqs).", []string{"result"}, nil)
	sessionQueueDesc = prometheus.NewDesc("swd_session_queue_length",
		"New sessions waiting for admission (--admission sqs).", nil, nil)
	sessionIntervalDesc = prometheus.NewDesc("swd_session_interval_seconds",
		"The session interval: at most one new session is admitted per interval (--admission sqs).", nil, nil)
)

// RegisterAdmission adds the admission metrics to m's registry (once).
func (m *Metrics) RegisterAdmission(live AdmissionLive) {
	m.Registry.MustRegister(&admissionCollector{live: live})
}

type admissionCollector struct{ live AdmissionLive }

func (c *admissionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- routeLimitDesc
	ch <- sessionsDesc
	ch <- sessionQueueDesc
	ch <- sessionIntervalDesc
}

func (c *admissionCollector) Collect(ch chan<- prometheus.Metric) {
	if c.live.RouteLimits != nil {
		for r, v := range c.live.RouteLimits() {
			ch <- prometheus.MustNewConstMetric(routeLimitDesc, prometheus.GaugeValue, v, r)
		}
	}
	if c.live.Sessions == nil {
		return
	}
	if s, ok := c.live.Sessions(); ok {
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.CounterValue, float64(s.Admitted), "admitted")
		ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.CounterValue, float64(s.Refused), "refused")
		ch <- prometheus.MustNewConstMetric(sessionQueueDesc, prometheus.GaugeValue, float64(s.Queue))
		ch <- prometheus.MustNewConstMetric(sessionIntervalDesc, prometheus.GaugeValue, s.Interval)
	}
}
