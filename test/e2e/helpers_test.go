// Package e2e runs SWD's end-to-end tests: real swd, dummyapp and swdctl
// processes (built by `make build` into bin/) on loopback. Tests skip with a
// message when the binaries are missing.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/swd-project/swd/internal/localcluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// binDir returns the repository's bin/ directory, skipping the test if the
// binaries are not built.
func binDir(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "bin")
	for _, b := range []string{"swd", "dummyapp", "swdctl"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Skipf("skipping: %s not built (run `make build` first): %v", b, err)
		}
	}
	return dir
}

// startCluster starts a local cluster and stops it when the test ends.
func startCluster(t *testing.T, mutate func(*localcluster.Config)) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping end-to-end test in -short mode")
	}
	cfg := localcluster.DefaultConfig()
	cfg.BinDir = binDir(t)
	cfg.LogDir = t.TempDir()
	cfg.ReadyTimeout = 60 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := localcluster.Start(context.Background(), cfg)
	if err != nil {
		dumpLogs(t, cfg.LogDir)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Stop(20 * time.Second)
		if t.Failed() {
			dumpLogs(t, cfg.LogDir)
		}
	})
	return c
}

func dumpLogs(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		t.Logf("== %s (tail)\n%s", e.Name(), b)
	}
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
	resp, err := c.Get(url)
	if err != nil {
		return answer{err: err, at: time.Now()}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return answer{status: resp.StatusCode, servedBy: resp.Header.Get("X-Served-By"), retry: resp.Header.Get("Retry-After"), at: time.Now()}
}

// fire sends n GETs concurrently and returns every answer.
func fire(c *http.Client, n int, url func(i int) string) []answer {
	out := make([]answer, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = get(c, url(i))
		}()
	}
	wg.Wait()
	return out
}

type appStats struct {
	Served      uint64 `json:"served"`
	InFlight    int64  `json:"in_flight"`
	MaxInFlight int64  `json:"max_in_flight"`
}

func stats(t *testing.T, appAddr string) appStats {
	t.Helper()
	resp, err := http.Get("http://" + appAddr + "/stats")
	require.NoError(t, err)
	defer resp.Body.Close()
	var s appStats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

func ctl(t *testing.T, addr string) swdv1.ControlClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return swdv1.NewControlClient(cc)
}

func status(t *testing.T, cl swdv1.ControlClient) *swdv1.StatusResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := cl.Status(ctx, &swdv1.StatusRequest{})
	require.NoError(t, err)
	return s
}

// waitQueue polls until the node's queue holds n waiting requests.
func waitQueue(t *testing.T, cl swdv1.ControlClient, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return status(t, cl).GetQueueLength() == n },
		20*time.Second, 5*time.Millisecond, "queue never reached %d", n)
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
