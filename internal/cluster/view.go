package cluster

import (
	"net"
	"sort"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/swd-project/swd/internal/policy"
)

// entry is one received load report. Immutable once published in a slot.
type entry struct {
	boot   uint64
	seq    uint64
	load   int
	conc   int
	policy PolicyStamp
	// recv is the local receipt time (monotonic clock); ageAtRecv is how old
	// the report already was then (0 when heard from its origin, the relays'
	// holding time when relayed). Clocks of different machines are never
	// compared.
	recv      time.Time
	ageAtRecv time.Duration
	// ext is the entry's extension fields (head age, flags, work) as sent.
	ext wireExt
}

func (e *entry) age(now time.Time) time.Duration {
	return now.Sub(e.recv) + e.ageAtRecv
}

// slot holds the latest entry of one member. It outlives ring snapshots: a
// member keeps its slot while it stays in the membership, and gets a fresh
// one when it comes back after leaving or failing.
type slot struct {
	cur atomic.Pointer[entry]
}

type offerResult int

const (
	offerApplied offerResult = iota
	offerRestart             // applied, and the sender restarted (new boot ID)
	offerOld                 // same boot, sequence number not newer: out of order or duplicate
	offerStale               // the relayed entry is already older than stale-after
)

// offer installs w if it is newer than the slot's entry: the same boot ID
// with a higher sequence number, or a new boot. Boot IDs are the sender's
// start time in nanoseconds, so a restarted process has a higher one; a
// lower boot is only taken once the current entry has gone stale (it is then
// a restart on a machine whose clock went back, or nothing is lost anyway).
func (s *slot) offer(w *wireEntry, now time.Time, staleAfter time.Duration) offerResult {
	if w.age > staleAfter {
		return offerStale
	}
	for {
		old := s.cur.Load()
		restart := false
		if old != nil {
			switch {
			case w.boot == old.boot:
				if w.seq <= old.seq {
					return offerOld
				}
			case w.boot > old.boot:
				restart = true
			default:
				if old.age(now) <= staleAfter {
					return offerOld
				}
				restart = true
			}
		}
		ne := &entry{
			boot: w.boot, seq: w.seq,
			load: int(w.load), conc: int(w.conc),
			policy: PolicyStamp{Epoch: w.epoch, ActivationInterval: time.Duration(w.interval)},
			recv:   now, ageAtRecv: w.age,
			ext: w.ext,
		}
		if old != nil && old.policy.Name == string(w.policy) { // no allocation
			ne.policy.Name = old.policy.Name
		} else {
			ne.policy.Name = string(w.policy)
		}
		if s.cur.CompareAndSwap(old, ne) {
			if restart {
				return offerRestart
			}
			return offerApplied
		}
	}
}

// member is one alive member in a ring snapshot. Immutable.
type member struct {
	name       string
	gossipAddr string
	grpcAddr   string
	role       string
	node       memberlist.Node // private copy, for SendBestEffort
	ringID     int             // -1 unless role node
	self       bool
	slot       *slot
}

// ring is an immutable snapshot of the membership, swapped atomically when
// it changes. Receivers find a member's slot with one map lookup.
type ring struct {
	nodes  []*member // role node, sorted by name: index = ring ID
	all    []*member // every alive member, sorted by name
	byName map[string]*member
	self   *member // nil only before memberlist has announced us
	// batchAddrs are the UDP addresses of the other members that speak
	// memberlist protocol 5 (all current ones): the direct mechanism's
	// sendmmsg targets.
	batchAddrs []net.Addr
}

// batchable reports whether a datagram framed by frameUserMsg suits m.
func (m *member) batchable() bool { return m.node.PMax >= 5 }

func (r *ring) selfID() int {
	if r.self == nil {
		return -1
	}
	return r.self.ringID
}

// memberInfo is the mutable membership record kept under Cluster.mu.
type memberInfo struct {
	node memberlist.Node
	meta nodeMeta
}

// buildRing derives the ring from the membership. Ring IDs: the members with
// role "node", sorted by name (byte order), numbered 0..n-1. Every member
// that sees the same membership computes the same ring.
func buildRing(self string, members map[string]memberInfo, slots map[string]*slot) *ring {
	r := &ring{
		all:    make([]*member, 0, len(members)),
		byName: make(map[string]*member, len(members)),
	}
	for name, info := range members {
		s := slots[name]
		if s == nil {
			s = new(slot)
			slots[name] = s
		}
		m := &member{
			name:       name,
			gossipAddr: info.node.Address(),
			grpcAddr:   info.meta.GRPCAddr,
			role:       info.meta.Role,
			node:       info.node,
			ringID:     -1,
			self:       name == self,
			slot:       s,
		}
		r.all = append(r.all, m)
		r.byName[name] = m
		if m.self {
			r.self = m
		}
	}
	sort.Slice(r.all, func(i, j int) bool { return r.all[i].name < r.all[j].name })
	for _, m := range r.all {
		if !m.self && m.batchable() {
			r.batchAddrs = append(r.batchAddrs, &net.UDPAddr{IP: m.node.Addr, Port: int(m.node.Port)})
		}
		if m.role == RoleNode {
			m.ringID = len(r.nodes)
			r.nodes = append(r.nodes, m)
		}
	}
	return r
}

// Peer describes one alive member as this member sees it.
type Peer struct {
	Name       string
	GossipAddr string
	GRPCAddr   string
	Role       string
	// State is "alive", or "stale" for a node whose load entry is missing or
	// older than StaleAfter (it may have failed: memberlist has not declared
	// it dead yet). memberlist does not expose its suspect state.
	State string
	// RingID is the member's absolute ring ID, -1 for a dispatcher.
	RingID      int
	Self        bool
	Load        int
	Concurrency int
	// Known is true for self, and for a node whose entry is at most
	// StaleAfter old.
	Known bool
	// Age of the load entry (0 for self).
	Age time.Duration
	// Policy is the last policy the member gossiped (live for self).
	Policy PolicyStamp
	// Unavailable is true when the node says its app is not ready (live
	// for self): no transfer, pull or dispatch may target it. State is then
	// "unavailable" and Known false.
	Unavailable bool
	// HeadAge and Work are as in policy.NodeLoad (live for self).
	HeadAge time.Duration
	Work    time.Duration
}

// view builds the policy view from a ring snapshot.
func (c *Cluster) view(r *ring, now time.Time) policy.View {
	v := policy.View{Self: r.selfID(), Nodes: make([]policy.NodeLoad, len(r.nodes))}
	for i, m := range r.nodes {
		nl := &v.Nodes[i]
		nl.Name = m.name
		if m.self {
			x := c.local.Extras()
			nl.Load, nl.Concurrency, nl.Known = c.local.Load(), c.local.Concurrency(), true
			nl.HeadAge, nl.Work, nl.Unavailable = x.HeadAge, x.Work, x.Unavailable
			continue
		}
		if e := m.slot.cur.Load(); e != nil {
			nl.Load, nl.Concurrency = e.load, e.conc
			nl.Age = e.age(now)
			nl.Unavailable = e.ext.flags&flagUnavailable != 0
			nl.Known = nl.Age <= c.stale && !nl.Unavailable
			nl.Work = e.ext.work
			if e.ext.head > 0 {
				nl.HeadAge = e.ext.head + nl.Age
			}
		}
	}
	return v
}

func (c *Cluster) peer(m *member, now time.Time) Peer {
	p := Peer{
		Name: m.name, GossipAddr: m.gossipAddr, GRPCAddr: m.grpcAddr, Role: m.role,
		State: "alive", RingID: m.ringID, Self: m.self,
	}
	switch {
	case m.self:
		p.Known = true
		if c.local != nil {
			p.Load, p.Concurrency, p.Policy = c.local.Load(), c.local.Concurrency(), c.local.Policy()
			x := c.local.Extras()
			p.HeadAge, p.Work, p.Unavailable = x.HeadAge, x.Work, x.Unavailable
		}
	case m.role == RoleNode:
		if e := m.slot.cur.Load(); e != nil {
			p.Load, p.Concurrency, p.Policy = e.load, e.conc, e.policy
			p.Age = e.age(now)
			p.Unavailable = e.ext.flags&flagUnavailable != 0
			p.Known = p.Age <= c.stale && !p.Unavailable
			p.Work = e.ext.work
			if e.ext.head > 0 {
				p.HeadAge = e.ext.head + p.Age
			}
		}
		switch {
		case p.Unavailable && p.Age <= c.stale:
			p.State = "unavailable"
		case !p.Known:
			p.State = "stale"
		}
	}
	return p
}
