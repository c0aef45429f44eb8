package policy

// RoundRobin sends arrival Seq to node Seq mod n, skipping nodes that are
// down (the next up node in turn takes it).
func RoundRobin(d DispatchView) int {
	n := len(d.Outstanding)
	if n == 0 {
		return -1
	}
	start := int(d.Seq % uint64(n))
	for k := 0; k < n; k++ {
		if i := (start + k) % n; d.up(i) {
			return i
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
