package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/swd-project/swd/internal/policy"
)

// LocalState is what the cluster reads from the daemon (the queue and the
// policy holder) every gossip tick and for every View. All methods must be
// lock-free and cheap, and safe for concurrent use.
type LocalState interface {
	// Load is the load index: requests waiting plus in service.
	Load() int
	// Concurrency is m, the requests served at once.
	Concurrency() int
	// Policy is the policy in force and its epoch.
	Policy() PolicyStamp
	// Extras are the entry's fields beyond the paper's (gossip version 2).
	Extras() Extras
}

// Extras are what a member gossips beside its load and policy. The zero
// value says: no movable request waits, the app is ready, work not
// computed.
type Extras struct {
	// HeadAge is the age of the oldest waiting request that may still move
	// (see policy.NodeLoad.HeadAge); 0 when there is none.
	HeadAge time.Duration
	// Unavailable says the app is not ready: peers must not send the node
	// anything (transfers, pulls, dispatches) and leave it out of plans.
	Unavailable bool
	// Work is the predicted work the node holds (the load index in time);
	// 0 when the node does not compute it.
	Work time.Duration
}

// wireExt is x as the gossip extension block carries it.
func (x Extras) wireExt() wireExt {
	w := wireExt{head: x.HeadAge, work: x.Work}
	if x.Unavailable {
		w.flags |= flagUnavailable
	}
	return w
}

// PolicyStamp is the policy a member runs: name, epoch (higher wins) and
// the activation interval it runs at. It is what gossip carries and what
// the node and its control API report (one type for all three).
type PolicyStamp struct {
	Name               string
	Epoch              int64
	ActivationInterval time.Duration
}

// Stats are cumulative counters since New. Load messages are SWD's gossip
// payloads; packets are every UDP datagram the member sends: load messages
// with their framing, memberlist's probes and membership gossip.
type Stats struct {
	MsgsSent      uint64 // load messages sent (one per destination)
	BytesSent     uint64 // their payload bytes
	SendErrors    uint64
	MsgsReceived  uint64 // user messages received, valid or not
	BytesReceived uint64
	PacketsSent   uint64 // all UDP datagrams sent
	// PacketBytesSent is the UDP payload bytes of PacketsSent (memberlist
	// framing, CRC and encryption included; IP/UDP headers not).
	PacketBytesSent uint64

	EntriesApplied    uint64 // entries that replaced an older one
	EntriesOutOfOrder uint64 // entries not newer than the one held (ignored)
	EntriesStale      uint64 // relayed entries already older than StaleAfter
	EntriesUnknown    uint64 // entries about non-members or dispatchers (ignored)
	PeerRestarts      uint64 // entries that revealed a restarted peer (new boot ID)
	DroppedMalformed  uint64 // SWD messages that failed to decode
	DroppedForeign    uint64 // messages that are not SWD load messages

	JoinAttempts    uint64 // calls of memberlist Join by the background joiner
	MembersJoined   uint64 // membership join events (self included)
	MembersLeft     uint64 // membership leave events (graceful or failed)
	MembersUpdated  uint64 // node meta changes
	MembersRejected uint64 // members refused for foreign node meta
	NameConflicts   uint64 // the same name seen at two addresses
	PolicyNotices   uint64 // OnPolicy callbacks made
}

type counters struct {
	msgsSent, bytesSent, sendErrors, msgsRecv, bytesRecv, pktsSent, pktBytesSent atomic.Uint64
	applied, outOfOrder, stale, unknown, restarts, malformed, foreign            atomic.Uint64
	joinAttempts, joined, left, updated, rejected, conflicts, policyNotices      atomic.Uint64
}

// Cluster is one member of an SWD cluster: membership, the ring, and the
// load view. Create it with New; all methods are safe for concurrent use.
type Cluster struct {
	cfg   Config
	local LocalState
	log   *slog.Logger
	stale time.Duration
	boot  uint64
	meta  []byte
	seq   atomic.Uint64

	ml *memberlist.Memberlist
	tr *transport
	// keyring is memberlist's gossip keyring (nil without encryption); it
	// is safe for concurrent use.
	keyring *memberlist.Keyring
	ring    atomic.Pointer[ring]

	mu      sync.Mutex // guards members, slots, failed; serialises ring rebuilds
	members map[string]memberInfo
	slots   map[string]*slot
	// failed holds members that departed, by name:
	// the reconnect loop keeps trying their addresses, so the two sides of
	// a healed partition find each other again.
	failed map[string]failedMember

	onPolicy atomic.Pointer[func(PolicyStamp)]
	onHead   atomic.Pointer[func()]
	notified atomic.Int64 // highest epoch passed to OnPolicy
	tooFar   atomic.Int64 // highest epoch beyond MaxEpochLead passed to OnPolicy
	cursor   atomic.Uint64
	st       counters

	lifeMu sync.Mutex // serialises Leave and Shutdown
	closed bool
	down   atomic.Bool // closed, for callbacks that must not take lifeMu
	left   atomic.Bool
	// muted stops load dissemination (Mute).
	muted atomic.Bool
	stop  chan struct{}
	// nudge asks the direct gossip loop to send the own entry now
	// (SendNow), buffered(1).
	nudge chan struct{}
	wg    sync.WaitGroup
	// direct mode send buffers, owned by the gossip goroutine
	sent, frame []byte
}

// lastBoot makes boot IDs strictly increasing within a process, so that a
// member restarted in the same nanosecond (tests) still looks restarted.
var lastBoot atomic.Uint64

func newBootID() uint64 {
	now := uint64(time.Now().UnixNano())
	for {
		prev := lastBoot.Load()
		id := max(now, prev+1)
		if lastBoot.CompareAndSwap(prev, id) {
			return id
		}
	}
}

// New validates cfg, binds the gossip address, starts memberlist and the
// gossip ticker, and returns at once: joining the seeds in cfg.Join happens in
// the background, retried with back-off until another member is seen. local
// may be nil for a dispatcher.
func New(cfg Config, local LocalState) (*Cluster, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if local == nil && cfg.Role == RoleNode {
		return nil, errors.New("cluster: local state is nil for a node")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "cluster", "node", cfg.NodeName)
	c := &Cluster{
		cfg:     cfg,
		local:   local,
		log:     logger,
		stale:   cfg.staleAfter(),
		boot:    newBootID(),
		meta:    encodeMeta(nodeMeta{Role: cfg.Role, GRPCAddr: cfg.GRPCAddr}),
		members: make(map[string]memberInfo),
		slots:   make(map[string]*slot),
		failed:  make(map[string]failedMember),
		stop:    make(chan struct{}),
		nudge:   make(chan struct{}, 1),
	}
	c.notified.Store(math.MinInt64)
	c.ring.Store(buildRing(cfg.NodeName, nil, c.slots))

	mc, err := cfg.memberlistConfig(logger)
	if err != nil {
		return nil, err
	}
	c.keyring = mc.Keyring
	bindIP, bindPort, _ := splitAddr(cfg.GossipAddr, false)
	var fast func([]byte) bool
	if len(cfg.GossipKey) == 0 {
		fast = c.fastReceive
	}
	tr, err := newTransport(bindIP, bindPort, fast, cfg.Faults, &c.st, logger)
	if err != nil {
		return nil, fmt.Errorf("cluster: bind %s: %w", cfg.GossipAddr, err)
	}
	mc.BindPort = tr.Port() // also the default port of join addresses
	d := &delegate{c: c}
	mc.Transport = tr
	mc.Delegate, mc.Events, mc.Alive, mc.Conflict = d, d, d, d
	ml, err := memberlist.Create(mc)
	if err != nil {
		_ = tr.Shutdown()
		return nil, fmt.Errorf("cluster: start memberlist: %w", err)
	}
	c.ml, c.tr = ml, tr
	c.log.Debug("gossip started", "addr", c.GossipAddr(), "mechanism", cfg.mechanism(),
		"interval", cfg.GossipInterval, "stale_after", c.stale)

	if cfg.mechanism() == MechanismDirect && cfg.Role == RoleNode {
		c.wg.Add(1)
		go c.gossipLoop()
	}
	if len(cfg.Join) > 0 {
		c.wg.Add(1)
		go c.joinLoop()
	}
	c.wg.Add(1)
	go c.reconnectLoop()
	return c, nil
}

// failedMember is a departed member, for the reconnect loop.
type failedMember struct {
	addr  string
	since time.Time
}

const (
	// reconnectInterval is how often the reconnect loop tries one failed
	// member (memberlist stops gossiping to the dead after
	// GossipToTheDeadTime, so without this two sides of a partition longer
	// than that would never merge again).
	reconnectInterval = 2 * time.Second
	// reconnectTimeout is how long a departed member is retried.
	reconnectTimeout = 10 * time.Minute
)

// reconnectLoop tries, every reconnectInterval, to rejoin one member that
// was declared dead (Serf's reconnect, in small).
func (c *Cluster) reconnectLoop() {
	defer c.wg.Done()
	t := time.NewTicker(reconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.left.Load() {
			continue
		}
		var addr, name string
		c.mu.Lock()
		for n, f := range c.failed {
			if time.Since(f.since) > reconnectTimeout {
				delete(c.failed, n)
				continue
			}
			if addr == "" || rand.N(2) == 0 {
				addr, name = f.addr, n
			}
		}
		c.mu.Unlock()
		if addr == "" {
			continue
		}
		if n, err := c.ml.Join([]string{addr}); n > 0 && err == nil {
			c.log.Info("reconnected to a failed member", "peer", name, "addr", addr)
		} else {
			c.log.Debug("reconnect failed", "peer", name, "addr", addr, "err", err)
		}
	}
}

// GossipAddr returns the address other members reach this one at (the bound
// port when GossipAddr had port 0).
func (c *Cluster) GossipAddr() string {
	return c.ml.LocalNode().Address()
}

// View returns an immutable snapshot for the policies: Nodes indexed by ring
// ID (alive members with role "node", sorted by name), Self this member's
// ring ID. Self is -1 for a dispatcher and after Leave: there is nothing to
// plan then. The own entry is read live from LocalState; peers' entries
// older than StaleAfter, or never received, have Known false.
func (c *Cluster) View() policy.View {
	return c.view(c.ring.Load(), time.Now())
}

// Ring returns the names of the ring members in ring-ID order.
func (c *Cluster) Ring() []string {
	r := c.ring.Load()
	names := make([]string, len(r.nodes))
	for i, m := range r.nodes {
		names[i] = m.name
	}
	return names
}

// Peers returns every alive member, self included, sorted by name.
func (c *Cluster) Peers() []Peer {
	r, now := c.ring.Load(), time.Now()
	out := make([]Peer, len(r.all))
	for i, m := range r.all {
		out[i] = c.peer(m, now)
	}
	return out
}

// Peer returns the member called name, if it is alive.
func (c *Cluster) Peer(name string) (Peer, bool) {
	m, ok := c.ring.Load().byName[name]
	if !ok {
		return Peer{}, false
	}
	return c.peer(m, time.Now()), true
}

// IsMember reports whether name is an alive member.
func (c *Cluster) IsMember(name string) bool {
	_, ok := c.ring.Load().byName[name]
	return ok
}

// Members returns the number of alive members, self and dispatchers
// included.
func (c *Cluster) Members() int {
	return len(c.ring.Load().all)
}

// OnPolicy registers fn, replacing any earlier one. fn is called from the
// receive path when a peer gossips a policy epoch higher than
// LocalState.Policy().Epoch, at most once per epoch value (the highest seen
// so far); it must not block. The daemon adopts the policy there.
func (c *Cluster) OnPolicy(fn func(PolicyStamp)) {
	if fn == nil {
		c.onPolicy.Store(nil)
		return
	}
	c.onPolicy.Store(&fn)
}

// OnHead registers fn, replacing any earlier one (nil removes it). fn is
// called from the receive path each time an entry is installed whose head
// is positive (a peer has a request a pull may take: policy steal's pull
// on gossip); it must not block.
func (c *Cluster) OnHead(fn func()) {
	if fn == nil {
		c.onHead.Store(nil)
		return
	}
	c.onHead.Store(&fn)
}

// Stats returns the counters.
func (c *Cluster) Stats() Stats {
	s := &c.st
	return Stats{
		MsgsSent: s.msgsSent.Load(), BytesSent: s.bytesSent.Load(), SendErrors: s.sendErrors.Load(),
		MsgsReceived: s.msgsRecv.Load(), BytesReceived: s.bytesRecv.Load(),
		PacketsSent: s.pktsSent.Load(), PacketBytesSent: s.pktBytesSent.Load(),
		EntriesApplied: s.applied.Load(), EntriesOutOfOrder: s.outOfOrder.Load(),
		EntriesStale: s.stale.Load(), EntriesUnknown: s.unknown.Load(), PeerRestarts: s.restarts.Load(),
		DroppedMalformed: s.malformed.Load(), DroppedForeign: s.foreign.Load(),
		JoinAttempts: s.joinAttempts.Load(), MembersJoined: s.joined.Load(), MembersLeft: s.left.Load(),
		MembersUpdated: s.updated.Load(), MembersRejected: s.rejected.Load(),
		NameConflicts: s.conflicts.Load(), PolicyNotices: s.policyNotices.Load(),
	}
}

// Mute stops disseminating this member's load while it stays a member: the
// others see its entry go stale within StaleAfter and stop planning
// transfers to it, yet still accept the transfers it sends them. A draining
// node mutes itself first, so peers stop sending it work it would refuse.
func (c *Cluster) Mute() { c.muted.Store(true) }

// Leave announces a graceful departure and waits up to timeout (0: no limit)
// for the announcement to go out; the others drop this member at once
// instead of waiting for failure detection. The member stops gossiping load
// and drops itself from its own membership (View().Self becomes -1) but
// keeps running until Shutdown.
func (c *Cluster) Leave(timeout time.Duration) error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed {
		return errors.New("cluster: leave after shutdown")
	}
	c.left.Store(true)
	if err := c.ml.Leave(timeout); err != nil {
		return fmt.Errorf("cluster: leave: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}

// Shutdown stops gossip, memberlist and the background goroutines, and waits
// for them. Without Leave first, the others see a failure. Idempotent.
func (c *Cluster) Shutdown() error {
	c.lifeMu.Lock()
	defer c.lifeMu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.down.Store(true)
	close(c.stop)
	err := c.ml.Shutdown()
	c.wg.Wait()
	if err != nil {
		return fmt.Errorf("cluster: shutdown: %w", err)
	}
	return nil
}

// gossipLoop is the direct mechanism: every GossipInterval, the own entry to
// every other member.
func (c *Cluster) gossipLoop() {
	defer c.wg.Done()
	// A random phase keeps members started together from sending in lockstep.
	phase := time.NewTimer(rand.N(c.cfg.GossipInterval))
	select {
	case <-phase.C:
	case <-c.stop:
		phase.Stop()
		return
	}
	t := time.NewTicker(c.cfg.GossipInterval)
	defer t.Stop()
	for {
		if !c.muted.Load() {
			c.sendDirect()
		}
		select {
		case <-t.C:
		case <-c.nudge:
		case <-c.stop:
			return
		}
	}
}

// SendNow makes a node under direct gossip send its own entry to every
// member at once, besides the regular ticks (head news for policy steal:
// a node that gets or loses a head tells everyone without waiting for the
// next tick). Requests made while a send is pending merge into it, so it
// never sends more often than the gossip goroutine can. Under piggyback
// gossip it does nothing. It never blocks.
func (c *Cluster) SendNow() {
	select {
	case c.nudge <- struct{}{}:
	default:
	}
}

func (c *Cluster) sendDirect() {
	if c.left.Load() {
		return
	}
	r := c.ring.Load()
	if len(r.all) < 2 {
		return
	}
	c.sent = c.appendOwn(appendHeader(c.sent[:0], 1))
	ok := 0
	if len(c.cfg.GossipKey) == 0 && len(r.batchAddrs) > 0 {
		// Without encryption, frame once and send to every member in one
		// sendmmsg(2); the bytes are what SendBestEffort would send.
		c.frame = frameUserMsg(c.frame[:0], c.sent)
		n, err := c.tr.writeBatch(c.frame, r.batchAddrs)
		ok += n
		if err != nil {
			c.st.sendErrors.Add(uint64(len(r.batchAddrs) - n))
			c.log.Debug("gossip send failed", "err", err)
		}
	}
	for _, m := range r.all {
		if m.self || (len(c.cfg.GossipKey) == 0 && m.batchable()) {
			continue
		}
		if err := c.ml.SendBestEffort(&m.node, c.sent); err != nil {
			c.st.sendErrors.Add(1)
			continue
		}
		ok++
	}
	c.st.msgsSent.Add(uint64(ok))
	c.st.bytesSent.Add(uint64(ok * len(c.sent)))
}

// fastReceive is the transport's fast path for unencrypted load messages.
func (c *Cluster) fastReceive(pkt []byte) bool {
	msg, crcOK, ok := unframeLoadMsg(pkt)
	if !ok {
		return false
	}
	if !crcOK {
		c.st.msgsRecv.Add(1)
		c.st.bytesRecv.Add(uint64(len(msg)))
		c.st.malformed.Add(1)
		return true
	}
	c.receive(msg)
	return true
}

// appendOwn appends this member's entry with a fresh sequence number.
func (c *Cluster) appendOwn(b []byte) []byte {
	return appendEntry(b, c.cfg.NodeName, c.boot, c.seq.Add(1),
		c.local.Load(), c.local.Concurrency(), c.local.Policy(), 0, c.local.Extras().wireExt())
}

// piggybackMessage is the piggyback mechanism's message: the own entry, then
// as many fresh entries of other nodes as fit in budget bytes, starting at a
// rotating position so that every entry gets its turn when not all fit.
func (c *Cluster) piggybackMessage(budget int) []byte {
	if c.muted.Load() {
		return nil
	}
	r, now := c.ring.Load(), time.Now()
	if len(r.all) < 2 {
		return nil
	}
	const hdr = 5 // magic, version, count ≤ 2 bytes
	body := c.appendOwn(make([]byte, 0, min(budget, 64*len(r.nodes)+64)))
	if hdr+len(body) > budget {
		return nil
	}
	count := 1
	n := len(r.nodes)
	// Continue where the previous message stopped (racing callers may
	// repeat or skip a few entries: harmless).
	start := int(c.cursor.Load() % uint64(max(n, 1)))
	i := 0
	defer func() { c.cursor.Store(uint64(start + i)) }()
	for ; i < n && count < maxEntries; i++ {
		m := r.nodes[(start+i)%n]
		if m.self {
			continue
		}
		e := m.slot.cur.Load()
		if e == nil {
			continue
		}
		age := e.age(now)
		if age >= c.stale {
			continue
		}
		prev := len(body)
		body = appendEntry(body, m.name, e.boot, e.seq, e.load, e.conc, e.policy, age, e.ext)
		if hdr+len(body) > budget {
			body = body[:prev]
			break
		}
		count++
	}
	msg := appendHeader(make([]byte, 0, hdr+len(body)), count)
	return append(msg, body...)
}

// receive handles one load message from memberlist.
func (c *Cluster) receive(b []byte) {
	c.st.msgsRecv.Add(1)
	c.st.bytesRecv.Add(uint64(len(b)))
	if _, err := parseMessage(b, nil); err != nil {
		if errors.Is(err, errForeign) {
			c.st.foreign.Add(1)
		} else {
			c.st.malformed.Add(1)
		}
		c.log.Debug("dropped gossip message", "err", err, "bytes", len(b))
		return
	}
	r, now := c.ring.Load(), time.Now()
	_, _ = walkMessage(b, func(w *wireEntry) { c.offer(r, w, now) })
}

func (c *Cluster) offer(r *ring, w *wireEntry, now time.Time) {
	m := r.byName[string(w.name)]
	if m == nil || m.self || m.role != RoleNode {
		c.st.unknown.Add(1)
		return
	}
	switch m.slot.offer(w, now, c.stale) {
	case offerOld:
		c.st.outOfOrder.Add(1)
		return
	case offerStale:
		c.st.stale.Add(1)
		return
	case offerRestart:
		c.st.restarts.Add(1)
		c.log.Debug("peer restarted", "peer", m.name, "boot", w.boot)
	}
	c.st.applied.Add(1)
	if fn := c.onHead.Load(); fn != nil && w.ext.head > 0 {
		(*fn)()
	}
	if w.epoch > c.notified.Load() {
		c.maybeNotify(m.slot.cur.Load().policy)
	}
}

// MaxEpochLead is how far ahead of a node's clock a policy epoch
// (wall-clock milliseconds) may be; one further ahead was made up (a rogue
// member) and is refused by the daemon.
const MaxEpochLead = 10 * time.Minute

// maybeNotify calls the OnPolicy callback for an epoch higher than the local
// one and than any epoch notified before. An epoch more than MaxEpochLead
// ahead of the clock is passed on once (so it is logged) but does not count
// as notified, so it cannot hide the honest epochs that follow it.
func (c *Cluster) maybeNotify(p PolicyStamp) {
	fn := c.onPolicy.Load()
	if fn == nil {
		return
	}
	if c.local != nil && p.Epoch <= c.local.Policy().Epoch {
		return
	}
	if p.Epoch > time.Now().UnixMilli()+MaxEpochLead.Milliseconds() {
		if prev := c.tooFar.Load(); p.Epoch > prev && c.tooFar.CompareAndSwap(prev, p.Epoch) {
			(*fn)(p)
		}
		return
	}
	for {
		prev := c.notified.Load()
		if p.Epoch <= prev {
			return
		}
		if c.notified.CompareAndSwap(prev, p.Epoch) {
			break
		}
	}
	c.st.policyNotices.Add(1)
	(*fn)(p)
}

// joinLoop contacts the seeds until another member is seen, backing off
// exponentially (with jitter) between attempts.
func (c *Cluster) joinLoop() {
	defer c.wg.Done()
	backoff := joinBackoffMin
	for attempt := 1; ; attempt++ {
		if c.left.Load() || c.ml.NumMembers() > 1 {
			return
		}
		c.st.joinAttempts.Add(1)
		n, err := c.ml.Join(c.cfg.Join)
		if n > 0 && c.ml.NumMembers() > 1 {
			c.log.Info("joined the cluster", "seeds_reached", n, "members", c.ml.NumMembers(), "attempt", attempt)
			return
		}
		if err == nil {
			err = errors.New("only this member answered")
		}
		c.log.Debug("join failed, retrying", "seeds", strings.Join(c.cfg.Join, ","), "attempt", attempt,
			"err", err, "retry_in", backoff)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			return
		}
		backoff = min(2*backoff, joinBackoffMax)
	}
}

// memberChanged records a membership event and publishes a new ring. Called
// by memberlist with its node lock held: it must not call memberlist. Events
// after Shutdown (a suspicion timer firing late) are ignored.
func (c *Cluster) memberChanged(event string, n *memberlist.Node, gone bool) {
	if c.down.Load() {
		return
	}
	switch {
	case gone:
		c.st.left.Add(1)
	case event == "joined":
		c.st.joined.Add(1)
	default:
		c.st.updated.Add(1)
	}
	c.mu.Lock()
	if gone {
		delete(c.members, n.Name)
		delete(c.slots, n.Name) // a member that comes back starts afresh
		// memberlist's NotifyLeave does not say whether the member left
		// gracefully or was declared dead (Node.State is not updated), so
		// every departed member is retried; one that left for good just
		// refuses the connection until reconnectTimeout.
		if n.Name != c.cfg.NodeName {
			c.failed[n.Name] = failedMember{addr: n.Address(), since: time.Now()}
		}
	} else {
		delete(c.failed, n.Name)
		meta, err := decodeMeta(n.Meta)
		if err != nil { // the alive delegate filters these; be safe anyway
			c.mu.Unlock()
			c.st.rejected.Add(1)
			return
		}
		node := *n
		node.Addr = append([]byte(nil), n.Addr...)
		node.Meta = append([]byte(nil), n.Meta...)
		c.members[n.Name] = memberInfo{node: node, meta: meta}
	}
	c.ring.Store(buildRing(c.cfg.NodeName, c.members, c.slots))
	c.mu.Unlock()
	level := slog.LevelInfo
	if event == "updated" {
		level = slog.LevelDebug
	}
	c.log.Log(context.Background(), level, "member "+event, "peer", n.Name, "addr", n.Address())
}

// delegate receives memberlist's callbacks, keeping them off Cluster's API.
type delegate struct{ c *Cluster }

var (
	_ memberlist.Delegate         = (*delegate)(nil)
	_ memberlist.EventDelegate    = (*delegate)(nil)
	_ memberlist.AliveDelegate    = (*delegate)(nil)
	_ memberlist.ConflictDelegate = (*delegate)(nil)
)

func (d *delegate) NodeMeta(limit int) []byte {
	if len(d.c.meta) > limit {
		return nil // unreachable: Validate bounds GRPCAddr well below the limit
	}
	return d.c.meta
}

func (d *delegate) NotifyMsg(b []byte) { d.c.receive(b) }

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	c := d.c
	if c.cfg.mechanism() != MechanismPiggyback || c.cfg.Role != RoleNode || c.left.Load() {
		return nil
	}
	msg := c.piggybackMessage(limit - overhead)
	if msg == nil {
		return nil
	}
	c.st.msgsSent.Add(1)
	c.st.bytesSent.Add(uint64(len(msg)))
	return [][]byte{msg}
}

func (d *delegate) LocalState(bool) []byte                 { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

func (d *delegate) NotifyJoin(n *memberlist.Node)   { d.c.memberChanged("joined", n, false) }
func (d *delegate) NotifyLeave(n *memberlist.Node)  { d.c.memberChanged("left", n, true) }
func (d *delegate) NotifyUpdate(n *memberlist.Node) { d.c.memberChanged("updated", n, false) }

// NotifyAlive refuses members whose node meta is not SWD's (another
// memberlist application on the port, an incompatible version).
func (d *delegate) NotifyAlive(n *memberlist.Node) error {
	if _, err := decodeMeta(n.Meta); err != nil {
		d.c.st.rejected.Add(1)
		d.c.log.Debug("refused member", "peer", n.Name, "addr", n.Address(), "err", err)
		return fmt.Errorf("cluster: refused member %q: %w", n.Name, err)
	}
	return nil
}

func (d *delegate) NotifyConflict(existing, other *memberlist.Node) {
	d.c.st.conflicts.Add(1)
	d.c.log.Warn("node name conflict", "peer", existing.Name,
		"known_addr", existing.Address(), "other_addr", other.Address())
}
