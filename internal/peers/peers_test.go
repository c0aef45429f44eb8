package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden configurations in testdata/")

// goldenConfig is a fixed configuration, so renderings are stable.
func goldenConfig() Config {
	c := DefaultConfig()
	c.Listen = "127.0.0.1:18000"
	c.Backends = []string{"127.0.0.1:19000", "127.0.0.1:19001"}
	c.Threads = 2
	return c
}

// testPeers are the registered peers.
func testPeers(t *testing.T) []Peer {
	t.Helper()
	var out []Peer
	for _, n := range Names() {
		p, err := Lookup(n)
		require.NoError(t, err)
		out = append(out, p)
	}
	return out
}

// Every peer's rendered configuration equals its golden file (go test
// -update rewrites them after a deliberate template change).
func TestRenderGolden(t *testing.T) {
	for _, p := range testPeers(t) {
		t.Run(p.Name, func(t *testing.T) {
			got, err := Render(p, goldenConfig(), "/run/swd-peer")
			require.NoError(t, err)
			path := filepath.Join("testdata", p.Name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "missing golden file: go test ./internal/peers/ -update")
			assert.Equal(t, string(want), string(got))
		})
	}
}

// The settings that make each system reach its configuration.
func TestRenderSettings(t *testing.T) {
	cfg := goldenConfig()
	cfg.Concurrency = 3
	cases := []struct {
		peer     string
		contains []string
		absent   []string
	}{
		// the central queue: maxconn m on every server, a queue timeout
		{"haproxy-cq", []string{"balance leastconn", "server app0 127.0.0.1:19000 maxconn 3", "server app1 127.0.0.1:19001 maxconn 3", "timeout queue 30000ms", "maxconn 8000"}, nil},
		// no maxconn on the servers: no queue in the balancer
		{"haproxy-leastconn", []string{"balance leastconn", "server app0 127.0.0.1:19000\n"}, []string{"19000 maxconn"}},
		// consistent hashing on the key header with bounded load, no maxconn
		{"haproxy-hash", []string{"balance hdr(X-User)", "hash-type consistent", "hash-balance-factor 125", "server app0 127.0.0.1:19000\n"}, []string{"19000 maxconn"}},
		// least_conn counted in one zone shared by the workers
		{"nginx-leastconn", []string{"least_conn;", "zone apps 64k;", "server 127.0.0.1:19001 max_fails=0;", "listen 127.0.0.1:18000"}, nil},
		// every host name on the port, bound to loopback only
		{"caddy-leastconn", []string{"http://:18000 {", "bind 127.0.0.1", "reverse_proxy 127.0.0.1:19000 127.0.0.1:19001 {", "lb_policy least_conn", "admin off"}, nil},
	}
	for _, c := range cases {
		t.Run(c.peer, func(t *testing.T) {
			p, err := Lookup(c.peer)
			require.NoError(t, err)
			got, err := Render(p, cfg, "/run/swd-peer")
			require.NoError(t, err)
			for _, s := range c.contains {
				assert.Contains(t, string(got), s)
			}
			for _, s := range c.absent {
				assert.NotContains(t, string(got), s)
			}
		})
	}
}

func TestRenderRejects(t *testing.T) {
	p, err := Lookup("haproxy-cq")
	require.NoError(t, err)
	cases := []struct {
		name   string
		peer   Peer
		mutate func(*Config)
		dir    string
		want   string
	}{
		// no apps to balance over
		{"no backends", p, func(c *Config) { c.Backends = nil }, "/d", "at least one backend"},
		// a backend that would break out of its configuration line
		{"injected backend", p, func(c *Config) { c.Backends = []string{"127.0.0.1:1\n    server evil 10.0.0.1:80"} }, "/d", "backend"},
		// a port out of range
		{"bad port", p, func(c *Config) { c.Backends = []string{"127.0.0.1:70000"} }, "/d", "port"},
		// rendering needs the address it listens on
		{"no listen", p, func(c *Config) { c.Listen = "" }, "/d", "listen address"},
		// m = 0 is no server at all
		{"zero concurrency", p, func(c *Config) { c.Concurrency = 0 }, "/d", "concurrency"},
		// the directory goes into the configuration verbatim
		{"relative dir", p, func(*Config) {}, "rel/dir", "absolute"},
		// a directory with a space would split a directive
		{"dir with space", p, func(*Config) {}, "/a b", "absolute"},
		// an extra backend line is one line
		{"multi-line backend line", Peer{Name: "x", Product: HAProxy, Settings: Settings{Balance: "roundrobin", BackendLines: []string{"a\nb"}}}, func(*Config) {}, "/d", "one line"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := goldenConfig()
			c.mutate(&cfg)
			_, err := Render(c.peer, cfg, c.dir)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestRegistry(t *testing.T) {
	assert.Equal(t, []string{"caddy-leastconn", "haproxy-cq", "haproxy-hash", "haproxy-leastconn", "nginx-leastconn"}, Names())
	_, err := Lookup("f5")
	require.ErrorIs(t, err, ErrUnknownPeer)
	assert.Contains(t, err.Error(), "haproxy-cq", "the message lists the known peers")
	cases := []struct {
		name string
		peer Peer
	}{
		// only HAProxy has a central queue
		{"queue on nginx", Peer{Name: "nginx-cq", Product: Nginx, Settings: Settings{Balance: "least_conn", CentralQueue: true}}},
		// a name is registered once
		{"duplicate", Peer{Name: "haproxy-cq", Product: HAProxy, Settings: Settings{Balance: "leastconn"}}},
		// an algorithm is needed
		{"no balance", Peer{Name: "x", Product: HAProxy}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Panics(t, func() { Register(c.peer) })
		})
	}
}

func TestFindMissing(t *testing.T) {
	_, err := Find(&Product{Name: "nosuch", Binary: "swd-no-such-balancer", Package: "nosuch", Ensure: "scripts/ensure-nosuch.sh"})
	require.ErrorIs(t, err, ErrNotInstalled)
	assert.Contains(t, err.Error(), "scripts/ensure-nosuch.sh", "the message says how to install it")
}

// needProduct skips the test when prod is not installed.
func needProduct(t *testing.T, prod *Product) {
	t.Helper()
	if _, err := Find(prod); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// The product's own validator accepts every rendered configuration (and
// rejects a broken one, so the check can fail).
func TestCheckWithValidator(t *testing.T) {
	for _, p := range testPeers(t) {
		t.Run(p.Name, func(t *testing.T) {
			needProduct(t, p.Product)
			cfg := DefaultConfig()
			cfg.Backends = []string{"127.0.0.1:19000", "127.0.0.1:19001"}
			cfg.Dir = t.TempDir()
			out, err := Check(context.Background(), p, cfg)
			require.NoError(t, err, out)

			bad := p
			bad.Settings.Balance = "no-such-algorithm"
			_, err = Check(context.Background(), bad, cfg)
			require.Error(t, err, "the validator rejects an unknown algorithm")
			assert.Contains(t, err.Error(), "rejects")
		})
	}
}

// countingApp is a backend: /work?ms=X holds X ms and counts requests in
// flight; /healthz answers 200.
type countingApp struct {
	addr              string
	served            atomic.Int64
	inFlight, maxSeen atomic.Int64
}

func startCountingApp(t *testing.T) *countingApp {
	t.Helper()
	a := &countingApp{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	a.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/work" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		n := a.inFlight.Add(1)
		defer a.inFlight.Add(-1)
		for m := a.maxSeen.Load(); n > m && !a.maxSeen.CompareAndSwap(m, n); m = a.maxSeen.Load() {
		}
		d, _ := time.ParseDuration(r.URL.Query().Get("ms") + "ms")
		time.Sleep(d)
		a.served.Add(1)
		w.Header().Set("X-Served-By", a.addr)
		_, _ = io.WriteString(w, "done")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return a
}

// get sends n concurrent GET path requests through addr and returns their
// status codes.
func get(t *testing.T, addr, path string, n int) []int {
	t.Helper()
	codes := make([]int, n)
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 30 * time.Second}
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Get("http://" + addr + path)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	return codes
}

// Each registered peer starts as a child process in front of two real
// backends, passes requests to both, honours (or not) the central queue,
// and stops: the process exits, its port closes and its directory goes.
func TestLifecycle(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			p, err := Lookup(name)
			require.NoError(t, err)
			needProduct(t, p.Product)
			a, b := startCountingApp(t), startCountingApp(t)
			cfg := DefaultConfig()
			cfg.Backends = []string{a.addr, b.addr}
			pr, err := Start(context.Background(), p, cfg)
			require.NoError(t, err)
			defer pr.Stop()
			assert.FileExists(t, filepath.Join(pr.Dir, p.Product.ConfigFile))

			// 8 requests of 300 ms at once: least connections spreads
			// them over both apps; with the central queue each app
			// holds at most m = 1 at a time.
			codes := get(t, pr.Addr, "/work?ms=300", 8)
			for i, c := range codes {
				assert.Equal(t, 200, c, "request %d", i)
			}
			assert.EqualValues(t, 8, a.served.Load()+b.served.Load())
			assert.Positive(t, a.served.Load(), "both apps serve")
			assert.Positive(t, b.served.Load(), "both apps serve")
			if p.Settings.CentralQueue {
				assert.EqualValues(t, 1, a.maxSeen.Load(), "maxconn 1: one request at a time per app")
				assert.EqualValues(t, 1, b.maxSeen.Load(), "maxconn 1: one request at a time per app")
			} else {
				assert.Greater(t, max(a.maxSeen.Load(), b.maxSeen.Load()), int64(1), "no queue in the balancer: apps get several at once")
			}

			require.NoError(t, pr.Stop())
			<-pr.Exited()
			assert.NoError(t, pr.Stop(), "Stop is idempotent")
			_, err = os.Stat(pr.Dir)
			assert.True(t, errors.Is(err, os.ErrNotExist), "the temporary directory is removed")
			_, err = net.DialTimeout("tcp", pr.Addr, time.Second)
			assert.Error(t, err, "nothing listens any more")
		})
	}
}

// A configuration the program refuses at start-up is an error that
// carries its log, not a hang.
func TestStartFailsWithLog(t *testing.T) {
	needProduct(t, HAProxy)
	bad := Peer{Name: "haproxy-bad", Product: HAProxy, Settings: Settings{Balance: "no-such-algorithm"}}
	cfg := DefaultConfig()
	cfg.Backends = []string{"127.0.0.1:19000"}
	_, err := Start(context.Background(), bad, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exited during start-up")
	assert.Contains(t, err.Error(), "balance only supports", "the program's own message is in the error")
}

// Too many connections for the hard limit of open files is refused before
// HAProxy would refuse to start.
func TestStartFileLimit(t *testing.T) {
	needProduct(t, HAProxy)
	p, err := Lookup("haproxy-cq")
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Backends = []string{"127.0.0.1:19000"}
	cfg.MaxConns = 1 << 40
	_, err = Start(context.Background(), p, cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "hard limit")
}

func ExampleRender() {
	p, _ := Lookup("haproxy-cq")
	cfg := DefaultConfig()
	cfg.Listen, cfg.Backends, cfg.Threads = "127.0.0.1:8080", []string{"127.0.0.1:9000"}, 1
	text, _ := Render(p, cfg, "/tmp/haproxy-cq")
	for _, l := range strings.Split(string(text), "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, "server ") || strings.HasPrefix(l, "balance ") {
			fmt.Println(l)
		}
	}
	// Output:
	// balance leastconn
	// server app0 127.0.0.1:9000 maxconn 1
}
