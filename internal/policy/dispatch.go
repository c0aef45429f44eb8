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

// FreeSlotOrLeast is cq's Picker, what a dispatcher that cannot hold
// arrivals does with cq: FreeSlot's node when one has a free slot, else
// LeastOutstanding's (ct).
func FreeSlotOrLeast(d DispatchView) int {
	if i := FreeSlot(d); i >= 0 {
		return i
	}
	return LeastOutstanding(d)
}
