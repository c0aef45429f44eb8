// Package observability runs SWD's observability end-to-end tests: a real
// Prometheus (Debian's prometheus package) scraping a local 4-node cluster,
// and headless Chromium (Debian's chromium) driving the /ui status page,
// plus checks of the deploy/prometheus and deploy/grafana assets. The
// cluster's processes come from bin/ (`make build`); Prometheus and
// Chromium come from PATH, installed by scripts/ensure-prometheus.sh and
// scripts/ensure-chromium.sh (`make test-deps`). Tests skip with a message
// when a binary is missing and cannot be installed.
package observability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
	"github.com/swd-project/swd/test/testutil"
)

// binDir returns bin/, skipping the test if the binaries are not built.
func binDir(t *testing.T) string {
	t.Helper()
	return testutil.BinDir(t, "swd", "dummyapp")
}

// startCluster starts a local cluster (4 nodes, nu, m=1, sleep-mode apps
// unless mutate changes it) and stops it when the test ends.
func startCluster(t *testing.T, mutate func(*localcluster.Config)) *localcluster.Cluster {
	t.Helper()
	return testutil.StartCluster(t, binDir(t), mutate)
}

var (
	ensureMu   sync.Mutex
	ensureDone = map[string]bool{}
)

// ensureTool returns the path of the first of names on PATH. When none is,
// it runs the project's install script (scripts/SCRIPT, which installs
// Debian's package with apt-get) only if the test runs as root and
// SWD_TEST_NO_INSTALL is unset; it never installs anything otherwise. It
// skips the test with a message when the program cannot be had.
func ensureTool(t *testing.T, script string, names ...string) string {
	t.Helper()
	if p := lookAny(names); p != "" {
		return p
	}
	scriptPath := filepath.Join(testutil.RepoRoot(), "scripts", script)
	how := fmt.Sprintf("run `make test-deps` or `sudo %s`", scriptPath)
	switch {
	case os.Geteuid() != 0:
		t.Skipf("skipping: %s not on PATH and the test is not root, so it installs nothing (%s)", names[0], how)
	case os.Getenv("SWD_TEST_NO_INSTALL") != "":
		t.Skipf("skipping: %s not on PATH and SWD_TEST_NO_INSTALL is set (%s)", names[0], how)
	}
	ensureMu.Lock()
	defer ensureMu.Unlock()
	if !ensureDone[script] {
		ensureDone[script] = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "bash", scriptPath).CombinedOutput()
		if len(out) > 3000 {
			out = out[len(out)-3000:]
		}
		t.Logf("%s: err=%v\n%s", script, err, out)
	}
	if p := lookAny(names); p != "" {
		return p
	}
	t.Skipf("skipping: %s is not on PATH and %s could not install it (see the log above; %s)", names[0], script, how)
	return ""
}

func lookAny(names []string) string {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	return ""
}

// startProcess starts a helper program (Prometheus, Chromium) in its own
// process group that dies with the test binary, and kills the whole group
// when the test ends. Its output goes to logPath; the channel closes when
// it exits.
func startProcess(t *testing.T, logPath, bin string, args ...string) <-chan struct{} {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start(), "start %s", bin)
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = f.Close()
		close(done)
	}()
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // any straggler in the group
	})
	return done
}

// httpGetBody fetches a URL and returns its status, headers and body.
func httpGetBody(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, string(b)
}

// answer is one client request's result.
type answer struct {
	status   int
	servedBy string
	err      error
}

func newClient() *http.Client {
	return &http.Client{
		Timeout:   60 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 500, MaxIdleConnsPerHost: 500},
	}
}

func get(ctx context.Context, c *http.Client, url string) answer {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{err: err}
	}
	resp, err := testutil.Do(c, req)
	if err != nil {
		return answer{err: err}
	}
	return answer{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By")}
}

// openLoop sends n GETs to url, one every gap, each in its own goroutine,
// and returns every answer once all are in.
func openLoop(c *http.Client, n int, gap time.Duration, url string) []answer {
	out := make([]answer, n)
	testutil.OpenLoop(n, gap, func(i int) { out[i] = get(context.Background(), c, url) })
	return out
}

func statusCounts(as []answer) map[string]int {
	m := map[string]int{}
	for _, a := range as {
		if a.err != nil {
			m["error: "+strings.SplitN(a.err.Error(), ":", 2)[0]]++
			continue
		}
		m[fmt.Sprint(a.status)]++
	}
	return m
}
