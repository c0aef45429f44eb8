package security

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/test/testutil"
)

// rogue is a gossip member that claims a policy with any epoch.
type rogue struct{ stamp cluster.PolicyStamp }

func (r rogue) Load() int                   { return 0 }
func (r rogue) Concurrency() int            { return 1 }
func (r rogue) Policy() cluster.PolicyStamp { return r.stamp }
func (r rogue) Extras() cluster.Extras      { return cluster.Extras{} }

// A member gossiping policy "none" with epoch MaxInt64 (anyone who reaches
// an unauthenticated gossip port) no longer takes the cluster over: the
// epoch is far ahead of every node's clock, so it is ignored and logged,
// and `swdctl policy set --cluster` still switches every real node. On main
// every node adopted "none" and the switch failed everywhere with "stale
// policy epoch"; and a later switch on one node must still spread by
// gossip. Issue 17, item 5.
func TestRogueEpochIgnored(t *testing.T) {
	binDir(t)
	t.Parallel()
	appA, appB := startApp(t, "app-a"), startApp(t, "app-b")
	a := startSwd(t, swdOpts{Name: "node-a", App: appA, Args: []string{"--policy", "nu"}})
	b := startSwd(t, swdOpts{Name: "node-b", App: appB, Join: a.Gossip, Args: []string{"--policy", "nu"}})

	cfg := cluster.DefaultConfig()
	cfg.NodeName, cfg.Role = "rogue", cluster.RoleNode
	cfg.GossipAddr = testutil.FreeAddr(t)
	cfg.GRPCAddr = "127.0.0.1:1"
	cfg.Join = []string{a.Gossip}
	cl, err := cluster.New(cfg, rogue{cluster.PolicyStamp{Name: "none", Epoch: math.MaxInt64, ActivationInterval: 40 * time.Millisecond}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Shutdown() })

	// Both nodes see the rogue's stamp (so its gossip was applied)...
	for _, n := range []*node{a, b} {
		ctl := testutil.Control(t, n.GRPC)
		require.Eventually(t, func() bool {
			for _, p := range testutil.Status(t, ctl).GetView() {
				if p.GetName() == "rogue" && p.GetEpoch() == math.MaxInt64 {
					return true
				}
			}
			return false
		}, 20*time.Second, 20*time.Millisecond, "%s never saw the rogue's epoch", n.Name)
		// ...and still run nu.
		assert.Equal(t, "nu", testutil.Status(t, ctl).GetPolicy().GetName(), n.Name)
	}
	waitFor(t, a.p, "the rogue's epoch logged as ignored", func() bool {
		return strings.Contains(a.p.out.String(), "ahead of this node's clock")
	})
	// The operator switches the cluster, with the rogue still there.
	out, code := swdctl(t, "--addr", a.GRPC, "policy", "set", "ll", "--cluster")
	t.Log(out)
	for _, n := range []*node{a, b} {
		assert.Equal(t, "ll", testutil.Status(t, testutil.Control(t, n.GRPC)).GetPolicy().GetName(), "%s (swdctl exit %d)", n.Name, code)
	}
	// A switch made on node-a alone still reaches node-b by gossip: the
	// rogue's epoch did not become the highest one node-b waits to beat.
	out, code = swdctl(t, "--addr", a.GRPC, "policy", "set", "nu")
	require.Zero(t, code, out)
	ctlB := testutil.Control(t, b.GRPC)
	require.Eventually(t, func() bool { return testutil.Status(t, ctlB).GetPolicy().GetName() == "nu" }, 20*time.Second, 20*time.Millisecond,
		"node-b never adopted node-a's switch by gossip")
}
