package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/swd-project/swd/internal/peers"
	"github.com/swd-project/swd/internal/stats"
	"github.com/swd-project/swd/loadgen"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// run executes loadgen with args and an environment map.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	code = Main(context.Background(), args, &out, &errb, lookup)
	return code, out.String(), errb.String()
}

// node is a stand-in for a node: GET /work?ms=X sleeps X ms (capped).
func node(t *testing.T, hits *atomic.Int64) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := strconv.ParseFloat(r.URL.Query().Get("ms"), 64)
		if r.URL.Path != "/work" || err != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		hits.Add(1)
		time.Sleep(time.Duration(min(v, 20) * float64(time.Millisecond)))
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// control is a fake Control service recording the policies set.
type control struct {
	swdv1.UnimplementedControlServer
	mu       sync.Mutex
	policies []string
}

func (c *control) SetPolicy(_ context.Context, req *swdv1.SetPolicyRequest) (*swdv1.SetPolicyResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.policies = append(c.policies, req.GetName())
	return &swdv1.SetPolicyResponse{Results: []*swdv1.NodeResult{{Node: "a", Addr: "local", Ok: true}}}, nil
}

func startControl(t *testing.T) (*control, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &control{}
	s := grpc.NewServer()
	swdv1.RegisterControlServer(s, c)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return c, lis.Addr().String()
}

// quick are the flags that make runs short and requests tiny.
var quick = []string{"--workload", "custom", "--mean-ms", "2", "--cv", "0.5", "--warmup", "100ms", "--duration", "300ms",
	"--settle", "0s", "--cooldown", "0s", "--progress", "none"}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		// Unknown subcommand.
		{"unknown command", []string{"bogus"}, "unknown command"},
		// Unknown flag.
		{"unknown flag", []string{"run", "--bogus"}, "unknown flag"},
		// A cq lookahead below -1 (the registered one's).
		{"bad cq ahead", []string{"sim", "--policies", "cq", "--rates", "10", "--cq-ahead", "-5"}, "--cq-ahead"},
		// A bad value for a typed flag.
		{"bad duration", []string{"run", "--targets", "a:1", "--duration", "soon"}, "duration"},
		// No cluster at all.
		{"no cluster", []string{"run"}, "--targets"},
		// A preset workload with a custom parameter.
		{"cv with preset", []string{"run", "--targets", "a:1", "--cv", "3"}, "--workload custom"},
		// Unknown workload.
		{"unknown workload", []string{"run", "--targets", "a:1", "--workload", "heavy"}, "unknown workload"},
		// Rates must be numbers.
		{"bad rates", []string{"sweep", "--targets", "a:1", "--rates", "40,fast"}, "rate"},
		// Percentiles must be ones the CSV holds.
		{"bad percentile", []string{"compare", "--targets", "a:1", "--percentiles", "90"}, "not supported"},
		// --local with explicit addresses.
		{"local and targets", []string{"compare", "--local", "4", "--targets", "a:1"}, "--local starts its own cluster"},
		// rr needs a dispatcher.
		{"rr without dispatcher", []string{"compare", "--targets", "a:1", "--control", "a:2", "--policies", "rr"}, "--dispatcher"},
		// Switching needs a control address.
		{"no control", []string{"compare", "--targets", "a:1", "--policies", "nu"}, "--control"},
		// Unknown policy.
		{"unknown policy", []string{"compare", "--targets", "a:1", "--control", "a:2", "--policies", "best"}, "best"},
		// A limit source the sweep does not measure.
		{"limit source", []string{"compare", "--targets", "a:1", "--control", "a:2", "--policies", "nu", "--rates", "40", "--limit-from", "nu@320"}, "does not measure"},
		// Peers front the local cluster's apps: no --local, no peers.
		{"peers without local", []string{"compare", "--targets", "a:1", "--control", "a:2", "--policies", "nu", "--peers", "haproxy-cq"}, "--peers needs --local"},
		// Unknown peer, with the known ones.
		{"unknown peer", []string{"compare", "--local", "2", "--policies", "nu", "--peers", "f5"}, "haproxy-cq"},
		// A peer may not share a policy's label.
		{"peer named like a policy", []string{"compare", "--local", "2", "--policies", "nu", "--peers", "nu"}, "listed twice"},
		// The reference must be measured.
		{"reference not measured", []string{"compare", "--local", "2", "--policies", "nu", "--reference", "ct"}, "--reference ct"},
		// m = 0 is no app at all.
		{"zero concurrency", []string{"compare", "--local", "2", "--concurrency", "0"}, "--concurrency"},
		// The limit may come from a peer, but only a measured one.
		{"limit from unmeasured peer", []string{"compare", "--local", "2", "--policies", "nu", "--rates", "40", "--limit-from", "haproxy-cq@40"}, "does not measure"},
		// The swd and dummyapp flags of a keyed run configure a cluster
		// loadgen starts.
		{"affinity without local", []string{"run", "--targets", "a:1", "--affinity", "header:X-User"}, "needs --local"},
		{"cache without local", []string{"run", "--targets", "a:1", "--cache-size", "50"}, "needs --local"},
		// The cohort order needs keys to order by.
		{"cohort without affinity", []string{"run", "--local", "2", "--cohort"}, "give --affinity too"},
		// swd would read a header the keys are not in.
		{"affinity header", []string{"run", "--local", "2", "--keys", "5", "--affinity", "header:X-Other"}, "--key-header X-User"},
		// A bad key source.
		{"affinity source", []string{"run", "--local", "2", "--affinity", "query:u"}, "header:NAME or cookie:NAME"},
		// Zipf needs s above 1.
		{"zipf s", []string{"run", "--targets", "a:1", "--keys", "10", "--key-dist", "zipf", "--key-zipf-s", "0.5"}, "--key-zipf-s"},
		// HAProxy's hash reads X-User.
		{"hash peer header", []string{"compare", "--local", "2", "--policies", "nu", "--peers", "haproxy-hash", "--keys", "5", "--key-header", "X-Other"}, "haproxy-hash hashes the X-User header"},
		// Both limits.
		{"both limits", []string{"capacity", "--limit", "1s", "--limit-from", "nu@1", "x.csv"}, "not both"},
		// capacity without its file.
		{"capacity without file", []string{"capacity", "--limit", "1s"}, "one results CSV"},
		// capacity without a limit.
		{"capacity without limit", []string{"capacity", "x.csv"}, "no limit"},
		// Output format.
		{"bad output", []string{"capacity", "--limit", "1s", "-o", "xml", "x.csv"}, "-o table or -o json"},
		// A bad value from the environment is a usage error too.
		{"bad env", []string{"capacity", "--limit", "1s", "x.csv"}, "LOADGEN_MAX_ERROR_RATE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			if c.name == "bad env" {
				env["LOADGEN_MAX_ERROR_RATE"] = "lots"
			}
			code, stdout, stderr := run(t, env, c.args...)
			assert.Equal(t, 2, code, "usage errors exit 2; stderr: %s", stderr)
			assert.Empty(t, stdout)
			assert.Contains(t, stderr, c.want)
			assert.Contains(t, stderr, "--help", "the message says where to look")
		})
	}
}

func TestRunCommandWritesEverything(t *testing.T) {
	var hits atomic.Int64
	a, b := node(t, &hits), node(t, &hits)
	out := t.TempDir()
	args := append([]string{"run", "--targets", a + "," + b, "--rate", "80", "--out", out, "-o", "json"}, quick...)
	code, stdout, stderr := run(t, nil, args...)
	require.Equal(t, 0, code, stderr)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Rows, 1)
	row := rep.Rows[0]
	assert.Equal(t, "current", row.Policy)
	assert.Equal(t, 80.0, row.Rate)
	assert.Positive(t, row.Requests)
	assert.Zero(t, row.Errors)
	assert.Equal(t, "custom", rep.Workload.Name)
	assert.Equal(t, []float64{95, 99, 99.5}, rep.Percentiles)
	assert.Positive(t, hits.Load())
	for _, f := range []string{"results.csv", "report.json", "rt_mean.png", "rt_p95.png", "rt_p99.png", "rt_p995.png", filepath.Join("current_80", "results.bin")} {
		assert.FileExists(t, filepath.Join(out, f))
	}
	rows, err := loadgen.ReadCSVFile(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	require.Len(t, rows, 1)
	assert.Equal(t, row.Requests, rows[0].Requests)
}

func TestCompareCommand(t *testing.T) {
	var nodeHits, dispHits atomic.Int64
	a, b := node(t, &nodeHits), node(t, &nodeHits)
	d := node(t, &dispHits)
	ctl, ctlAddr := startControl(t)
	args := append([]string{"compare", "--targets", a + "," + b, "--dispatcher", d, "--control", ctlAddr,
		"--policies", "rr,nu", "--rates", "40,80", "--percentiles", "95,99", "--limit-from", "nu@80", "--out", ""}, quick...)
	code, stdout, stderr := run(t, nil, args...)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, []string{"rr", "nu"}, ctl.policies, "the cluster is switched to each policy in turn")
	assert.Positive(t, dispHits.Load(), "rr goes through the dispatcher")
	assert.Positive(t, nodeHits.Load(), "nu goes to the nodes")
	for _, want := range []string{
		"loadgen compare: rr,nu × 40,80 req/s on 2 nodes",
		"mean response time (ms)",
		"95th percentile response time (ms)",
		"99th percentile response time (ms)",
		"capacity (req/s)",
		"limits: nu's PRT at 80 req/s",
	} {
		assert.Contains(t, stdout, want)
	}
	// The table's blocks, in order. "max send lag" is there only when this
	// machine fell behind the load schedule (as it does under load), and
	// then the note says so; every other block is always there.
	const (
		mean     = "mean response time (ms), policies × rate (req/s)"
		p95      = "95th percentile response time (ms)"
		p99      = "99th percentile response time (ms)"
		lag      = "max send lag (ms)"
		capacity = "capacity (req/s): highest rate whose PRT stays within the limit"
	)
	blocks := map[string]tableBlock{}
	var titles []string
	for _, b := range tableBlocks(stdout) {
		blocks[b.title] = b
		titles = append(titles, b.title)
	}
	want := []string{mean, p95, p99, capacity}
	if _, late := blocks[lag]; late {
		want = []string{mean, p95, p99, lag, capacity}
		assert.Contains(t, stdout, "this machine fell behind the schedule")
	}
	assert.Equal(t, want, titles, "the table's blocks, in order")
	for _, title := range want {
		b := blocks[title]
		if title != capacity {
			assert.Equal(t, []string{"policy", "40", "80"}, b.header, "%s: a column per rate", title)
		}
		require.Len(t, b.rows, 2, "%s: one row per policy", title)
		for i, p := range []string{"rr", "nu"} {
			row := b.rows[i]
			require.Len(t, row, 3, "%s: %s, then a cell per rate (or per limit)", title, p)
			assert.Equal(t, p, row[0], "%s: policies in the order given", title)
			if title == capacity {
				continue // "46.6", "< 40" or "≥ 80"
			}
			for _, cell := range row[1:] {
				_, err := strconv.ParseFloat(cell, 64)
				assert.NoError(t, err, "%s: %s has a number per rate, not %q", title, p, cell)
			}
		}
	}
}

// cells splits a table line at runs of two or more spaces.
func cells(line string) []string {
	var out []string
	for _, c := range strings.Split(line, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// tableBlock is one block of a table report: its title, its header (the
// word "policy" and then the column names) and its rows (a policy and then
// its cells).
type tableBlock struct {
	title  string
	header []string
	rows   [][]string
}

// tableBlocks parses a table report (loadgen.Report.WriteTable) into its
// policies × columns blocks, in order. A block is a title line, a header line
// starting with "policy", then one line per policy up to a blank line or a
// "key: value" line; cells are separated by two or more spaces (a cell such
// as "< 40" holds one).
func tableBlocks(out string) []tableBlock {
	var blocks []tableBlock
	for _, chunk := range strings.Split(out, "\n\n") {
		lines := strings.Split(chunk, "\n")
		if len(lines) < 2 || !strings.HasPrefix(strings.TrimSpace(lines[1]), "policy") {
			continue
		}
		b := tableBlock{title: lines[0], header: cells(lines[1])}
		for _, l := range lines[2:] {
			l = strings.TrimSpace(l)
			if l == "" || strings.HasSuffix(strings.Fields(l)[0], ":") {
				break
			}
			b.rows = append(b.rows, cells(l))
		}
		blocks = append(blocks, b)
	}
	return blocks
}

func TestCapacityCommand(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "results.csv")
	require.NoError(t, loadgen.WriteCSVFile(csv, []loadgen.Row{
		{Policy: "ct", Rate: 40, Requests: 100, MeanMs: 40, P50Ms: 30, P95Ms: 100, P99Ms: 300, P995Ms: 400},
		{Policy: "ct", Rate: 120, Requests: 100, MeanMs: 50, P50Ms: 35, P95Ms: 150, P99Ms: 700, P995Ms: 900},
		{Policy: "nu", Rate: 40, Requests: 100, MeanMs: 40, P50Ms: 30, P95Ms: 100, P99Ms: 200, P995Ms: 300},
		{Policy: "nu", Rate: 120, Requests: 100, MeanMs: 50, P50Ms: 35, P95Ms: 150, P99Ms: 400, P995Ms: 500},
	}))
	// ct crosses 500 ms between 40 (300) and 120 (700): 40 + 200/400*80 = 80.
	code, stdout, stderr := run(t, nil, "capacity", "--percentile", "99", "--limit", "500ms", "-o", "json", csv)
	require.Equal(t, 0, code, stderr)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Capacities, 2)
	assert.Equal(t, loadgen.Capacity{Policy: "ct", Percentile: 99, LimitMs: 500, Rate: 80, Bound: stats.Interpolated}, rep.Capacities[0])
	assert.Equal(t, loadgen.Capacity{Policy: "nu", Percentile: 99, LimitMs: 500, Rate: 120, Bound: stats.AtLeast}, rep.Capacities[1])

	// The same from the environment and a config file, as a table with plots.
	cfg := filepath.Join(dir, "loadgen.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte("percentiles: 99\nout: "+filepath.Join(dir, "plots")+"\n"), 0o644))
	code, stdout, stderr = run(t, map[string]string{"LOADGEN_LIMIT": "500ms", "LOADGEN_CONFIG": cfg}, "capacity", csv)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "99th ≤ 500.00ms")
	assert.Contains(t, stdout, "80.0")
	assert.Contains(t, stdout, "≥ 120")
	assert.FileExists(t, filepath.Join(dir, "plots", "capacity.png"))

	// A missing file is a runtime error (exit 1).
	code, _, stderr = run(t, nil, "capacity", "--limit", "500ms", filepath.Join(dir, "none.csv"))
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "open results csv")
}

func TestSimCommand(t *testing.T) {
	out := t.TempDir()
	code, stdout, stderr := run(t, nil, "sim", "--nodes", "4", "--policies", "rr,nu,central", "--rates", "20,40",
		"--duration", "5s", "--warmup", "1s", "--limit-from", "nu@40", "--out", out, "-o", "json", "--progress", "none")
	require.Equal(t, 0, code, stderr)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Rows, 6)
	assert.Equal(t, "central", rep.Rows[5].Policy)
	assert.Len(t, rep.Capacities, 3*3)
	require.Len(t, rep.Blocks, 1)
	assert.Equal(t, "transfers per request", rep.Blocks[0].Title)
	for _, f := range []string{"results.csv", "report.json", "rt_mean.png", "capacity.png"} {
		assert.FileExists(t, filepath.Join(out, f))
	}

	// Same seed, same numbers.
	code, again, _ := run(t, nil, "sim", "--nodes", "4", "--policies", "rr,nu,central", "--rates", "20,40",
		"--duration", "5s", "--warmup", "1s", "--limit-from", "nu@40", "--out", out, "-o", "json", "--progress", "none")
	require.Equal(t, 0, code)
	assert.Equal(t, stdout, again)
}

// TestSimCQAhead: --cq-ahead 0 simulates cq without its lookahead, and
// with a slow dispatch round trip (--transfer-delay 3ms, --control-delay
// 1ms) near saturation the registered cq, which sends requests ahead
// when its FIFO is deep, answers faster on average (the same requests).
func TestSimCQAhead(t *testing.T) {
	mean := func(extra ...string) float64 {
		args := append([]string{"sim", "--nodes", "4", "--policies", "cq", "--workload", "custom", "--mean-ms", "20",
			"--cv", "1", "--rates", "190", "--duration", "20s", "--warmup", "2s", "--transfer-delay", "3ms",
			"--control-delay", "1ms", "--out", "", "-o", "json", "--progress", "none"}, extra...)
		code, stdout, stderr := run(t, nil, args...)
		require.Equal(t, 0, code, stderr)
		var rep loadgen.Report
		require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
		require.Len(t, rep.Rows, 1)
		return rep.Rows[0].MeanMs
	}
	strict, ahead := mean("--cq-ahead", "0"), mean()
	assert.Less(t, ahead, strict, "sending ahead should hide the dispatch round trip near saturation")
}

// repoRoot finds the module root (the directory holding go.mod).
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "no go.mod above the test")
		dir = parent
	}
}

// TestCompareLocalIntegration runs `loadgen compare --local` against real
// swd and swdctl binaries from bin/ (make build). It is skipped when they
// are missing, and in -short mode.
func TestCompareLocalIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: starts a real local cluster")
	}
	root := repoRoot(t)
	for _, b := range []string{"swd", "swdctl", "dummyapp"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			t.Skipf("bin/%s is missing: run `make build` to enable this test", b)
		}
	}
	out := t.TempDir()
	args := []string{"compare", "--local", "3", "--swdctl", filepath.Join(root, "bin", "swdctl"),
		"--policies", "rr,ct,ll,nu", "--rates", "20,40", "--scale", "0.25",
		"--warmup", "300ms", "--duration", "1s", "--settle", "300ms", "--cooldown", "200ms",
		"--limit-from", "nu@40", "--percentiles", "95,99", "--out", out, "-o", "json", "--progress", "lines"}
	code, stdout, stderr := run(t, nil, args...)
	require.Equal(t, 0, code, stderr)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Rows, 8)
	for _, r := range rep.Rows {
		assert.Positive(t, r.Requests, "%s@%v", r.Policy, r.Rate)
		assert.False(t, r.Failed(0.01), "%s@%v: %d of %d failed", r.Policy, r.Rate, r.Errors, r.Requests)
	}
	assert.Len(t, rep.Capacities, 4*2)
	assert.FileExists(t, filepath.Join(out, "results.csv"))
	assert.FileExists(t, filepath.Join(out, "rr_20", "results.bin"))
	assert.Contains(t, stderr, "stopping the local cluster")
}

// TestComparePeersLocalIntegration runs `loadgen compare --local 2` with
// one SWD policy and every installed peer on real binaries: each peer is
// started in front of the cluster's apps, gets the same requests, has its
// rows, capacities and a ratio to haproxy-cq. Skipped without bin/ (make
// build), without any peer installed (scripts/ensure-haproxy.sh), and in
// -short mode.
func TestComparePeersLocalIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: starts a real local cluster and peers")
	}
	root := repoRoot(t)
	for _, b := range []string{"swd", "swdctl", "dummyapp"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			t.Skipf("bin/%s is missing: run `make build` to enable this test", b)
		}
	}
	installed, skipped, err := loadgen.CheckPeers(loadgen.PeerNames())
	require.NoError(t, err)
	if !slices.Contains(installed, "haproxy-cq") {
		t.Skipf("haproxy is not installed (run scripts/ensure-haproxy.sh as root): %v", skipped)
	}
	out := t.TempDir()
	args := []string{"compare", "--local", "2", "--swdctl", filepath.Join(root, "bin", "swdctl"),
		"--policies", "nu", "--peers", strings.Join(installed, ","), "--rates", "20", "--scale", "0.25",
		"--warmup", "300ms", "--duration", "1s", "--settle", "200ms", "--cooldown", "200ms",
		"--limit", "1s", "--percentiles", "99", "--out", out, "-o", "json", "--progress", "lines"}
	code, stdout, stderr := run(t, nil, args...)
	require.Equal(t, 0, code, stderr)
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	want := append([]string{"nu"}, installed...)
	assert.Equal(t, want, loadgen.Policies(rep.Rows), "one row per system, policies first")
	for _, r := range rep.Rows {
		assert.Positive(t, r.Requests, r.Policy)
		assert.Zero(t, r.Errors, "%s: every request answered by an app through it", r.Policy)
	}
	assert.Equal(t, "haproxy-cq", rep.Reference, "haproxy-cq is the default reference")
	require.Len(t, rep.Ratios, len(want))
	for _, x := range rep.Ratios {
		if x.Policy == "haproxy-cq" {
			assert.Equal(t, "1.00", x.String())
		}
	}
	rows, err := loadgen.ReadCSVFile(filepath.Join(out, "results.csv"))
	require.NoError(t, err)
	assert.Equal(t, want, loadgen.Policies(rows), "every system in the CSV")
	assert.FileExists(t, filepath.Join(out, "haproxy-cq_20", "results.bin"))
	assert.FileExists(t, filepath.Join(out, "capacity.png"))
	for _, p := range installed {
		assert.Contains(t, stderr, "starting "+p+" in front of the apps")
	}
}

// missingPeer is registered for the tests: its program is not installed.
func init() {
	peers.Register(peers.Peer{Name: "test-missing", Description: "a balancer this machine lacks",
		Product:  &peers.Product{Name: "nosuch", Binary: "swd-test-no-such-balancer", Package: "nosuch", Ensure: "scripts/ensure-nosuch.sh"},
		Settings: peers.Settings{Balance: "leastconn"}})
}

// A peer whose program is missing is skipped with one line saying how to
// install it, before anything starts; as the reference it gives no ratios,
// as the limit source no capacities (the rest is still measured).
func TestComparePeerSkipped(t *testing.T) {
	code, _, stderr := run(t, nil, "compare", "--local", "2", "--swdctl", "/nonexistent/swdctl", "--policies", "nu",
		"--peers", "test-missing", "--reference", "test-missing", "--limit-from", "test-missing@40", "--rates", "40", "--progress", "none", "--out", "")
	assert.Equal(t, 1, code, "then the cluster fails to start: no swdctl")
	assert.Contains(t, stderr, "loadgen: skipping test-missing: nosuch not installed: no swd-test-no-such-balancer on PATH (install it with `sudo bash scripts/ensure-nosuch.sh`")
	assert.Contains(t, stderr, "no ratios: the reference test-missing is skipped")
	assert.Contains(t, stderr, "no capacities: the limit source test-missing is skipped")
	assert.Contains(t, stderr, "swdctl not found", "the skip came first")
}

// TestRunKeyedLocalIntegration is the command, small: a keyed
// workload on a local cluster with affinity, the cohort order and
// cache-mode apps; the report carries the hit ratio. Skipped without bin/
// and in -short mode.
func TestRunKeyedLocalIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode: starts a real local cluster")
	}
	root := repoRoot(t)
	for _, b := range []string{"swd", "swdctl", "dummyapp"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			t.Skipf("bin/%s is missing: run `make build` to enable this test", b)
		}
	}
	args := []string{"run", "--local", "2", "--swdctl", filepath.Join(root, "bin", "swdctl"),
		"--affinity", "header:X-User", "--cohort", "--keys", "20", "--cache-size", "10", "--miss-ms", "2",
		"--rate", "20", "--scale", "0.05", "--warmup", "1s", "--duration", "1s",
		"--percentiles", "99", "--out", "", "-o", "json", "--progress", "none"}
	code, stdout, stderr := run(t, nil, args...)
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stderr, "--node-arg=--affinity=header:X-User --node-arg=--cohort=true --node-arg=--cohort-cache=10 --app-arg=--cache-size=10", "the cluster got the flags")
	var rep loadgen.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.Len(t, rep.Rows, 1)
	assert.Zero(t, rep.Rows[0].Errors)
	var hit *loadgen.Block
	for i := range rep.Blocks {
		if strings.HasPrefix(rep.Blocks[i].Title, "cache hit ratio") {
			hit = &rep.Blocks[i]
		}
	}
	require.NotNil(t, hit, "a hit-ratio block: %+v", rep.Blocks)
	require.Len(t, hit.Cells, 1)
	// 20 keys over 2 nodes, 10 cached per app: with affinity each app sees
	// its ~10 keys, which fit, so nearly every lookup after the warm-up hits.
	assert.Greater(t, hit.Cells[0].Value, 0.5)
}
