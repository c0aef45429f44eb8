// Package e2e runs SWD's end-to-end tests: real swd, dummyapp and swdctl
// processes (built by `make build` into bin/) on loopback. Tests skip with a
// message when the binaries are missing.
package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/dummyapp"
	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// binDir returns the repository's bin/ directory, skipping the test if the
// binaries are not built.
func binDir(t *testing.T) string {
	t.Helper()
	return testutil.BinDir(t, "swd", "dummyapp", "swdctl")
}

// startCluster starts a local cluster and stops it when the test ends.
func startCluster(t *testing.T, mutate func(*localcluster.Config)) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	return testutil.StartCluster(t, binDir(t), mutate)
}

// client returns an HTTP client with room for many concurrent requests.
func client() *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        2000,
			MaxIdleConnsPerHost: 2000,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		},
	}
}

type answer struct {
	status   int
	servedBy string
	retry    string
	err      error
	at       time.Time
	// order is the app's WorkReply.Order for a 200 of /work: the order the
	// app started it in (0 when the answer has none).
	order uint64
	// serviceMs is the app's WorkReply.ServiceMs: the time it spent on the
	// request.
	serviceMs float64
}

func get(c *http.Client, url string) answer {
	resp, err := c.Get(url)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
	a := answer{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By"), retry: resp.Header.Get("Retry-After"), at: time.Now(), err: err}
	var reply dummyapp.WorkReply
	if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &reply) == nil {
		a.order, a.serviceMs = reply.Order, reply.ServiceMs
	}
	return a
}

// fire sends n GETs concurrently and returns every answer.
func fire(c *http.Client, n int, url func(i int) string) []answer {
	return fireAsync(c, n, url)()
}

// fireAsync starts n concurrent GETs and returns a function that waits for
// them all and returns every answer.
func fireAsync(c *http.Client, n int, url func(i int) string) (wait func() []answer) {
	out := make([]answer, n)
	done := testutil.Concurrently(n, func(i int) { out[i] = get(c, url(i)) })
	return func() []answer {
		done()
		return out
	}
}

// waitQueue polls until the node's queue holds n waiting requests.
func waitQueue(t *testing.T, cl swdv1.ControlClient, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return testutil.Status(t, cl).GetQueueLength() == n },
		20*time.Second, 5*time.Millisecond, "queue never reached %d", n)
}

// waitArrived polls until all n requests sent to the node behind cl have
// reached swd: served by its app (at appAddr), waiting or in flight.
func waitArrived(t *testing.T, cl swdv1.ControlClient, appAddr string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		s := testutil.Status(t, cl)
		return int64(testutil.AppStats(t, appAddr).Served)+s.GetQueueLength()+s.GetInFlight() == n
	}, 10*time.Second, 2*time.Millisecond)
}

func countStatus(as []answer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		if a.err != nil {
			m["error"]++
			continue
		}
		m[fmt.Sprint(a.status)]++
	}
	return m
}

// metricsText fetches a node's admin /metrics as text.
func metricsText(t *testing.T, admin string) string {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}
