package dummyapp

import (
	"context"
	"sync/atomic"
	"time"
)

// sink keeps the loop's result observable so the compiler cannot drop it.
var sink atomic.Uint64

// spin runs n iterations of a fixed xorshift loop from state x and returns
// the new state. The loop has no memory traffic, so its speed depends only
// on the CPU time it gets.
func spin(n int64, x uint64) uint64 {
	for i := int64(0); i < n; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// calibrationRounds is how many rounds Calibrate splits its time into; it
// keeps the fastest, the one least disturbed by other processes.
const calibrationRounds = 5

// Calibrate measures, for about d in total, how many iterations of the busy
// loop one goroutine runs per millisecond, and returns the best of several
// rounds (always > 0). It burns one CPU for d. Safe for concurrent use, but
// concurrent calibrations disturb each other.
func Calibrate(d time.Duration) float64 {
	const chunk = 20000
	round := d / calibrationRounds
	if round <= 0 {
		round = time.Millisecond
	}
	x := uint64(88172645463325252)
	best := 0.0
	for r := 0; r < calibrationRounds; r++ {
		var n int64
		start := time.Now()
		var elapsed time.Duration
		for elapsed < round {
			x = spin(chunk, x)
			n += chunk
			elapsed = time.Since(start)
		}
		rate := float64(n) / (float64(elapsed) / float64(time.Millisecond))
		if rate > best {
			best = rate
		}
	}
	sink.Store(x)
	return best
}

// burn spends ms of CPU: it runs the calibrated number of iterations for ms
// at itersPerMs, and if the CPU turned out faster than at calibration keeps
// spinning until ms of wall time have passed, so the service time is never
// below the request (under CPU contention it is above, like any CPU-bound
// server's). It checks ctx about every 0.1 ms and returns ctx's error if it
// was cancelled.
func burn(ctx context.Context, ms, itersPerMs float64) error {
	start := time.Now()
	target := time.Duration(ms * float64(time.Millisecond))
	total := int64(ms * itersPerMs)
	chunk := int64(itersPerMs / 10)
	if chunk < 1 {
		chunk = 1
	}
	x := uint64(start.UnixNano()) | 1
	defer func() { sink.Store(x) }()
	for done := int64(0); done < total; done += chunk {
		x = spin(min(chunk, total-done), x)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	for time.Since(start) < target {
		x = spin(chunk, x)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// hold spends ms without CPU, on a timer; it returns ctx's error if ctx was
// cancelled first.
func hold(ctx context.Context, ms float64) error {
	d := time.Duration(ms * float64(time.Millisecond))
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
