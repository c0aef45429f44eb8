package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/swd-project/swd/internal/queue"
)

// benchConfigs: without a timeout Wait arms no timer; the default config
// (30 s) arms one per Wait, as in production.
var benchConfigs = []struct {
	name    string
	timeout time.Duration
}{
	{"no-timeout", 0},
	{"timeout", queue.DefaultConfig().Timeout},
}

// BenchmarkPushWaitDone is one request's trip through an idle queue, from a
// single goroutine: Push (granted at once), Wait, Done.
func BenchmarkPushWaitDone(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: 1024, Timeout: bc.timeout})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				tk := queue.NewTicket(nil, true)
				if err := q.Push(tk); err != nil {
					b.Fatal(err)
				}
				if _, err := q.Wait(ctx, tk); err != nil {
					b.Fatal(err)
				}
				q.Done(tk)
			}
		})
	}
}

// BenchmarkParallelPushWaitDone is the same trip from many goroutines with
// enough slots that nobody waits: it measures contention on the queue's lock.
func BenchmarkParallelPushWaitDone(b *testing.B) {
	for _, bc := range benchConfigs {
		b.Run(bc.name, func(b *testing.B) {
			q, err := queue.New(queue.Config{Concurrency: 1 << 20, Limit: 1024, Timeout: bc.timeout})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					tk := queue.NewTicket(nil, true)
					if err := q.Push(tk); err != nil {
						b.Error(err)
						return
					}
					if _, err := q.Wait(ctx, tk); err != nil {
						b.Error(err)
						return
					}
					q.Done(tk)
				}
			})
		})
	}
}

var sinkLoad atomic.Int64 // keeps the reads from being optimized away

// BenchmarkLoad reads the load index from many goroutines, as the cluster
// layer does on every gossip tick; it takes no lock.
func BenchmarkLoad(b *testing.B) {
	q, err := queue.New(queue.Config{Concurrency: 2, Limit: 1024})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 10 {
		if err := q.Push(queue.NewTicket(i, true)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := 0
		for pb.Next() {
			s += q.Load()
		}
		sinkLoad.Add(int64(s))
	})
}

// BenchmarkHandOffPutBack hands the tail of a queue of n waiting tickets to
// a peer and puts it back (a refused transfer): HandOff, the owner's Wait,
// PutBack at the original place.
func BenchmarkHandOffPutBack(b *testing.B) {
	for _, n := range []int{1, 64, 1024} {
		b.Run(fmt.Sprintf("waiting=%d", n), func(b *testing.B) {
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: n})
			if err != nil {
				b.Fatal(err)
			}
			if err := q.Push(queue.NewTicket("in service", false)); err != nil {
				b.Fatal(err)
			}
			var tail *queue.Ticket
			for i := range n {
				tail = queue.NewTicket(i, true)
				if err := q.Push(tail); err != nil {
					b.Fatal(err)
				}
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if q.HandOff(1, "peer") != 1 {
					b.Fatal("nothing handed off")
				}
				if o, err := q.Wait(ctx, tail); err != nil || o.Kind != queue.Transfer {
					b.Fatalf("wait: %v %v", o, err)
				}
				if err := q.PutBack(tail); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
