package sim

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Wire sizes of the daemon's load message (internal/cluster/wire.go), so
// that a run can say what its gossip costs. Version 1 entry: name (uvarint
// length + bytes), boot ID (8 bytes), sequence number, load, m, policy name
// (uvarint length + bytes), epoch (zig-zag varint), activation interval
// (ns), age (µs). Version 2 (what steal needs) appends head: the age in µs
// of the node's oldest movable waiting request, 0 for none. The sizes use
// values a long-running production node has, not a test's small ones:
const (
	wireSeqBytes   = 4  // per-boot sequence number: 2^21..2^28, i.e. 12 h to 62 days at 50 entries/s
	wireEpochBytes = 6  // the epoch is wall-clock milliseconds (2^41..2^48 zig-zagged)
	wireBootBytes  = 8  // fixed 64 bits
	wireMsgHeader  = 3  // magic 'S' 'L' and the version byte; the entry count follows as a uvarint
	wireFrame      = 34 // memberlist user-message type and CRC-32 (6) plus IPv4 and UDP headers (28)
)

// wireSizes computes message sizes for one run's cluster.
type wireSizes struct {
	fixed int // the bytes of an entry that do not depend on load, age or head
}

func uvarintLen(x uint64) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], x)
}

// nodeNameLen is the length of the name of a node of an n-node cluster
// as the studies name them: "node-07" up to 100 nodes, "node-1023" at 1024.
func nodeNameLen(n int) int { return len(fmt.Sprintf("node-%02d", max(n-1, 0))) }

func newWireSizes(c Config) wireSizes {
	name := nodeNameLen(c.Nodes)
	f := uvarintLen(uint64(name)) + name + wireBootBytes + wireSeqBytes +
		uvarintLen(uint64(c.Concurrency)) +
		uvarintLen(uint64(len(c.Policy))) + len(c.Policy) +
		wireEpochBytes + uvarintLen(uint64(c.ActivationInterval))
	return wireSizes{fixed: f}
}

// entry is the size of a version 2 entry with these values (age, head
// and work in ns, sent as µs; work, when positive, is a tag and a value in
// the extension block).
func (w wireSizes) entry(load int, age, head, work int64) int {
	n := w.fixed + uvarintLen(uint64(max(load, 0))) + uvarintLen(uint64(age/1000)) + uvarintLen(uint64(head+999)/1000)
	if work >= 1000 {
		n += 1 + uvarintLen(uint64(work/1000))
	}
	return n
}

// message is the size on the wire of a datagram of count entries whose
// sizes add up to body.
func (w wireSizes) message(count, body int) int {
	return wireFrame + wireMsgHeader + uvarintLen(uint64(count)) + body
}

// datagram is the size on the wire of a one-entry message.
func (w wireSizes) datagram(entry int) int { return w.message(1, entry) }

// pbEntry is what a node holds about another under piggyback gossip.
type pbEntry struct {
	seq    int64 // the origin's publish time: higher is newer; -1 never heard
	born   int64 // local time at which the entry's age was 0: age = now - born
	head   int64 // head age (ns) the origin measured when it built the entry, 0: none
	load   int32
	work   int64 // predicted work (ns), under the work load index
	news   bool  // the head state is news: shown, or gone since the previous entry
	listed bool
}

// pbItem is one entry of a datagram in flight: age is its carried age.
type pbItem struct {
	j    int32
	load int32
	seq  int64
	age  int64
	head int64
	work int64
}

// piggyback models MechanismPiggyback: every gossip tick a node sends one
// datagram, its own entry first and then relayed entries while they fit
// in the budget, to Fanout distinct random peers; receivers keep the
// newest entry per node (by the origin's sequence) with the age it carried
// plus the time held (transit is not counted, as in internal/cluster).
// Entries older than StaleAfter are neither relayed nor Known.
type piggyback struct {
	e       *engine
	n       int
	tab     []pbEntry // tab[i*n+j]: node i's entry for node j
	cursor  []int
	listed  [][]int32 // per node: entries whose head state is news (RelayHeads)
	rng     *rand.Rand
	msgs    [][]pbItem
	refs    []int
	free    []int32
	targets []int
	heads   bool
	budget  int // message bytes (header included) a datagram may hold
}

func newPiggyback(e *engine, rng *rand.Rand) *piggyback {
	n := e.n
	pb := &piggyback{
		e: e, n: n, rng: rng,
		tab:    make([]pbEntry, n*n),
		cursor: make([]int, n),
		listed: make([][]int32, n),
		heads:  e.cfg.Relay == RelayHeads,
		budget: e.cfg.DatagramBytes - wireFrame,
	}
	for i := range pb.tab {
		pb.tab[i].seq = -1
	}
	return pb
}

// tick is node i's gossip tick: its own entry and relayed ones. With
// ownOnly (an extra publication, PullRules.GossipOnChange) the datagram
// holds the own entry alone. It returns the datagram's slot in pb.msgs
// (tests), -1 when there is nobody to send to.
func (pb *piggyback) tick(i int, ownOnly bool) int32 {
	e, n := pb.e, pb.n
	if n < 2 {
		return -1
	}
	var d int32
	if k := len(pb.free); k > 0 {
		d = pb.free[k-1]
		pb.free = pb.free[:k-1]
	} else {
		pb.msgs = append(pb.msgs, nil)
		pb.refs = append(pb.refs, 0)
		d = int32(len(pb.msgs) - 1)
	}
	items := pb.msgs[d][:0]
	own := pbItem{j: int32(i), load: int32(e.published(i)), seq: e.now, head: headAge(e.now, e.headArr(i))}
	if e.work != nil {
		own.work = e.work.work(i, e.now)
	}
	items = append(items, own)
	size := wireMsgHeader + 2 + e.wire.entry(int(own.load), 0, own.head, own.work) // count as 2 bytes: up to 16383 entries
	add := func(j int) bool {
		t := &pb.tab[i*n+j]
		it := pbItem{j: int32(j), load: t.load, seq: t.seq, age: e.now - t.born, head: t.head, work: t.work}
		sz := e.wire.entry(int(it.load), it.age, it.head, it.work)
		if size+sz > pb.budget {
			return false
		}
		size += sz
		items = append(items, it)
		return true
	}
	fresh := func(j int) bool {
		t := &pb.tab[i*n+j]
		return t.seq >= 0 && e.now-t.born < e.stale
	}
	full := ownOnly
	if pb.heads && !full {
		// News first, youngest first; drop what is no longer news or fresh.
		l := pb.listed[i][:0]
		for _, j := range pb.listed[i] {
			t := &pb.tab[i*n+int(j)]
			if t.news && fresh(int(j)) {
				l = append(l, j)
			} else {
				t.listed = false
			}
		}
		pb.listed[i] = l
		if (len(l)+1)*(e.wire.fixed+12) > pb.budget {
			// Not all fit: youngest first.
			slices.SortFunc(l, func(a, b int32) int {
				ba, bb := pb.tab[i*n+int(a)].born, pb.tab[i*n+int(b)].born
				if ba != bb {
					if ba > bb {
						return -1
					}
					return 1
				}
				return int(a - b)
			})
		}
		for _, j := range l {
			if !add(int(j)) {
				full = true
				break
			}
		}
	}
	start := pb.cursor[i]
	k := 0
	for ; k < n && !full; k++ {
		j := (start + k) % n
		if j == i || !fresh(j) || (pb.heads && pb.tab[i*n+j].listed) {
			continue
		}
		if !add(j) {
			break
		}
	}
	pb.cursor[i] = (start + k) % n
	pb.msgs[d] = items
	// Fanout distinct peers other than i.
	f := min(e.cfg.Fanout, n-1)
	pb.targets = pb.targets[:0]
	for len(pb.targets) < f {
		t := pb.rng.IntN(n - 1)
		if t >= i {
			t++
		}
		if !slices.Contains(pb.targets, t) {
			pb.targets = append(pb.targets, t)
		}
	}
	pb.refs[d] = f
	for _, t := range pb.targets {
		e.gossipInFlight++
		e.schedule(e.now+e.gosDel, evRecv, t, d)
	}
	body := size - wireMsgHeader - 2
	e.gossipBytes += int64(f) * int64(e.wire.message(len(items), body))
	return d
}

// recv installs datagram d at node r.
func (pb *piggyback) recv(r int, d int32) {
	e, n := pb.e, pb.n
	shows := false
	for _, it := range pb.msgs[d] {
		j := int(it.j)
		if j == r {
			continue
		}
		t := &pb.tab[r*n+j]
		if it.seq <= t.seq {
			continue
		}
		wasHead := t.seq >= 0 && t.head > 0
		t.seq, t.born, t.head, t.load, t.work = it.seq, e.now-it.age, it.head, it.load, it.work
		t.news = it.head > 0 || wasHead
		if t.news && pb.heads && !t.listed {
			t.listed = true
			pb.listed[r] = append(pb.listed[r], it.j)
		}
		shows = shows || it.head > 0
	}
	pb.refs[d]--
	if pb.refs[d] == 0 {
		pb.free = append(pb.free, d)
	}
	if shows && e.puller != nil && e.rules.OnGossip && e.pullable(r) {
		e.tryPull(r)
	}
}

// view fills e.view with node i's entries for the others.
func (pb *piggyback) view(i int) {
	e, n := pb.e, pb.n
	for j := range e.view {
		if j == i {
			continue
		}
		v := &e.view[j]
		t := &pb.tab[i*n+j]
		if t.seq < 0 {
			v.Load, v.Known, v.Age, v.HeadAge = 0, false, 0, 0
			continue
		}
		age := e.now - t.born
		v.Load, v.Known, v.Age = int(t.load), age <= e.stale, time.Duration(age)
		v.Work = time.Duration(t.work)
		v.HeadAge = 0
		if t.head > 0 {
			v.HeadAge = time.Duration(t.head + age)
		}
	}
}
