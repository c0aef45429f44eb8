// Package policy holds SWD's load-balancing policies as pure functions of an
// immutable snapshot of the cluster view.
//
// Two kinds exist. Transfer policies (ll, nu, nu-exact, steal) run on every
// node: a Planner, every activation interval, turns a View into the Moves
// that node makes from the tail of its own queue. Dispatch policies (rr, ct,
// cq) run on a dispatcher for each arriving request: a Picker chooses the
// node. The policy "none" moves nothing.
//
// Beyond the paper, a Policy may carry optional hooks the daemon calls on
// events instead of on a timer (each nil when unused, so older policies and
// their callers are unchanged):
//
//   - Puller (transfer): when an app slot frees and nothing waits locally,
//     the peers to ask, in order, for their oldest movable waiting request
//     (steal). PullRules says what the daemon does around that decision.
//   - ArrivalPusher (transfer): whether a request arriving from a client is
//     sent at once to a peer known to have a free slot.
//   - Holder (dispatch): the dispatcher holds arrivals in one FIFO and sends
//     its head to a node the moment that node has a free slot (cq).
//
// The daemon, `swdctl plan` and the simulator all call the code in this
// package; nothing here reads the clock, a random source or shared state.
// Time enters through the ages in a View; randomness through a seed argument
// (the caller draws it from its own source), so the same arguments always
// give the same answer.
//
// Concurrency: Views are values owned by the caller and must not be mutated
// while a policy reads them. Planners, Pickers, Pullers, ArrivalPushers and
// Holders are stateless and safe for concurrent use; the registry is
// read-only after package initialisation.
package policy

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/swderr"
)

// NodeLoad is one node's entry in a View.
type NodeLoad struct {
	// Name is the node's unique name in the cluster.
	Name string
	// Load is the load index: requests waiting plus requests in service.
	Load int
	// Concurrency is the node's m: requests it serves at once. A node holding
	// Load requests can move at most Load-Concurrency of them.
	Concurrency int
	// Known is false when the entry is stale or missing; planners ignore
	// unknown nodes entirely (they are neither sources nor targets).
	Known bool
	// Age is how old the entry was when the view was taken.
	Age time.Duration
	// HeadAge is the age, as of the view, of the node's oldest waiting
	// request that may still move: waiting (not handed to the app), never
	// moved before (hop limit 1), and not already being handed to a puller.
	// Zero means the node has none. A request's age counts from the moment
	// it reached the SWD of the node its client sent it to.
	//
	// For Self it is the live value. For a peer it comes from gossip: the
	// sender puts in its entry head, the age of that request at the moment
	// it builds the entry (whole microseconds, rounded up so that a request
	// it has is never 0; 0 when it has none), and the view adds the entry's
	// Age (the same Age as above: carried age plus time since receipt):
	//
	//	HeadAge = head + Age   if head > 0
	//	HeadAge = 0            if head == 0
	//
	// It is as stale as Load: the request may have started or moved since.
	// Only Pullers read it; Planners and older policies ignore it.
	HeadAge time.Duration
	// Unavailable says the node's app is not ready, so nothing may be sent
	// to it. A peer in that state is also not Known (every policy leaves it
	// out); for Self it is the live value and Self stays Known.
	Unavailable bool
	// Work is the node's predicted work (its load index in time: predicted
	// cost of the waiting requests plus predicted remaining service), as
	// of the entry; 0 when the node does not compute it. Policies that
	// plan on work read it; the others ignore it.
	Work time.Duration
}

// Waiting returns how many of the node's requests are waiting (movable).
func (n NodeLoad) Waiting() int {
	m := n.Concurrency
	if m < 1 {
		m = 1
	}
	if n.Load <= m {
		return 0
	}
	return n.Load - m
}

// FreeSlots returns how many of the node's app slots are free: its m
// (at least 1) minus its load, never negative. A peer with FreeSlots() > 0
// in a view was idle when its entry was built.
func (n NodeLoad) FreeSlots() int {
	m := max(n.Concurrency, 1)
	if n.Load >= m {
		return 0
	}
	return m - max(n.Load, 0)
}

// View is an immutable snapshot of the cluster as one node sees it. Nodes is
// indexed by ring ID (absolute IDs 0..n-1); Self is the ring ID of the node
// the plan is for. The Self entry always counts as Known.
type View struct {
	Self  int
	Nodes []NodeLoad
	// Costs is what work-based planning (PlanWork) reads besides Nodes:
	// the predicted cost of each of Self's movable waiting requests, in
	// the order a hand-off takes them (from the tail of its queue). Other
	// planners ignore it; nil when the node does not plan on work.
	Costs []time.Duration
}

// Move says: node From sends Count requests from the tail of its queue to
// node To. IDs are absolute ring IDs.
type Move struct {
	From  int `json:"from"`
	To    int `json:"to"`
	Count int `json:"count"`
}

// Planner is a transfer policy: given a view, the moves node v.Self makes.
// Every move has From == v.Self and To != v.Self, and the counts sum to at
// most the self node's waiting requests.
type Planner interface {
	Plan(v View) []Move
}

// PlannerFunc adapts a function to a Planner.
type PlannerFunc func(v View) []Move

// Plan calls f(v).
func (f PlannerFunc) Plan(v View) []Move { return f(v) }

// DispatchView is what a dispatcher knows when a request arrives: each
// node's exact outstanding count (dispatched and not yet completed), which
// nodes may receive requests, and the arrival's sequence number.
type DispatchView struct {
	Outstanding []int
	Up          []bool // nil means every node is up; missing entries are down
	Seq         uint64
	// Concurrency is each node's m, the requests its app serves at once
	// (from the node's gossiped entry). nil, a missing entry or a value
	// below 1 counts as 1. Only Holders (cq) read it.
	Concurrency []int
	// Held is how many requests wait in a holding dispatcher's FIFO, the
	// one being placed included (0 for a Picker's arrival). Only Holders
	// (cq) read it.
	Held int
}

func (d DispatchView) up(i int) bool { return d.Up == nil || (i < len(d.Up) && d.Up[i]) }

// slots is node i's m as Holders count it.
func (d DispatchView) slots(i int) int {
	if i < len(d.Concurrency) && d.Concurrency[i] > 1 {
		return d.Concurrency[i]
	}
	return 1
}

// Picker is a dispatch policy: the node an arriving request goes to, or -1
// when no node is up.
type Picker interface {
	Pick(d DispatchView) int
}

// PickerFunc adapts a function to a Picker.
type PickerFunc func(d DispatchView) int

// Pick calls f(d).
func (f PickerFunc) Pick(d DispatchView) int { return f(d) }

// Kind says how a policy acts.
type Kind int

const (
	// KindNone moves and dispatches nothing.
	KindNone Kind = iota
	// KindTransfer policies move queued requests between nodes.
	KindTransfer
	// KindDispatch policies place arriving requests from a dispatcher.
	KindDispatch
)

func (k Kind) String() string {
	switch k {
	case KindTransfer:
		return "transfer"
	case KindDispatch:
		return "dispatch"
	default:
		return "none"
	}
}

// Puller is the pull side of a transfer policy (steal). The daemon calls it
// when one of node v.Self's app slots frees and nothing waits locally, and,
// with PullRules.OnGossip, when a slot is idle and a gossip entry shows a
// peer's head. It returns the peers to ask, in order, for their head (their
// oldest movable waiting request): ask the first; on a miss (the peer has
// nothing movable any more) ask the next; stop at the first hit or the end
// of the list. The list holds distinct known peers, never Self, at most the
// policy's attempt bound; it is empty when Self has no free slot (its Load,
// which must not yet count the slot being filled, is at least its m) or no
// known peer shows a head. seed is the decision's randomness: draw it fresh
// from the caller's own source for every call; equal (v, seed) always give
// the same list.
type Puller interface {
	Pull(v View, seed uint64) []int
}

// PullerFunc adapts a function to a Puller.
type PullerFunc func(v View, seed uint64) []int

// Pull calls f(v, seed).
func (f PullerFunc) Pull(v View, seed uint64) []int { return f(v, seed) }

// PullRules is what a node does around its Puller's decisions: the parts of
// pulling that are not a function of the view. The simulator models each
// rule exactly as documented here, so the daemon must follow them for its
// figures to match.
type PullRules struct {
	// Reserve keeps the slot that triggered a pull for the pulled request
	// until the request arrives or every asked peer has missed. Meanwhile
	// the slot counts in the node's load index (so peers do not see it
	// idle) and a local arrival waits in the queue, movable, instead of
	// taking the slot. Without Reserve the slot stays free: a local arrival
	// takes it, and a pulled request that then arrives waits in the queue
	// (it has moved once, so it never moves again).
	Reserve bool
	// OnGossip makes a node that has an idle, unreserved slot and no pull
	// in flight also pull when it installs a gossip entry whose head is
	// positive, instead of only when a slot frees.
	OnGossip bool
	// GossipPullers thins OnGossip's pulls under direct gossip, where
	// every member receives every entry and all idle nodes would ask for
	// the same head at once: each idle node then pulls on an entry only
	// if GossipPull(v, GossipPullers, seed) says so (about GossipPullers
	// of them pull; 0 means all). Under piggyback gossip an entry reaches
	// a few members at a time and every idle receiver pulls.
	GossipPullers int
	// Overtake makes a node call Pull also when a slot frees while
	// requests wait locally, with Self's Load counting them (so
	// Self.FreeSlots() is 0) and Self.HeadAge the age of the oldest
	// movable one. If Pull names peers, the slot is reserved and pulls
	// (the local requests keep waiting, movable); if not, the node serves
	// its own queue as usual. NewSteal sets it from StealConfig.Overtake.
	Overtake bool
	// GossipOnChange makes a node send its own entry at once, besides its
	// gossip ticks, whenever whether it shows a head changes: a movable
	// request starts waiting where none did, or its last one left (served,
	// pulled or moved). Direct gossip sends that entry to every member as
	// a tick does; piggyback gossip sends a datagram holding the own entry
	// alone to Fanout random members. Peers then learn of new waiting work
	// within one network delay instead of up to one gossip interval later,
	// and stop asking for a head that is gone.
	GossipOnChange bool
}

// ArrivalPusher decides, for a request arriving at node v.Self from a
// client, whether to send it at once to a peer. v is taken before the
// arrival counts (Self's Load does not include it). It returns the peer's
// ring ID, a known peer other than Self, or -1 to keep the request. A pushed
// request has moved once and never moves again. seed as for Puller.
type ArrivalPusher interface {
	PushArrival(v View, seed uint64) int
}

// ArrivalPusherFunc adapts a function to an ArrivalPusher.
type ArrivalPusherFunc func(v View, seed uint64) int

// PushArrival calls f(v, seed).
func (f ArrivalPusherFunc) PushArrival(v View, seed uint64) int { return f(v, seed) }

// Holder is a dispatch policy that holds arrivals in one FIFO at the
// dispatcher (cq) instead of placing each at once. Place is called for the
// FIFO's head whenever placing it may have become possible (an arrival, a
// completion, a node coming up) and returns the node the head goes to now,
// or -1 to keep holding it; after a placement the dispatcher calls Place
// again for the next head until it returns -1. d.Outstanding must count
// every request sent to a node and not yet answered (those in flight
// included), d.Concurrency each node's m, and d.Seq is the head's arrival
// number.
type Holder interface {
	Place(d DispatchView) int
}

// HolderFunc adapts a function to a Holder.
type HolderFunc func(d DispatchView) int

// Place calls f(d).
func (f HolderFunc) Place(d DispatchView) int { return f(d) }

// Policy is a registered policy. Exactly one of Planner and Picker is set,
// according to Kind (neither for KindNone). The hooks after them are
// optional (nil when the policy has none); a caller that does not know a
// hook simply never calls it and gets the policy's Planner or Picker
// behaviour alone.
type Policy struct {
	Name        string
	Kind        Kind
	Description string
	Planner     Planner
	Picker      Picker

	// Puller, with Pull, is the pull side (transfer policies only).
	Puller Puller
	// Pull says what the daemon does around Puller (meaningless without it).
	Pull PullRules
	// Pusher decides on arrivals (transfer policies only).
	Pusher ArrivalPusher
	// Holder makes a dispatcher hold arrivals in one FIFO (dispatch
	// policies only). Picker stays set: it is what a dispatcher that
	// cannot hold does instead.
	Holder Holder
}

var registry = map[string]Policy{}

// Register adds a policy to the registry. It panics on a duplicate or
// inconsistent registration (a programming error caught at init).
func Register(p Policy) {
	if _, dup := registry[p.Name]; dup {
		panic("policy: duplicate registration of " + p.Name)
	}
	switch {
	case p.Kind == KindTransfer && p.Planner == nil,
		p.Kind == KindDispatch && p.Picker == nil:
		panic("policy: " + p.Name + " lacks its planner or picker")
	case p.Kind != KindTransfer && (p.Puller != nil || p.Pusher != nil):
		panic("policy: " + p.Name + " pulls or pushes arrivals but is not a transfer policy")
	case p.Kind != KindDispatch && p.Holder != nil:
		panic("policy: " + p.Name + " holds arrivals but is not a dispatch policy")
	}
	registry[p.Name] = p
}

// Lookup returns the policy registered under name.
func Lookup(name string) (Policy, error) {
	p, ok := registry[name]
	if !ok {
		return Policy{}, fmt.Errorf("%w %q (known: %s)", swderr.ErrUnknownPolicy, name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Names lists the registered policy names, sorted.
func Names() []string {
	out := make([]string, 0, len(registry))
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func init() {
	Register(Policy{Name: "none", Kind: KindNone, Description: "no transfers: requests stay on the node they reach"})
	Register(Policy{Name: "rr", Kind: KindDispatch, Picker: PickerFunc(RoundRobin), Description: "dispatcher sends arrivals to nodes in turn"})
	Register(Policy{Name: "ct", Kind: KindDispatch, Picker: PickerFunc(LeastOutstanding), Description: "dispatcher sends each arrival to the node with the fewest outstanding requests (exact counts)"})
	Register(Policy{Name: "ll", Kind: KindTransfer, Planner: PlannerFunc(LeastLoaded), Description: "move fewer than half the difference to the least-loaded node"})
	Register(Policy{Name: "nu", Kind: KindTransfer, Planner: PlannerFunc(NearestUnderloaded), Description: "Nearest Underloaded: push excess over the mean to the nearest underloaded nodes on the ring"})
	Register(Policy{Name: "nu-exact", Kind: KindTransfer, Planner: PlannerFunc(NearestUnderloadedExact), Description: "Nearest Underloaded with integer quotas: one simultaneous round balances an exact view"})
	Register(Policy{Name: "cq", Kind: KindDispatch, Picker: PickerFunc(FreeSlotOrLeast), Holder: FreeSlotAhead(CQAhead),
		Description: "dispatcher holds arrivals in one FIFO and sends the head to a node the moment it has a free slot (its m, counted exactly); with a deep FIFO, one request per slot waits ahead at the nodes"})
	steal, err := NewSteal(DefaultStealConfig())
	if err != nil {
		panic(err) // the defaults are compiled in
	}
	Register(steal)
}
