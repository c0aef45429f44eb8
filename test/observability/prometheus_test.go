package observability

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/internal/metrics"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
	"github.com/swd-project/swd/test/testutil"
)

// scrapeInterval is the test Prometheus' scrape interval. Prometheus takes
// sub-second intervals (its minimum is 1 ms), so 200 ms keeps the test fast.
const scrapeInterval = 200 * time.Millisecond

// prom is a Prometheus server the test started.
type prom struct {
	base string
	log  string
	hc   *http.Client
}

// startPrometheus runs Prometheus on a free loopback port with a temporary
// storage directory and a generated configuration scraping every node's
// admin address (job "swd", with the node and role target labels that
// deploy/prometheus sets too). It is killed when the test ends.
func startPrometheus(t *testing.T, bin string, nodes []localcluster.NodeInfo) *prom {
	t.Helper()
	dir := t.TempDir()
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\n",
		scrapeInterval, scrapeInterval*3/4, scrapeInterval)
	cfg.WriteString("scrape_configs:\n  - job_name: swd\n    static_configs:\n")
	for _, n := range nodes {
		fmt.Fprintf(&cfg, "      - targets: [%q]\n        labels: {node: %q, role: node}\n", n.Admin, n.Name)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(cfg.String()), 0o644))
	ports, err := localcluster.FreePorts(1)
	require.NoError(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	p := &prom{base: "http://" + addr, log: filepath.Join(dir, "prometheus.log"), hc: &http.Client{Timeout: 5 * time.Second}}
	exited := startProcess(t, p.log, bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=1h",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("== prometheus log (tail)\n%s", testutil.TailFile(p.log, 4000))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := p.hc.Get(p.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited at start-up\n%s", testutil.TailFile(p.log, 4000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 30s (last: %v)\n%s", err, testutil.TailFile(p.log, 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return p
}

type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s sample) float(t *testing.T) float64 {
	t.Helper()
	str, ok := s.Value[1].(string)
	require.True(t, ok, "sample value %v", s.Value)
	f, err := strconv.ParseFloat(str, 64)
	require.NoError(t, err)
	return f
}

// query runs an instant PromQL query through /api/v1/query and returns the
// vector (a scalar comes back as one sample without labels).
func (p *prom) query(t *testing.T, q string) ([]sample, error) {
	t.Helper()
	resp, err := p.hc.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %q: decode: %w", q, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", q, body.ErrorType, body.Error)
	}
	switch body.Data.ResultType {
	case "vector":
		var out []sample
		err := json.Unmarshal(body.Data.Result, &out)
		return out, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(body.Data.Result, &v)
		return []sample{{Value: v}}, err
	default:
		return nil, fmt.Errorf("query %q: result type %s", q, body.Data.ResultType)
	}
}

// byLabel runs q and returns each sample's value keyed by one label ("" for
// a single unlabelled sample).
func (p *prom) byLabel(t *testing.T, q, label string) (map[string]float64, error) {
	t.Helper()
	ss, err := p.query(t, q)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range ss {
		out[s.Metric[label]] = s.float(t)
	}
	return out, nil
}

// nonZero drops zero values: swd creates its known counter label values up
// front at 0, so a series at 0 and a missing one mean the same here.
func nonZero(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if v != 0 {
			out[k] = v
		}
	}
	return out
}

// eventually polls q until it returns want (keyed by label) or the deadline
// passes, and fails with the last answer.
func (p *prom) eventually(t *testing.T, q, label string, want map[string]float64, within time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	var got map[string]float64
	var err error
	for {
		got, err = p.byLabel(t, q, label)
		if err == nil && assert.ObjectsAreEqual(nonZero(want), nonZero(got)) {
			if d := time.Since(start); d > 3*time.Second {
				t.Logf("Prometheus took %s to show %s = %v", d.Round(time.Millisecond), q, want)
			}
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	require.NoError(t, err)
	require.Equal(t, nonZero(want), nonZero(got), "Prometheus query %s (after %s)", q, within)
}

// A real Prometheus scrapes a 4-node cluster; what it reports through its
// HTTP API matches what the test sent and what the clients saw.
func TestPrometheusScrapesCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	bin := ensureTool(t, "ensure-prometheus.sh", "prometheus")
	c := startCluster(t, func(cfg *localcluster.Config) { cfg.Nodes = 4; cfg.Policy = "nu"; cfg.Concurrency = 1 })
	names := make([]string, len(c.Info.Nodes))
	for i, n := range c.Info.Nodes {
		names[i] = n.Name
	}
	p := startPrometheus(t, bin, c.Info.Nodes)

	// Every node is a healthy target, sees the whole cluster and gossips.
	ones := map[string]float64{}
	fours := map[string]float64{}
	for _, n := range names {
		ones[n], fours[n] = 1, 4
	}
	p.eventually(t, `up{job="swd"}`, "node", ones, 20*time.Second)
	p.eventually(t, `swd_cluster_members`, "node", fours, 10*time.Second)
	p.eventually(t, `swd_policy_info{policy="nu"}`, "node", ones, 10*time.Second)
	p.eventually(t, `count(swd_gossip_view_age_seconds)`, "", map[string]float64{"": 12}, 10*time.Second)

	// Phase 1: N requests, all to node-0, under nu at about 2.5x one node's
	// capacity: node-0 hands part of them to the others.
	const n = 150
	hc := newClient()
	answers := openLoop(hc, n, 8*time.Millisecond, "http://"+c.Info.Nodes[0].HTTP+"/work?ms=20")
	require.Equal(t, map[string]int{"200": n}, statusCounts(answers))
	servedBy := map[string]float64{}
	remote := 0
	for _, a := range answers {
		servedBy[a.servedBy]++
		if a.servedBy != names[0] {
			remote++
		}
	}
	t.Logf("answers by X-Served-By: %v (%d of %d transferred)", servedBy, remote, n)
	require.Greater(t, remote, 0, "nu transferred nothing: the test cannot check transfer counts")
	within := 15 * time.Second

	// Transfers: every answer served elsewhere is exactly one successful
	// outgoing transfer from node-0 (max hops 1), and one incoming on its
	// server.
	p.eventually(t, `sum(swd_transfers_total{direction="out",outcome="ok"})`, "",
		map[string]float64{"": float64(remote)}, within)
	wantPeers := map[string]float64{}
	for name, cnt := range servedBy {
		if name != names[0] {
			wantPeers[name] = cnt
		}
	}
	p.eventually(t, `sum by (peer) (swd_transfers_total{direction="out",outcome="ok",node="node-0"})`, "peer", wantPeers, within)
	p.eventually(t, `sum by (node) (swd_transfers_total{direction="in",outcome="ok"})`, "node", wantPeers, within)

	// Requests: each client request is counted once, on the node it reached.
	p.eventually(t, `sum(swd_requests_total)`, "", map[string]float64{"": n}, within)
	p.eventually(t, `sum by (outcome) (swd_requests_total)`, "outcome",
		map[string]float64{"served_local": servedBy[names[0]], "served_remote": float64(remote)}, within)
	p.eventually(t, `sum(swd_request_duration_seconds_count)`, "", map[string]float64{"": n}, within)
	// Every served request waited in some queue: node-0's own, or its
	// server's after the transfer.
	p.eventually(t, `sum(swd_queue_wait_seconds_count)`, "", map[string]float64{"": n}, within)
	// The 20 ms requests took at least 20 ms: p50 latency is at least that.
	p50, err := p.byLabel(t, `histogram_quantile(0.5, sum by (le) (swd_request_duration_seconds_bucket))`, "")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, p50[""], 0.02, "p50 latency %v", p50)
	// Node 0's queue built up while the load ran, and Prometheus saw it.
	maxQ, err := p.byLabel(t, `max_over_time(swd_queue_length{node="node-0"}[1m])`, "")
	require.NoError(t, err)
	assert.Positive(t, maxQ[""], "Prometheus never saw node-0's queue above 0")

	// Every dashboard query parses and evaluates on a real Prometheus, and
	// those that must show data after this load do.
	checkDashboardQueries(t, p)

	// Phase 2: policy none (nothing moves), K long requests to node-1 with
	// m=1: one runs, K-1 wait, and swd_queue_length says exactly that.
	setPolicy(t, c.Info.Nodes[0].GRPC, "none")
	p.eventually(t, `swd_policy_info{policy="none"}`, "node", ones, within)
	const k = 6
	slow := "http://" + c.Info.Nodes[1].HTTP + "/work?ms=30000"
	var wg sync.WaitGroup
	send := func(ctx context.Context, count int) {
		for i := 0; i < count; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				get(ctx, hc, slow)
			}()
		}
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	waitCtx, cancelWait := context.WithCancel(context.Background())
	defer func() { cancelWait(); cancelRun(); wg.Wait() }()
	zeros := map[string]float64{"node-0": 0, "node-1": 0, "node-2": 0, "node-3": 0}
	with := func(v float64) map[string]float64 {
		m := maps.Clone(zeros)
		m["node-1"] = v
		return m
	}
	send(runCtx, 1) // takes node-1's one slot for 30 s
	p.eventually(t, `swd_in_flight`, "node", with(1), within)
	send(waitCtx, k-1) // these wait behind it
	p.eventually(t, `swd_queue_length`, "node", with(k-1), within)
	p.eventually(t, `swd_in_flight`, "node", with(1), within)
	// The waiting clients give up: the queue empties and each of their
	// requests is counted once, as client_gone.
	cancelWait()
	p.eventually(t, `swd_queue_length`, "node", zeros, within)
	p.eventually(t, `sum by (outcome) (swd_requests_total{node="node-1",outcome="client_gone"})`, "outcome",
		map[string]float64{"client_gone": k - 1}, within)
	// The running one's client gives up too: the slot frees and every
	// request of phase 2 has been counted exactly once.
	cancelRun()
	wg.Wait()
	p.eventually(t, `swd_in_flight`, "node", zeros, within)
	p.eventually(t, `sum(swd_requests_total{node="node-1"})`, "", map[string]float64{"": k}, within)

	// Label values stay bounded: peers are node names, outcomes and
	// directions fixed words (see internal/metrics' golden test).
	checkLabelValues(t, p, names)
}

func setPolicy(t *testing.T, grpcAddr, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := testutil.Control(t, grpcAddr).SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: name, Cluster: true})
	require.NoError(t, err)
	for _, res := range r.GetResults() {
		require.True(t, res.GetOk(), "%s: %s", res.GetNode(), res.GetError())
	}
}

// checkLabelValues asserts every value Prometheus stored for SWD's
// labelled families is in the bounded set.
func checkLabelValues(t *testing.T, p *prom, nodes []string) {
	t.Helper()
	allowed := map[string][]string{
		"peer":      append(slices.Clone(nodes), "unknown", "dispatcher"),
		"direction": {"in", "out"},
		"outcome": {
			"served_local", "served_remote", "rejected", "timed_out", "client_gone", "failed",
			"ok", "refused", "retried_locally",
		},
		"reason": append(append([]string{}, metrics.RejectionReasons...), "malformed", "foreign"),
		"policy": {"nu", "none"},
		"edge":   strs(metrics.Edges...),
		"body":   strs(metrics.BodyKinds...),
		"size":   strs(metrics.SizeClasses...),
		// swd_route_cost_seconds: this test sends only GET /work?ms=...
		"route": {"GET /work"},
	}
	for label, values := range allowed {
		ss, err := p.query(t, fmt.Sprintf(`group by (%s) ({__name__=~"swd_.+", %s!=""})`, label, label))
		require.NoError(t, err)
		var got []string
		for _, s := range ss {
			got = append(got, s.Metric[label])
		}
		sort.Strings(got)
		t.Logf("label %s: %v", label, got)
		for _, v := range got {
			assert.Contains(t, values, v, "label %s has unexpected value %q", label, v)
		}
	}
	total, err := p.byLabel(t, `count({__name__=~"swd_.+"})`, "")
	require.NoError(t, err)
	t.Logf("swd_* series in Prometheus for 4 nodes: %v", total[""])
	// Per node: about 190 for the request, queue, transfer-duration and
	// rejection families, 64 for the body-size histograms (4 edges x 2 x 8
	// series), 40 for the hand-off histogram (4 size classes x 10), 28 for
	// the pull idle histogram (2 x 14), and per peer 8 transfer and 4 byte
	// counters (36 with 3 peers): about 340 (1,364 in all when measured).
	assert.Less(t, total[""], 1400.0, "too many swd_* series for a 4-node cluster")
}

// checkDashboardQueries runs every query of deploy/grafana/swd.json on the
// real Prometheus, with Grafana's variables filled in.
func checkDashboardQueries(t *testing.T, p *prom) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "deploy", "grafana", "swd.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1s", "$node", ".*")
	// Panels that show nothing unless something went wrong.
	mayBeEmpty := []string{"swd_rejections_total", "swd_gossip_dropped_total", `outcome!="ok"`}
	count := 0
	for _, pnl := range d.Panels {
		for _, tg := range pnl.Targets {
			q := vars.Replace(tg.Expr)
			require.NotContains(t, q, "$", "panel %q: unknown Grafana variable in %s", pnl.Title, tg.Expr)
			ss, err := p.query(t, q)
			if !assert.NoError(t, err, "panel %q", pnl.Title) {
				continue
			}
			count++
			empty := slices.ContainsFunc(mayBeEmpty, func(s string) bool { return strings.Contains(q, s) })
			if !empty {
				assert.NotEmpty(t, ss, "panel %q: %s returned no data after the load", pnl.Title, q)
			}
		}
	}
	assert.Positive(t, count)
	// The node variable's values: label_values(swd_queue_length, node).
	nodes, err := p.byLabel(t, `group by (node) (swd_queue_length)`, "node")
	require.NoError(t, err)
	assert.Len(t, nodes, 4, "node variable values %v", nodes)
}

// strs lists label values of one of the metrics package's label types.
func strs[T ~string](vs ...T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
