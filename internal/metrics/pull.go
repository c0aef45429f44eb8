package metrics

import "github.com/prometheus/client_golang/prometheus"

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
