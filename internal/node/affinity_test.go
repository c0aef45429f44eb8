package node

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/queue"
)

// fifo is some other feature's scheduler (per-route limits, say).
type fifo struct{}

func (fifo) Pick(w *queue.Waiting) *queue.Ticket { return w.Front() }
func (fifo) Granted(*queue.Ticket)               {}
func (fifo) Released(*queue.Ticket)              {}

func TestValidateAffinity(t *testing.T) {
	header := affinity.Source{Kind: affinity.KindHeader, Name: "X-User"}
	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
		err    string
	}{
		// Off by default.
		{"off", func(*Config) {}, ""},
		// Affinity alone, and with the cohort order.
		{"affinity", func(c *Config) { c.Affinity.Source = header }, ""},
		{"cohort", func(c *Config) { c.Affinity.Source, c.Cohort.Enabled = header, true }, ""},
		// The cohort order needs keys.
		{"cohort without key", func(c *Config) { c.Cohort.Enabled = true }, "--cohort orders requests by their key"},
		// Only one scheduler runs: refused beside another feature's.
		{"two schedulers", func(c *Config) {
			c.Affinity.Source, c.Cohort.Enabled = header, true
			c.Queue.Scheduler = fifo{}
		}, "only one scheduler runs at a time"},
		// Sending a request home is a transfer.
		{"no hops", func(c *Config) { c.Affinity.Source, c.Proxy.MaxHops = header, 0 }, "--max-hops must be at least 1"},
		// A dispatcher has no queue to order and no home to be.
		{"dispatcher", func(c *Config) { c.Role, c.Affinity.Source = cluster.RoleDispatcher, header }, "apply to nodes"},
		// The parts' own checks run.
		{"factor", func(c *Config) { c.Affinity.Source, c.Affinity.Factor = header, 0.5 }, "--affinity-factor"},
		{"cache", func(c *Config) { c.Affinity.Source, c.Cohort.Enabled, c.Cohort.Capacity = header, true, 0 }, "--cohort-cache"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := named()
			tc.mutate(&c)
			err := c.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				_, err := New(c)
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			_, err = New(c)
			require.ErrorContains(t, err, tc.err, "New refuses it too")
		})
	}
}

// TestRouterWithoutCluster: before the cluster runs, every keyed request
// stays here and none may move.
func TestRouterWithoutCluster(t *testing.T) {
	c := named()
	c.Affinity.Source = affinity.Source{Kind: affinity.KindHeader, Name: "X-User"}
	c.Cohort.Enabled = true
	n, err := New(c)
	require.NoError(t, err)
	require.NotNil(t, n.router)
	require.NotNil(t, n.cohort)
	require.Equal(t, "", n.router.Place("user-1"))
	tk := queue.NewTicket(nil, true)
	tk.Affinity = "user-1"
	require.False(t, n.router.Movable(tk, "node-b"))
	require.True(t, n.router.Movable(queue.NewTicket(nil, true), "node-b"), "unkeyed tickets move freely")
	n.draining.Store(true)
	require.True(t, n.router.Movable(tk, "node-b"), "a draining node hands keyed tickets off too")
}

// TestCohortClassesAreTheMetricsLabels: swd_cohort_picks_total's label
// values are the cohort order's classes, all of them.
func TestCohortClassesAreTheMetricsLabels(t *testing.T) {
	var names []string
	for c := cohort.ClassStarved; c <= cohort.ClassUncached; c++ {
		names = append(names, c.String())
	}
	require.Equal(t, metrics.CohortClasses, names)
	c := named()
	c.Affinity.Source = affinity.Source{Kind: affinity.KindHeader, Name: "X-User"}
	c.Cohort.Enabled = true
	n, err := New(c)
	require.NoError(t, err)
	require.Len(t, n.cohortPicks(), len(names))
	n.cohort = nil
	require.Nil(t, n.cohortPicks())
}
