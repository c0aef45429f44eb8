package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

// keyed is one answer to a keyed request.
type keyed struct {
	status   int
	servedBy string
	cache    string
	err      error
}

// keyedGet sends GET /work?ms=ms with key in X-User to the node at addr.
func keyedGet(c *http.Client, addr, key string, ms int) keyed {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/work?ms=%d", addr, ms), nil)
	if err != nil {
		return keyed{err: err}
	}
	req.Header.Set("X-User", key)
	resp, err := c.Do(req)
	if err != nil {
		return keyed{err: err}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return keyed{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By"), cache: resp.Header.Get("X-Cache")}
}

// affinityCluster starts n nodes with key affinity on X-User, the cohort
// order, cache-mode apps (50 keys, 5 ms per miss) and a staleness bound
// long enough that a busy test machine's late gossip never makes a live
// node look gone.
func affinityCluster(t *testing.T, n, m int, policy string) *localcluster.Cluster {
	t.Helper()
	return startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Concurrency, cfg.Policy = n, m, policy
		cfg.NodeArgs = []string{"--affinity=header:X-User", "--cohort", "--cohort-cache=50", "--stale-after=2s"}
		cfg.AppArgs = []string{"--cache-size=50", "--miss-ms=5", "--cache-header=X-User"}
	})
}

func nodeNames(nodes []localcluster.NodeInfo) []string {
	out := make([]string, len(nodes))
	for i, nd := range nodes {
		out[i] = nd.Name
	}
	return out
}

// waitUnknown polls until every node in from sees gone as unknown (or no
// longer a member).
func waitUnknown(t *testing.T, from []localcluster.NodeInfo, gone string) {
	t.Helper()
	for _, nd := range from {
		cl := testutil.Control(t, nd.GRPC)
		require.Eventually(t, func() bool {
			for _, v := range testutil.Status(t, cl).GetView() {
				if v.GetName() == gone && v.GetKnown() {
					return false
				}
			}
			return true
		}, 30*time.Second, 20*time.Millisecond, "%s still sees %s", nd.Name, gone)
	}
}

// TestKeyedRequestsLandHome: every keyed request runs on its key's home
// (rendezvous hash over the ring), whichever node the client called; the
// home's cache then holds the key, so the second round only hits. When a
// node dies, only its keys move, each to its next node.
func TestKeyedRequestsLandHome(t *testing.T) {
	c := affinityCluster(t, 4, 1, "nu")
	hc := client()
	names := nodeNames(c.Info.Nodes)
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
	}
	// Sequential requests, each to another node: loads stay far below the
	// bound, so nothing spills.
	for round := range 2 {
		for i, k := range keys {
			nd := c.Info.Nodes[(i+round)%len(c.Info.Nodes)]
			a := keyedGet(hc, nd.HTTP, k, 1)
			require.NoError(t, a.err)
			require.Equal(t, http.StatusOK, a.status, k)
			assert.Equal(t, names[affinity.Home(k, names)], a.servedBy, "round %d: %s called on %s", round, k, nd.Name)
		}
	}
	var hits, misses uint64
	for _, nd := range c.Info.Nodes {
		st := testutil.AppStats(t, nd.App)
		hits += st.CacheHits
		misses += st.CacheMisses
	}
	assert.Equal(t, uint64(len(keys)), misses, "one miss per key: its first request, at its home")
	assert.Equal(t, uint64(len(keys)), hits, "the second round only hits")

	// node-3 dies: its keys go to their next node; no other key moves.
	require.NoError(t, c.Kill("node-3"))
	require.NoError(t, c.Kill("app-3"))
	alive := c.Info.Nodes[:3]
	waitUnknown(t, alive, "node-3")
	rest := nodeNames(alive)
	moved := 0
	for i, k := range keys {
		before := names[affinity.Home(k, names)]
		want := rest[affinity.Home(k, rest)]
		if before != "node-3" {
			require.Equal(t, before, want, "the hash moved %s although its home lives", k)
		} else {
			moved++
		}
		a := keyedGet(hc, alive[i%3].HTTP, k, 1)
		require.NoError(t, a.err)
		require.Equal(t, http.StatusOK, a.status, k)
		assert.Equal(t, want, a.servedBy, "after node-3 died: %s", k)
	}
	assert.Positive(t, moved, "some keys lived on node-3")
}

// TestHotKeySpills: one key's requests arrive faster than its home serves
// them (the cohort order runs one request per key at a time); once the
// home is past the load bound, arrivals spill to the key's next nodes,
// and no app ever runs the key twice at once although m = 2.
func TestHotKeySpills(t *testing.T) {
	c := affinityCluster(t, 4, 2, "nu")
	names := nodeNames(c.Info.Nodes)
	const hot = "user-hot"
	home := names[affinity.Home(hot, names)]
	rest := make([]string, 0, 3)
	for _, n := range names {
		if n != home {
			rest = append(rest, n)
		}
	}
	second := rest[affinity.Home(hot, rest)]

	hc := client()
	var mu sync.Mutex
	servedBy := map[string]int{}
	// 60 requests of 100 ms, one every 25 ms, over every node: four times
	// what one request at a time can serve.
	testutil.OpenLoop(60, 25*time.Millisecond, func(i int) {
		a := keyedGet(hc, c.Info.Nodes[i%4].HTTP, hot, 100)
		mu.Lock()
		defer mu.Unlock()
		if a.err != nil || a.status != http.StatusOK {
			servedBy[fmt.Sprintf("error %v %d", a.err, a.status)]++
			return
		}
		servedBy[a.servedBy]++
	})
	t.Logf("home %s, next %s; served by %v", home, second, servedBy)
	total := 0
	for by, n := range servedBy {
		require.False(t, strings.HasPrefix(by, "error"), "%s: %d", by, n)
		total += n
	}
	require.Equal(t, 60, total)
	assert.Positive(t, servedBy[home], "the home served the key")
	assert.Positive(t, servedBy[second], "the key spilled to its next node")
	assert.Less(t, servedBy[home], 60, "not everything at home")

	spilled := 0.0
	for _, nd := range c.Info.Nodes {
		spilled += metricValue(t, nd.Admin, `swd_affinity_placements_total{placement="spilled"}`)
		assert.LessOrEqual(t, testutil.AppStats(t, nd.App).MaxInFlight, int64(1), "%s ran the key twice at once", nd.Name)
	}
	assert.Positive(t, spilled, "placements counted as spilled")
}

// metricValue reads one series' value from a node's /metrics.
func metricValue(t *testing.T, admin, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(metricsText(t, admin), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			_, err := fmt.Sscan(v, &f)
			require.NoError(t, err)
			return f
		}
	}
	t.Fatalf("no series %s on %s", series, admin)
	return 0
}
