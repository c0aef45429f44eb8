package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

func oneNode(t *testing.T, m int, args ...string) (*localcluster.Cluster, localcluster.NodeInfo) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 1
		cfg.Policy = "none"
		cfg.Concurrency = m
		cfg.SwdArgs = args
	})
	return c, c.Info.Nodes[0]
}

// Every one of 1,000 concurrent clients gets exactly one 200, and the app
// never has more than m requests at once.
func TestThousandConcurrentClients(t *testing.T) {
	const m, n = 4, 1000
	_, nd := oneNode(t, m)
	answers := fire(client(), n, func(i int) string { return fmt.Sprintf("http://%s/work?ms=1", nd.HTTP) })
	assert.Equal(t, map[string]int{"200": n}, countStatus(answers))
	s := testutil.AppStats(t, nd.App)
	assert.EqualValues(t, n, s.Served, "the app served each request once")
	assert.LessOrEqual(t, s.MaxInFlight, int64(m), "swd sent more than m requests at once")
	assert.Positive(t, s.MaxInFlight)
}

// With m = 1 requests are served in arrival order: the app started them
// in the order they were queued (its own count, not the clients' clocks,
// which a busy machine can run late by more than one 20 ms request).
func TestArrivalOrderWithMEqualsOne(t *testing.T) {
	_, nd := oneNode(t, 1)
	cl := testutil.Control(t, nd.GRPC)
	hc := client()
	// The first request holds the slot; the rest queue one by one, each
	// sent only after the previous one is in the queue.
	const n = 12
	var wg sync.WaitGroup
	answers := make([]answer, n)
	wg.Add(1)
	go func() { defer wg.Done(); answers[0] = get(hc, "http://"+nd.HTTP+"/work?ms=2500") }()
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 1 }, 10*time.Second, 5*time.Millisecond)
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); answers[i] = get(hc, fmt.Sprintf("http://%s/work?ms=20&seq=%d", nd.HTTP, i)) }()
		waitQueue(t, cl, int64(i))
	}
	wg.Wait()
	started := make([]uint64, n)
	for i := range started {
		require.NoError(t, answers[i].err)
		require.Equal(t, http.StatusOK, answers[i].status)
		started[i] = answers[i].order
	}
	assert.Equal(t, []uint64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, started, "the app did not serve the requests in arrival order")
}

// A full queue answers 503 with Retry-After; queued requests still succeed.
func TestQueueFullGives503WithRetryAfter(t *testing.T) {
	_, nd := oneNode(t, 1, "--queue-limit=2", "--retry-after=3s")
	cl := testutil.Control(t, nd.GRPC)
	hc := client()
	var wg sync.WaitGroup
	held := make([]answer, 3)
	for i := range held {
		wg.Add(1)
		go func() { defer wg.Done(); held[i] = get(hc, "http://"+nd.HTTP+"/work?ms=400") }()
		if i == 0 {
			require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 1 }, 10*time.Second, 5*time.Millisecond)
		} else {
			waitQueue(t, cl, int64(i))
		}
	}
	over := get(hc, "http://"+nd.HTTP+"/work?ms=1")
	require.NoError(t, over.err)
	assert.Equal(t, http.StatusServiceUnavailable, over.status)
	assert.Equal(t, "3", over.retry)
	wg.Wait()
	assert.Equal(t, map[string]int{"200": 3}, countStatus(held))
}

// A request waiting too long in the queue gets 503.
func TestQueueTimeoutGives503(t *testing.T) {
	_, nd := oneNode(t, 1, "--queue-timeout=200ms")
	cl := testutil.Control(t, nd.GRPC)
	hc := client()
	var wg sync.WaitGroup
	var first answer
	wg.Add(1)
	go func() { defer wg.Done(); first = get(hc, "http://"+nd.HTTP+"/work?ms=1500") }()
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 1 }, 10*time.Second, 5*time.Millisecond)
	late := get(hc, "http://"+nd.HTTP+"/work?ms=1")
	assert.Equal(t, http.StatusServiceUnavailable, late.status)
	wg.Wait()
	assert.Equal(t, http.StatusOK, first.status)
	assert.EqualValues(t, 1, testutil.AppStats(t, nd.App).Served, "the timed-out request reached the app")
}

// A client that goes away while queued never reaches the app.
func TestClientGoneWhileQueuedNeverReachesApp(t *testing.T) {
	_, nd := oneNode(t, 1)
	cl := testutil.Control(t, nd.GRPC)
	hc := client()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = get(hc, "http://"+nd.HTTP+"/work?ms=600") }()
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 1 }, 10*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.HTTP+"/work?ms=1", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	waitQueue(t, cl, 1)
	cancel()
	require.Error(t, <-errc)
	waitQueue(t, cl, 0)
	wg.Wait()
	// Poll: the app must have seen only the first request.
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetInFlight() == 0 }, 10*time.Second, 5*time.Millisecond)
	assert.EqualValues(t, 1, testutil.AppStats(t, nd.App).Served)
}

// SIGTERM under load: every queued and in-flight request is answered 200,
// then swd exits 0.
func TestSigtermUnderLoadLosesNothing(t *testing.T) {
	c, nd := oneNode(t, 2)
	cl := testutil.Control(t, nd.GRPC)
	hc := client()
	const n = 40
	wait := fireAsync(hc, n, func(int) string { return "http://" + nd.HTTP + "/work?ms=50" })
	// Wait until every request has reached swd (served, waiting or in flight).
	waitArrived(t, cl, nd.App, n)
	require.NoError(t, c.Signal("node-0", syscall.SIGTERM, 30*time.Second))
	answers := wait()
	assert.Equal(t, map[string]int{"200": n}, countStatus(answers))
	assert.Equal(t, 0, c.ExitCode("node-0"))
	assert.EqualValues(t, n, testutil.AppStats(t, nd.App).Served)
}
