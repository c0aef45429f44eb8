package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/workload"
)

const never = math.MaxInt64

// Kinds of heap events. Arrivals and the two periodic timers are separate
// streams (see engine.run), so the heap only holds request and message
// events.
const (
	evDone     uint8 = iota // a request finished service on node
	evXfer                  // a moved (pushed or dispatched) request reached node
	evPullReq               // pull slot's request reached node (the asked peer)
	evPullMiss              // pull slot's "nothing movable" reached node (the puller)
	evPullXfer              // pull slot's request reached node (the puller)
	evSeen                  // node's published entry became visible (direct gossip)
	evRecv                  // datagram slot reached node (piggyback gossip)
	evNotice                // node's completion notice reached the dispatcher (cq)
)

// event is a heap entry: at time t, kind happens to request slot on node.
// seq (the scheduling order) breaks ties, which keeps runs deterministic.
type event struct {
	t    int64
	seq  uint64
	node int32
	slot int32
	kind uint8
}

// eventHeap is a binary min-heap on (t, seq), written out by hand so that
// nothing is boxed in an interface.
type eventHeap []event

func (a event) before(b event) bool { return a.t < b.t || (a.t == b.t && a.seq < b.seq) }

func (h *eventHeap) push(e event) {
	s := append(*h, e)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !e.before(s[p]) {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = e
	*h = s
}

func (h *eventHeap) pop() event {
	s := *h
	top := s[0]
	last := s[len(s)-1]
	s = s[:len(s)-1]
	n := len(s)
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && s[r].before(s[c]) {
			c = r
		}
		if !s[c].before(last) {
			break
		}
		s[i] = s[c]
		i = c
	}
	if n > 0 {
		s[i] = last
	}
	*h = s
	return top
}

// ticker is a periodic per-node timer: node[k] fires at base + phase[k]
// every interval. All nodes share the interval, so the firing order within
// a period is the sorted phases and the next firing is O(1) to find.
type ticker struct {
	interval int64
	phase    []int64 // ascending
	node     []int32
	base     int64
	i        int
}

func newTicker(interval int64, n int, rng *rand.Rand) ticker {
	phases := make([]int64, n)
	for i := range phases {
		phases[i] = rng.Int64N(interval)
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		if phases[a] != phases[b] {
			if phases[a] < phases[b] {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	t := ticker{interval: interval, phase: make([]int64, n), node: order}
	for k, id := range order {
		t.phase[k] = phases[id]
	}
	return t
}

func (t *ticker) next() int64 {
	if len(t.phase) == 0 {
		return never
	}
	return t.base + t.phase[t.i]
}

func (t *ticker) advance() {
	t.i++
	if t.i == len(t.phase) {
		t.i = 0
		t.base += t.interval
	}
}

// fifo is a queue of request slots; it also allows removing requests near
// its tail (transfers).
type fifo struct {
	buf  []int32
	head int
}

func (q *fifo) len() int { return len(q.buf) - q.head }

func (q *fifo) push(s int32) { q.buf = append(q.buf, s) }

func (q *fifo) pop() int32 {
	s := q.buf[q.head]
	q.head++
	switch {
	case q.head == len(q.buf):
		q.buf, q.head = q.buf[:0], 0
	case q.head >= 1024 && 2*q.head >= len(q.buf):
		n := copy(q.buf, q.buf[q.head:])
		q.buf, q.head = q.buf[:n], 0
	}
	return s
}

// removeAt removes the request at position p (0 is the head) and returns it.
func (q *fifo) removeAt(p int) int32 {
	if p == 0 {
		return q.pop()
	}
	i := q.head + p
	s := q.buf[i]
	copy(q.buf[i:], q.buf[i+1:])
	q.buf = q.buf[:len(q.buf)-1]
	return s
}

// engine is the state of one run. Nothing in it is shared.
type engine struct {
	cfg      Config
	n, m     int
	kind     policy.Kind
	planner  policy.Planner
	picker   policy.Picker
	puller   policy.Puller        // steal's pull side, nil otherwise
	pusher   policy.ArrivalPusher // steal's arrival push, nil otherwise
	rules    policy.PullRules
	holder   policy.Holder // cq: the dispatcher holds arrivals
	gen      *workload.Generator
	duration int64
	warmup   int64
	xferDel  int64
	gosDel   int64
	stale    int64
	ctlDel   int64
	sizeCap  float64 // ns; sizes are clipped to it

	// bodies and the transfer-cost rule (cost.go)
	bodyRng    *rand.Rand
	perByte    float64 // ns per body byte moved
	cost       policy.TransferCost
	heldBack   int
	movedBytes int64

	now    int64
	heap   eventHeap
	evSeq  uint64
	events int

	// the next arrival
	hasArr bool
	arr    workload.Arrival
	arrSeq int64

	// requests, by slot; slots are recycled through free
	rArr  []int64
	rSize []int64
	rSeq  []int64
	rHop  []bool
	rBody []int64 // body bytes (cost.go)
	free  []int32

	// nodes
	q       []fifo
	busy    []int
	movable []int // waiting requests that may still be moved
	load    []int // waiting + in service, the load index

	// gossip (direct): per node a ring of the last published (time, load,
	// head) entries, head being the arrival time of the node's oldest
	// movable waiting request (-1: none)
	gossip, activate ticker
	ringK            int
	pubT             []int64
	pubL             []int
	pubH             []int64
	pubHead, pubCnt  []int
	view             []policy.NodeLoad
	picked           []int
	gossipBytes      int64 // what every node sent, wire bytes
	wire             wireSizes

	// piggyback gossip, when configured (see gossip.go)
	pb *piggyback
	// PullRules.GossipOnChange: whether each node's last publication
	// showed a head, and how many extra publications there were
	onChange bool
	lastHead []bool
	nChanges int
	// gossip events (evSeen, evRecv) in the heap
	gossipInFlight int

	// steal: pulls in flight by slot, per-node counts, decision seeds
	pulls    []pullRec
	pullFree []int32
	inflight []int // pulls in flight per node
	reserved []int // slots held for pulled requests (PullRules.Reserve)
	drng     *rand.Rand
	nPulls   int
	nMisses  int
	nPushes  int
	nMoves   int // planner moves

	// cq: the dispatcher's FIFO and its exact outstanding counts
	dq    fifo
	dOut  []int
	dConc []int

	inSystem      int
	transfers     int
	firstMeasured int64
	rts           []time.Duration
	err           error

	// snapshotBursts, when set (studies), makes the dispatcher place every
	// request of a burst (same arrival instant) on the counts it had when
	// the burst arrived, as a dispatcher issuing a burst's requests in
	// parallel would.
	snapshotBursts bool
	snapLoad       []int
	lastArr        int64

	// work is the work load index's state; nil under count (see work.go).
	work *workState

	// onDone, when set (tests), sees every completion.
	onDone func(seq int64, node int, rt time.Duration)
	// onStart and onMove, when set (tests), see every request handed to
	// a slot and every request leaving a node (periodic move, pull,
	// arrival push; from is the node it leaves).
	onStart func(seq int64, node int)
	onMove  func(seq int64, from, to int)
}

func newEngine(cfg Config) (*engine, error) {
	e := &engine{
		cfg:           cfg,
		n:             cfg.Nodes,
		m:             cfg.Concurrency,
		duration:      int64(cfg.Duration),
		warmup:        int64(cfg.Warmup),
		xferDel:       int64(cfg.TransferDelay),
		gosDel:        int64(cfg.GossipDelay),
		stale:         int64(cfg.StaleAfter),
		ctlDel:        int64(cfg.ControlDelay),
		firstMeasured: -1,
		sizeCap:       math.MaxInt64 / 4,
	}
	e.snapshotBursts = cfg.SnapshotBursts
	if cfg.SizeCap > 0 {
		e.sizeCap = float64(cfg.SizeCap)
	}
	if cfg.Policy == Central {
		// One FIFO feeding all n*m slots is one node with n*m slots.
		e.n, e.m, e.kind = 1, cfg.Nodes*cfg.Concurrency, policy.KindNone
	} else {
		p, err := cfg.policy()
		if err != nil {
			return nil, err
		}
		e.kind, e.planner, e.picker = p.Kind, p.Planner, p.Picker
		e.puller, e.pusher, e.rules, e.holder = p.Puller, p.Pusher, p.Pull, p.Holder
	}
	gen, err := workload.NewGenerator(cfg.Workload, cfg.Rate, cfg.Seed)
	if err != nil {
		return nil, err
	}
	e.gen = gen
	e.q = make([]fifo, e.n)
	e.busy = make([]int, e.n)
	e.movable = make([]int, e.n)
	e.load = make([]int, e.n)
	e.inflight = make([]int, e.n)
	e.reserved = make([]int, e.n)
	if e.kind == policy.KindTransfer {
		rng := rand.New(rand.NewPCG(cfg.Seed^0x5851f42d4c957f2d, 0x14057b7ef767814f))
		e.gossip = newTicker(int64(cfg.GossipInterval), e.n, rng)
		e.activate = newTicker(int64(cfg.ActivationInterval), e.n, rng)
		// Entries not yet visible span at most GossipDelay, so at most
		// delay/interval+1 of them, plus the visible one.
		e.ringK = int(e.gosDel/int64(cfg.GossipInterval)) + 2
		if e.rules.GossipOnChange {
			// Extra publications: room for many within one gossip delay
			// (beyond that the oldest invisible one is dropped).
			e.onChange = true
			e.lastHead = make([]bool, e.n)
			e.ringK += 14
		}
		e.pubT = make([]int64, e.n*e.ringK)
		e.pubL = make([]int, e.n*e.ringK)
		e.pubH = make([]int64, e.n*e.ringK)
		e.pubHead = make([]int, e.n)
		e.pubCnt = make([]int, e.n)
		e.view = make([]policy.NodeLoad, e.n)
		for i := range e.view {
			e.view[i].Concurrency = e.m
		}
		e.wire = newWireSizes(cfg)
		if cfg.Gossip == GossipPiggyback {
			e.pb = newPiggyback(e, rand.New(rand.NewPCG(cfg.Seed^0x2545f4914f6cdd1d, 0x9e3779b97f4a7c15)))
		}
	}
	if e.puller != nil || e.pusher != nil {
		e.drng = rand.New(rand.NewPCG(cfg.Seed^0x6a09e667f3bcc909, 0xbb67ae8584caa73b))
	}
	if cfg.LoadIndex == policy.IndexWork && e.kind == policy.KindTransfer {
		e.work = newWorkState(e)
		e.work.pubW = make([]int64, e.n*e.ringK)
	}
	if e.holder != nil {
		e.dOut = make([]int, e.n)
		e.dConc = make([]int, e.n)
		for i := range e.dConc {
			e.dConc[i] = e.m
		}
	}
	if est := int(cfg.Rate * cfg.Duration.Seconds() * 1.01); est > 0 {
		e.rts = make([]time.Duration, 0, est-int(cfg.Rate*cfg.Warmup.Seconds()))
	}
	e.initBodies(cfg)
	e.nextArrival()
	return e, nil
}

func (e *engine) nextArrival() {
	a := e.gen.Next()
	e.arr, e.hasArr = a, int64(a.At) < e.duration
}

func (e *engine) schedule(t int64, kind uint8, node int, slot int32) {
	e.heap.push(event{t: t, seq: e.evSeq, node: int32(node), slot: slot, kind: kind})
	e.evSeq++
}

func (e *engine) run() {
	// Messages still in flight when the last request completes (a pull
	// that will miss, cq's last completion notices) are delivered too;
	// gossip in flight (which the ticks keep producing) is not waited for.
	for e.err == nil && (e.hasArr || e.inSystem > 0 || len(e.heap) > e.gossipInFlight) {
		tH := int64(never)
		if len(e.heap) > 0 {
			tH = e.heap[0].t
		}
		tA := int64(never)
		if e.hasArr {
			tA = int64(e.arr.At)
		}
		tG, tP := e.gossip.next(), e.activate.next()
		e.events++
		switch {
		case tH <= tA && tH <= tG && tH <= tP:
			ev := e.heap.pop()
			e.now = ev.t
			switch ev.kind {
			case evDone:
				e.done(int(ev.node), ev.slot)
			case evXfer:
				e.enqueue(int(ev.node), ev.slot)
			case evPullReq:
				e.pullReq(int(ev.node), ev.slot)
			case evPullMiss:
				e.pullMiss(ev.slot)
			case evPullXfer:
				e.pullArrive(ev.slot)
			case evSeen:
				e.gossipInFlight--
				e.seen(int(ev.node))
			case evRecv:
				e.gossipInFlight--
				e.pb.recv(int(ev.node), ev.slot)
			case evNotice:
				e.dOut[ev.node]--
				e.dispatch()
			}
		case tA <= tG && tA <= tP:
			e.now = tA
			e.arrive()
		case tG <= tP:
			e.now = tG
			e.publish(int(e.gossip.node[e.gossip.i]))
			e.gossip.advance()
		default:
			e.now = tP
			e.activateNode(int(e.activate.node[e.activate.i]))
			e.activate.advance()
		}
	}
}

func (e *engine) alloc() int32 {
	if k := len(e.free); k > 0 {
		s := e.free[k-1]
		e.free = e.free[:k-1]
		return s
	}
	e.rArr = append(e.rArr, 0)
	e.rSize = append(e.rSize, 0)
	e.rSeq = append(e.rSeq, 0)
	e.rHop = append(e.rHop, false)
	e.rBody = append(e.rBody, 0)
	if e.work != nil {
		e.work.grow(len(e.rArr))
	}
	return int32(len(e.rArr) - 1)
}

func (e *engine) arrive() {
	seq := e.arrSeq
	e.arrSeq++
	s := e.alloc()
	e.rArr[s] = e.now
	e.rSize[s] = int64(min(math.Round(e.arr.SizeMs*1e6), e.sizeCap))
	e.rSeq[s] = seq
	e.rHop[s] = false
	e.rBody[s] = e.drawBody()
	if e.work != nil {
		e.work.class[s] = int32(e.arr.Class)
	}
	if e.now >= e.warmup {
		if e.firstMeasured < 0 {
			e.firstMeasured = seq
		}
		e.rts = append(e.rts, 0)
	}
	e.inSystem++
	if e.holder != nil {
		e.dq.push(s)
		e.dispatch()
		e.nextArrival()
		return
	}
	d := policy.DispatchView{Outstanding: e.load, Seq: uint64(seq)}
	if e.snapshotBursts && e.kind == policy.KindDispatch {
		if seq == 0 || e.now != e.lastArr {
			e.snapLoad = append(e.snapLoad[:0], e.load...)
		}
		e.lastArr = e.now
		d.Outstanding = e.snapLoad
	}
	var target int
	if e.kind == policy.KindDispatch {
		target = e.picker.Pick(d)
	} else {
		target = policy.RoundRobin(d)
	}
	if target < 0 || target >= e.n {
		e.err = fmt.Errorf("policy %s picked node %d of %d", e.cfg.Policy, target, e.n)
		return
	}
	if e.pusher != nil && e.busy[target]+e.reserved[target] >= e.m {
		if to := e.pusher.PushArrival(e.buildView(target), e.drng.Uint64()); to >= 0 {
			if to >= e.n || to == target {
				e.err = fmt.Errorf("policy %s pushed an arrival at node %d to node %d of %d", e.cfg.Policy, target, to, e.n)
				return
			}
			if e.onMove != nil {
				e.onMove(seq, target, to)
			}
			e.rHop[s] = true
			e.nPushes++
			e.transfers++
			e.schedule(e.now+e.handoff(e.rBody[s]), evXfer, to, s)
			e.nextArrival()
			return
		}
	}
	e.enqueue(target, s)
	e.nextArrival()
}

// enqueue puts request s on node i: into a free slot, else at the queue
// tail. A slot reserved for a pull in flight is not free.
func (e *engine) enqueue(i int, s int32) {
	e.load[i]++
	if e.work != nil {
		e.work.predict(i, s)
	}
	if e.busy[i]+e.reserved[i] < e.m {
		e.start(i, s)
	} else {
		if e.work != nil {
			e.work.waitW[i] += e.work.pred[s]
		}
		e.q[i].push(s)
		if !e.rHop[s] {
			e.movable[i]++
		}
	}
	e.changed(i)
}

func (e *engine) start(i int, s int32) {
	if e.onStart != nil {
		e.onStart(e.rSeq[s], i)
	}
	e.busy[i]++
	if e.work != nil {
		e.work.started(i, s, e.now)
	}
	e.schedule(e.now+e.rSize[s], evDone, i, s)
}

func (e *engine) done(i int, s int32) {
	e.busy[i]--
	e.load[i]--
	e.inSystem--
	rt := time.Duration(e.now - e.rArr[s])
	seq := e.rSeq[s]
	if e.firstMeasured >= 0 && seq >= e.firstMeasured {
		e.rts[seq-e.firstMeasured] = rt
	}
	if e.work != nil {
		e.work.finished(i, s, e.rSize[s])
	}
	if e.onDone != nil {
		e.onDone(seq, i, rt)
	}
	e.free = append(e.free, s)
	if e.holder != nil {
		e.schedule(e.now+e.ctlDel, evNotice, i, 0)
	}
	if e.rules.Overtake && e.q[i].len() > 0 && e.tryOvertake(i) {
		e.changed(i)
		return
	}
	if !e.startNext(i) && e.puller != nil {
		e.tryPull(i)
	}
	e.changed(i)
}

// startNext starts node i's queue head in a free slot, if there are both.
func (e *engine) startNext(i int) bool {
	if e.q[i].len() == 0 || e.busy[i]+e.reserved[i] >= e.m {
		return false
	}
	next := e.q[i].pop()
	if !e.rHop[next] {
		e.movable[i]--
	}
	if e.work != nil {
		e.work.waitW[i] -= e.work.pred[next]
	}
	e.start(i, next)
	return true
}

// headArr is the arrival time of node i's oldest movable waiting request,
// -1 when it has none.
func (e *engine) headArr(i int) int64 {
	if p := e.headPos(i); p >= 0 {
		q := &e.q[i]
		return e.rArr[q.buf[q.head+p]]
	}
	return -1
}

// headPos is the queue position of node i's oldest movable waiting
// request, -1 when it has none.
func (e *engine) headPos(i int) int {
	if e.movable[i] == 0 {
		return -1
	}
	q := &e.q[i]
	for p, s := range q.buf[q.head:] {
		if !e.rHop[s] {
			return p
		}
	}
	return -1
}

// published is the load index node i gossips: a slot reserved for a pull
// counts as busy.
func (e *engine) published(i int) int { return e.load[i] + e.reserved[i] }

// hasHead is what PullRules.GossipOnChange watches: whether node i has a
// movable waiting request.
func (e *engine) hasHead(i int) bool { return e.movable[i] > 0 }

// changed publishes node i's entry at once when whether it has a head
// changed since its last publication (PullRules.GossipOnChange).
func (e *engine) changed(i int) {
	if e.onChange && e.hasHead(i) != e.lastHead[i] {
		e.nChanges++
		e.publishEntry(i, true)
	}
}

// publish is node i's gossip tick: it publishes its current load and head.
func (e *engine) publish(i int) { e.publishEntry(i, false) }

// publishEntry publishes node i's entry; extra marks a publication outside
// the ticks (GossipOnChange), which under piggyback gossip carries the own
// entry alone.
func (e *engine) publishEntry(i int, extra bool) {
	if e.onChange {
		e.lastHead[i] = e.hasHead(i)
	}
	if e.pb != nil {
		e.pb.tick(i, extra)
		return
	}
	e.promote(i)
	base, k := i*e.ringK, e.ringK
	if e.pubCnt[i] == k { // cannot happen with ringK sized as above
		e.pubHead[i] = (e.pubHead[i] + 1) % k
		e.pubCnt[i]--
	}
	pos := base + (e.pubHead[i]+e.pubCnt[i])%k
	h := e.headArr(i)
	e.pubT[pos], e.pubL[pos], e.pubH[pos] = e.now, e.published(i), h
	var work int64
	if e.work != nil {
		work = e.work.work(i, e.now)
		e.work.pubW[pos] = work
	}
	e.pubCnt[i]++
	e.gossipBytes += int64(e.n-1) * int64(e.wire.datagram(e.wire.entry(e.published(i), 0, headAge(e.now, h), work)))
	if h >= 0 && e.puller != nil && e.rules.OnGossip {
		e.gossipInFlight++
		e.schedule(e.now+e.gosDel, evSeen, i, 0)
	}
}

func headAge(now, arr int64) int64 {
	if arr < 0 {
		return 0
	}
	return max(now-arr, 1)
}

// promote drops node j's entries superseded by a newer visible one, so that
// the ring's head is the latest entry the others can see (if any is).
func (e *engine) promote(j int) {
	base, k := j*e.ringK, e.ringK
	for e.pubCnt[j] >= 2 {
		nxt := (e.pubHead[j] + 1) % k
		if e.pubT[base+nxt]+e.gosDel > e.now {
			break
		}
		e.pubHead[j] = nxt
		e.pubCnt[j]--
	}
}

// buildView fills e.view with what node i sees now: its own live load
// (pulls in flight counting as load) and head, and the others' latest
// visible gossip entries.
func (e *engine) buildView(i int) policy.View {
	if e.pb != nil {
		e.pb.view(i)
	} else {
		for j := range e.view {
			if j == i {
				continue
			}
			v := &e.view[j]
			e.promote(j)
			pos := j*e.ringK + e.pubHead[j]
			if e.pubCnt[j] == 0 || e.pubT[pos]+e.gosDel > e.now {
				v.Load, v.Known, v.Age, v.HeadAge = 0, false, 0, 0
				continue
			}
			age := e.now - e.pubT[pos]
			v.Load, v.Known, v.Age = e.pubL[pos], age <= e.stale, time.Duration(age)
			v.HeadAge = time.Duration(headAge(e.now, e.pubH[pos]))
			if e.work != nil {
				v.Work = time.Duration(e.work.pubW[pos])
			}
		}
	}
	v := &e.view[i]
	v.Load, v.Known, v.Age = e.load[i]+e.inflight[i], true, 0
	v.HeadAge = time.Duration(headAge(e.now, e.headArr(i)))
	if e.work != nil {
		v.Work = time.Duration(e.work.work(i, e.now))
	}
	return policy.View{Self: i, Nodes: e.view}
}

// activateNode is node i's policy tick: view, plan, move from the tail.
func (e *engine) activateNode(i int) {
	if e.movable[i] == 0 {
		// Every planner moves at most the waiting requests, and none of
		// them may move: the plan could not change anything.
		return
	}
	v := e.buildView(i)
	moves := e.plan(v)
	for _, mv := range moves {
		if mv.From != i || mv.To < 0 || mv.To >= e.n || mv.To == i || mv.Count < 0 {
			e.err = fmt.Errorf("policy %s planned an invalid move %+v for node %d of %d", e.cfg.Policy, mv, i, e.n)
			return
		}
	}
	if e.cfg.TransferCost {
		e.moveWorth(i, v, moves)
		return
	}
	for _, mv := range moves {
		e.move(i, mv.To, mv.Count)
	}
}

// move sends up to k movable requests from the tail of node i's queue to
// node to; they keep their order and arrive TransferDelay later.
func (e *engine) move(i, to, k int) {
	q := &e.q[i]
	buf := q.buf[q.head:]
	picked := e.picked[:0]
	for p := len(buf) - 1; p >= 0 && len(picked) < k; p-- {
		if !e.rHop[buf[p]] {
			picked = append(picked, p)
		}
	}
	e.picked = picked
	if len(picked) == 0 {
		return
	}
	for x := len(picked) - 1; x >= 0; x-- { // oldest first
		s := buf[picked[x]]
		if e.work != nil {
			e.work.waitW[i] -= e.work.pred[s]
		}
		buf[picked[x]] = -1
		if e.onMove != nil {
			e.onMove(e.rSeq[s], i, to)
		}
		e.rHop[s] = true
		e.movedBytes += e.rBody[s]
		e.schedule(e.now+e.handoff(e.rBody[s]), evXfer, to, s)
	}
	w := picked[len(picked)-1]
	for r := w; r < len(buf); r++ {
		if buf[r] >= 0 {
			buf[w] = buf[r]
			w++
		}
	}
	q.buf = q.buf[:q.head+w]
	e.load[i] -= len(picked)
	e.movable[i] -= len(picked)
	e.transfers += len(picked)
	e.nMoves += len(picked)
	e.changed(i)
}

func (e *engine) result() Result {
	r := Result{
		Config:        e.cfg,
		ResponseTimes: e.rts,
		Requests:      int(e.arrSeq),
		Transfers:     e.transfers,
		Moves:         e.nMoves,
		Pulls:         e.nPulls,
		PullMisses:    e.nMisses,
		ArrivalPushes: e.nPushes,
		HeldBack:      e.heldBack,
		MovedBytes:    e.movedBytes,
		Events:        e.events,
	}
	if e.now > 0 && e.n > 0 {
		r.GossipBytesPerNodeSec = float64(e.gossipBytes) / float64(e.n) / (float64(e.now) / 1e9)
	}
	if e.work != nil {
		r.RouteCosts = e.work.routeCosts(e)
	}
	r.summarise()
	return r
}
