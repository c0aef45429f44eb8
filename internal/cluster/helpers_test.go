package cluster

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Deadlines for polled conditions. They bound how long a test waits for an
// eventual outcome on a loaded machine under -race; no test asserts that
// anything is fast.
const (
	waitShort = 10 * time.Second
	waitLong  = 30 * time.Second
	poll      = 10 * time.Millisecond
)

// fakeLocal is a node's queue and policy holder.
type fakeLocal struct {
	load, conc atomic.Int64
	policy     atomic.Pointer[PolicyStamp]
	extras     atomic.Pointer[Extras]
}

func newLocal(load int) *fakeLocal {
	l := &fakeLocal{}
	l.load.Store(int64(load))
	l.conc.Store(1)
	l.policy.Store(&PolicyStamp{Name: "nu", Epoch: 1, ActivationInterval: 40 * time.Millisecond})
	l.extras.Store(&Extras{})
	return l
}

func (l *fakeLocal) Load() int           { return int(l.load.Load()) }
func (l *fakeLocal) Concurrency() int    { return int(l.conc.Load()) }
func (l *fakeLocal) Policy() PolicyStamp { return *l.policy.Load() }
func (l *fakeLocal) Extras() Extras      { return *l.extras.Load() }

// testLogger logs to stderr when SWD_TEST_LOG is set, else discards.
func testLogger() *slog.Logger {
	if os.Getenv("SWD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testConfig is a node on a free loopback port.
func testConfig(name string, join ...string) Config {
	cfg := DefaultConfig()
	cfg.NodeName = name
	cfg.GossipAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "127.0.0.1:7" + fmt.Sprint(len(name))
	cfg.Join = join
	cfg.Logger = testLogger()
	return cfg
}

type tnode struct {
	*Cluster
	local *fakeLocal
}

// start starts a member and shuts it down when the test ends.
func start(t *testing.T, cfg Config, local *fakeLocal) tnode {
	t.Helper()
	var ls LocalState
	if local != nil {
		ls = local
	}
	c, err := New(cfg, ls)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown() })
	return tnode{Cluster: c, local: local}
}

// startCluster starts n nodes named prefix-0..n-1; each joins the first.
func startCluster(t *testing.T, prefix string, n int) []tnode {
	t.Helper()
	nodes := make([]tnode, 0, n)
	var seed []string
	for i := range n {
		nodes = append(nodes, start(t, testConfig(fmt.Sprintf("%s-%d", prefix, i), seed...), newLocal(i+1)))
		if i == 0 {
			seed = []string{nodes[0].GossipAddr()}
		}
	}
	waitMembers(t, nodes, n)
	return nodes
}

// waitMembers waits until every node sees n members.
func waitMembers(t *testing.T, nodes []tnode, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, nd := range nodes {
			if nd.Members() != n {
				return false
			}
		}
		return true
	}, waitShort, poll, "members never converged to %d", n)
}

// allKnown reports whether nd's view holds every ring node, all Known.
func allKnown(nd tnode, n int) bool {
	v := nd.View()
	if len(v.Nodes) != n {
		return false
	}
	for _, nl := range v.Nodes {
		if !nl.Known {
			return false
		}
	}
	return true
}

// checkLeaks registers, first so that it runs last, a check that every
// goroutine of this package and of memberlist is gone once the test's
// members are shut down. Stacks are matched by package rather than counted,
// so goroutines of the testing framework or the runtime do not matter.
// (go.uber.org/goleak would do the same; this avoids a new module in the
// shared go.mod for twenty lines.)
func checkLeaks(t *testing.T) {
	t.Cleanup(func() {
		var leaked []string
		ok := assertEventually(waitShort, func() bool {
			leaked = ourGoroutines()
			return len(leaked) == 0
		})
		if !ok {
			t.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

func assertEventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(poll)
	}
}

func ourGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "github.com/hashicorp/memberlist.") ||
			strings.Contains(g, "swd/internal/cluster.(*") {
			out = append(out, g)
		}
	}
	return out
}

// freePort returns a port that was free for both TCP and UDP on 127.0.0.1
// a moment ago. Callers that bind it later retry on a clash.
func freePort(t *testing.T) int {
	t.Helper()
	for range 20 {
		tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		require.NoError(t, err)
		port := tl.Addr().(*net.TCPAddr).Port
		ul, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
		_ = tl.Close()
		if err == nil {
			_ = ul.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}
