package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

func do(c *http.Client, method, url string) answer {
	req, err := http.NewRequest(method, url, strings.NewReader("payload"))
	if err != nil {
		return answer{err: err}
	}
	resp, err := testutil.Do(c, req)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	return answer{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By"), at: time.Now()}
}

// When the peer running transferred requests dies, every request still gets
// exactly one answer from the node the client called: idempotent ones (GET)
// are run locally once, others (POST) get 502.
func TestPeerDeathDuringTransfers(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 2
		cfg.Policy = "nu"
	})
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	hc := client()
	const each = 12
	answers := make(map[string][]answer)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		for i := 0; i < each; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := do(hc, method, "http://"+n0.HTTP+"/work?ms=400")
				mu.Lock()
				answers[method] = append(answers[method], a)
				mu.Unlock()
			}()
		}
	}
	// Wait until node-1 runs transferred requests, then kill its swd.
	require.Eventually(t, func() bool { return testutil.AppStats(t, n1.App).InFlight > 0 }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, c.Kill("node-1"))
	wg.Wait()
	total := 0
	for method, as := range answers {
		require.Len(t, as, each)
		for _, a := range as {
			require.NoError(t, a.err, "%s got no answer", method)
			total++
			switch method {
			case http.MethodGet:
				assert.Equal(t, http.StatusOK, a.status, "a GET must be rerun locally when its transfer fails")
			case http.MethodPost:
				assert.Contains(t, []int{http.StatusOK, http.StatusBadGateway}, a.status)
			}
		}
	}
	assert.Equal(t, 2*each, total)
	// node-0's app served every GET that was not answered by node-1, and
	// every POST that got a 200 from node-0.
	byNode := map[string]int{}
	for _, as := range answers {
		for _, a := range as {
			if a.status == http.StatusOK {
				byNode[a.servedBy]++
			}
		}
	}
	assert.EqualValues(t, byNode["node-0"], testutil.AppStats(t, n0.App).Served, "node-0's app ran a request twice or not at all: %v", byNode)
}

// SIGTERM on a node under a transfer policy hands its waiting requests to
// its peers instead of making them wait for its own app, and loses none.
func TestDrainHandsWaitingRequestsToPeers(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes = 3
		cfg.Policy = "nu"
		// A slow activation so the burst stays queued on node-0 until drain.
		cfg.SwdArgs = []string{"--activation-interval=10s"}
	})
	n0 := c.Info.Nodes[0]
	cl := testutil.Control(t, n0.GRPC)
	hc := client()
	const n = 30
	wait := fireAsync(hc, n, func(int) string { return "http://" + n0.HTTP + "/work?ms=100" })
	waitArrived(t, cl, n0.App, n)
	before := testutil.AppStats(t, n0.App).Served
	require.NoError(t, c.Signal("node-0", syscall.SIGTERM, 30*time.Second))
	second := wait()
	assert.Equal(t, map[string]int{"200": n}, countStatus(second))
	servedHere := int(testutil.AppStats(t, n0.App).Served - before)
	assert.Less(t, servedHere, n-5, "the draining node served almost everything itself")
	var elsewhere uint64
	for _, nd := range c.Info.Nodes[1:] {
		elsewhere += testutil.AppStats(t, nd.App).Served
	}
	assert.EqualValues(t, n, servedHere+int(elsewhere), "every request of the burst was served exactly once")
	assert.Equal(t, 0, c.ExitCode("node-0"))
}

// A rolling restart of every node of a 4-node cluster under load loses
// nothing: like a load balancer, the client stops sending to a node before
// it is told to drain and resumes once it is back.
func TestRollingRestartUnderLoad(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu" })
	hc := client()
	var inRotation [4]atomic.Bool
	for i := range inRotation {
		inRotation[i].Store(true)
	}
	stop := make(chan struct{})
	var mu sync.Mutex
	var answers []answer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var inner sync.WaitGroup
		defer inner.Wait()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			k := i % 4
			for !inRotation[k].Load() {
				k = (k + 1) % 4
			}
			inner.Add(1)
			go func() {
				defer inner.Done()
				a := get(hc, "http://"+c.Info.Nodes[k].HTTP+"/work?ms=15")
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
			}()
		}
	}()
	for i, nd := range c.Info.Nodes {
		inRotation[i].Store(false)
		// A load balancer's deregistration delay (Kubernetes: the preStop
		// sleep): requests already on their way to the node still arrive
		// before it stops accepting connections.
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, c.Signal(nd.Name, syscall.SIGTERM, 30*time.Second))
		require.Equal(t, 0, c.ExitCode(nd.Name))
		require.NoError(t, c.Restart(nd.Name))
		cl := testutil.Control(t, nd.GRPC)
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := cl.Status(ctx, &swdv1.StatusRequest{})
			return err == nil && s.GetMembers() == 4
		}, 30*time.Second, 50*time.Millisecond, "%s did not rejoin", nd.Name)
		inRotation[i].Store(true)
	}
	close(stop)
	wg.Wait()
	require.NotEmpty(t, answers)
	assert.Equal(t, map[string]int{"200": len(answers)}, countStatus(answers), "requests lost during the rolling restart")
	t.Logf("rolling restart: %d requests, all answered 200", len(answers))
}

// Under 5x overload the cluster keeps its goodput (answers within the
// deadline per second): early 503s and queue timeouts keep the apps busy
// with requests that can still make it.
func TestOverloadKeepsGoodput(t *testing.T) {
	for _, pol := range []string{"nu", "ll"} {
		t.Run(pol, func(t *testing.T) {
			c := startCluster(t, func(cfg *localcluster.Config) {
				cfg.Nodes = 4
				cfg.Policy = pol
				cfg.SwdArgs = []string{"--queue-timeout=300ms"}
			})
			// Capacity: 4 nodes x 1 slot / 20 ms = 200 req/s.
			at1 := goodput(t, c, 200, 3*time.Second, 20, 600*time.Millisecond)
			at5 := goodput(t, c, 1000, 3*time.Second, 20, 600*time.Millisecond)
			t.Logf("%s goodput: %.0f req/s at 1x, %.0f req/s at 5x (%.0f%%)", pol, at1, at5, 100*at5/at1)
			assert.GreaterOrEqual(t, at5, 0.9*at1, "congestion collapse under %s", pol)
		})
	}
}

// goodput offers rate req/s of ms-millisecond requests, spread round robin
// over the nodes for dur, and returns the answers within deadline per
// second.
func goodput(t *testing.T, c *localcluster.Cluster, rate int, dur time.Duration, ms int, deadline time.Duration) float64 {
	t.Helper()
	hc := client()
	hc.Timeout = 5 * time.Second
	interval := time.Second / time.Duration(rate)
	n := int(dur / interval)
	var good, answered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := get(hc, fmt.Sprintf("http://%s/work?ms=%d", c.Info.Nodes[i%len(c.Info.Nodes)].HTTP, ms))
			if a.err == nil {
				answered.Add(1)
				if a.status == http.StatusOK && a.at.Sub(due) <= deadline {
					good.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, n, answered.Load(), "some requests got no answer")
	return float64(good.Load()) / dur.Seconds()
}
