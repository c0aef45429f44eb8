package loadgen

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/peers"
)

// A balancer this machine lacks, registered for the tests.
func init() {
	peers.Register(peers.Peer{Name: "test-missing", Product: &peers.Product{Name: "nosuch", Binary: "swd-test-no-such-balancer", Ensure: "scripts/ensure-nosuch.sh"},
		Settings: peers.Settings{Balance: "leastconn"}})
}

func TestCheckPeers(t *testing.T) {
	installed, skipped, err := CheckPeers([]string{"test-missing"})
	require.NoError(t, err)
	assert.Empty(t, installed)
	require.Len(t, skipped, 1)
	assert.Contains(t, skipped[0], "skipping test-missing: nosuch not installed")
	assert.Contains(t, skipped[0], "scripts/ensure-nosuch.sh")

	_, _, err = CheckPeers([]string{"f5"})
	require.ErrorIs(t, err, peers.ErrUnknownPeer)
}

// A sweep of one SWD-less system: haproxy-cq started by PeerLauncher in
// front of two apps gets every request and spreads them over both.
func TestPeerLauncherSweep(t *testing.T) {
	if _, err := peers.Find(peers.HAProxy); err != nil {
		t.Skipf("skipping: %v", err)
	}
	a, b := newSleepServer(t, "a"), newSleepServer(t, "b")
	var apps []string
	for _, s := range []*sleepServer{a, b} {
		u, err := url.Parse(s.URL)
		require.NoError(t, err)
		apps = append(apps, u.Host)
	}
	c := sweepConfig(t, nil, nil)
	c.Policies, c.Rates = nil, []float64{100}
	c.Run.Duration = 500 * time.Millisecond
	c.Peers, c.PeerStarter = []string{"haproxy-cq"}, PeerLauncher{Apps: apps, Concurrency: 1}
	res, err := Sweep(context.Background(), c)
	require.NoError(t, err)
	require.Len(t, res.Rows, 1)
	assert.Equal(t, "haproxy-cq", res.Rows[0].Policy)
	assert.Zero(t, res.Rows[0].Errors)
	assert.Equal(t, res.Runs[0].Sent, len(a.seen())+len(b.seen()), "every request reached an app through haproxy")
	assert.NotEmpty(t, a.seen())
	assert.NotEmpty(t, b.seen())
	assert.Len(t, res.Runs[0].ServedBy, 2)
}
