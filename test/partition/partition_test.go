// Package partition tests SWD under a network partition: four daemons and
// their apps in one process on loopback, with the gossip between two halves
// cut by fault injection in the cluster transport.
package partition

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/dummyapp"
	"github.com/swd-project/swd/internal/node"
	"github.com/swd-project/swd/test/testutil"
)

type member struct {
	name   string
	n      *node.Node
	http   string
	gossip string
	faults *cluster.Faults
}

func startApp(t *testing.T, name string) string {
	t.Helper()
	cfg := dummyapp.DefaultConfig()
	cfg.Mode, cfg.Name = dummyapp.ModeSleep, name
	app, err := dummyapp.New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = app.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return "http://" + ln.Addr().String()
}

// startCluster starts n daemons (m = 1) running policy that all know each
// other's gossip address as seeds.
func startCluster(t *testing.T, n int, policy string) []*member {
	t.Helper()
	ms := make([]*member, n)
	for i := range ms {
		ms[i] = &member{name: fmt.Sprintf("node-%d", i), gossip: testutil.FreeAddr(t), faults: cluster.NewFaults()}
	}
	for i, m := range ms {
		cfg := node.DefaultConfig()
		cfg.NodeName = m.name
		cfg.Policy = policy
		cfg.Listen, cfg.GRPC, cfg.Admin = testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
		cfg.Cluster.GossipAddr = m.gossip
		cfg.Cluster.Faults = m.faults
		for j, o := range ms {
			if j != i {
				cfg.Cluster.Join = append(cfg.Cluster.Join, o.gossip)
			}
		}
		cfg.Proxy.App = startApp(t, m.name)
		cfg.DrainTimeout = 5 * time.Second
		if os.Getenv("PARTITION_DEBUG") != "" {
			cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		}
		nd, err := node.New(cfg)
		require.NoError(t, err)
		require.NoError(t, nd.Start())
		m.n, m.http = nd, cfg.Listen
		t.Cleanup(func() { _ = nd.Shutdown(context.Background()) })
	}
	return ms
}

// sees reports whether m's view knows exactly the named nodes.
func sees(m *member, names ...string) bool {
	v := m.n.Cluster().View()
	known := map[string]bool{}
	for _, nl := range v.Nodes {
		if nl.Known {
			known[nl.Name] = true
		}
	}
	if len(known) != len(names) {
		return false
	}
	for _, n := range names {
		if !known[n] {
			return false
		}
	}
	return true
}

// crossings is the successful outgoing transfers across the cut, by
// "sender>peer": each side's members' swd_transfers_total series for the
// other side's members.
func crossings(t *testing.T, ms []*member) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for i, m := range ms {
		other := []string{"node-2", "node-3"}
		if i >= 2 {
			other = []string{"node-0", "node-1"}
		}
		for peer, v := range crossing(t, m, other...) {
			out[m.name+">"+peer] = v
		}
	}
	return out
}

// crossing is m's successful outgoing transfers to each of the named peers
// that still has its series (a node deletes a departed member's series).
func crossing(t *testing.T, m *member, peers ...string) map[string]float64 {
	t.Helper()
	mfs, err := m.n.Metrics().Registry.Gather()
	require.NoError(t, err)
	want := map[string]bool{}
	for _, p := range peers {
		want[p] = true
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "swd_transfers_total" {
			continue
		}
		for _, s := range mf.GetMetric() {
			if label(s, "direction") == "out" && label(s, "outcome") == "ok" && want[label(s, "peer")] {
				out[label(s, "peer")] += s.GetCounter().GetValue()
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// burst sends n 20 ms requests to one node at once and returns the answers'
// status counts and who served them.
func burst(t *testing.T, hc *http.Client, to *member, n int) (map[int]int, map[string]int) {
	t.Helper()
	var mu sync.Mutex
	codes, servedBy := map[int]int{}, map[string]int{}
	testutil.Concurrently(n, func(int) {
		resp, err := testutil.Get(hc, "http://"+to.http+"/work?ms=20")
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			codes[-1]++
			return
		}
		codes[resp.StatusCode]++
		servedBy[resp.Header.Get("X-Served-By")]++
	})()
	return codes, servedBy
}

// With the gossip between {0,1} and {2,3} cut, no transfer crosses the cut
// once the views have gone stale, every request is answered, and the cluster
// heals once the cut is repaired: under nu (pushes) and steal (pulls; a
// pulled request counts as a transfer out of its origin).
func TestPartitionNoTransferAcrossTheCut(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping partition test in -short mode")
	}
	for _, policy := range []string{"nu", "steal"} {
		t.Run(policy, func(t *testing.T) { partitionNoTransferAcrossTheCut(t, policy) })
	}
}

func partitionNoTransferAcrossTheCut(t *testing.T, policy string) {
	ms := startCluster(t, 4, policy)
	all := []string{"node-0", "node-1", "node-2", "node-3"}
	for _, m := range ms {
		require.Eventually(t, func() bool { return sees(m, all...) }, 30*time.Second, 20*time.Millisecond, "%s never saw everyone", m.name)
	}
	hc := &http.Client{Timeout: 30 * time.Second}

	// Before the cut, a burst on node-0 spreads over the whole cluster.
	codes, served := burst(t, hc, ms[0], 40)
	require.Equal(t, map[int]int{200: 40}, codes)
	t.Logf("before the cut: served by %v", served)

	// Cut: each half drops everything it sends to the other half.
	left, right := ms[:2], ms[2:]
	for _, a := range left {
		a.faults.Block(right[0].gossip, right[1].gossip)
	}
	for _, b := range right {
		b.faults.Block(left[0].gossip, left[1].gossip)
	}
	cutAt := time.Now()
	for _, m := range left {
		require.Eventually(t, func() bool { return sees(m, "node-0", "node-1") }, 30*time.Second, 10*time.Millisecond)
	}
	for _, m := range right {
		require.Eventually(t, func() bool { return sees(m, "node-2", "node-3") }, 30*time.Second, 10*time.Millisecond)
	}
	t.Logf("views went stale across the cut after %s", time.Since(cutAt).Round(time.Millisecond))
	crossBefore := crossings(t, ms)

	// Load on both sides: everything is answered, nothing crosses.
	for _, side := range [][]*member{left, right} {
		codes, served := burst(t, hc, side[0], 40)
		assert.Equal(t, map[int]int{200: 40}, codes)
		for who := range served {
			assert.Contains(t, []string{side[0].name, side[1].name}, who, "a request crossed the cut: %v", served)
		}
	}
	// Compare the series both reads have: memberlist may already have
	// declared the other half dead (on a loaded machine, within the
	// bursts), which deletes its series; the apps' X-Served-By above is
	// checked whatever happened to the series.
	crossAfter := crossings(t, ms)
	for k, after := range crossAfter {
		if before, ok := crossBefore[k]; ok {
			assert.Equal(t, before, after, "transfers %s crossed the cut after the views went stale", k)
		}
	}

	// Hold the cut until memberlist has declared the other half dead, and
	// past the time it keeps gossiping to the dead (5 s): only the reconnect
	// loop can merge the halves after that.
	for _, m := range ms {
		require.Eventually(t, func() bool { return m.n.Cluster().Members() == 2 }, 30*time.Second, 50*time.Millisecond,
			"%s never declared the other half dead", m.name)
	}
	t.Logf("other half declared dead after %s", time.Since(cutAt).Round(time.Millisecond))
	time.Sleep(6 * time.Second) // deliberately outlast memberlist's GossipToTheDeadTime

	// Heal: everyone sees everyone again.
	for _, m := range ms {
		m.faults.Heal()
	}
	healAt := time.Now()
	for _, m := range ms {
		require.Eventually(t, func() bool { return sees(m, all...) }, 60*time.Second, 50*time.Millisecond, "%s never healed", m.name)
	}
	t.Logf("healed after %s", time.Since(healAt).Round(time.Millisecond))
	codes, served = burst(t, hc, ms[0], 40)
	assert.Equal(t, map[int]int{200: 40}, codes)
	t.Logf("after healing: served by %v", served)
}
