package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cpuset"
	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

// uiNode is the part of /ui/state's nodes this file reads.
type uiNode struct {
	Name   string  `json:"name"`
	Load   int     `json:"load"`
	Known  bool    `json:"known"`
	WorkMs float64 `json:"work_ms"`
}

// peerView is what the node behind admin sees of node name: its gossiped
// load and work.
func peerView(t *testing.T, admin, name string) uiNode {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/ui/state")
	require.NoError(t, err)
	defer resp.Body.Close()
	var st struct {
		Nodes []uiNode `json:"nodes"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&st))
	for _, n := range st.Nodes {
		if n.Name == name {
			return n
		}
	}
	return uiNode{}
}

// TestGossipedWorkTellsHeavyFromLight: two nodes under --load-index work
// (policy none: nothing moves) hold the same number of requests, node-0
// heavy ones and node-1 light ones. Their loads gossip equal, their works
// do not: each node sees the other's predicted work from the routes' learnt
// costs, and status lists both routes' costs within 10 % of the truth.
func TestGossipedWorkTellsHeavyFromLight(t *testing.T) {
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Policy = 2, "none"
		cfg.SwdArgs = []string{"--load-index=work"}
	})
	hc := client()
	n0, n1 := c.Info.Nodes[0], c.Info.Nodes[1]
	const heavyMs, lightMs = 200, 10
	// Teach both nodes both routes: five of each, one at a time. For each
	// node and route, the app's own service times and the client's round
	// trips: what swd measures at the app lies between the two.
	type span struct{ app, client float64 } // sums, ms
	taught := []map[string]*span{{}, {}}
	for i, nd := range c.Info.Nodes {
		for range 5 {
			for _, r := range []struct {
				route string
				ms    int
			}{{"GET /work/heavy", heavyMs}, {"GET /work/light", lightMs}} {
				path := strings.TrimPrefix(r.route, "GET ")
				began := time.Now()
				a := get(hc, fmt.Sprintf("http://%s%s?ms=%d", nd.HTTP, path, r.ms))
				rtt := float64(time.Since(began)) / float64(time.Millisecond)
				require.NoError(t, a.err)
				require.Equal(t, http.StatusOK, a.status)
				sp := taught[i][r.route]
				if sp == nil {
					sp = &span{}
					taught[i][r.route] = sp
				}
				sp.app += a.serviceMs
				sp.client += rtt
			}
		}
	}
	learnt := make([]map[string]float64, 2)
	for i, nd := range c.Info.Nodes {
		routes := map[string]float64{}
		for _, r := range testutil.Status(t, testutil.Control(t, nd.GRPC)).GetRoutes() {
			routes[r.GetName()] = r.GetCostSeconds() * 1000
			assert.EqualValues(t, 5, r.GetSamples(), "%s %s", nd.Name, r.GetName())
		}
		// Below theta samples the statistic is the arithmetic mean of what
		// swd measured at the app: no less than the app's own times (and so
		// than the sleep), no more than the client's round trips. Bounds in
		// the order of events, not in wall-clock speed: they hold however
		// busy the machine is.
		for _, r := range []struct {
			route string
			ms    int
		}{{"GET /work/heavy", heavyMs}, {"GET /work/light", lightMs}} {
			sp := taught[i][r.route]
			require.NotNil(t, sp)
			got := routes[r.route]
			assert.GreaterOrEqual(t, got, float64(r.ms), "%s learnt %s below the sleep: %v", nd.Name, r.route, routes)
			assert.GreaterOrEqual(t, got, sp.app/5-0.001, "%s learnt %s below the app's mean service time: %v", nd.Name, r.route, routes)
			assert.LessOrEqual(t, got, sp.client/5, "%s learnt %s above the client's mean round trip: %v", nd.Name, r.route, routes)
		}
		learnt[i] = routes
	}
	heavy0, light1 := learnt[0]["GET /work/heavy"], learnt[1]["GET /work/light"]
	// Occupy each node's one slot for a few seconds with a request of its
	// kind, then queue three more of the same kind behind it.
	const holdMs = 6000 // long enough to look at the queues on a busy machine
	waits := []func() []answer{
		fireAsync(hc, 1, func(int) string { return fmt.Sprintf("http://%s/work/heavy?ms=%d", n0.HTTP, holdMs) }),
		fireAsync(hc, 1, func(int) string { return fmt.Sprintf("http://%s/work/light?ms=%d", n1.HTTP, holdMs) }),
	}
	waitQueueOrRun(t, n0.GRPC, 0, 1)
	waitQueueOrRun(t, n1.GRPC, 0, 1)
	waits = append(waits,
		fireAsync(hc, 3, func(int) string { return fmt.Sprintf("http://%s/work/heavy?ms=%d", n0.HTTP, heavyMs) }),
		fireAsync(hc, 3, func(int) string { return fmt.Sprintf("http://%s/work/light?ms=%d", n1.HTTP, lightMs) }),
	)
	waitQueueOrRun(t, n0.GRPC, 3, 1)
	waitQueueOrRun(t, n1.GRPC, 3, 1)
	// Both hold 4 requests. node-0's work is its 3 waiting heavies plus
	// the one in service (its remaining prediction: never 0); node-1's is
	// 3 lights plus its one in service (at most one light's cost). Each
	// sees the other's gossiped entry.
	var seen0, seen1 uiNode
	require.Eventually(t, func() bool {
		seen0, seen1 = peerView(t, n1.Admin, n0.Name), peerView(t, n0.Admin, n1.Name)
		return seen0.Known && seen1.Known && seen0.Load == 4 && seen1.Load == 4 &&
			seen0.WorkMs > 3*heavy0 && seen0.WorkMs <= 4*heavy0+0.01 &&
			seen1.WorkMs > 3*light1 && seen1.WorkMs <= 4*light1+0.01
	}, 5*time.Second, 5*time.Millisecond, "node-1 sees node-0 %+v, node-0 sees node-1 %+v", seen0, seen1)
	// 200 ms against 10 ms sleeps: a factor 20 idle, kept with a wide
	// margin however much a busy machine adds to the light ones.
	assert.Greater(t, seen0.WorkMs, 2*seen1.WorkMs, "equal counts, heavy vs light work")
	for _, w := range waits {
		for _, a := range w() {
			require.NoError(t, a.err)
			assert.Equal(t, http.StatusOK, a.status)
		}
	}
}

// waitQueueOrRun polls until the node at grpc has waiting requests queued
// and inFlight in service.
func waitQueueOrRun(t *testing.T, grpcAddr string, waiting, inFlight int64) {
	t.Helper()
	cl := testutil.Control(t, grpcAddr)
	require.Eventually(t, func() bool {
		s := testutil.Status(t, cl)
		return s.GetQueueLength() == waiting && s.GetInFlight() == inFlight
	}, 20*time.Second, 2*time.Millisecond, "queue never reached %d waiting, %d in flight", waiting, inFlight)
}

// threadCPUs reads every thread's allowed CPU list of process pid.
func threadCPUs(t *testing.T, pid int) map[string]string {
	t.Helper()
	dirs, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	require.NoError(t, err)
	require.NotEmpty(t, dirs)
	out := map[string]string{}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "status"))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				out[filepath.Base(d)] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// TestCPUPinning: swd --cpus and dummyapp --cpus pin every thread of the
// process to the list (read back from the kernel), and a bad or
// unavailable list stops the binary with a message naming --cpus.
func TestCPUPinning(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("--cpus is Linux only")
	}
	allowed, err := cpuset.Current()
	require.NoError(t, err)
	cpu := fmt.Sprint(allowed[len(allowed)-1])
	c := startCluster(t, func(cfg *localcluster.Config) {
		cfg.Nodes, cfg.Policy = 1, "none"
		cfg.SwdArgs = []string{"--cpus=" + cpu}
	})
	pid, err := c.PID("node-0")
	require.NoError(t, err)
	a := get(client(), "http://"+c.Info.Nodes[0].HTTP+"/work?ms=1")
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "a pinned swd serves")
	for tid, l := range threadCPUs(t, pid) {
		assert.Equal(t, cpu, l, "swd thread %s", tid)
	}

	bin := binDir(t)
	addr := testutil.FreeAddr(t)
	app := exec.Command(filepath.Join(bin, "dummyapp"), "--listen", addr, "--mode", "sleep", "--cpus", cpu)
	require.NoError(t, app.Start())
	t.Cleanup(func() { _ = app.Process.Kill(); _ = app.Wait() })
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 10*time.Millisecond)
	for tid, l := range threadCPUs(t, app.Process.Pid) {
		assert.Equal(t, cpu, l, "dummyapp thread %s", tid)
	}

	for _, tc := range []struct{ bin, list, want string }{
		{"swd", "x", `--cpus: CPU list element "x" is not a CPU number or range`},
		{"swd", "1023", "--cpus: none of CPUs 1023 is available to this process"},
		{"dummyapp", "3-1", "--cpus: CPU range \"3-1\" runs backwards"},
		{"dummyapp", "1023", "--cpus: none of CPUs 1023 is available to this process"},
	} {
		out, err := exec.Command(filepath.Join(bin, tc.bin), "--cpus", tc.list, "--listen", testutil.FreeAddr(t)).CombinedOutput()
		require.Error(t, err, "%s --cpus %s", tc.bin, tc.list)
		assert.Contains(t, string(out), tc.want, "%s --cpus %s", tc.bin, tc.list)
	}
}
