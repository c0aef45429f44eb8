package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/policy"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// longWaits counts the requests that waited in a node's own queue longer
// than about 13 ms (swd_queue_wait_seconds, from its /metrics). Behind a
// dispatcher that never sends a node more than its m, a request finds a
// free slot at once; one sent beyond m waits for a request in service
// (60 ms here). The 13 ms margin absorbs a node's own scheduling delay
// between its answer and the release of its slot on a loaded machine.
func longWaits(t *testing.T, admin string) float64 {
	t.Helper()
	above, _ := queueWaitsAbove(t, admin, 13*time.Millisecond) // the 13.45 ms bucket
	return float64(above)
}

// TestDispatcherCQ: `swd --role dispatcher --policy cq` in front of three
// nodes with m = 2 and apps without a limit of their own.
//
//   - A shallow backlog (60 ms requests at once: one per slot, and one
//     fewer held than cq's lookahead depth, policy.CQAhead per node): no
//     app ever serves more than m at once, and no request waits in a
//     node's queue: each went to a node the moment it had a free slot.
//   - A deep backlog (90 at once, 15 times the slots): cq sends requests
//     ahead, but never more than one per slot waits at a node (sampled
//     queue lengths), and apps still never serve more than m.
//   - A live switch cq → ct while the dispatcher holds a backlog loses
//     nothing: the held requests drain through ct, which sends beyond m, so
//     now more than m wait at a node (the check above can fail).
//   - A switch back to cq holds again.
func TestDispatcherCQ(t *testing.T) {
	const m, nodes, batch = 2, 3, 90
	shallow := nodes*m + nodes*policy.CQAhead - 1
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Concurrency, cfg.Policy, cfg.Dispatcher = nodes, m, "cq", true
	})
	disp := c.Info.Dispatcher
	dctl := testutil.Control(t, disp.GRPC)
	var nctl []swdv1.ControlClient
	for _, nd := range c.Info.Nodes {
		nctl = append(nctl, testutil.Control(t, nd.GRPC))
	}
	hc := client()
	url := func(int) string { return "http://" + disp.HTTP + "/work?ms=60" }
	// held waits until the dispatcher holds a backlog.
	held := func(phase string) {
		t.Helper()
		require.Eventually(t, func() bool { return testutil.Status(t, dctl).GetQueueLength() > 0 },
			30*time.Second, time.Millisecond, "%s: the dispatcher never held a request", phase)
	}
	// run sends n requests at once and, until every answer is in, samples
	// the nodes' queue lengths; it returns the answers and the longest
	// queue seen. before runs once the requests are on their way.
	run := func(n int, before func()) ([]answer, int64) {
		t.Helper()
		wait := fireAsync(hc, n, url)
		done := make(chan []answer)
		go func() { done <- wait() }()
		before()
		var longest int64
		for {
			select {
			case answers := <-done:
				return answers, longest
			default:
			}
			for _, cl := range nctl {
				longest = max(longest, testutil.Status(t, cl).GetQueueLength())
			}
			time.Sleep(5 * time.Millisecond) // a few hundred Status calls a second at most
		}
	}
	served := func() uint64 {
		var n uint64
		for _, nd := range c.Info.Nodes {
			n += testutil.AppStats(t, nd.App).Served
		}
		return n
	}
	setPolicy := func(name string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r, err := dctl.SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: name, Cluster: true})
		require.NoError(t, err)
		for _, res := range r.GetResults() {
			assert.True(t, res.GetOk(), "%s: %s", res.GetNode(), res.GetError())
		}
		require.Equal(t, name, testutil.Status(t, dctl).GetPolicy().GetName())
	}
	appsWithinM := func(phase string) {
		t.Helper()
		for _, nd := range c.Info.Nodes {
			assert.LessOrEqual(t, testutil.AppStats(t, nd.App).MaxInFlight, int64(m), "%s: %s's app served more than m at once", phase, nd.Name)
		}
	}

	// cq, shallow backlog: held to m, nothing waits at the nodes. This
	// phase must come first: requests sent ahead in a later deep phase
	// stay outstanding (up to 2m) until answered.
	answers, _ := run(shallow, func() { held("cq, shallow") })
	assert.Equal(t, map[string]int{"200": shallow}, countStatus(answers))
	appsWithinM("cq, shallow")
	for _, nd := range c.Info.Nodes {
		assert.Zero(t, longWaits(t, nd.Admin), "%s: requests waited in its queue: the dispatcher sent it more than m", nd.Name)
	}
	total := uint64(shallow)
	assert.EqualValues(t, total, served())

	// cq, deep backlog: ahead, at most one per slot waiting at a node.
	answers, longest := run(batch, func() { held("cq, deep") })
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	appsWithinM("cq, deep")
	assert.LessOrEqual(t, longest, int64(m), "cq let more than one request per slot wait at a node")
	assert.Positive(t, longest, "cq never sent a request ahead with a deep backlog")
	total += batch
	assert.EqualValues(t, total, served())

	// Switch to ct with a backlog held: nothing lost, the backlog drained,
	// beyond m at the nodes.
	answers, longest = run(batch, func() {
		held("cq before the switch")
		setPolicy("ct")
	})
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	total += batch
	assert.EqualValues(t, total, served(), "apps served a different number of requests than were answered")
	assert.Greater(t, longest, int64(m), "ct never let more than one request per slot wait at a node: the drained backlog should have queued there")
	assert.Zero(t, testutil.Status(t, dctl).GetQueueLength())

	// And back to cq: it holds again.
	setPolicy("cq")
	answers, _ = run(batch, func() { held("cq after the switch back") })
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	total += batch
	assert.EqualValues(t, total, served(), fmt.Sprintf("after %d batches", 4))
}
