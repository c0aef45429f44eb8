package policy

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// PullOrder is how a steal Puller orders the peers it asks.
type PullOrder int

const (
	// OldestHead asks the peers showing a head oldest head first (one FIFO
	// over the cluster serves the oldest request first); equal ages go to
	// the nearer peer on the ring (relative ID 1, 2, ... as in nu).
	OldestHead PullOrder = iota
	// RandomTopK asks the K oldest heads in a random order, then the rest
	// oldest first: idle nodes reading the same view spread over the K
	// oldest instead of all asking the same peer.
	RandomTopK
	// PowerOfD draws K peers at random among those showing a head and asks
	// them oldest head first (power of d choices).
	PowerOfD
)

var pullOrderNames = []string{"oldest", "random-top-k", "power-of-d"}

func (o PullOrder) String() string {
	if o >= 0 && int(o) < len(pullOrderNames) {
		return pullOrderNames[o]
	}
	return fmt.Sprintf("PullOrder(%d)", int(o))
}

// ParsePullOrder is the inverse of PullOrder.String.
func ParsePullOrder(s string) (PullOrder, error) {
	if i := slices.Index(pullOrderNames, s); i >= 0 {
		return PullOrder(i), nil
	}
	return 0, fmt.Errorf("unknown pull order %q (known: %s)", s, strings.Join(pullOrderNames, ", "))
}

// PushTarget is how a steal ArrivalPusher picks among the peers it sees
// with a free slot.
type PushTarget int

const (
	// RandomIdle picks uniformly at random, so that nodes reading the same
	// stale view do not all push to the same peer.
	RandomIdle PushTarget = iota
	// FreshestIdle picks the peer whose entry is youngest (the likeliest to
	// still be idle); equal ages go to the nearer peer on the ring.
	FreshestIdle
)

var pushTargetNames = []string{"random", "freshest"}

func (t PushTarget) String() string {
	if t >= 0 && int(t) < len(pushTargetNames) {
		return pushTargetNames[t]
	}
	return fmt.Sprintf("PushTarget(%d)", int(t))
}

// periodicPlanners are the planners steal may run on its activation timer.
var periodicPlanners = map[string]PlannerFunc{
	"ll":       LeastLoaded,
	"nu":       NearestUnderloaded,
	"nu-exact": NearestUnderloadedExact,
}

// MaxPullAttempts bounds StealConfig.Attempts: a pull asks at most this
// many peers before giving up.
const MaxPullAttempts = 16

// StealConfig configures the steal policy. The registered "steal" is
// NewSteal(DefaultStealConfig()); other values exist for the simulator's
// design study (test/study/steal) and are not what the daemon runs.
type StealConfig struct {
	// Order is how the Puller orders the peers it asks.
	Order PullOrder
	// K is RandomTopK's k or PowerOfD's d (ignored by OldestHead).
	K int
	// Attempts bounds the peers asked per pull (1..MaxPullAttempts): the
	// Puller returns at most this many.
	Attempts int
	// PushArrival sets the ArrivalPusher: a request arriving at a node
	// with no free slot goes at once to a peer whose entry shows a free
	// slot, chosen by PushTarget. Off, steal has no ArrivalPusher.
	PushArrival bool
	// PushTarget is how the ArrivalPusher picks among idle peers.
	PushTarget PushTarget
	// Periodic names the Planner steal also runs every activation
	// interval ("ll", "nu" or "nu-exact"); "" runs none (the Planner
	// moves nothing).
	Periodic string
	// Overtake, when positive, makes a slot that frees while requests wait
	// locally pull anyway from a peer whose head is older than the local
	// head by more than Overtake (the slot waits for it; the local request
	// stays movable). Zero pulls only when nothing waits locally. It needs
	// Rules.Reserve.
	Overtake time.Duration
	// Rules is what the daemon does around the Puller (Policy.Pull);
	// Rules.Overtake is ignored: NewSteal sets it from Overtake.
	Rules PullRules
}

// DefaultStealConfig is the registered steal: the design the simulator
// study kept (docs/sim.md, "steal and cq").
func DefaultStealConfig() StealConfig {
	return StealConfig{
		Order:    PowerOfD,
		K:        2,
		Attempts: 3,
		Overtake: 200 * time.Millisecond,
		Rules:    PullRules{Reserve: true, OnGossip: true, GossipPullers: 1, GossipOnChange: true},
	}
}

// Validate reports the first problem with c.
func (c StealConfig) Validate() error {
	switch {
	case c.Order < OldestHead || c.Order > PowerOfD:
		return fmt.Errorf("steal: unknown pull order %d", int(c.Order))
	case c.Order != OldestHead && (c.K < 1 || c.K > MaxPullAttempts*4):
		return fmt.Errorf("steal: k must be in [1, %d] for %s, got %d", MaxPullAttempts*4, c.Order, c.K)
	case c.Attempts < 1 || c.Attempts > MaxPullAttempts:
		return fmt.Errorf("steal: attempts must be in [1, %d], got %d", MaxPullAttempts, c.Attempts)
	case c.PushTarget < RandomIdle || c.PushTarget > FreshestIdle:
		return fmt.Errorf("steal: unknown push target %d", int(c.PushTarget))
	case c.Overtake < 0:
		return fmt.Errorf("steal: overtake must not be negative, got %s", c.Overtake)
	case c.Overtake > 0 && !c.Rules.Reserve:
		return fmt.Errorf("steal: overtake needs the reserve rule (the slot waits for the pulled request)")
	case c.Rules.GossipPullers < 0 || c.Rules.GossipPullers > 64:
		return fmt.Errorf("steal: gossip pullers must be in [0, 64], got %d", c.Rules.GossipPullers)
	}
	if _, ok := periodicPlanners[c.Periodic]; c.Periodic != "" && !ok {
		return fmt.Errorf("steal: periodic planner %q is none of \"\", ll, nu, nu-exact", c.Periodic)
	}
	return nil
}

// String is a short label of the design, for study tables.
func (c StealConfig) String() string {
	var b strings.Builder
	b.WriteString(c.Order.String())
	if c.Order != OldestHead {
		fmt.Fprintf(&b, "(%d)", c.K)
	}
	fmt.Fprintf(&b, " x%d", c.Attempts)
	if c.PushArrival {
		b.WriteString(" +push-" + c.PushTarget.String())
	}
	if c.Periodic != "" {
		b.WriteString(" +" + c.Periodic)
	}
	if c.Overtake > 0 {
		fmt.Fprintf(&b, " +overtake-%s", c.Overtake)
	}
	if !c.Rules.Reserve {
		b.WriteString(" no-reserve")
	}
	if !c.Rules.OnGossip {
		b.WriteString(" no-gossip-pull")
	} else if c.Rules.GossipPullers > 0 {
		fmt.Fprintf(&b, " +gossip-pull/%d", c.Rules.GossipPullers)
	}
	if c.Rules.GossipOnChange {
		b.WriteString(" +gossip-on-change")
	}
	return b.String()
}

// NewSteal builds the steal policy of c: a transfer policy named "steal"
// whose Puller is StealPull, whose Pusher is StealPushArrival when
// c.PushArrival, whose Planner is c.Periodic's (or one that moves nothing)
// and whose Pull rules are c.Rules with Overtake set when c.Overtake > 0.
func NewSteal(c StealConfig) (Policy, error) {
	if err := c.Validate(); err != nil {
		return Policy{}, err
	}
	p := Policy{
		Name: "steal",
		Kind: KindTransfer,
		Description: "a slot that frees with nothing waiting locally pulls the oldest waiting request it knows of " +
			"(gossiped head ages) from its node's queue head; misses try the next peer",
		Planner: PlannerFunc(func(View) []Move { return nil }),
		Puller:  PullerFunc(func(v View, seed uint64) []int { return StealPull(c, v, seed) }),
		Pull:    c.Rules,
	}
	p.Pull.Overtake = c.Overtake > 0
	if c.Periodic != "" {
		p.Planner = periodicPlanners[c.Periodic]
		p.Description += "; also " + c.Periodic + " every activation interval"
	}
	if c.PushArrival {
		p.Pusher = ArrivalPusherFunc(func(v View, seed uint64) int { return StealPushArrival(c, v, seed) })
		p.Description += "; an arrival that finds no free slot goes at once to a peer seen idle"
	}
	return p, nil
}

// source is a decision's random source, seeded by the caller's seed.
type source struct{ pcg rand.PCG }

func newSource(seed uint64) *source {
	s := &source{}
	s.pcg.Seed(seed, 0x73776473746561) // fixed stream: "swdstea"
	return s
}

// intN returns a number in [0, n) (Lemire's multiply-high; the bias is
// below 2^-50 for the n used here).
func (s *source) intN(n int) int {
	hi, _ := bits.Mul64(s.pcg.Uint64(), uint64(n))
	return int(hi)
}

type pullCandidate struct {
	id   int
	age  int64 // HeadAge, ns
	dist int   // relative ring ID from Self: 1 is Self-1
}

// StealPull is steal's Puller for configuration c (see Puller for the
// contract). Candidates are the known peers other than Self with a
// positive HeadAge; they are ordered by c.Order and cut to c.Attempts. It
// returns nil when v.Self is out of range, Self has no free slot, or there
// is no candidate.
func StealPull(c StealConfig, v View, seed uint64) []int {
	if !validSelf(v) {
		return nil
	}
	var older time.Duration // candidates' heads must be older than this
	if self := v.Nodes[v.Self]; self.FreeSlots() == 0 {
		// Requests wait locally: pull only to overtake them.
		if c.Overtake <= 0 || self.HeadAge <= 0 {
			return nil
		}
		older = self.HeadAge + c.Overtake
	}
	n := len(v.Nodes)
	var cands []pullCandidate
	for j, nl := range v.Nodes {
		if j == v.Self || !nl.Known || nl.HeadAge <= older {
			continue
		}
		cands = append(cands, pullCandidate{id: j, age: int64(nl.HeadAge), dist: (v.Self - j + n) % n})
	}
	if len(cands) == 0 {
		return nil
	}
	oldestFirst := func(a, b pullCandidate) int {
		switch {
		case a.age > b.age:
			return -1
		case a.age < b.age:
			return 1
		}
		return a.dist - b.dist
	}
	switch c.Order {
	case OldestHead:
		slices.SortFunc(cands, oldestFirst)
	case RandomTopK:
		slices.SortFunc(cands, oldestFirst)
		k := min(c.K, len(cands))
		src := newSource(seed)
		for i := k - 1; i > 0; i-- { // Fisher-Yates over the top k
			j := src.intN(i + 1)
			cands[i], cands[j] = cands[j], cands[i]
		}
	case PowerOfD:
		d := min(c.K, len(cands))
		src := newSource(seed)
		for i := range d { // partial Fisher-Yates: d distinct draws
			j := i + src.intN(len(cands)-i)
			cands[i], cands[j] = cands[j], cands[i]
		}
		cands = cands[:d]
		slices.SortFunc(cands, oldestFirst)
	}
	out := make([]int, min(len(cands), c.Attempts))
	for i := range out {
		out[i] = cands[i].id
	}
	return out
}

// GossipPull is the PullRules.GossipPullers decision: whether node v.Self,
// idle, pulls on a gossip entry that every member received at once. It
// says yes with probability min(1, k / idle), idle being the known nodes
// with a free slot in v, Self included, so that about k of the idle nodes
// ask instead of all of them. k <= 0 always says yes. seed as for Puller.
func GossipPull(v View, k int, seed uint64) bool {
	if k <= 0 {
		return true
	}
	idle := 1
	for j, nl := range v.Nodes {
		if j != v.Self && nl.Known && nl.FreeSlots() > 0 {
			idle++
		}
	}
	if k >= idle {
		return true
	}
	return newSource(seed).intN(idle) < k
}

// StealPushArrival is steal's ArrivalPusher for configuration c (see
// ArrivalPusher for the contract). A request arriving at a node with a free
// slot stays (it starts at once); otherwise it goes to a known peer other
// than Self whose entry shows a free slot, picked by c.PushTarget, or stays
// when there is none. It returns -1 when v.Self is out of range.
func StealPushArrival(c StealConfig, v View, seed uint64) int {
	if !validSelf(v) || v.Nodes[v.Self].FreeSlots() > 0 {
		return -1
	}
	n := len(v.Nodes)
	best, count := -1, 0
	var src *source
	for k := 1; k < n; k++ { // relative IDs 1, 2, ...: nearer peers first
		j := (v.Self - k + n) % n
		nl := v.Nodes[j]
		if !nl.Known || nl.FreeSlots() == 0 {
			continue
		}
		count++
		switch c.PushTarget {
		case FreshestIdle:
			if best < 0 || nl.Age < v.Nodes[best].Age {
				best = j
			}
		default: // RandomIdle: reservoir sampling, one draw per idle peer
			if src == nil {
				src = newSource(seed)
			}
			if src.intN(count) == 0 {
				best = j
			}
		}
	}
	return best
}
