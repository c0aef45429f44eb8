package policy

// known returns the absolute IDs of the nodes that count in a view, in ring
// order, and the position of Self among them. Unknown (stale) nodes drop out
// of the ring for this round: every node that sees the same staleness
// computes the same sub-ring.
func known(v View) (ids []int, self int) {
	self = -1
	ids = make([]int, 0, len(v.Nodes))
	for i, n := range v.Nodes {
		if n.Known || i == v.Self {
			if i == v.Self {
				self = len(ids)
			}
			ids = append(ids, i)
		}
	}
	return ids, self
}

func validSelf(v View) bool { return v.Self >= 0 && v.Self < len(v.Nodes) }

// LeastLoaded is the paper's LL policy. The node finds the least-loaded known
// node (lowest ring ID among equals, which is what every node picks, hence
// LL's herd effect) and moves "fewer than half the difference" to it:
// ceil((self - min) / 2) - 1 requests, at most its waiting requests.
func LeastLoaded(v View) []Move {
	if !validSelf(v) {
		return nil
	}
	self := v.Nodes[v.Self]
	target := -1
	for i, n := range v.Nodes {
		if i == v.Self || !n.Known {
			continue
		}
		if target < 0 || n.Load < v.Nodes[target].Load {
			target = i
		}
	}
	if target < 0 {
		return nil
	}
	diff := self.Load - v.Nodes[target].Load
	count := (diff+1)/2 - 1 // ceil(diff/2) - 1 for diff >= 0
	if w := self.Waiting(); count > w {
		count = w
	}
	if count <= 0 {
		return nil
	}
	return []Move{{From: v.Self, To: target, Count: count}}
}

// NearestUnderloaded is the paper's N algorithm (section 3.3) in the reading
// that docs/algorithms.md fixes for step 8.
//
// Over the known nodes (n of them, total load S, mean S/n), seen from the
// planning node i, relative ID t is the t-th node backwards on the ring
// (i-1, i-2, ...). The node's excess is over = load(i) - ceil(S/n), capped
// at its waiting requests. Walking t = 1, 2, ..., under accumulates
// (S/n - load(t)) as a running prefix sum: while nearer nodes are
// overloaded it goes negative, standing for their excess, which they push
// towards t before us. Only when floor(under) > 0 does node t have room left
// for us: we move k = min(floor(under), over) there and subtract k from
// both over and under. We stop when over reaches 0 or the walk returns to
// ourselves. The literal reading, which also subtracts negative
// floor(under) values, would add to over and make nodes send requests that
// are not theirs; the prefix sum is what the paper means.
//
// Arithmetic is exact: under is kept multiplied by n, so floor is integer
// floor division and no float rounding can change a decision.
func NearestUnderloaded(v View) []Move {
	ids, p := known(v)
	if p < 0 || len(ids) < 2 {
		return nil
	}
	n := len(ids)
	sum := 0
	for _, id := range ids {
		sum += v.Nodes[id].Load
	}
	self := v.Nodes[v.Self]
	over := self.Load - ceilDiv(sum, n)
	if w := self.Waiting(); over > w {
		over = w
	}
	if over <= 0 {
		return nil
	}
	var moves []Move
	underN := 0 // under * n
	for t := 1; t < n && over > 0; t++ {
		target := ids[(p-t+n)%n]
		underN += sum - n*v.Nodes[target].Load
		if f := floorDiv(underN, n); f > 0 {
			k := min(f, over)
			moves = append(moves, Move{From: v.Self, To: target, Count: k})
			over -= k
			underN -= k * n
		}
	}
	return moves
}

// NearestUnderloadedExact is the integer-quota variant of N
// (docs/algorithms.md, "Rounding").
// The total S over the n known nodes is split into quotas floor(S/n) each,
// plus one for the S mod n known nodes with the lowest ring IDs; every node
// computes the same quotas. The walk is N's prefix-sum walk against quotas
// instead of the real mean: over = load(i) - quota(i) (capped at waiting);
// under += quota(t) - load(t); when under > 0 move min(under, over). With an
// exact view, simultaneous activation and nothing pinned in service, one
// round brings every node exactly to its quota.
func NearestUnderloadedExact(v View) []Move {
	ids, p := known(v)
	if p < 0 || len(ids) < 2 {
		return nil
	}
	n := len(ids)
	sum := 0
	for _, id := range ids {
		sum += v.Nodes[id].Load
	}
	base, rem := sum/n, sum%n
	quota := func(pos int) int {
		if pos < rem {
			return base + 1
		}
		return base
	}
	self := v.Nodes[v.Self]
	over := self.Load - quota(p)
	if w := self.Waiting(); over > w {
		over = w
	}
	if over <= 0 {
		return nil
	}
	var moves []Move
	under := 0
	for t := 1; t < n && over > 0; t++ {
		pos := (p - t + n) % n
		target := ids[pos]
		under += quota(pos) - v.Nodes[target].Load
		if under > 0 {
			k := min(under, over)
			moves = append(moves, Move{From: v.Self, To: target, Count: k})
			over -= k
			under -= k
		}
	}
	return moves
}

func ceilDiv(a, b int) int { return -floorDiv(-a, b) }

// floorDiv is floor(a/b) for b > 0, also for negative a.
func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}
