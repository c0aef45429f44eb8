package node

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/queue"
)

// fakePeers answers Transfer.Pull per peer address: "miss", "error" or
// "hit"; on a hit it delivers a request into the held slot (as the
// peer's Forward would), unless deliver is off.
type fakePeers struct {
	q       *queue.Queue
	hold    *queue.Hold
	answers map[string]string
	deliver bool

	mu    sync.Mutex
	asked []string
	sent  []*queue.Ticket
}

func (f *fakePeers) Pull(_ context.Context, addr, from string, id uint64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, addr)
	switch f.answers[addr] {
	case "hit":
		if f.deliver {
			t := queue.NewTicket("pulled from "+addr, false)
			t.Moved = true
			f.sent = append(f.sent, t)
			go func() { _ = f.q.PushHeld(t, f.hold) }()
		}
		return true, nil
	case "error":
		return false, errors.New("unreachable")
	}
	return false, nil
}

func (f *fakePeers) askedPeers() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// A pull asks its peers in order, moving on after each miss or error, and
// stops at the first hit; the request that hit takes the held slot, or the
// slot is released for a local request after the last miss or when the hit
// never arrives.
func TestPullJob(t *testing.T) {
	cases := []struct {
		name    string
		answers map[string]string
		deliver bool
		asked   []string
		results []metrics.PullResult
		used    bool // the pulled request took the held slot
	}{
		// a miss (the peer's queue emptied meanwhile), then an unreachable
		// peer, then a hit: the request arrives into the held slot
		{"miss, error, hit", map[string]string{"a": "miss", "b": "error", "c": "hit"}, true,
			[]string{"a", "b", "c"}, []metrics.PullResult{metrics.PullMiss, metrics.PullError, metrics.PullHit}, true},
		// the first hit ends the pull: later peers are not asked
		{"hit first", map[string]string{"a": "hit", "b": "hit", "c": "hit"}, true,
			[]string{"a"}, []metrics.PullResult{metrics.PullHit}, true},
		// every peer misses: the slot is released
		{"all miss", map[string]string{"a": "miss", "b": "miss", "c": "miss"}, false,
			[]string{"a", "b", "c"}, []metrics.PullResult{metrics.PullMiss, metrics.PullMiss, metrics.PullMiss}, false},
		// a hit whose request never comes (its origin died): released
		{"hit never arrives", map[string]string{"a": "hit"}, false,
			[]string{"a"}, []metrics.PullResult{metrics.PullHit}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: 8})
			require.NoError(t, err)
			h := q.TryHold()
			require.NotNil(t, h)
			require.Equal(t, 1, q.Load(), "the held slot counts as busy")
			// A local request arrives while the pull runs: it waits.
			local := queue.NewTicket("local", true)
			require.NoError(t, q.Push(local))
			fp := &fakePeers{q: q, hold: h, answers: tc.answers, deliver: tc.deliver}
			var results []metrics.PullResult
			pullJob{
				hold: h, id: 7, peers: []string{"a", "b", "c"}, from: "self",
				addr:   func(p string) (string, bool) { return p, true },
				client: fp, record: func(r metrics.PullResult) { results = append(results, r) },
				arrive: 100 * time.Millisecond, stop: make(chan struct{}), log: slog.New(slog.DiscardHandler),
			}.run()
			assert.Equal(t, tc.asked, fp.askedPeers())
			assert.Equal(t, tc.results, results)
			assert.Equal(t, tc.used, h.Used())
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if tc.used {
				// The pulled request holds the slot; the local one waits.
				o, err := q.Wait(ctx, fp.sent[0])
				require.NoError(t, err)
				assert.Equal(t, queue.Granted, o.Kind)
				assert.Equal(t, 1, q.Waiting())
				q.Done(fp.sent[0])
			}
			// The local request gets the slot once the pull is over.
			o, err := q.Wait(ctx, local)
			require.NoError(t, err)
			assert.Equal(t, queue.Granted, o.Kind)
			q.Done(local)
			assert.Zero(t, q.Load())
		})
	}
}

// The Puller reads head ages as they are under --load-index count, and
// grown by each node's predicted work under work (policy.WorkPullView), as
// the simulator's steal does on the work index.
func TestPullViewFor(t *testing.T) {
	v := policy.View{Self: 0, Nodes: []policy.NodeLoad{
		{Load: 0, Concurrency: 1, Known: true}, // self: a free slot
		{Load: 3, Concurrency: 1, Known: true, HeadAge: 50 * time.Millisecond, Work: 900 * time.Millisecond}, // heavy work behind its head
		{Load: 3, Concurrency: 1, Known: true, HeadAge: 80 * time.Millisecond, Work: 30 * time.Millisecond},  // light work
	}}
	cases := []struct {
		name  string
		index policy.LoadIndex
		heads []time.Duration // the head ages the Puller reads, by node
	}{
		// count: the gossiped ages as they are.
		{"count", policy.IndexCount, []time.Duration{0, 50 * time.Millisecond, 80 * time.Millisecond}},
		// work: each head's age plus its node's predicted work.
		{"work", policy.IndexWork, []time.Duration{0, 950 * time.Millisecond, 110 * time.Millisecond}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := pullViewFor(tc.index, v)
			var heads []time.Duration
			for _, nl := range got.Nodes {
				heads = append(heads, nl.HeadAge)
			}
			assert.Equal(t, tc.heads, heads)
			assert.Equal(t, 50*time.Millisecond, v.Nodes[1].HeadAge, "the node's own view is not modified")
		})
	}
}
