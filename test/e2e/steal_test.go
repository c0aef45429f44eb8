package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// serving sends node (its HTTP address) one request of ms and waits until
// it is the one request node's app serves (cl is node's control client).
func serving(t *testing.T, hc *http.Client, node string, cl swdv1.ControlClient, ms int) (wait func() []answer) {
	t.Helper()
	wait = fireAsync(hc, 1, func(int) string { return fmt.Sprintf("http://%s/work?ms=%d", node, ms) })
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 1 }, 10*time.Second, 2*time.Millisecond)
	return wait
}

// Under steal, a node whose slot frees with nothing waiting takes a busy
// peer's waiting requests, oldest first. node-0 serves a long request
// with four short ones waiting behind it, queued in order r0..r3; node-1
// is busy with a shorter long request meanwhile. When node-1's slot
// frees it pulls node-0's head, serves it, pulls the next, and so on: it
// serves all four, one at a time, in arrival order, long before node-0's
// long request ends (the sizes leave seconds of slack).
func TestStealTakesWaitingOldestFirst(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 2; cfg.Policy = "steal" })
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	cl0, cl1 := testutil.Control(t, n0.GRPC), testutil.Control(t, n1.GRPC)
	hc := client()

	long1 := serving(t, hc, n1.HTTP, cl1, 3000)
	long0 := serving(t, hc, n0.HTTP, cl0, 9000)
	const shorts = 4
	waits := make([]func() []answer, shorts)
	for i := range shorts {
		waits[i] = fireAsync(hc, 1, func(int) string { return fmt.Sprintf("http://%s/work?ms=150&r=%d", n0.HTTP, i) })
		waitQueue(t, cl0, int64(i+1)) // r_i queued behind r_0..r_i-1
	}
	require.Positive(t, testutil.Status(t, cl1).GetInFlight(), "node-1 finished its long request before the shorts queued: no test")

	var got []answer
	for i := range shorts {
		a := waits[i]()[0]
		require.NoError(t, a.err)
		require.Equal(t, http.StatusOK, a.status, "r%d", i)
		got = append(got, a)
	}
	l1 := long1()[0]
	require.Equal(t, http.StatusOK, l1.status)
	for i, a := range got {
		assert.Equal(t, l1.servedBy, a.servedBy, "r%d was not pulled by the idle node", i)
	}
	assert.True(t, slices.IsSortedFunc(got, func(a, b answer) int { return a.at.Compare(b.at) }),
		"pulled requests were not served oldest first: %v", got)
	assert.EqualValues(t, 1, testutil.Status(t, cl0).GetInFlight(), "node-0's long request should still run")
	l0 := long0()[0]
	require.Equal(t, http.StatusOK, l0.status)
	assert.NotEqual(t, l1.servedBy, l0.servedBy)
	// Nothing else reached node-1's app: every pull carried one request.
	assert.EqualValues(t, 1+shorts, testutil.AppStats(t, n1.App).Served)
	assert.EqualValues(t, 1, testutil.AppStats(t, n0.App).Served)
}

// Under steal, a node that has been idle all along pulls when gossip
// shows it a peer's waiting request (PullRules.OnGossip), not only when
// one of its own slots frees: node-1 never serves anything before, so it
// has no completion to trigger a pull. node-0 serves a long request with
// two short ones waiting behind it; node-1 hears node-0's head and takes
// them, long before node-0's long request ends. Without pull on gossip
// they would wait for it and be served by node-0.
func TestStealPullsOnGossip(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 2; cfg.Policy = "steal" })
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	cl0 := testutil.Control(t, n0.GRPC)
	hc := client()

	long0 := serving(t, hc, n0.HTTP, cl0, 8000)
	const shorts = 2
	waits := make([]func() []answer, shorts)
	for i := range shorts {
		waits[i] = fireAsync(hc, 1, func(int) string { return fmt.Sprintf("http://%s/work?ms=100&r=%d", n0.HTTP, i) })
	}
	for i := range shorts {
		a := waits[i]()[0]
		require.NoError(t, a.err)
		require.Equal(t, http.StatusOK, a.status, "r%d", i)
		assert.Equal(t, n1.Name, a.servedBy, "r%d was not pulled by the idle node", i)
	}
	assert.EqualValues(t, 1, testutil.Status(t, cl0).GetInFlight(), "node-0's long request should still run")
	assert.EqualValues(t, shorts, testutil.AppStats(t, n1.App).Served)
	require.Equal(t, http.StatusOK, long0()[0].status)
	assert.EqualValues(t, 1, testutil.AppStats(t, n0.App).Served)
}

// Transfer.Pull answers "nothing" at once on an empty queue, and hands
// the head over otherwise: the head travels on the Forward path to the
// puller, the node the client called still answers it. A request in
// service is never handed over, and a request that moved once (the pulled
// one, now waiting at the puller) is not handed on.
func TestPullRPC(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 3; cfg.Policy = "none" })
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	cl0, cl1 := testutil.Control(t, n0.GRPC), testutil.Control(t, n1.GRPC)
	pull := func(addr, from string, id uint64) (*swdv1.PullResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return swdv1.NewTransferClient(testutil.Dial(t, addr, testutil.Plaintext())).Pull(ctx, &swdv1.PullRequest{FromNode: from, PullId: id})
	}
	// An empty queue: nothing, at once.
	r, err := pull(n0.GRPC, "node-1", 1)
	require.NoError(t, err)
	assert.False(t, r.GetFound())
	// A puller that is not a member, or the node itself, is refused.
	_, err = pull(n0.GRPC, "intruder", 2)
	assert.Equal(t, codes.FailedPrecondition, grpcstatus.Code(err), "%v", err)
	_, err = pull(n0.GRPC, "node-0", 3)
	assert.Equal(t, codes.FailedPrecondition, grpcstatus.Code(err), "%v", err)

	// Both nodes busy, and one request waiting at node-0 (policy none: only
	// this test's pulls move anything).
	hc := client()
	long1 := serving(t, hc, n1.HTTP, cl1, 1500)
	long0 := serving(t, hc, n0.HTTP, cl0, 1500)
	short := fireAsync(hc, 1, func(int) string { return "http://" + n0.HTTP + "/work?ms=10" })
	waitQueue(t, cl0, 1)

	// node-1 pulls it: it leaves node-0's queue and waits at node-1 (whose
	// slot is taken), where it is not anybody's head.
	r, err = pull(n0.GRPC, "node-1", 4)
	require.NoError(t, err)
	require.True(t, r.GetFound())
	waitQueue(t, cl1, 1)
	assert.Zero(t, testutil.Status(t, cl0).GetQueueLength())
	r, err = pull(n1.GRPC, "node-2", 5)
	require.NoError(t, err)
	assert.False(t, r.GetFound(), "a moved request was handed on")
	// The one in service at node-0 is never handed over.
	r, err = pull(n0.GRPC, "node-2", 6)
	require.NoError(t, err)
	assert.False(t, r.GetFound(), "a request in service was handed over")

	s := short()[0]
	require.Equal(t, http.StatusOK, s.status)
	l1 := long1()[0]
	assert.Equal(t, l1.servedBy, s.servedBy, "the pulled request ran at the puller")
	require.Equal(t, http.StatusOK, long0()[0].status)
}

// Overtake: a slot that frees while a local request waits goes instead to
// a peer's request that has waited longer by more than steal's margin
// (200 ms). node-1 serves a long request with r_old waiting; node-0
// serves a shorter one with r_new waiting, which arrived 500 ms after
// r_old. When node-0's slot frees it pulls r_old first, then serves r_new;
// without overtake r_new would run first and r_old wait for node-1's long
// request.
func TestStealOvertake(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 2; cfg.Policy = "steal" })
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	cl0, cl1 := testutil.Control(t, n0.GRPC), testutil.Control(t, n1.GRPC)
	hc := client()

	long1 := serving(t, hc, n1.HTTP, cl1, 6000)
	long0 := serving(t, hc, n0.HTTP, cl0, 1500)
	old := fireAsync(hc, 1, func(int) string { return "http://" + n1.HTTP + "/work?ms=100&r=old" })
	waitQueue(t, cl1, 1)
	time.Sleep(500 * time.Millisecond) // the age gap the scenario needs, not a synchronisation
	young := fireAsync(hc, 1, func(int) string { return "http://" + n0.HTTP + "/work?ms=100&r=new" })
	waitQueue(t, cl0, 1)
	require.EqualValues(t, 1, testutil.Status(t, cl0).GetInFlight(), "node-0's long request ended before r_new queued: no test")

	o, y := old()[0], young()[0]
	require.Equal(t, http.StatusOK, o.status)
	require.Equal(t, http.StatusOK, y.status)
	l0 := long0()[0]
	assert.Equal(t, l0.servedBy, o.servedBy, "node-0 did not pull the older request")
	assert.Equal(t, l0.servedBy, y.servedBy)
	assert.True(t, o.at.Before(y.at), "the older request was not served first: old at %s, new at %s", o.at, y.at)
	assert.EqualValues(t, 1, testutil.Status(t, cl1).GetInFlight(), "node-1's long request should still run")
	require.Equal(t, http.StatusOK, long1()[0].status)
}

// A peer that dies while it serves a request it pulled loses nothing: the
// request's origin still owns it and answers its client (a GET runs
// locally once, as after any failed transfer), and the origin's queue
// keeps every request that was not handed over.
func TestStealPullerDiesMidPull(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 2; cfg.Policy = "steal" })
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	cl0, cl1 := testutil.Control(t, n0.GRPC), testutil.Control(t, n1.GRPC)
	hc := client()

	long1 := serving(t, hc, n1.HTTP, cl1, 500)
	long0 := serving(t, hc, n0.HTTP, cl0, 3000)
	first := fireAsync(hc, 1, func(int) string { return "http://" + n0.HTTP + "/work?ms=5000&r=0" })
	waitQueue(t, cl0, 1)
	second := fireAsync(hc, 1, func(int) string { return "http://" + n0.HTTP + "/work?ms=50&r=1" })
	waitQueue(t, cl0, 2)
	require.Equal(t, http.StatusOK, long1()[0].status)
	// node-1's slot freed: it pulls the head (r0) and serves it; kill it then.
	require.Eventually(t, func() bool { return testutil.AppStats(t, n1.App).InFlight == 1 }, 10*time.Second, 2*time.Millisecond,
		"node-1 never pulled")
	require.NoError(t, c.Kill("node-1"))

	l0 := long0()[0]
	require.Equal(t, http.StatusOK, l0.status)
	a0, a1 := first()[0], second()[0]
	require.NoError(t, a0.err)
	require.NoError(t, a1.err)
	assert.Equal(t, http.StatusOK, a0.status, "the pulled GET is rerun at its origin")
	assert.Equal(t, l0.servedBy, a0.servedBy)
	assert.Equal(t, http.StatusOK, a1.status, "the request still waiting at the origin is served")
	assert.Equal(t, l0.servedBy, a1.servedBy)
}
