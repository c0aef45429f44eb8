package cluster

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func encodeOne(name string, boot, seq uint64, load, conc int, p PolicyStamp, age time.Duration) []byte {
	return appendEntry(appendHeader(nil, 1), name, boot, seq, load, conc, p, age, wireExt{})
}

func TestWireRoundTrip(t *testing.T) {
	p := PolicyStamp{Name: "nu-exact", Epoch: -3, ActivationInterval: 40 * time.Millisecond}
	b := appendHeader(nil, 2)
	b = appendEntry(b, "node-07", 1<<60+5, 12345, 17, 2, p, 0, wireExt{})
	b = appendEntry(b, "n2", 9, 1, 0, 1, PolicyStamp{}, 1500*time.Microsecond,
		wireExt{head: 2500 * time.Nanosecond, flags: flagUnavailable, work: 7 * time.Millisecond})

	var got []wireEntry
	n, err := parseMessage(b, func(e *wireEntry) {
		c := *e
		c.name, c.policy = append([]byte(nil), e.name...), append([]byte(nil), e.policy...)
		got = append(got, c)
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, "node-07", string(got[0].name))
	assert.Equal(t, uint64(1<<60+5), got[0].boot)
	assert.Equal(t, uint64(12345), got[0].seq)
	assert.Equal(t, uint64(17), got[0].load)
	assert.Equal(t, uint64(2), got[0].conc)
	assert.Equal(t, "nu-exact", string(got[0].policy))
	assert.Equal(t, int64(-3), got[0].epoch)
	assert.Equal(t, uint64(40*time.Millisecond), got[0].interval)
	assert.Zero(t, got[0].age)
	assert.Equal(t, "n2", string(got[1].name))
	assert.Empty(t, got[1].policy)
	assert.Equal(t, 1500*time.Microsecond, got[1].age)
	assert.Equal(t, wireExt{}, got[0].ext, "no extension field set, none sent")
	// 2.5 µs rounds up to 3: a head never encodes as "none".
	assert.Equal(t, wireExt{head: 3 * time.Microsecond, flags: flagUnavailable, work: 7 * time.Millisecond}, got[1].ext)

	// A direct message is compact: the figure quoted in the docs.
	assert.Len(t, encodeOne("node-07", 1<<62, 1000, 3, 1, PolicyStamp{Name: "nu", Epoch: 1, ActivationInterval: 40 * time.Millisecond}, 0), 34)
}

// TestWireVersions: a version 1 message (no extension block) still decodes,
// and extension tags this build does not know are skipped.
func TestWireVersions(t *testing.T) {
	p := PolicyStamp{Name: "nu", Epoch: 1}
	v2 := encodeOne("a", 1, 1, 5, 1, p, 0)
	// The same entry as version 1: header byte 1 and no extension block
	// (its one length byte, 0, is the message's last).
	v1 := append([]byte(nil), v2[:len(v2)-1]...)
	v1[2] = 1
	var got wireEntry
	_, err := parseMessage(v1, func(e *wireEntry) { got = *e })
	require.NoError(t, err)
	assert.Equal(t, uint64(5), got.load)
	assert.Equal(t, wireExt{}, got.ext)

	// A later build's tag 9 (value 300) after head: skipped, head kept.
	ext := []byte{extHead, 10, 9, 0xac, 0x02}
	msg := append(append(append([]byte(nil), v2[:len(v2)-1]...), byte(len(ext))), ext...)
	_, err = parseMessage(msg, func(e *wireEntry) { got = *e })
	require.NoError(t, err)
	assert.Equal(t, 10*time.Microsecond, got.ext.head)
}

func TestWireRejects(t *testing.T) {
	good := encodeOne("a", 1, 1, 1, 1, PolicyStamp{Name: "nu"}, 0)
	with := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := []struct {
		name    string
		msg     []byte
		foreign bool // else malformed
	}{
		// Nothing at all.
		{"empty", nil, true},
		// Someone else's user message.
		{"other magic", []byte("hello world"), true},
		// A version before ours is foreign to this build.
		{"version 0", with(func(b []byte) []byte { b[2] = 0; return b }), true},
		// Magic and version only.
		{"header only", good[:3], false},
		// Zero entries is not a message.
		{"zero count", append(appendHeader(nil, 0), good[4:]...), false},
		// A count beyond the limit.
		{"huge count", appendHeader(nil, maxEntries+1), false},
		// Cut in the middle of an entry.
		{"truncated", good[:len(good)-3], false},
		// Bytes after the last entry.
		{"trailing", append(append([]byte(nil), good...), 0), false},
		// An entry without a name.
		{"empty name", encodeOne("", 1, 1, 1, 1, PolicyStamp{}, 0), false},
		// A name longer than the limit.
		{"long name", with(func(b []byte) []byte {
			return append(appendHeader(nil, 1), append([]byte{200, 1}, make([]byte, 300)...)...)
		}), false},
		// A load that does not fit an int32.
		{"load out of range", encodeOne("a", 1, 1, 1<<40, 1, PolicyStamp{}, 0), false},
		// A count claiming more entries than present.
		{"count too high", with(func(b []byte) []byte { b[3] = 2; return b }), false},
		// Extension tags out of order (work before head).
		{"ext tags out of order", withExt(good, extWork, 1, extHead, 1), false},
		// The same extension tag twice.
		{"ext tag repeated", withExt(good, extFlags, 1, extFlags, 1), false},
		// An extension value cut short (a varint's continuation bit at the end).
		{"ext truncated", withExt(good, extHead, 0x80), false},
		// A head age beyond an hour.
		{"ext head out of range", withExt(good, extHead, 0xff, 0xff, 0xff, 0xff, 0x0f), false},
		// An extension block longer than the limit.
		{"ext too long", withExt(good, make([]byte, maxExtLen+1)...), false},
		// An unknown version.
		{"version 3", with(func(b []byte) []byte { b[2] = 3; return b }), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			visited := false
			_, err := parseMessage(tt.msg, func(*wireEntry) { visited = true })
			require.Error(t, err)
			if tt.foreign {
				assert.ErrorIs(t, err, errForeign)
			} else {
				assert.ErrorIs(t, err, errMalformed)
			}
			assert.False(t, visited, "a bad message must not reach the view in part")
		})
	}
}

// withExt is the one-entry message good (which has an empty extension
// block, its last byte) with ext as its extension block instead.
func withExt(good []byte, ext ...byte) []byte {
	b := append([]byte(nil), good[:len(good)-1]...)
	b = append(b, byte(len(ext)))
	return append(b, ext...)
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []nodeMeta{
		{Role: RoleNode, GRPCAddr: "127.0.0.1:7070"},
		{Role: RoleDispatcher, GRPCAddr: ""},
	} {
		got, err := decodeMeta(encodeMeta(m))
		require.NoError(t, err)
		assert.Equal(t, m, got)
	}
	_, err := decodeMeta(nil)
	assert.ErrorIs(t, err, errForeign)
	_, err = decodeMeta([]byte("SM\x01\x07"))
	assert.ErrorIs(t, err, errMalformed)
	_, err = decodeMeta(append(encodeMeta(nodeMeta{Role: RoleNode}), 'x'))
	assert.ErrorIs(t, err, errMalformed)
}

func TestFraming(t *testing.T) {
	msg := encodeOne("a", 1, 1, 1, 1, PolicyStamp{}, 0)
	framed := frameUserMsg(nil, msg)
	got, crcOK, ok := unframeLoadMsg(framed)
	require.True(t, ok)
	assert.True(t, crcOK)
	assert.Equal(t, msg, got)

	// A flipped payload bit fails the CRC.
	framed[len(framed)-1] ^= 1
	_, crcOK, ok = unframeLoadMsg(framed)
	assert.True(t, ok)
	assert.False(t, crcOK)

	// Without CRC (older peers), and other memberlist traffic (left alone).
	got, crcOK, ok = unframeLoadMsg(append([]byte{mlUserMsg}, msg...))
	assert.True(t, ok && crcOK)
	assert.Equal(t, msg, got)
	_, _, ok = unframeLoadMsg(append([]byte{mlUserMsg}, "other app"...))
	assert.False(t, ok)
	_, _, ok = unframeLoadMsg([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8})
	assert.False(t, ok)
}

func TestSlotOffer(t *testing.T) {
	const stale = 100 * time.Millisecond
	t0 := time.Now()
	w := func(boot, seq uint64, age time.Duration) *wireEntry {
		return &wireEntry{name: []byte("x"), boot: boot, seq: seq, load: seq, conc: 1, policy: []byte("nu"), age: age}
	}
	tests := []struct {
		name    string
		held    *wireEntry // offered first at t0 (nil: empty slot)
		offer   *wireEntry // then at t0+after
		after   time.Duration
		want    offerResult
		wantSeq uint64
	}{
		// The first entry is taken.
		{"empty slot", nil, w(5, 1, 0), 0, offerApplied, 1},
		// A higher sequence number replaces.
		{"newer", w(5, 1, 0), w(5, 2, 0), 0, offerApplied, 2},
		// Out of order: ignored.
		{"older", w(5, 7, 0), w(5, 6, 0), 0, offerOld, 7},
		// Duplicate: ignored.
		{"duplicate", w(5, 7, 0), w(5, 7, 0), 0, offerOld, 7},
		// A restarted sender (higher boot) starts over at seq 1.
		{"restart", w(5, 900, 0), w(6, 1, 0), 0, offerRestart, 1},
		// A lower boot (an old process's late message) is ignored while the
		// held entry is fresh...
		{"lower boot while fresh", w(6, 3, 0), w(5, 900, 0), 50 * time.Millisecond, offerOld, 3},
		// ...and taken once it went stale (a restart whose clock went back).
		{"lower boot after stale", w(6, 3, 0), w(5, 1, 0), 150 * time.Millisecond, offerRestart, 1},
		// A relayed entry already past stale-after is dropped.
		{"stale relay", nil, w(5, 1, 150*time.Millisecond), 0, offerStale, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s slot
			if tt.held != nil {
				require.NotEqual(t, offerOld, s.offer(tt.held, t0, stale))
			}
			assert.Equal(t, tt.want, s.offer(tt.offer, t0.Add(tt.after), stale))
			if e := s.cur.Load(); e != nil {
				assert.Equal(t, tt.wantSeq, e.seq)
			} else {
				assert.Zero(t, tt.wantSeq)
			}
		})
	}

	// Ages add up across relays and keep growing locally.
	var s slot
	require.Equal(t, offerApplied, s.offer(w(1, 1, 30*time.Millisecond), t0, stale))
	assert.Equal(t, 40*time.Millisecond, s.cur.Load().age(t0.Add(10*time.Millisecond)))
	// The policy name string is reused when unchanged (no allocation per entry).
	p1 := s.cur.Load().policy.Name
	require.Equal(t, offerApplied, s.offer(w(1, 2, 0), t0, stale))
	assert.Equal(t, p1, s.cur.Load().policy.Name)
}

// TestPiggybackMessageBudget checks that the piggyback message holds the own
// entry first, never exceeds its budget, and rotates which relayed entries
// it carries when not all fit.
func TestPiggybackMessageBudget(t *testing.T) {
	c := &Cluster{cfg: testConfig("self"), local: newLocal(3), stale: time.Second, boot: 1}
	members := map[string]memberInfo{}
	for i := range 100 {
		name := "peer-with-a-longish-name-" + string(rune('A'+i%26)) + string(rune('a'+i/26))
		members[name] = memberInfo{meta: nodeMeta{Role: RoleNode}}
	}
	members["self"] = memberInfo{meta: nodeMeta{Role: RoleNode}}
	c.slots = map[string]*slot{}
	r := buildRing("self", members, c.slots)
	c.ring.Store(r)
	now := time.Now()
	for i, m := range r.nodes {
		if !m.self {
			m.slot.offer(&wireEntry{boot: 1, seq: uint64(i + 1), load: 1, conc: 1, ext: wireExt{head: time.Duration(i+1) * time.Millisecond}}, now, c.stale)
		}
	}
	heads := map[string]time.Duration{}
	for _, m := range r.nodes {
		if !m.self {
			heads[m.name] = m.slot.cur.Load().ext.head
		}
	}
	seen := map[string]bool{}
	for range 10 {
		msg := c.piggybackMessage(1000)
		require.LessOrEqual(t, len(msg), 1000)
		first := true
		n, err := parseMessage(msg, func(e *wireEntry) {
			if first {
				assert.Equal(t, "self", string(e.name), "own entry first")
				first = false
			} else {
				assert.Equal(t, heads[string(e.name)], e.ext.head, "relays keep the origin's head age")
			}
			seen[string(e.name)] = true
		})
		require.NoError(t, err)
		assert.Greater(t, n, 10)
		assert.Less(t, n, 101, "100 entries cannot fit in 1000 bytes")
	}
	assert.Greater(t, len(seen), 50, "rotation spreads the relayed entries")

	// With nobody else, nothing is sent.
	c2 := &Cluster{cfg: testConfig("alone"), local: newLocal(0), stale: time.Second, slots: map[string]*slot{}}
	c2.ring.Store(buildRing("alone", map[string]memberInfo{"alone": {meta: nodeMeta{Role: RoleNode}}}, c2.slots))
	assert.Nil(t, c2.piggybackMessage(1000))
}

// TestReceiveGarbage feeds random bytes, with and without SWD's magic, to
// the receive path: nothing panics, everything is counted, the view holds.
func TestReceiveGarbage(t *testing.T) {
	c := &Cluster{cfg: testConfig("self"), local: newLocal(0), stale: time.Hour, log: testLogger(), slots: map[string]*slot{}}
	c.ring.Store(buildRing("self", map[string]memberInfo{
		"self": {meta: nodeMeta{Role: RoleNode}},
		"peer": {meta: nodeMeta{Role: RoleNode}},
	}, c.slots))
	c.receive(encodeOne("peer", 1, 10, 4, 1, PolicyStamp{Name: "nu", Epoch: 1}, 0))
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		b := make([]byte, rng.IntN(80))
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		if i%2 == 0 && len(b) >= 3 {
			b[0], b[1], b[2] = wireMagic[0], wireMagic[1], wireVersion
		}
		c.receive(b)
	}
	st := c.Stats()
	assert.Equal(t, uint64(5001), st.MsgsReceived)
	assert.Greater(t, st.DroppedForeign, uint64(2000))
	assert.Greater(t, st.DroppedMalformed, uint64(2000))
	v := c.View()
	require.Len(t, v.Nodes, 2)
	assert.Equal(t, "peer", v.Nodes[0].Name)
	assert.Equal(t, 4, v.Nodes[0].Load, "garbage did not touch the view")
	assert.True(t, v.Nodes[0].Known)
}

// FuzzParseMessage: decoding never panics, and what decodes re-encodes to
// the same bytes.
func FuzzParseMessage(f *testing.F) {
	f.Add(encodeOne("node-1", 1, 2, 3, 4, PolicyStamp{Name: "nu", Epoch: 5, ActivationInterval: 6}, 7*time.Microsecond))
	f.Add([]byte("SL\x01\x00"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var re []byte
		n, err := parseMessage(b, func(e *wireEntry) {
			re = appendEntry(re, string(e.name), e.boot, e.seq, int(e.load), int(e.conc),
				PolicyStamp{Name: string(e.policy), Epoch: e.epoch, ActivationInterval: time.Duration(e.interval)}, e.age, e.ext)
		})
		if err != nil {
			return
		}
		if _, err := parseMessage(append(appendHeader(nil, n), re...), nil); err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
	})
}
