package sim

import (
	"fmt"

	"github.com/swd-project/swd/internal/policy"
)

// pullRec is one pull in flight: node asks asks[next], then the rest in
// order; req is the request it was handed, once handed.
type pullRec struct {
	node  int32
	next  int8
	nAsk  int8
	asks  [policy.MaxPullAttempts]int32
	req   int32
	since int64 // when the pull started (tests)
}

// pullable reports whether node i may start a pull now: nothing waits in
// its queue and it has a slot that is neither busy nor promised to a pull
// already in flight.
func (e *engine) pullable(i int) bool {
	return e.q[i].len() == 0 && e.busy[i]+e.inflight[i] < e.m
}

// tryOvertake: a slot of node i freed while requests wait locally; the
// Puller may name peers whose head is older than the local one. If so the
// slot is reserved and pulls; the local requests keep waiting.
func (e *engine) tryOvertake(i int) bool {
	if e.busy[i]+e.inflight[i] >= e.m {
		return false
	}
	asks := e.pull(e.buildView(i))
	if len(asks) == 0 {
		return false
	}
	e.startPull(i, asks)
	return e.err == nil
}

// tryPull runs the Puller for every slot of node i that may pull, on node
// i's current view, and starts the pulls it asks for.
func (e *engine) tryPull(i int) {
	defer e.changed(i)
	for e.pullable(i) {
		asks := e.pull(e.buildView(i))
		if len(asks) == 0 {
			return
		}
		e.startPull(i, asks)
		if e.err != nil {
			return
		}
	}
}

// startPull starts a pull of node i asking asks in order.
func (e *engine) startPull(i int, asks []int) {
	if len(asks) > policy.MaxPullAttempts {
		e.err = fmt.Errorf("policy %s asked %d peers, more than %d", e.cfg.Policy, len(asks), policy.MaxPullAttempts)
		return
	}
	var p int32
	if k := len(e.pullFree); k > 0 {
		p = e.pullFree[k-1]
		e.pullFree = e.pullFree[:k-1]
	} else {
		e.pulls = append(e.pulls, pullRec{})
		p = int32(len(e.pulls) - 1)
	}
	r := &e.pulls[p]
	*r = pullRec{node: int32(i), nAsk: int8(len(asks)), req: -1, since: e.now}
	for k, j := range asks {
		if j < 0 || j >= e.n || j == i {
			e.err = fmt.Errorf("policy %s asked node %d for node %d of %d", e.cfg.Policy, j, i, e.n)
			return
		}
		r.asks[k] = int32(j)
	}
	e.inflight[i]++
	if e.rules.Reserve {
		e.reserved[i]++
	}
	e.schedule(e.now+e.ctlDel, evPullReq, int(r.asks[0]), p)
}

// pullReq: pull p's request reached peer j. The peer hands over its head
// (oldest movable waiting request), which reaches the puller TransferDelay
// later, or answers "nothing movable", which reaches it ControlDelay later.
func (e *engine) pullReq(j int, p int32) {
	r := &e.pulls[p]
	pos := e.headPos(j)
	if pos < 0 {
		e.nMisses++
		e.schedule(e.now+e.ctlDel, evPullMiss, int(r.node), p)
		return
	}
	s := e.q[j].removeAt(pos)
	if e.work != nil {
		e.work.waitW[j] -= e.work.pred[s]
	}
	if e.onMove != nil {
		e.onMove(e.rSeq[s], j, int(r.node))
	}
	e.rHop[s] = true
	e.load[j]--
	e.movable[j]--
	e.nPulls++
	e.transfers++
	r.req = s
	e.schedule(e.now+e.xferDel, evPullXfer, int(r.node), p)
	e.changed(j)
}

// pullMiss: the asked peer had nothing movable. Ask the next one, or give
// the slot back when the list is exhausted.
func (e *engine) pullMiss(p int32) {
	r := &e.pulls[p]
	r.next++
	if r.next < r.nAsk {
		e.schedule(e.now+e.ctlDel, evPullReq, int(r.asks[r.next]), p)
		return
	}
	i := int(r.node)
	e.endPull(i, p)
	// A local arrival may have waited for the reserved slot. A pull that
	// found nothing does not retry at once (it would ask the same stale
	// view again); the next completion or gossip entry triggers the next.
	e.startNext(i)
	e.changed(i)
}

// pullArrive: the pulled request reached the puller. With Reserve it takes
// the slot held for it; without, it joins the node like any moved request
// (and waits if a local arrival took the slot meanwhile).
func (e *engine) pullArrive(p int32) {
	r := &e.pulls[p]
	i, s := int(r.node), r.req
	e.endPull(i, p)
	e.enqueue(i, s)
}

func (e *engine) endPull(i int, p int32) {
	e.inflight[i]--
	if e.rules.Reserve {
		e.reserved[i]--
	}
	e.pullFree = append(e.pullFree, p)
}

// seen: node j's entry, which shows a head, became visible to the others
// (direct gossip). Every node with a slot that may pull, in ring order
// after j (they all read the entry at the same instant), runs its Puller
// if policy.GossipPull lets it (PullRules.GossipPullers).
func (e *engine) seen(j int) {
	for k := 1; k < e.n; k++ {
		i := (j + k) % e.n
		if !e.pullable(i) {
			continue
		}
		if e.rules.GossipPullers > 0 && !policy.GossipPull(e.buildView(i), e.rules.GossipPullers, e.drng.Uint64()) {
			continue
		}
		e.tryPull(i)
	}
}

// dispatch is cq's dispatcher: while the Holder places the FIFO's head on
// a node, send it there (it arrives TransferDelay later).
func (e *engine) dispatch() {
	for e.dq.len() > 0 {
		s := e.dq.buf[e.dq.head]
		i := e.holder.Place(policy.DispatchView{Outstanding: e.dOut, Concurrency: e.dConc, Seq: uint64(e.rSeq[s]), Held: e.dq.len()})
		if i < 0 {
			return
		}
		if i >= e.n {
			e.err = fmt.Errorf("policy %s placed a request on node %d of %d", e.cfg.Policy, i, e.n)
			return
		}
		e.dq.pop()
		e.dOut[i]++
		e.schedule(e.now+e.xferDel, evXfer, i, s)
	}
}
