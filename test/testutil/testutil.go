// Package testutil holds the helpers SWD's test packages share: finding the
// repository and its built binaries, starting a local cluster whose log
// tails are shown when a test fails, free loopback addresses, gRPC Control
// clients, dummyapp statistics, HTTP calls whose answer body is drained,
// and running requests concurrently or in an open loop.
//
// Concurrency: every function may be called from many goroutines at once,
// and so from parallel tests; FreeAddrs serialises its callers so that no
// two get the same port in one test binary. A SyncBuffer is safe for
// concurrent writers and readers. Concurrently and OpenLoop run f in many
// goroutines at once: f must synchronise what it shares (writing its own
// slice element needs nothing more). The functions that take a testing.TB
// may skip or fail the test, so call them from the test's own goroutine,
// as the testing package requires of Skip and FailNow.
package testutil

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/localcluster"
)

// RepoRoot is the repository's top directory (found from this source
// file's path, so the test binary may run in any directory).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// BinDir returns the repository's bin/ directory, skipping the test if one
// of bins is not built there.
func BinDir(t testing.TB, bins ...string) string {
	t.Helper()
	dir := filepath.Join(RepoRoot(), "bin")
	for _, b := range bins {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Skipf("skipping: %s not built (run `make build` first): %v", b, err)
		}
	}
	return dir
}

// StartCluster starts a local cluster from the binaries in binDir (the
// default configuration with its logs in a temporary directory and a 60 s
// ready timeout, then changed by mutate if it is not nil) and stops it when
// the test ends. The log tails are dumped when the cluster fails to start
// or the test failed.
func StartCluster(t testing.TB, binDir string, mutate func(*localcluster.Config)) *localcluster.Cluster {
	t.Helper()
	cfg := localcluster.DefaultConfig()
	cfg.BinDir = binDir
	cfg.LogDir = t.TempDir()
	cfg.ReadyTimeout = 60 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := localcluster.Start(context.Background(), cfg)
	if err != nil {
		DumpLogs(t, cfg.LogDir)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Stop(20 * time.Second)
		if t.Failed() {
			DumpLogs(t, cfg.LogDir)
		}
	})
	return c
}

// DumpLogs logs the last 4,000 bytes of every file in dir.
func DumpLogs(t testing.TB, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		t.Logf("== %s (tail)\n%s", e.Name(), TailFile(filepath.Join(dir, e.Name()), 4000))
	}
}

// Tail returns the last n bytes of s (all of s if it is shorter).
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TailFile returns the last n bytes of the file at path, for failure
// messages; a file that cannot be read gives "".
func TailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return Tail(string(b), n)
}

// SyncBuffer collects output, such as a child process's; it is safe for
// concurrent use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
