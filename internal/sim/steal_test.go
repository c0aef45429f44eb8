package sim

// Hand-checked tests of the steal and cq models: the pull round trip,
// misses, which request a pull takes, reservation, overtaking, cq's
// holding dispatcher, gossip on change, piggyback gossip and wire sizes.

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

const ms = time.Millisecond

// quiet returns an engine for cfg with no arrivals and no timers: the test
// places requests and publishes gossip by hand.
func quiet(t *testing.T, cfg Config) *engine {
	t.Helper()
	require.NoError(t, cfg.Validate())
	e, err := newEngine(cfg)
	require.NoError(t, err)
	e.hasArr = false
	e.gossip, e.activate = ticker{}, ticker{}
	return e
}

// place puts a request (arrival number seq, arrived at arr, size size) on
// node i at time arr, as a local arrival.
func place(e *engine, i int, seq int64, arr, size time.Duration) int32 {
	s := e.alloc()
	e.rArr[s], e.rSize[s], e.rSeq[s], e.rHop[s] = int64(arr), int64(size), seq, false
	e.inSystem++
	e.arrSeq = max(e.arrSeq, seq+1)
	e.now = int64(arr)
	e.enqueue(i, s)
	return s
}

// stealCfg is a 16-node default config running steal with c on n nodes.
func stealCfg(n int, c policy.StealConfig) Config {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Policy, cfg.Steal = n, "steal", &c
	return cfg
}

// plainSteal: oldest head first, 3 attempts, the slot reserved, no
// gossip-triggered pulls, no head news, no overtake.
func plainSteal() policy.StealConfig {
	return policy.StealConfig{Order: policy.OldestHead, Attempts: 3, Rules: policy.PullRules{Reserve: true}}
}

// completions runs e to the end and returns each request's completion time
// and node by arrival number.
func completions(t *testing.T, e *engine) map[int64][2]int64 {
	t.Helper()
	out := map[int64][2]int64{}
	e.onDone = func(seq int64, node int, _ time.Duration) { out[seq] = [2]int64{e.now, int64(node)} }
	e.run()
	require.NoError(t, e.err)
	return out
}

func at(d time.Duration) int64 { return int64(d) }

// TestPullRoundTrip: a slot that frees with nothing local asks the peer
// showing a head; the request reaches the peer ControlDelay later, the
// head reaches the puller TransferDelay after that and starts at once.
func TestPullRoundTrip(t *testing.T) {
	e := quiet(t, stealCfg(2, plainSteal()))
	place(e, 0, 0, 0, 100*ms) // A in service on node 0 until 100 ms
	place(e, 0, 1, 0, 10*ms)  // B waits behind it
	place(e, 1, 2, 0, 20*ms)  // C in service on node 1 until 20 ms
	e.publish(0)              // node 0 shows B as its head from 0.5 ms on
	done := completions(t, e)
	// 20 ms: C done, node 1 asks node 0; 20.5 ms: node 0 hands B over;
	// 21.5 ms: B reaches node 1 and starts; 31.5 ms: B done there.
	assert.Equal(t, [2]int64{at(31500 * time.Microsecond), 1}, done[1])
	assert.Equal(t, [2]int64{at(100 * ms), 0}, done[0])
	assert.Equal(t, [2]int64{at(20 * ms), 1}, done[2])
	r := e.result()
	assert.Equal(t, 1, r.Pulls)
	assert.Equal(t, 1, r.Transfers)
	// At 31.5 ms node 1 is idle again and its view (no gossip ticks in
	// this test) still shows B at node 0: one miss, then nothing to ask.
	assert.Equal(t, 1, r.PullMisses)
}

// TestPullMissTriesNext: the first peer asked has nothing movable any more
// (its head started after it gossiped); its answer comes back one
// ControlDelay later and the next peer is asked.
func TestPullMissTriesNext(t *testing.T) {
	e := quiet(t, stealCfg(3, plainSteal()))
	place(e, 2, 0, 0, 10*ms)                  // D in service on node 2 until 10 ms
	place(e, 2, 1, time.Millisecond, 100*ms)  // E waits on node 2 (arrived at 1 ms), then runs until 110 ms
	place(e, 0, 2, 0, 100*ms)                 // A in service on node 0
	place(e, 0, 3, 2*time.Millisecond, 10*ms) // B waits on node 0 (arrived at 2 ms: younger than E)
	place(e, 1, 4, 2*time.Millisecond, 18*ms) // C in service on node 1 until 20 ms
	e.publish(0)                              // at 2 ms: B is node 0's head
	e.publish(2)                              // at 2 ms: E is node 2's head; E starts at 10 ms
	done := completions(t, e)
	// 20 ms: node 1 asks node 2 (E, 19 ms old, is older than B, 18 ms);
	// 20.5 ms: node 2 has nothing movable (E in service since 10 ms): miss;
	// 21 ms: back at node 1, ask node 0; 21.5 ms: B handed over; 22.5 ms: B
	// starts on node 1; 32.5 ms: done.
	assert.Equal(t, [2]int64{at(32500 * time.Microsecond), 1}, done[3])
	assert.Equal(t, [2]int64{at(110 * ms), 2}, done[1], "E ran on node 2")
	r := e.result()
	assert.Equal(t, 1, r.Pulls)
	// The miss at node 2, then (the views keep their 2 ms entries: no
	// gossip ticks here) node 1 at 32.5 ms asks nodes 2 and 0 again, and
	// node 0 at 100 ms asks node 2: four misses in all.
	assert.Equal(t, 4, r.PullMisses)
}

// TestPullTakesOldestMovable: the asked peer hands over the oldest waiting
// request that never moved, skipping one that moved in, and leaves the
// rest of its queue in order.
func TestPullTakesOldestMovable(t *testing.T) {
	e := quiet(t, stealCfg(2, plainSteal()))
	place(e, 0, 0, 0, time.Second) // in service
	x := place(e, 0, 1, 0, 10*ms)  // X moved in earlier: not movable
	e.rHop[x] = true
	e.movable[0]--
	place(e, 0, 2, time.Millisecond, 10*ms)   // Y: the oldest movable
	place(e, 0, 3, 2*time.Millisecond, 10*ms) // Z
	e.startPull(1, []int{0})
	e.now = at(500 * time.Microsecond)
	ev := e.heap.pop()
	require.Equal(t, evPullReq, ev.kind)
	e.pullReq(int(ev.node), ev.slot)
	assert.Equal(t, []int64{1, 3}, seqs(e, e.q[0].buf[e.q[0].head:]), "X and Z stay, in order")
	assert.Equal(t, int64(2), e.rSeq[e.pulls[ev.slot].req], "Y was handed over")
	assert.True(t, e.rHop[e.pulls[ev.slot].req], "and can never move again")
	assert.Equal(t, 1, e.movable[0])
	assert.Equal(t, 3, e.load[0])
}

func seqs(e *engine, slots []int32) []int64 {
	out := make([]int64, len(slots))
	for i, s := range slots {
		out[i] = e.rSeq[s]
	}
	return out
}

// TestReservation: with Reserve a local arrival during a pull waits (the
// slot is held for the pulled request); without, it takes the slot and the
// pulled request waits behind it.
func TestReservation(t *testing.T) {
	for _, reserve := range []bool{true, false} {
		c := plainSteal()
		c.Rules.Reserve = reserve
		e := quiet(t, stealCfg(2, c))
		place(e, 0, 0, 0, time.Second) // A on node 0
		place(e, 0, 1, 0, 10*ms)       // B waits on node 0
		place(e, 1, 2, 0, 20*ms)       // C on node 1 until 20 ms
		e.publish(0)
		// L reaches node 1 at 20.8 ms, while its pull is in flight.
		l := e.alloc()
		e.rArr[l], e.rSize[l], e.rSeq[l] = at(20800*time.Microsecond), at(5*ms), 3
		e.inSystem++
		e.arrSeq = 4
		e.schedule(at(20800*time.Microsecond), evXfer, 1, l)
		done := completions(t, e)
		if reserve {
			// B takes the held slot at 21.5 ms (done 31.5); L waits until then (done 36.5).
			assert.Equal(t, at(31500*time.Microsecond), done[1][0], "reserve: B first")
			assert.Equal(t, at(36500*time.Microsecond), done[3][0], "reserve: L waits for B")
		} else {
			// L takes the free slot at 20.8 ms (done 25.8); B arrives at 21.5 and waits (done 35.8).
			assert.Equal(t, at(25800*time.Microsecond), done[3][0], "no reserve: L first")
			assert.Equal(t, at(35800*time.Microsecond), done[1][0], "no reserve: B waits for L")
		}
		assert.Equal(t, int64(1), done[1][1], "B ran on the puller")
	}
}

// TestOvertake: a slot that frees while a young request waits locally
// pulls a peer's head older by more than the margin; without overtaking
// (or with the peer's head too young) it serves the local one.
func TestOvertake(t *testing.T) {
	cases := []struct {
		name     string
		overtake time.Duration
		pulled   bool
	}{
		{"overtakes: 200 ms > 10 ms + 50 ms", 50 * ms, true},           // B is far older than L
		{"no overtaking configured", 0, false},                         // only idle slots pull
		{"margin too large: 200 ms < 10 ms + 300 ms", 300 * ms, false}, // not old enough
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := plainSteal()
			c.Overtake = tc.overtake
			// Head news: node 0 tells at once that B left, so node 1 does
			// not try to overtake again with a stale view.
			c.Rules.GossipOnChange = true
			cfg := stealCfg(2, c)
			cfg.StaleAfter = time.Second
			e := quiet(t, cfg)
			place(e, 0, 0, 0, time.Second) // A on node 0 for a second
			place(e, 0, 1, 0, 10*ms)       // B waits on node 0 from 0 ms
			e.publish(0)
			place(e, 1, 2, 0, 200*ms)     // C on node 1 until 200 ms
			place(e, 1, 3, 190*ms, 10*ms) // L waits on node 1 from 190 ms
			done := completions(t, e)
			if tc.pulled {
				// 200 ms: pull B (slot held); 201.5 ms: B starts; 211.5 ms: done; L then until 221.5.
				assert.Equal(t, [2]int64{at(211500 * time.Microsecond), 1}, done[1])
				assert.Equal(t, at(221500*time.Microsecond), done[3][0])
			} else {
				assert.Equal(t, at(210*ms), done[3][0], "L starts at 200 ms")
				assert.Equal(t, int64(1), done[1][1], "B is pulled once node 1 is idle")
			}
		})
	}
}

// TestRegisteredStealRules: the simulator runs the registered steal with
// the rules its registry entry carries (overtaking included).
func TestRegisteredStealRules(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Policy = "steal"
	e, err := newEngine(cfg)
	require.NoError(t, err)
	p, err := policy.Lookup("steal")
	require.NoError(t, err)
	assert.Equal(t, p.Pull, e.rules)
	assert.Equal(t, policy.DefaultStealConfig().Overtake > 0, e.rules.Overtake)
}

// TestCQDispatcher: the dispatcher sends the FIFO's head to a node with a
// free slot (TransferDelay), holds otherwise, and hears of a completion
// ControlDelay after it; no node ever serves more than m.
func TestCQDispatcher(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Nodes, cfg.Policy = 2, "cq"
	e := quiet(t, cfg)
	sizes := []time.Duration{50 * ms, 30 * ms, 10 * ms}
	for seq, size := range sizes {
		s := e.alloc()
		e.rArr[s], e.rSize[s], e.rSeq[s] = 0, at(size), int64(seq)
		e.inSystem++
		e.dq.push(s)
	}
	e.arrSeq = 3
	e.dispatch()
	assert.Equal(t, []int{1, 1}, e.dOut, "two placed, one held")
	assert.Equal(t, 1, e.dq.len())
	e.onStart = func(_ int64, i int) {
		assert.Less(t, e.busy[i], e.m, "node %d over its m", i)
	}
	done := completions(t, e)
	// R0 on node 0 from 1 ms (seq 0 mod 2), R1 on node 1 from 1 ms (done
	// 31 ms); the dispatcher hears at 31.5 ms and sends R2 to node 1:
	// there at 32.5 ms, done at 42.5 ms.
	assert.Equal(t, [2]int64{at(51 * ms), 0}, done[0])
	assert.Equal(t, [2]int64{at(31 * ms), 1}, done[1])
	assert.Equal(t, [2]int64{at(42500 * time.Microsecond), 1}, done[2])
	assert.Equal(t, []int{0, 0}, e.dOut)
	assert.Zero(t, e.result().Transfers, "dispatches are not transfers")
}

// TestGossipOnChange: with head news a node publishes at once when a head
// appears and when it goes, not only on its ticks.
func TestGossipOnChange(t *testing.T) {
	c := plainSteal()
	c.Rules.GossipOnChange = true
	e := quiet(t, stealCfg(2, c))
	place(e, 0, 0, 0, 100*ms) // A in service: no head
	assert.Zero(t, e.nChanges)
	place(e, 0, 1, 3*ms, 10*ms) // B waits: a head appears
	assert.Equal(t, 1, e.nChanges, "published at once")
	e.now = at(3400 * time.Microsecond)
	v := e.buildView(1)
	assert.False(t, v.Nodes[0].Known, "not visible before the gossip delay")
	e.now = at(3500 * time.Microsecond)
	v = e.buildView(1)
	require.True(t, v.Nodes[0].Known)
	assert.Equal(t, 500*time.Microsecond, v.Nodes[0].HeadAge, "B is 0.5 ms old")
	assert.Equal(t, 2, v.Nodes[0].Load)
	place(e, 0, 2, 4*ms, 10*ms) // C waits too: still a head, no news
	assert.Equal(t, 1, e.nChanges)
}

// TestGossipPullersThin: under direct gossip, a head that every idle node
// sees at once is asked for by about GossipPullers of them, not all.
func TestGossipPullersThin(t *testing.T) {
	for _, k := range []int{0, 1, 2} {
		c := plainSteal()
		c.Rules.OnGossip, c.Rules.GossipPullers = true, k
		asked := 0
		const rounds = 400
		for round := range rounds {
			cfg := stealCfg(9, c)
			cfg.Seed = uint64(round + 1)
			e := quiet(t, cfg)
			place(e, 0, 0, 0, time.Second)
			place(e, 0, 1, 0, time.Second) // node 0's head; nodes 1-8 idle
			for i := 1; i < 9; i++ {
				e.publish(i) // everyone knows the others are idle
			}
			e.publish(0)
			e.now = at(500 * time.Microsecond)
			e.seen(0)
			for i := 1; i < 9; i++ {
				asked += e.inflight[i]
			}
		}
		want := float64(k)
		if k == 0 {
			want = 8 // every idle node
		}
		assert.InDelta(t, want, float64(asked)/rounds, 0.15*want, "k=%d: pulls per piece of news", k)
	}
}

// TestHeadAgeInView: a peer's HeadAge is the age of its oldest movable
// waiting request now (its gossiped head plus the entry's age), 0 when it
// showed none; Self's is live.
func TestHeadAgeInView(t *testing.T) {
	cfg := stealCfg(3, plainSteal())
	e := quiet(t, cfg)
	place(e, 0, 0, 0, time.Second)
	place(e, 0, 1, 2*ms, 10*ms) // node 0's head from 2 ms
	place(e, 1, 2, 2*ms, time.Second)
	e.now = at(5 * ms)
	e.publish(0)
	e.publish(1)
	place(e, 2, 3, 6*ms, time.Second)
	place(e, 2, 4, 7*ms, 10*ms) // node 2's own head from 7 ms
	e.now = at(25 * ms)
	v := e.buildView(2)
	assert.Equal(t, 23*ms, v.Nodes[0].HeadAge, "published 3 ms old at 5 ms, plus 20 ms")
	assert.Equal(t, 20*ms, v.Nodes[0].Age)
	assert.Zero(t, v.Nodes[1].HeadAge, "node 1 showed no head")
	assert.Equal(t, 18*ms, v.Nodes[2].HeadAge, "self: live")
	assert.Equal(t, 2, v.Nodes[2].Load)
}

// TestWireSizes: the byte counts of the daemon's load message, by hand.
func TestWireSizes(t *testing.T) {
	c := DefaultConfig()
	c.Policy = "steal"
	w := newWireSizes(c)
	// "node-15": 1+7, boot 8, seq 4, m=1: 1, "steal": 1+5, epoch 6, 40 ms
	// in ns (40,000,000 < 2^28): 4 bytes.
	assert.Equal(t, 8+8+4+1+6+6+4, w.fixed)
	// load 3: 1 byte, age 0: 1, head 0: 1.
	assert.Equal(t, 40, w.entry(3, 0, 0, 0))
	// load 200: 2 bytes; age 20 ms = 20,000 µs: 3 bytes; head 1.5 ms = 1500 µs: 2 bytes.
	assert.Equal(t, 37+2+3+2, w.entry(200, at(20*ms), at(1500*time.Microsecond), 0))
	// A head of 1 ns still counts as 1 µs (never 0: 0 means none).
	assert.Equal(t, 40, w.entry(1, 0, 1, 0))
	// Work (work load index): its tag and 310,000 µs (3 bytes); under a
	// microsecond it is left out, as the daemon leaves out a zero field.
	assert.Equal(t, 40+1+3, w.entry(3, 0, 0, at(310*ms)))
	assert.Equal(t, 40, w.entry(3, 0, 0, 999))
	// One-entry datagram: framing 34, magic and version 3, count 1.
	assert.Equal(t, 34+3+1+40, w.datagram(40))
	assert.Equal(t, 34+3+2+1000, w.message(200, 1000), "count 200 is a 2-byte uvarint")
	assert.Equal(t, 9, nodeNameLen(1024), "node-1023")
	assert.Equal(t, 7, nodeNameLen(16), "node-15")
	assert.Equal(t, 7, nodeNameLen(2), "node-01")
}

// TestGossipBytes: direct gossip costs every node (n-1) datagrams per
// tick; piggyback at most Fanout datagrams of DatagramBytes per tick plus
// the small extra ones, whatever n.
func TestGossipBytes(t *testing.T) {
	c := short(20 * time.Second)
	c.Policy = "nu"
	r, err := Run(c)
	require.NoError(t, err)
	w := newWireSizes(c)
	// Entries of 37 bytes plus load, age and head (1 byte each, up to
	// 3 for a head): 75-77 bytes per datagram, 15 peers, 50 ticks/s.
	lo, hi := float64(15*w.datagram(w.entry(0, 0, 0, 0))*50), float64(15*w.datagram(w.entry(0, 0, at(time.Second), 0))*50)
	assert.GreaterOrEqual(t, r.GossipBytesPerNodeSec, lo*0.99)
	assert.LessOrEqual(t, r.GossipBytesPerNodeSec, hi*1.01)

	for _, n := range []int{64, 256} {
		c := short(4 * time.Second)
		c.Nodes, c.Rate, c.Policy, c.Gossip = n, 20*float64(n), "steal", GossipPiggyback
		r, err := Run(c)
		require.NoError(t, err)
		bound := float64(c.Fanout * c.DatagramBytes * 50)
		assert.Less(t, r.GossipBytesPerNodeSec, bound*1.3, "%d nodes: ticks plus head news", n)
		assert.Greater(t, r.GossipBytesPerNodeSec, bound*0.3, "%d nodes: relays fill datagrams", n)
	}
}

// TestPiggybackEntries: receivers keep the newest entry per node with the
// age it carried plus the time held; a relay sends its own entry first,
// then fresh ones (head news first with RelayHeads) within the budget.
func TestPiggybackEntries(t *testing.T) {
	cfg := stealCfg(4, plainSteal())
	cfg.Gossip, cfg.Relay, cfg.Fanout = GossipPiggyback, RelayHeads, 3
	e := quiet(t, cfg)
	pb := e.pb
	deliver := func(r int, items ...pbItem) {
		pb.msgs = append(pb.msgs, items)
		pb.refs = append(pb.refs, 1)
		pb.recv(r, int32(len(pb.msgs)-1))
	}
	e.now = at(10 * ms)
	// Node 1 hears of node 2 (load 3, head 4 ms, relayed 6 ms old) and of
	// node 3 (load 0, no head, its own entry).
	deliver(1, pbItem{j: 2, load: 3, seq: at(4 * ms), age: at(6 * ms), head: at(4 * ms)}, pbItem{j: 3, load: 0, seq: at(10 * ms)})
	e.now = at(15 * ms)
	v := e.buildView(1)
	assert.Equal(t, policy.NodeLoad{Load: 3, Concurrency: 1, Known: true, Age: 11 * ms, HeadAge: 15 * ms}, v.Nodes[2], "carried 6 + held 5; head 4 + 11")
	assert.Equal(t, policy.NodeLoad{Load: 0, Concurrency: 1, Known: true, Age: 5 * ms}, v.Nodes[3])
	assert.False(t, v.Nodes[0].Known, "never heard of")
	// An older entry of node 2 is ignored; a newer one replaces it.
	deliver(1, pbItem{j: 2, load: 9, seq: at(2 * ms), age: 0})
	assert.Equal(t, 3, e.buildView(1).Nodes[2].Load)
	deliver(1, pbItem{j: 2, load: 1, seq: at(14 * ms), age: at(1 * ms)})
	v = e.buildView(1)
	assert.Equal(t, policy.NodeLoad{Load: 1, Concurrency: 1, Known: true, Age: 1 * ms}, v.Nodes[2], "head gone")
	// Node 1 ticks: its own entry, then node 2's (head gone: news) before
	// node 3's.
	place(e, 1, 0, 15*ms, time.Second)
	id := pb.tick(1, false)
	d := pb.msgs[id]
	require.Len(t, d, 3)
	assert.Equal(t, int32(1), d[0].j, "own entry first")
	assert.Equal(t, int64(0), d[0].age)
	assert.Equal(t, int32(2), d[1].j, "head news next")
	assert.Equal(t, at(1*ms), d[1].age, "carried age: 1 ms")
	assert.Equal(t, int32(3), d[2].j)
	assert.Equal(t, 3, pb.refs[id], "to fanout 3 peers")
	// Entries older than StaleAfter are neither known nor relayed.
	e.now = at(200 * ms)
	assert.False(t, e.buildView(1).Nodes[3].Known)
	assert.Len(t, pb.msgs[pb.tick(1, false)], 1, "only the own entry")
	// An extra publication (head news of its own) carries the own entry alone.
	e.now = at(15 * ms)
	assert.Len(t, pb.msgs[pb.tick(1, true)], 1)
}

// TestStealDeterminism: random steal designs and both gossip mechanisms
// give the same result for the same seed.
func TestStealDeterminism(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for k := range 6 {
		c := short(10 * time.Second)
		c.Nodes, c.Rate = 24, 24*18
		c.Policy, c.Steal = "steal", randomSteal(rng)
		if k%2 == 1 {
			c.Gossip, c.Relay = GossipPiggyback, []string{RelayRotate, RelayHeads}[k%4/2]
		}
		a, err := Run(c)
		require.NoError(t, err)
		b, err := Run(c)
		require.NoError(t, err)
		a.Wall, b.Wall = 0, 0
		assert.Equal(t, a, b, "design %d (%s): same seed, same result", k, c.Steal)
		assert.Positive(t, a.Pulls, "design %d pulls", k)
	}
}
