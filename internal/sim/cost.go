package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/swd-project/swd/internal/policy"
)

// Bodies and the transfer-cost rule (issue 22, paper 002): requests may
// carry bodies, moving a request takes longer the larger its body, and with
// Config.TransferCost every planner's moves go through policy.WorthMoving,
// as the daemon's runner does with --transfer-cost measured.

// BodyMix gives requests bodies: a LargeShare of them (drawn independently,
// from the seed) carry LargeBytes, the others SmallBytes.
type BodyMix struct {
	SmallBytes int64
	LargeBytes int64
	LargeShare float64
}

func (b BodyMix) validate() error {
	switch {
	case b.SmallBytes < 0 || b.LargeBytes < 0:
		return fmt.Errorf("body sizes must not be negative, got %d and %d", b.SmallBytes, b.LargeBytes)
	case !(b.LargeShare >= 0 && b.LargeShare <= 1):
		return fmt.Errorf("large-body share must be in [0, 1], got %v", b.LargeShare)
	}
	return nil
}

// validateCost checks the body and cost fields of c.
func (c Config) validateCost() error {
	if err := c.Bodies.validate(); err != nil {
		return err
	}
	if c.HandoffPerMiB < 0 {
		return fmt.Errorf("hand-off time per MiB must not be negative, got %s", c.HandoffPerMiB)
	}
	return nil
}

// initBodies sets up body draws and the rule's costs.
func (e *engine) initBodies(cfg Config) {
	if cfg.Bodies.LargeShare > 0 || cfg.Bodies.SmallBytes > 0 {
		e.bodyRng = rand.New(rand.NewPCG(cfg.Seed^0x3c6ef372fe94f82b, 0xa54ff53a5f1d36f1))
	}
	e.perByte = float64(cfg.HandoffPerMiB) / float64(1<<20)
	if cfg.TransferCost {
		// What the daemon would measure: the model's hand-off time per
		// size class (at each class's upper bound), and the app's mean
		// service time.
		e.cost = policy.TransferCost{Service: time.Duration(cfg.Workload.MeanServiceMs() * 1e6)}
		for _, b := range []int64{4 << 10, 64 << 10, 1 << 20, max(cfg.Bodies.LargeBytes, cfg.Bodies.SmallBytes, 1<<20)} {
			e.cost.Handoff = append(e.cost.Handoff, policy.SizeCost{MaxBytes: b, Cost: time.Duration(e.handoff(b))})
		}
	}
}

// drawBody is a new request's body size.
func (e *engine) drawBody() int64 {
	if e.bodyRng == nil {
		return 0
	}
	if e.bodyRng.Float64() < e.cfg.Bodies.LargeShare {
		return e.cfg.Bodies.LargeBytes
	}
	return e.cfg.Bodies.SmallBytes
}

// handoff is how long moving a request with a body of n bytes takes, in
// nanoseconds.
func (e *engine) handoff(n int64) int64 { return e.xferDel + int64(float64(n)*e.perByte) }

// pick is one movable request chosen to go: its queue position (0 is the
// head) and its target.
type pick struct{ pos, to int }

// moveWorth carries out node i's planned moves through the rule: the
// movable requests from the tail (as many as planned plus the daemon's
// slack), their bodies, policy.WorthMoving, then the chosen ones leave.
func (e *engine) moveWorth(i int, v policy.View, moves []policy.Move) {
	total := 0
	for _, mv := range moves {
		total += mv.Count
	}
	q := &e.q[i]
	buf := q.buf[q.head:]
	var pos []int
	var sizes []int64
	for p := len(buf) - 1; p >= 0 && len(pos) < total+movableSlack; p-- {
		if !e.rHop[buf[p]] {
			pos = append(pos, p)
			sizes = append(sizes, e.rBody[buf[p]])
		}
	}
	var picks []pick
	for _, h := range policy.WorthMoving(v, moves, sizes, e.cost) {
		for _, k := range h.Picks {
			picks = append(picks, pick{pos: pos[k], to: h.To})
		}
	}
	e.heldBack += min(total, len(pos)) - len(picks)
	e.moveAt(i, picks)
}

// movableSlack is the daemon's (internal/node): how many movable requests
// beyond the planned count the rule may choose instead.
const movableSlack = 64

// moveAt sends the picked requests of node i's queue to their targets,
// oldest first; each arrives after its hand-off time.
func (e *engine) moveAt(i int, picks []pick) {
	if len(picks) == 0 {
		return
	}
	q := &e.q[i]
	buf := q.buf[q.head:]
	first := len(buf)
	for _, pk := range picks {
		first = min(first, pk.pos)
	}
	for p := first; p < len(buf); p++ { // oldest first, as move does
		for _, pk := range picks {
			if pk.pos != p {
				continue
			}
			s := buf[p]
			if e.work != nil {
				e.work.waitW[i] -= e.work.pred[s]
			}
			buf[p] = -1
			if e.onMove != nil {
				e.onMove(e.rSeq[s], i, pk.to)
			}
			e.rHop[s] = true
			e.movedBytes += e.rBody[s]
			e.schedule(e.now+e.handoff(e.rBody[s]), evXfer, pk.to, s)
		}
	}
	w := first
	for r := first; r < len(buf); r++ {
		if buf[r] >= 0 {
			buf[w] = buf[r]
			w++
		}
	}
	q.buf = q.buf[:q.head+w]
	e.load[i] -= len(picks)
	e.movable[i] -= len(picks)
	e.transfers += len(picks)
	e.nMoves += len(picks)
	e.changed(i)
}
