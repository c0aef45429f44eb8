// Package e2e runs SWD's end-to-end tests: real swd, dummyapp and swdctl
// processes (built by `make build` into bin/) on loopback. Tests skip with a
// message when the binaries are missing.
package e2e

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
}

func get(c *http.Client, url string) answer {
	resp, err := testutil.Get(c, url)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	return answer{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By"), retry: resp.Header.Get("Retry-After"), at: time.Now()}
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
