package metrics

import "github.com/prometheus/client_golang/prometheus"

// Placement is where a keyed request was placed on arrival (--affinity):
// swd_affinity_placements_total's "placement" label.
type Placement string

// Placements of keyed requests.
const (
	// PlacementHome: on its home node (here or a peer).
	PlacementHome Placement = "home"
	// PlacementSpilled: its home was past the load bound or unknown; on
	// the next node of its rendezvous order.
	PlacementSpilled Placement = "spilled"
)

// Placements lists every placement.
var Placements = []Placement{PlacementHome, PlacementSpilled}

// CohortClasses are the values of swd_cohort_picks_total's "class" label
// (internal/cohort's classes).
var CohortClasses = []string{"starved", "priority", "cached", "uncached"}

func newPlacements() *prometheus.CounterVec {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "swd_affinity_placements_total",
		Help: "Keyed requests placed on arrival (--affinity), by placement (home, spilled).",
	}, []string{"placement"})
	for _, p := range Placements {
		v.WithLabelValues(string(p))
	}
	return v
}

// Placed counts one keyed request placed on arrival.
func (m *Metrics) Placed(p Placement) {
	m.placements.WithLabelValues(string(p)).Inc()
}

var cohortDesc = prometheus.NewDesc("swd_cohort_picks_total",
	"App slots the cohort order (--cohort) gave, by class (starved, priority, cached, uncached).", []string{"class"}, nil)

// cohortCollector reads the cohort order's counters at scrape time.
type cohortCollector struct{ f func() map[string]float64 }

func (c *cohortCollector) Describe(ch chan<- *prometheus.Desc) { ch <- cohortDesc }

func (c *cohortCollector) Collect(ch chan<- prometheus.Metric) {
	if c.f == nil {
		return
	}
	for class, v := range c.f() {
		ch <- prometheus.MustNewConstMetric(cohortDesc, prometheus.CounterValue, v, class)
	}
}
