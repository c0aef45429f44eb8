package policy

// RoundRobin sends arrival Seq to the (Seq mod k)-th of the k nodes that
// are up, so a node that is down does not double the share of its
// successor.
func RoundRobin(d DispatchView) int {
	n := len(d.Outstanding)
	k := 0
	for i := 0; i < n; i++ {
		if d.up(i) {
			k++
		}
	}
	if k == 0 {
		return -1
	}
	want := int(d.Seq % uint64(k))
	for i := 0; i < n; i++ {
		if d.up(i) {
			if want == 0 {
				return i
			}
			want--
		}
	}
	return -1
}

// LeastOutstanding (CT) sends an arrival to an up node with the fewest
// outstanding requests. Ties go to the first such node at or after
// Seq mod n, so equal nodes share arrivals in turn instead of node 0 taking
// every tie.
func LeastOutstanding(d DispatchView) int {
	n := len(d.Outstanding)
	if n == 0 {
		return -1
	}
	start := int(d.Seq % uint64(n))
	best := -1
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if !d.up(i) {
			continue
		}
		if best < 0 || d.Outstanding[i] < d.Outstanding[best] {
			best = i
		}
	}
	return best
}

// FreeSlot is cq's Holder: the up node with the most free slots, its m
// (DispatchView.Concurrency) minus its outstanding requests, or -1 when no
// up node has one, which tells the dispatcher to keep holding its FIFO's
// head. Ties go to the first such node at or after Seq mod n, so idle
// nodes share arrivals in turn.
func FreeSlot(d DispatchView) int {
	n := len(d.Outstanding)
	if n == 0 {
		return -1
	}
	start := int(d.Seq % uint64(n))
	best, bestFree := -1, 0
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if !d.up(i) {
			continue
		}
		if free := d.slots(i) - d.Outstanding[i]; free > bestFree {
			best, bestFree = i, free
		}
	}
	return best
}

// CQAhead is the registered cq's lookahead (FreeSlotAhead): a request
// goes ahead to a busy node once at least CQAhead requests per up node
// wait in the dispatcher's FIFO. docs/sim.md ("cq: sending ahead") and
// docs/peers.md (run 6: 4 instead of 2 kept the capacity and shortened the
// tail at moderate load) show how it was chosen.
const CQAhead = 4

// FreeSlotAhead returns cq's Holder. It places the FIFO's head on
// FreeSlot's node when one has a free slot. Otherwise, when the FIFO is
// deep (at least ahead requests per up node wait, DispatchView.Held), it
// sends the head ahead, to an up node below twice its m (at most one
// request waits at a node per slot): the one with the fewest requests
// already waiting ahead per slot, then the most slots, ties to the first
// at or after Seq mod n. Else -1: keep holding.
//
// Why: a slot that frees stays idle for the round trip of its node's
// answer to the dispatcher and of the next request back (two hops between
// processes, milliseconds on a loaded machine, against microseconds inside
// one HAProxy). Near saturation that dead time costs capacity. A request
// waiting at the node starts the moment the slot frees; the price is that
// it may wait behind a long request while another slot frees first, which
// is why it happens only when the FIFO is deep: then its head would wait
// anyway. ahead 0 never sends ahead (FreeSlot alone, HAProxy's maxconn
// queue exactly).
func FreeSlotAhead(ahead int) HolderFunc {
	return func(d DispatchView) int {
		if i := FreeSlot(d); i >= 0 || ahead <= 0 {
			return i
		}
		n := len(d.Outstanding)
		up := 0
		for i := range n {
			if d.up(i) {
				up++
			}
		}
		if up == 0 || d.Held < ahead*up {
			return -1
		}
		start := int(d.Seq % uint64(n))
		best := -1
		for k := range n {
			i := (start + k) % n
			if !d.up(i) || d.Outstanding[i] >= 2*d.slots(i) {
				continue
			}
			if best < 0 || aheadBefore(d, i, best) {
				best = i
			}
		}
		return best
	}
}

// aheadBefore reports whether node i is a better place than node j for a
// request sent ahead: fewer requests already waiting ahead per slot (with
// every slot busy, Outstanding - m wait), then more slots (the sooner one
// frees).
func aheadBefore(d DispatchView, i, j int) bool {
	si, sj := d.slots(i), d.slots(j)
	wi, wj := max(d.Outstanding[i]-si, 0), max(d.Outstanding[j]-sj, 0)
	if a, b := wi*sj, wj*si; a != b {
		return a < b
	}
	return si > sj
}

// FreeSlotOrLeast is cq's Picker, what a dispatcher that cannot hold
// arrivals does with cq: FreeSlot's node when one has a free slot, else
// LeastOutstanding's (ct).
func FreeSlotOrLeast(d DispatchView) int {
	if i := FreeSlot(d); i >= 0 {
		return i
	}
	return LeastOutstanding(d)
}
