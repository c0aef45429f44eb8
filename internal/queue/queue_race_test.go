package queue_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// raceTally counts how the tickets of one race iteration ended.
type raceTally struct {
	granted, done, transfers, cancelled, timedOut, evicted, other atomic.Int64
}

// TestConcurrentOutcomes races owners' cancels and timeouts against grants,
// hand-offs and evictions, and checks that no slot and no ticket is lost:
// each ticket ends exactly once, every grant is followed by exactly one Done,
// and the queue ends empty.
func TestConcurrentOutcomes(t *testing.T) {
	tests := []struct {
		name       string
		m          int
		timeout    time.Duration
		cancel     bool // owners' contexts are cancelled at random moments
		handOff    bool // a policy runner hands off the tail (owners put back)
		evict      bool // a drain gives up and evicts the waiters
		iterations int
	}{
		// The core race: a cancel arriving as a slot is granted.
		{name: "cancel vs grant m=1", m: 1, cancel: true, iterations: 200},
		{name: "cancel vs grant m=3", m: 3, cancel: true, iterations: 200},
		// Timeouts racing grants.
		{name: "timeout vs grant", m: 2, timeout: 10 * time.Microsecond, iterations: 100},
		// Cancels racing hand-offs and put-backs as well.
		{name: "cancel vs grant vs hand-off", m: 2, cancel: true, handOff: true, iterations: 200},
		// Evictions racing cancels and grants.
		{name: "evict vs cancel vs grant", m: 2, cancel: true, evict: true, iterations: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			const owners = 8
			var sum [5]int64 // done, cancelled, timed out, evicted, transfers
			defer func() {
				t.Logf("outcomes over %d iterations: done=%d cancelled=%d timedOut=%d evicted=%d transfers=%d",
					tc.iterations, sum[0], sum[1], sum[2], sum[3], sum[4])
			}()
			for it := range tc.iterations {
				rng := rand.New(rand.NewPCG(uint64(it), 42))
				q := newQueue(t, queue.Config{Concurrency: tc.m, Limit: owners, Timeout: tc.timeout})
				var tally raceTally
				var wg sync.WaitGroup
				cancels := make([]context.CancelFunc, owners)
				ctxs := make([]context.Context, owners)
				for i := range owners {
					ctxs[i], cancels[i] = context.WithCancel(context.Background())
				}
				for i := range owners {
					transferable := rng.IntN(2) == 0
					work := rng.IntN(3)
					wg.Go(func() { raceOwner(ctxs[i], t, q, transferable, work, tc.m, &tally) })
				}
				stop := make(chan struct{})
				var bg sync.WaitGroup
				if tc.cancel {
					order := rng.Perm(owners)
					bg.Go(func() {
						for _, i := range order {
							runtime.Gosched()
							cancels[i]()
						}
					})
				}
				if tc.handOff {
					bg.Go(func() {
						for {
							select {
							case <-stop:
								return
							default:
							}
							q.HandOff(2, "peer")
							runtime.Gosched()
						}
					})
				}
				if tc.evict {
					bg.Go(func() {
						for range 3 {
							runtime.Gosched()
							q.Evict()
						}
					})
				}
				wg.Wait()
				close(stop)
				bg.Wait()
				for _, c := range cancels {
					c()
				}

				sum[0] += tally.done.Load()
				sum[1] += tally.cancelled.Load()
				sum[2] += tally.timedOut.Load()
				sum[3] += tally.evicted.Load()
				sum[4] += tally.transfers.Load()
				ended := tally.done.Load() + tally.cancelled.Load() + tally.timedOut.Load() + tally.evicted.Load()
				require.Zero(t, tally.other.Load(), "iteration %d: unexpected errors", it)
				require.Equal(t, tally.granted.Load(), tally.done.Load(), "iteration %d: every grant is done once", it)
				require.EqualValues(t, owners, ended, "iteration %d: every ticket ends exactly once", it)
				requireCounts(t, q, 0, 0)
				require.Empty(t, q.Snapshot())
				if !tc.handOff {
					require.Zero(t, tally.transfers.Load())
				}
			}
		})
	}
}

// raceOwner plays a request handler: push, wait, serve (Done) or put back a
// transfer and wait again, until the ticket ends.
func raceOwner(ctx context.Context, t *testing.T, q *queue.Queue, transferable bool, work, m int, tally *raceTally) {
	tk := queue.NewTicket(nil, transferable)
	if !assert.NoError(t, q.Push(tk)) {
		tally.other.Add(1)
		return
	}
	for {
		o, err := q.Wait(ctx, tk)
		switch {
		case errors.Is(err, queue.ErrClientGone):
			tally.cancelled.Add(1)
			return
		case errors.Is(err, queue.ErrQueueTimeout):
			tally.timedOut.Add(1)
			return
		case errors.Is(err, queue.ErrDraining):
			tally.evicted.Add(1)
			return
		case err != nil:
			t.Errorf("wait: unexpected error %v", err)
			tally.other.Add(1)
			return
		}
		switch o.Kind {
		case queue.Granted:
			tally.granted.Add(1)
			assert.LessOrEqual(t, q.InFlight(), m, "InFlight <= m")
			for range work {
				runtime.Gosched()
			}
			q.Done(tk)
			tally.done.Add(1)
			return
		case queue.Transfer:
			tally.transfers.Add(1)
			assert.Equal(t, "peer", o.Peer)
			// The peer refuses; half the time the request must stay here.
			var err error
			if work == 0 {
				err = q.PutBackLocal(tk)
			} else {
				err = q.PutBack(tk)
			}
			if !assert.NoError(t, err) {
				tally.other.Add(1)
				return
			}
		default:
			t.Errorf("wait: unexpected outcome %+v", o)
			tally.other.Add(1)
			return
		}
	}
}
