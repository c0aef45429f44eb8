package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/loadgen"
	"github.com/swd-project/swd/test/testutil"
)

// TestSQSNoStartedSessionFails: paper 001's promise with real processes.
// One node with --admission sqs before a sleep-mode app whose heavy page
// thrashes beyond 2 at once; closed-loop session clients offer about twice
// what the heavy page can serve. New sessions are refused (503 at once) so
// that every session that started completes: none fails after its first
// page.
func TestSQSNoStartedSessionFails(t *testing.T) {
	cl := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Concurrency = 1, 8
		cfg.NodeArgs = []string{"--admission=sqs", "--session-cookie=SID", "--session-max-wait=1s"}
		cfg.AppArgs = []string{"--session-cookie=SID", "--route=/login=10", "--route=/light=5", "--route=/heavy=50,knee=2,power=2"}
	})
	node := cl.Info.Nodes[0]

	// The app sets the cookie on a first page; swd lets it through.
	resp, err := http.Get("http://" + node.HTTP + "/login")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Set-Cookie"), "SID="), "the first page sets the session cookie")

	// The heavy page serves at most 40/s (2 at once, 50 ms); 60 clients
	// with 100 ms think time want about twice that.
	res, err := loadgen.RunSessions(context.Background(), loadgen.SessionConfig{
		Targets: []string{node.HTTP}, Clients: 60, Duration: 5 * time.Second, Warmup: 2 * time.Second,
		Pages: []string{"/login", "/light", "/light", "/heavy"}, Think: 100 * time.Millisecond,
		Timeout: 10 * time.Second, Backoff: 100 * time.Millisecond, Cookie: "SID",
	})
	require.NoError(t, err)
	t.Logf("sqs under overload: %+v", res)
	assert.Positive(t, res.Completed, "sessions complete")
	assert.Positive(t, res.FirstRefused, "overload: new sessions were refused at their first page")
	assert.Zero(t, res.FailedAfterStart, "no session fails after its first page: %v", res.Failures)
	assert.Zero(t, res.FirstFailed, "refusals are answers, not timeouts: %v", res.Failures)

	// The learnt limits and the session counters are on /metrics.
	body := metricsText(t, node.Admin)
	assert.Contains(t, body, `swd_route_limit{route="GET /heavy"}`)
	assert.Contains(t, body, `swd_sessions_total{result="refused"}`)
	// ... and in status (swdctl status's LIMIT column, /ui's routes).
	limits := map[string]int32{}
	for _, r := range testutil.Status(t, testutil.Control(t, node.GRPC)).GetRoutes() {
		limits[r.GetName()] = r.GetLimit()
	}
	assert.Positive(t, limits["GET /heavy"], "status carries the heavy route's learnt limit: %v", limits)
}
