package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
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
	resp, err := http.Get("http://" + admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var total, short float64
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "swd_queue_wait_seconds_count "); ok {
			total, err = strconv.ParseFloat(v, 64)
			require.NoError(t, err)
		}
		rest, ok := strings.CutPrefix(line, `swd_queue_wait_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, v, ok := strings.Cut(rest, `"} `)
		require.True(t, ok, line)
		bound, err := strconv.ParseFloat(le, 64)
		require.NoError(t, err)
		if bound <= 0.014 { // buckets are cumulative: keep the largest below
			short, err = strconv.ParseFloat(v, 64)
			require.NoError(t, err)
		}
	}
	return total - short
}

// TestDispatcherCQ: `swd --role dispatcher --policy cq` in front of three
// nodes with m = 2 and apps without a limit of their own. With 90
// requests of 60 ms at once (15 times the 6 slots), the dispatcher holds a
// backlog, no app ever serves more than m at once, and no request waits in
// a node's queue: each went to a node the moment it had a free slot.
// Then a live switch cq → ct while the dispatcher holds a backlog loses
// nothing: the held requests drain through ct (which sends beyond m, so
// now requests do wait at the nodes: the check above can fail), and a
// switch back to cq holds again.
func TestDispatcherCQ(t *testing.T) {
	const m, nodes, batch = 2, 3, 90
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Concurrency, cfg.Policy, cfg.Dispatcher = nodes, m, "cq", true
	})
	disp := c.Info.Dispatcher
	dctl := testutil.Control(t, disp.GRPC)
	hc := client()
	url := func(int) string { return "http://" + disp.HTTP + "/work?ms=60" }
	// held waits until the dispatcher holds a backlog.
	held := func(phase string) {
		t.Helper()
		require.Eventually(t, func() bool { return testutil.Status(t, dctl).GetQueueLength() > 0 },
			30*time.Second, time.Millisecond, "%s: the dispatcher never held a request", phase)
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

	// cq alone: held to m.
	wait := fireAsync(hc, batch, url)
	held("cq")
	answers := wait()
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	for _, nd := range c.Info.Nodes {
		assert.LessOrEqual(t, testutil.AppStats(t, nd.App).MaxInFlight, int64(m), "%s's app served more than m at once", nd.Name)
		assert.Zero(t, longWaits(t, nd.Admin), "%s: requests waited in its queue: the dispatcher sent it more than m", nd.Name)
	}
	assert.EqualValues(t, batch, served())

	// Switch to ct with a backlog held: nothing lost, the backlog drained.
	wait = fireAsync(hc, batch, url)
	held("cq before the switch")
	setPolicy("ct")
	answers = wait()
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	assert.EqualValues(t, 2*batch, served(), "apps served a different number of requests than were answered")
	var waited float64
	for _, nd := range c.Info.Nodes {
		waited += longWaits(t, nd.Admin)
	}
	assert.Positive(t, waited, "ct sent no node more than m: the drained backlog should have queued at the nodes")
	assert.Zero(t, testutil.Status(t, dctl).GetQueueLength())

	// And back to cq: it holds again.
	setPolicy("cq")
	wait = fireAsync(hc, batch, url)
	held("cq after the switch back")
	answers = wait()
	assert.Equal(t, map[string]int{"200": batch}, countStatus(answers))
	assert.EqualValues(t, 3*batch, served(), fmt.Sprintf("after %d batches", 3))
}
