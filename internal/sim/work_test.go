package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/policy"
)

// TestWorkAccounting: under the work index, at every completion and every
// move, each node's waiting work equals the predicted costs of the requests
// in its queue, its requests in service are its busy slots, and its work
// is that plus cost.Remaining of each, recomputed from scratch.
func TestWorkAccounting(t *testing.T) {
	for _, pol := range []string{"nu", "nu-exact", "steal", "ll"} {
		c := DefaultConfig()
		c.Policy, c.Workload, c.LoadIndex = pol, preset(t, "mixed"), policy.IndexWork
		c.Duration, c.Warmup = 20*time.Second, 2*time.Second
		e, err := newEngine(c)
		require.NoError(t, err)
		checks := 0
		check := func() {
			checks++
			for i := range e.n {
				var want int64
				q := &e.q[i]
				for _, s := range q.buf[q.head:] {
					if s >= 0 { // -1: being moved (onMove sees a move's requests one by one)
						want += e.work.pred[s]
					}
				}
				require.Equal(t, want, e.work.waitW[i], "%s node %d waiting work", pol, i)
				require.Len(t, e.work.serve[i], e.busy[i], "%s node %d in service", pol, i)
				for _, s := range e.work.serve[i] {
					want += int64(cost.Remaining(time.Duration(e.work.pred[s]), time.Duration(e.now-e.work.start[s])))
				}
				require.Equal(t, want, e.work.work(i, e.now), "%s node %d work", pol, i)
			}
		}
		e.onDone = func(int64, int, time.Duration) { check() }
		e.onMove = func(int64, int, int) { check() }
		e.run()
		require.NoError(t, e.err)
		require.Positive(t, checks)
	}
}

// TestWorkIndexOnMixed: on the mixed workload (16 nodes, 80 % load) nu and
// nu-exact planning on work cut the 99th percentile by more than 10 %
// against count on the same requests, and every node learnt both routes'
// true cost (the classes' sizes are exact, so the statistic is too).
func TestWorkIndexOnMixed(t *testing.T) {
	for _, pol := range []string{"nu", "nu-exact"} {
		c := DefaultConfig()
		c.Policy, c.Workload, c.Rate = pol, preset(t, "mixed"), 320
		c.Duration, c.Warmup = 100*time.Second, 10*time.Second
		count, err := Run(c)
		require.NoError(t, err)
		assert.Nil(t, count.RouteCosts, "count learns no cost")
		c.LoadIndex = policy.IndexWork
		work, err := Run(c)
		require.NoError(t, err)
		assert.Less(t, work.P99Ms, 0.9*count.P99Ms, "%s: p99 work %.1f ms, count %.1f ms", pol, work.P99Ms, count.P99Ms)
		require.Len(t, work.RouteCosts, 2)
		for _, rc := range work.RouteCosts {
			assert.InDelta(t, rc.TrueMs, rc.MinMs, 1e-6, "%s %s", pol, rc.Route)
			assert.InDelta(t, rc.TrueMs, rc.MaxMs, 1e-6, "%s %s", pol, rc.Route)
			assert.Zero(t, rc.ErrAtTheta, "%s %s", pol, rc.Route)
		}
		assert.Equal(t, []string{"light", "heavy"}, []string{work.RouteCosts[0].Route, work.RouteCosts[1].Route})
	}
}

// TestWorkIndexValidate: the cost statistic is checked only under work.
func TestWorkIndexValidate(t *testing.T) {
	c := DefaultConfig()
	c.Cost.Theta = 0
	require.NoError(t, c.Validate(), "count ignores the cost statistic")
	c.LoadIndex = policy.IndexWork
	require.ErrorContains(t, c.Validate(), "cost theta")
	c.LoadIndex = 9
	require.ErrorContains(t, c.Validate(), "unknown load index 9")
}
