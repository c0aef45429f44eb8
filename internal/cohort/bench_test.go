package cohort_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/queue"
)

// lastGrant is the cohort order remembering the ticket it granted last.
type lastGrant struct {
	*cohort.Scheduler
	last *queue.Ticket
}

func (l *lastGrant) Granted(t *queue.Ticket) {
	l.last = t
	l.Scheduler.Granted(t)
}

// BenchmarkGrant measures one grant through the cohort order (a Done that
// picks the next ticket, and the Push that refills the queue) with W
// tickets waiting over 400 keys, uniformly, and a model of 100 keys. Pick
// scans the whole waiting list, so its cost grows with W.
func BenchmarkGrant(b *testing.B) {
	for _, w := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("waiting=%d", w), func(b *testing.B) {
			cfg := cohort.DefaultConfig()
			cfg.Enabled, cfg.Capacity, cfg.MaxWait = true, 100, time.Hour
			s, err := cohort.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			l := &lastGrant{Scheduler: s}
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: w + 2, Scheduler: l})
			if err != nil {
				b.Fatal(err)
			}
			next := 0
			push := func() {
				tk := queue.NewTicket(nil, false)
				tk.Affinity = fmt.Sprintf("k%d", (next*7919)%400)
				next++
				if err := q.Push(tk); err != nil {
					b.Fatal(err)
				}
			}
			for range w + 1 {
				push()
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				q.Done(l.last)
				push()
			}
		})
	}
}
