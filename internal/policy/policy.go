// Package policy holds SWD's load-balancing policies as pure functions of an
// immutable snapshot of the cluster view.
//
// Two kinds exist. Transfer policies (ll, nu, nu-exact) run on every node
// every activation interval: a Planner turns a View into the Moves that node
// makes from the tail of its own queue. Dispatch policies (rr, ct) run on a
// dispatcher for each arriving request: a Picker chooses the node. The policy
// "none" moves nothing.
//
// The daemon, `swdctl plan` and the simulator all call the code in this
// package; nothing here reads the clock, a random source or shared state.
//
// Concurrency: Views are values owned by the caller and must not be mutated
// while a planner reads them. Planners and Pickers are stateless and safe for
// concurrent use; the registry is read-only after package initialisation.
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

// View is an immutable snapshot of the cluster as one node sees it. Nodes is
// indexed by ring ID (absolute IDs 0..n-1); Self is the ring ID of the node
// the plan is for. The Self entry always counts as Known.
type View struct {
	Self  int
	Nodes []NodeLoad
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
}

func (d DispatchView) up(i int) bool { return d.Up == nil || (i < len(d.Up) && d.Up[i]) }

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

// Policy is a registered policy. Exactly one of Planner and Picker is set,
// according to Kind (neither for KindNone).
type Policy struct {
	Name        string
	Kind        Kind
	Description string
	Planner     Planner
	Picker      Picker
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
}
