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
// streams (see engine.run), so the heap only holds request events.
const (
	evDone uint8 = iota // a request finished service on node
	evXfer              // a moved request reached node
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

// engine is the state of one run. Nothing in it is shared.
type engine struct {
	cfg      Config
	n, m     int
	kind     policy.Kind
	planner  policy.Planner
	picker   policy.Picker
	gen      *workload.Generator
	duration int64
	warmup   int64
	xferDel  int64
	gosDel   int64
	stale    int64
	sizeCap  float64 // ns; sizes are clipped to it

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
	free  []int32

	// nodes
	q       []fifo
	busy    []int
	movable []int // waiting requests that may still be moved
	load    []int // waiting + in service, the load index

	// gossip: per node a ring of the last published (time, load) entries
	gossip, activate ticker
	ringK            int
	pubT             []int64
	pubL             []int
	pubHead, pubCnt  []int
	view             []policy.NodeLoad
	picked           []int

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

	// onDone, when set (tests), sees every completion.
	onDone func(seq int64, node int, rt time.Duration)
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
		p, err := policy.Lookup(cfg.Policy)
		if err != nil {
			return nil, err
		}
		e.kind, e.planner, e.picker = p.Kind, p.Planner, p.Picker
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
	if e.kind == policy.KindTransfer {
		rng := rand.New(rand.NewPCG(cfg.Seed^0x5851f42d4c957f2d, 0x14057b7ef767814f))
		e.gossip = newTicker(int64(cfg.GossipInterval), e.n, rng)
		e.activate = newTicker(int64(cfg.ActivationInterval), e.n, rng)
		// Entries not yet visible span at most GossipDelay, so at most
		// delay/interval+1 of them, plus the visible one.
		e.ringK = int(e.gosDel/int64(cfg.GossipInterval)) + 2
		e.pubT = make([]int64, e.n*e.ringK)
		e.pubL = make([]int, e.n*e.ringK)
		e.pubHead = make([]int, e.n)
		e.pubCnt = make([]int, e.n)
		e.view = make([]policy.NodeLoad, e.n)
		for i := range e.view {
			e.view[i].Concurrency = e.m
		}
	}
	if est := int(cfg.Rate * cfg.Duration.Seconds() * 1.01); est > 0 {
		e.rts = make([]time.Duration, 0, est-int(cfg.Rate*cfg.Warmup.Seconds()))
	}
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
	for e.err == nil && (e.hasArr || e.inSystem > 0) {
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
			if ev.kind == evDone {
				e.done(int(ev.node), ev.slot)
			} else {
				e.enqueue(int(ev.node), ev.slot)
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
	if e.now >= e.warmup {
		if e.firstMeasured < 0 {
			e.firstMeasured = seq
		}
		e.rts = append(e.rts, 0)
	}
	e.inSystem++
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
	e.enqueue(target, s)
	e.nextArrival()
}

// enqueue puts request s on node i: into a free slot, else at the queue tail.
func (e *engine) enqueue(i int, s int32) {
	e.load[i]++
	if e.busy[i] < e.m {
		e.start(i, s)
		return
	}
	e.q[i].push(s)
	if !e.rHop[s] {
		e.movable[i]++
	}
}

func (e *engine) start(i int, s int32) {
	e.busy[i]++
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
	if e.onDone != nil {
		e.onDone(seq, i, rt)
	}
	e.free = append(e.free, s)
	if e.q[i].len() > 0 {
		next := e.q[i].pop()
		if !e.rHop[next] {
			e.movable[i]--
		}
		e.start(i, next)
	}
}

// publish is node i's gossip tick: it publishes its current load.
func (e *engine) publish(i int) {
	e.promote(i)
	base, k := i*e.ringK, e.ringK
	if e.pubCnt[i] == k { // cannot happen with ringK sized as above
		e.pubHead[i] = (e.pubHead[i] + 1) % k
		e.pubCnt[i]--
	}
	pos := base + (e.pubHead[i]+e.pubCnt[i])%k
	e.pubT[pos], e.pubL[pos] = e.now, e.load[i]
	e.pubCnt[i]++
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

// activateNode is node i's policy tick: view, plan, move from the tail.
func (e *engine) activateNode(i int) {
	if e.movable[i] == 0 {
		// Every planner moves at most the waiting requests, and none of
		// them may move: the plan could not change anything.
		return
	}
	for j := range e.view {
		v := &e.view[j]
		if j == i {
			v.Load, v.Known, v.Age = e.load[i], true, 0
			continue
		}
		e.promote(j)
		pos := j*e.ringK + e.pubHead[j]
		if e.pubCnt[j] == 0 || e.pubT[pos]+e.gosDel > e.now {
			v.Load, v.Known, v.Age = 0, false, 0
			continue
		}
		age := e.now - e.pubT[pos]
		v.Load, v.Known, v.Age = e.pubL[pos], age <= e.stale, time.Duration(age)
	}
	for _, mv := range e.planner.Plan(policy.View{Self: i, Nodes: e.view}) {
		if mv.From != i || mv.To < 0 || mv.To >= e.n || mv.To == i || mv.Count < 0 {
			e.err = fmt.Errorf("policy %s planned an invalid move %+v for node %d of %d", e.cfg.Policy, mv, i, e.n)
			return
		}
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
		e.rHop[s] = true
		e.schedule(e.now+e.xferDel, evXfer, to, s)
		buf[picked[x]] = -1
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
}

func (e *engine) result() Result {
	r := Result{
		Config:        e.cfg,
		ResponseTimes: e.rts,
		Requests:      int(e.arrSeq),
		Transfers:     e.transfers,
		Events:        e.events,
	}
	r.summarise()
	return r
}
