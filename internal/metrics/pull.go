package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PullResult is the result of one Transfer.Pull this node made (policy
// steal): swd_pulls_total's "result" label.
type PullResult string

// Pull results.
const (
	// PullHit: the peer handed its head over (it follows on Forward).
	PullHit PullResult = "hit"
	// PullMiss: the peer had nothing movable any more.
	PullMiss PullResult = "miss"
	// PullError: the peer could not be asked (unreachable, refused the
	// call, timed out): it handed nothing over.
	PullError PullResult = "error"
)

// PullResults lists every pull result.
var PullResults = []PullResult{PullHit, PullMiss, PullError}

func newPulls() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swd_pulls_total",
		Help: "Transfer.Pull calls this node made for a free app slot (policy steal), by result (hit, miss, error).",
	}, []string{"result"})
	for _, r := range PullResults {
		v.WithLabelValues(string(r))
	}
	return v
}

// Pulled counts one Transfer.Pull this node made.
func (m *Metrics) Pulled(r PullResult) {
	m.pulls.WithLabelValues(string(r)).Inc()
}

// newPullIdle is swd_pull_idle_seconds: how long an app slot held for a
// pull stayed idle, by whether a pulled request ended up taking it.
func newPullIdle() *prometheus.HistogramVec {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "swd_pull_idle_seconds",
		Help: "How long an app slot held for a pull (policy steal) stayed idle: from the hold to the pulled request taking it (filled=\"true\"), or to its release without one (filled=\"false\": every asked peer missed or failed, the request did not arrive in time, or the node stopped). The pull's dead time.",
		// 0.5 ms to 0.5 s, doubling: a pull on loopback takes about a
		// millisecond or two. Few buckets: every node exports them twice.
		Buckets: prometheus.ExponentialBucketsRange(0.0005, 0.5, 11),
	}, []string{"filled"})
	v.WithLabelValues("true")
	v.WithLabelValues("false")
	return v
}

// PullIdle observes how long a slot held for a pull stayed idle, and
// whether a pulled request filled it.
func (m *Metrics) PullIdle(d time.Duration, filled bool) {
	m.pullIdle.WithLabelValues(strconv.FormatBool(filled)).Observe(d.Seconds())
}
