package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestJoinAndFreshView: three nodes join, agree on the ring, and in steady
// state every node holds every peer's current load, younger than three
// gossip intervals.
func TestJoinAndFreshView(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "fresh", 3)
	require.NotEmpty(t, ourGoroutines(), "the leak check sees running members")
	nodes[0].local.load.Store(5)
	nodes[1].local.load.Store(0)
	nodes[2].local.load.Store(9)
	nodes[2].local.conc.Store(2)
	interval := DefaultConfig().GossipInterval

	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			v := nd.View()
			if len(v.Nodes) != 3 || v.Nodes[0].Load != 5 || v.Nodes[1].Load != 0 || v.Nodes[2].Load != 9 || v.Nodes[2].Concurrency != 2 {
				return false
			}
			for i, nl := range v.Nodes {
				if !nl.Known || (i != v.Self && nl.Age >= 3*interval) {
					return false
				}
			}
			return true
		}, waitShort, poll, "%s never saw a fresh, correct view", nd.cfg.NodeName)
		v := nd.View()
		assert.Equal(t, []string{"fresh-0", "fresh-1", "fresh-2"}, nd.Ring())
		assert.Equal(t, slices.Index(nd.Ring(), nd.cfg.NodeName), v.Self)
		assert.Zero(t, v.Nodes[v.Self].Age, "own entry is live")
	}

	// Peers carry what memberlist meta and gossip say.
	p, ok := nodes[0].Peer("fresh-2")
	require.True(t, ok)
	assert.Equal(t, "fresh-2", p.Name)
	assert.Equal(t, nodes[2].GossipAddr(), p.GossipAddr)
	assert.Equal(t, nodes[2].cfg.GRPCAddr, p.GRPCAddr)
	assert.Equal(t, RoleNode, p.Role)
	assert.Equal(t, 2, p.RingID)
	assert.False(t, p.Self)
	assert.Equal(t, PolicyStamp{Name: "nu", Epoch: 1, ActivationInterval: 40 * time.Millisecond}, p.Policy)
	self, ok := nodes[0].Peer("fresh-0")
	require.True(t, ok)
	assert.True(t, self.Self && self.Known)
	assert.Equal(t, 5, self.Load)
	assert.Len(t, nodes[1].Peers(), 3)
	assert.True(t, nodes[1].IsMember("fresh-0"))
	assert.False(t, nodes[1].IsMember("nobody"))
	_, ok = nodes[1].Peer("nobody")
	assert.False(t, ok)

	st := nodes[0].Stats()
	assert.Positive(t, st.MsgsSent)
	assert.Positive(t, st.MsgsReceived)
	assert.Positive(t, st.EntriesApplied)
	assert.Positive(t, st.PacketsSent)
	assert.EqualValues(t, 3, st.MembersJoined)
	assert.Zero(t, st.DroppedMalformed+st.DroppedForeign)
}

// TestExtrasInView: what a node gossips beyond its load reaches its peers'
// views and Peers: a head age grows by the entry's age, an unavailable node
// is left out of plans (not Known) and shows as such, and work is carried.
func TestExtrasInView(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "ext", 2)
	nodes[1].local.load.Store(4)
	nodes[1].local.extras.Store(&Extras{HeadAge: 30 * time.Millisecond, Work: 90 * time.Millisecond})
	require.Eventually(t, func() bool {
		v := nodes[0].View()
		return len(v.Nodes) == 2 && v.Nodes[1].Load == 4 && v.Nodes[1].Work == 90*time.Millisecond
	}, waitShort, poll, "ext-0 never saw ext-1's work")
	v := nodes[0].View()
	nl := v.Nodes[1]
	assert.True(t, nl.Known)
	assert.False(t, nl.Unavailable)
	assert.Equal(t, 30*time.Millisecond+nl.Age, nl.HeadAge, "head age = carried head + the entry's age")
	// Self reads its own extras live.
	self := nodes[1].View()
	assert.Equal(t, 30*time.Millisecond, self.Nodes[self.Self].HeadAge)

	// The app goes unready: peers stop counting the node as a target.
	nodes[1].local.extras.Store(&Extras{Unavailable: true})
	require.Eventually(t, func() bool {
		nl := nodes[0].View().Nodes[1]
		return nl.Unavailable && !nl.Known && nl.HeadAge == 0 && nl.Work == 0
	}, waitShort, poll, "ext-0 never saw ext-1 unavailable")
	p, ok := nodes[0].Peer("ext-1")
	require.True(t, ok)
	assert.Equal(t, "unavailable", p.State)
	assert.True(t, p.Unavailable)
	self = nodes[1].View()
	assert.True(t, self.Nodes[self.Self].Known && self.Nodes[self.Self].Unavailable, "self stays Known, marked unavailable")

	// Ready again: back in plans.
	nodes[1].local.extras.Store(&Extras{})
	require.Eventually(t, func() bool { return nodes[0].View().Nodes[1].Known }, waitShort, poll)
}

// TestRingConvergence: nodes started in random order, each joining a random
// earlier one, compute the same ring (sorted by name); when a member leaves
// or a new one joins, every node converges to the new ring and IDs shift as
// documented.
func TestRingConvergence(t *testing.T) {
	checkLeaks(t)
	names := []string{"r-b", "r-d", "r-f", "r-h", "r-j"}
	order := slices.Clone(names)
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var nodes []tnode
	for i, name := range order {
		var seed []string
		if i > 0 {
			seed = []string{nodes[rng.IntN(i)].GossipAddr()}
		}
		nodes = append(nodes, start(t, testConfig(name, seed...), newLocal(1)))
	}
	waitRing := func(nodes []tnode, want []string) {
		t.Helper()
		require.Eventually(t, func() bool {
			for _, nd := range nodes {
				if !slices.Equal(nd.Ring(), want) || nd.View().Self != slices.Index(want, nd.cfg.NodeName) {
					return false
				}
			}
			return true
		}, waitShort, poll, "ring never converged to %v", want)
	}
	waitRing(nodes, names)

	// r-d (ID 1) leaves: r-f, r-h, r-j shift down by one; r-b keeps ID 0.
	leaving := slices.IndexFunc(nodes, func(n tnode) bool { return n.cfg.NodeName == "r-d" })
	require.NoError(t, nodes[leaving].Leave(5*time.Second))
	require.NoError(t, nodes[leaving].Shutdown())
	rest := slices.Delete(slices.Clone(nodes), leaving, leaving+1)
	waitRing(rest, []string{"r-b", "r-f", "r-h", "r-j"})
	p, _ := rest[0].Peer("r-f")
	assert.Equal(t, 1, p.RingID)

	// r-a joins and sorts first: everyone shifts up by one.
	rest = append(rest, start(t, testConfig("r-a", rest[0].GossipAddr()), newLocal(1)))
	waitRing(rest, []string{"r-a", "r-b", "r-f", "r-h", "r-j"})
	p, _ = rest[0].Peer("r-f")
	assert.Equal(t, 2, p.RingID)
}

// TestGracefulLeave: a member that leaves is dropped by the others through
// its leave message, with no failure detection involved.
func TestGracefulLeave(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "leave", 3)
	require.NoError(t, nodes[2].Leave(5*time.Second))
	require.NoError(t, nodes[2].Shutdown())
	waitMembers(t, nodes[:2], 2)
	for _, nd := range nodes[:2] {
		assert.False(t, nd.IsMember("leave-2"))
		assert.Len(t, nd.View().Nodes, 2)
		assert.EqualValues(t, 1, nd.Stats().MembersLeft)
	}
	// Leave is idempotent, and refused after Shutdown; Shutdown is idempotent.
	require.NoError(t, nodes[1].Leave(time.Second))
	require.NoError(t, nodes[1].Leave(time.Second))
	require.NoError(t, nodes[1].Shutdown())
	require.NoError(t, nodes[1].Shutdown())
	require.ErrorContains(t, nodes[1].Leave(time.Second), "after shutdown")
	// The last snapshot stays readable; having left, the member is no
	// longer on its own ring.
	v := nodes[1].View()
	assert.Equal(t, -1, v.Self)
	assert.Equal(t, []string{"leave-0"}, nodes[1].Ring())
}

// TestKill: a crashed member (Shutdown without Leave) stops counting for load
// as soon as its entry goes stale, then leaves the membership through
// memberlist's failure detection.
func TestKill(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "kill", 3)
	for _, nd := range nodes {
		require.Eventually(t, func() bool { return allKnown(nd, 3) }, waitShort, poll)
	}
	require.NoError(t, nodes[2].Shutdown())

	// Stale first: still a member, on the ring, but unknown to the policies.
	for _, nd := range nodes[:2] {
		require.Eventually(t, func() bool {
			v := nd.View()
			return len(v.Nodes) != 3 || !v.Nodes[2].Known
		}, waitShort, poll)
	}
	// Then gone.
	waitDeparted(t, nodes[:2], "kill-2")
	for _, nd := range nodes[:2] {
		assert.Equal(t, []string{"kill-0", "kill-1"}, nd.Ring())
		assert.Positive(t, nd.Stats().MembersLeft)
	}
	// The survivors keep each other fresh.
	require.Eventually(t, func() bool { return allKnown(nodes[0], 2) && allKnown(nodes[1], 2) }, waitShort, poll)
}

// waitDeparted waits until name has left every node's membership: with our
// memberlist settings a crashed node goes within ≈ 3 s on loopback; the
// deadline is generous for a loaded machine under -race.
func waitDeparted(t *testing.T, nodes []tnode, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, nd := range nodes {
			if nd.IsMember(name) {
				return false
			}
		}
		return true
	}, waitLong, poll, "%s never left the membership", name)
}

// TestRejoinSameName: a member restarted under the same name and address
// rejoins cleanly, whether or not the others had declared the old process
// dead; its new entries win over the old process's higher sequence numbers.
func TestRejoinSameName(t *testing.T) {
	checkLeaks(t)
	tests := []struct {
		name     string
		waitDead bool
	}{
		// The restart comes after failure detection: the member comes back
		// with a fresh slot.
		{"after declared dead", true},
		// The restart comes before anyone noticed: the member refutes the old
		// incarnation and its new boot ID resets the others' slot.
		{"before failure detection", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "rejoin" + strconv.Itoa(i)
			nodes := startCluster(t, prefix, 3)
			victim := prefix + "-2"
			addr := nodes[2].GossipAddr()
			for _, nd := range nodes {
				require.Eventually(t, func() bool { return allKnown(nd, 3) }, waitShort, poll)
			}
			require.NoError(t, nodes[2].Shutdown())
			if tt.waitDead {
				waitDeparted(t, nodes[:2], victim)
			}
			cfg := testConfig(victim, nodes[0].GossipAddr())
			cfg.GossipAddr = addr
			var back tnode
			require.Eventually(t, func() bool { // the port may linger briefly
				c, err := New(cfg, newLocal(42))
				if err != nil {
					return false
				}
				t.Cleanup(func() { _ = c.Shutdown() })
				back = tnode{Cluster: c}
				return true
			}, waitShort, 100*time.Millisecond)
			all := []tnode{nodes[0], nodes[1], back}
			waitMembers(t, all, 3)
			for _, nd := range nodes[:2] {
				require.Eventually(t, func() bool {
					v := nd.View()
					return len(v.Nodes) == 3 && v.Nodes[2].Known && v.Nodes[2].Load == 42
				}, waitShort, poll, "%s never saw the restarted member's load", nd.cfg.NodeName)
				if !tt.waitDead {
					assert.Positive(t, nd.Stats().PeerRestarts, "the new boot ID was noticed")
				}
			}
			require.Eventually(t, func() bool { return allKnown(back, 3) }, waitShort, poll)
			assert.Equal(t, nodes[0].Ring(), back.Ring())
		})
	}
}

// TestGarbageGossip: foreign and malformed messages sent over the network
// are counted and dropped; a foreign memberlist cannot join; the view stays
// correct and fresh.
func TestGarbageGossip(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "garbage", 2)
	nodes[1].local.load.Store(7)
	target := nodes[0]

	// A plain memberlist (another application) on loopback.
	mc := memberlist.DefaultLocalConfig()
	mc.Name, mc.BindAddr, mc.BindPort = "intruder", "127.0.0.1", 0
	mc.Logger = nil
	mc.LogOutput = discard{}
	foreign, err := memberlist.Create(mc)
	require.NoError(t, err)
	t.Cleanup(func() { _ = foreign.Shutdown() })

	good := encodeOne("garbage-1", 1, 1, 99, 1, PolicyStamp{}, 0)
	payloads := []struct {
		name string
		msg  []byte
	}{
		// Another application's user message.
		{"foreign text", []byte("hello from another app")},
		// A future version of SWD's format.
		{"future version", append([]byte{'S', 'L', 9}, good[3:]...)},
		// SWD magic, body cut short.
		{"truncated", good[:10]},
		// SWD magic, extra bytes.
		{"trailing", append(slices.Clone(good), 1, 2, 3)},
		// A well-formed entry about a node that is not a member.
		{"unknown node", encodeOne("ghost", 1, 1, 1, 1, PolicyStamp{}, 0)},
	}
	to := memberlist.Address{Addr: target.GossipAddr(), Name: "garbage-0"}
	for _, p := range payloads {
		require.NoError(t, foreign.SendToAddress(to, p.msg), p.name)
	}
	// Datagrams memberlist itself cannot parse.
	conn, err := net.Dial("udp", target.GossipAddr())
	require.NoError(t, err)
	for _, b := range [][]byte{{}, {0xff}, {mlHasCrcMsg, 1, 2, 3, 4, mlUserMsg, 'S', 'L', 1, 1}, []byte("junk junk junk")} {
		_, _ = conn.Write(b)
	}
	_ = conn.Close()

	require.Eventually(t, func() bool {
		st := target.Stats()
		return st.DroppedForeign >= 2 && st.DroppedMalformed >= 3 && st.EntriesUnknown >= 1
	}, waitShort, poll, "garbage not counted: %+v", target.Stats())

	// The intruder cannot join: its node meta is not SWD's.
	_, _ = foreign.Join([]string{target.GossipAddr()})
	require.Eventually(t, func() bool { return target.Stats().MembersRejected >= 1 }, waitShort, poll)
	assert.Equal(t, 2, target.Members())
	assert.False(t, target.IsMember("intruder"))

	// The view is intact and fresh: the forged load 99 was rejected as a
	// malformed message; the real one is 7.
	require.Eventually(t, func() bool {
		v := target.View()
		return len(v.Nodes) == 2 && v.Nodes[1].Known && v.Nodes[1].Load == 7
	}, waitShort, poll)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestDispatcher: a dispatcher is a member with its gRPC address, off the
// ring, gossiping no load, and sees the nodes' loads.
func TestDispatcher(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "disp", 2)
	cfg := testConfig("disp-0-dispatcher", nodes[0].GossipAddr())
	cfg.Role, cfg.GRPCAddr = RoleDispatcher, "127.0.0.1:9999"
	d := start(t, cfg, nil)
	all := append(slices.Clone(nodes), d)
	waitMembers(t, all, 3)

	require.Eventually(t, func() bool { return allKnown(d, 2) }, waitShort, poll)
	v := d.View()
	assert.Equal(t, -1, v.Self)
	assert.Equal(t, []string{"disp-0", "disp-1"}, d.Ring())
	for _, nd := range nodes {
		assert.Equal(t, []string{"disp-0", "disp-1"}, nd.Ring(), "the dispatcher is off the ring")
		p, ok := nd.Peer("disp-0-dispatcher")
		require.True(t, ok)
		assert.Equal(t, RoleDispatcher, p.Role)
		assert.Equal(t, "127.0.0.1:9999", p.GRPCAddr)
		assert.Equal(t, -1, p.RingID)
		assert.Equal(t, "alive", p.State)
	}
	self, ok := d.Peer("disp-0-dispatcher")
	require.True(t, ok)
	assert.True(t, self.Self)
	assert.Zero(t, d.Stats().MsgsSent, "a dispatcher gossips no load")
}

// TestOnPolicy: a node hearing a higher policy epoch is told once, and adopts.
func TestOnPolicy(t *testing.T) {
	checkLeaks(t)
	nodes := startCluster(t, "pol", 2)
	var calls atomic.Int32
	var got atomic.Pointer[PolicyStamp]
	nodes[0].OnPolicy(func(p PolicyStamp) {
		calls.Add(1)
		got.Store(&p)
		nodes[0].local.policy.Store(&p) // the daemon adopts it
	})
	want := PolicyStamp{Name: "nu-exact", Epoch: 3, ActivationInterval: 80 * time.Millisecond}
	nodes[1].local.policy.Store(&want)
	require.Eventually(t, func() bool { return calls.Load() == 1 }, waitShort, poll)
	assert.Equal(t, want, *got.Load())

	// Many more messages with epoch 3 arrive; no second call.
	applied := nodes[0].Stats().EntriesApplied
	require.Eventually(t, func() bool { return nodes[0].Stats().EntriesApplied > applied+20 }, waitShort, poll)
	assert.EqualValues(t, 1, calls.Load())
	assert.EqualValues(t, 1, nodes[0].Stats().PolicyNotices)
	// The peer's stamp is visible.
	p, _ := nodes[0].Peer("pol-1")
	assert.Equal(t, want, p.Policy)
}

// TestEncryption: members sharing a key form a cluster and gossip load; a
// member with another key cannot join them.
func TestEncryption(t *testing.T) {
	checkLeaks(t)
	key := []byte("0123456789abcdef0123456789abcdef")
	cfgA := testConfig("enc-a")
	cfgA.GossipKey = key
	a := start(t, cfgA, newLocal(3))
	cfgB := testConfig("enc-b", a.GossipAddr())
	cfgB.GossipKey = key
	b := start(t, cfgB, newLocal(4))
	waitMembers(t, []tnode{a, b}, 2)
	require.Eventually(t, func() bool { return allKnown(a, 2) && a.View().Nodes[1].Load == 4 }, waitShort, poll)

	cfgC := testConfig("enc-c", a.GossipAddr())
	cfgC.GossipKey = []byte("fedcba9876543210")
	c := start(t, cfgC, newLocal(5))
	require.Eventually(t, func() bool { return c.Stats().JoinAttempts >= 3 }, waitShort, poll, "the joiner keeps retrying")
	assert.Equal(t, 1, c.Members())
	assert.Equal(t, 2, a.Members())
	assert.False(t, a.IsMember("enc-c"))
}

// TestJoinRetry: a member whose seed is not up yet retries until it is; the
// seed is given as a DNS name.
func TestJoinRetry(t *testing.T) {
	checkLeaks(t)
	port := freePort(t)
	b := start(t, testConfig("retry-b", "localhost:"+strconv.Itoa(port)), newLocal(1))
	require.Eventually(t, func() bool { return b.Stats().JoinAttempts >= 2 }, waitShort, poll)
	assert.Equal(t, 1, b.Members(), "alone is a one-node cluster")
	assert.Equal(t, []string{"retry-b"}, b.Ring())

	cfg := testConfig("retry-a")
	cfg.GossipAddr = fmt.Sprintf("127.0.0.1:%d", port)
	a := start(t, cfg, newLocal(1))
	waitMembers(t, []tnode{a, b}, 2)
}

// TestPiggyback: the piggyback mechanism also converges to a complete,
// known view.
func TestPiggyback(t *testing.T) {
	checkLeaks(t)
	var nodes []tnode
	for i := range 4 {
		cfg := testConfig(fmt.Sprintf("pig-%d", i))
		if i > 0 {
			cfg.Join = []string{nodes[0].GossipAddr()}
		}
		cfg.Mechanism = MechanismPiggyback
		nodes = append(nodes, start(t, cfg, newLocal(10+i)))
	}
	waitMembers(t, nodes, 4)
	for _, nd := range nodes {
		require.Eventually(t, func() bool {
			v := nd.View()
			if len(v.Nodes) != 4 {
				return false
			}
			for i, nl := range v.Nodes {
				if !nl.Known || nl.Load != 10+i {
					return false
				}
			}
			return true
		}, waitShort, poll)
	}
	// Its messages relay the other nodes' entries.
	require.Eventually(t, func() bool {
		n, err := parseMessage(nodes[0].piggybackMessage(udpBufferSize), nil)
		return err == nil && n == 4
	}, waitShort, poll)
	assert.Positive(t, nodes[0].Stats().MsgsSent)
}

// TestAdvertise: an advertise address without a port advertises the bound
// one; GossipAddr reports it.
func TestAdvertise(t *testing.T) {
	checkLeaks(t)
	cfg := testConfig("adv")
	cfg.Advertise = "127.0.0.1"
	nd := start(t, cfg, newLocal(0))
	host, port, err := net.SplitHostPort(nd.GossipAddr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	assert.NotEqual(t, "0", port)
	assert.Equal(t, strconv.Itoa(nd.tr.Port()), port)
	// A one-node cluster is a cluster: it is on its own ring and knows itself.
	assert.Equal(t, []string{"adv"}, nd.Ring())
	assert.True(t, allKnown(nd, 1))
}
