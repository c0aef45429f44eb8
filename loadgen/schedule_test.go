package loadgen

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/workload"
)

func spec(t *testing.T, name string) workload.Spec {
	t.Helper()
	s, err := workload.Lookup(name)
	require.NoError(t, err)
	return s
}

func TestNewScheduleMatchesGenerator(t *testing.T) {
	s, err := NewSchedule(spec(t, "dispersed"), 200, 42, time.Second, 2*time.Second)
	require.NoError(t, err)
	g, err := workload.NewGenerator(spec(t, "dispersed"), 200, 42)
	require.NoError(t, err)
	require.NotEmpty(t, s.Arrivals)
	for i, a := range s.Arrivals {
		require.Equal(t, g.Next(), a, "arrival %d differs from the generator's", i)
		require.Less(t, a.At, 3*time.Second)
	}
	assert.GreaterOrEqual(t, g.Next().At, 3*time.Second, "the schedule stops at the first arrival past warm-up+duration")

	again, err := NewSchedule(spec(t, "dispersed"), 200, 42, time.Second, 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, s.Arrivals, again.Arrivals, "same seed, same schedule")
	other, err := NewSchedule(spec(t, "dispersed"), 200, 43, time.Second, 2*time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, s.Arrivals, other.Arrivals, "another seed, another schedule")
}

func TestNewScheduleErrors(t *testing.T) {
	cases := []struct {
		name             string
		rate             float64
		warmup, duration time.Duration
		want             string
	}{
		// A run needs a measured window.
		{"zero duration", 10, 0, 0, "duration must be positive"},
		// Warm-up cannot be negative.
		{"negative warm-up", 10, -time.Second, time.Second, "warm-up must not be negative"},
		// The generator's own check on the rate.
		{"zero rate", 0, 0, time.Second, "rate must be a positive"},
		// Absurd schedules are refused before allocating them.
		{"too many arrivals", 1e9, 0, time.Hour, "shorten --duration"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewSchedule(spec(t, "standard"), c.rate, 1, c.warmup, c.duration)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// release drives a pacer the way vegeta's attacker does (sleep for the
// returned wait, then release the hit) on a simulated clock and returns
// each hit's release time and wait.
func release(p vegeta.Pacer, limit int) (at, waits []time.Duration, stopped bool) {
	var elapsed time.Duration
	for hits := uint64(0); int(hits) <= limit; hits++ {
		wait, stop := p.Pace(elapsed, hits)
		if stop {
			return at, waits, true
		}
		if wait > 0 {
			elapsed += wait
		}
		at = append(at, elapsed)
		waits = append(waits, wait)
	}
	return at, waits, false
}

func TestSchedulePacerBurstGrouping(t *testing.T) {
	cases := []struct {
		name  string
		burst int
	}{
		// Poisson arrivals: every hit has its own instant.
		{"poisson", 1},
		// The paper's burst workload: four requests arrive together.
		{"burst of 4", 4},
		// An odd burst size groups the same way.
		{"burst of 3", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sp := workload.Spec{Name: "custom", MeanMs: 40, CV: 3.06, Burst: c.burst, Scale: 1}
			s, err := NewSchedule(sp, 400, 7, 0, 2*time.Second)
			require.NoError(t, err)
			require.Zero(t, len(s.Arrivals)%c.burst, "the schedule ends on a whole burst")
			p := NewSchedulePacer(s)
			at, waits, stopped := release(p, len(s.Arrivals))
			require.True(t, stopped, "the pacer stops after the last arrival")
			require.Len(t, at, len(s.Arrivals))
			for k := range at {
				assert.Equal(t, s.Arrivals[k].At, at[k], "hit %d leaves at its scheduled time", k)
				if k%c.burst != 0 {
					assert.LessOrEqual(t, waits[k], time.Duration(0), "hit %d leaves with its burst, without waiting", k)
					assert.Equal(t, at[k-1], at[k], "hit %d shares its burst's instant", k)
				} else if k > 0 {
					assert.Greater(t, waits[k], time.Duration(0), "hit %d starts a new burst after a gap", k)
				}
			}
		})
	}
}

func TestSchedulePacerRecordsStartAndCatchesUp(t *testing.T) {
	s, err := NewSchedule(spec(t, "standard"), 100, 1, 0, time.Second)
	require.NoError(t, err)
	p := NewSchedulePacer(s)
	assert.True(t, p.Began().IsZero(), "no start before the first Pace")
	// A pacer asked late (the attacker fell behind) releases at once.
	wait, stop := p.Pace(time.Hour, 0)
	assert.False(t, stop)
	assert.Less(t, wait, time.Duration(0))
	assert.False(t, p.Began().IsZero())
	assert.WithinDuration(t, time.Now().Add(-time.Hour), p.Began(), time.Minute)
	off, ok := p.Offset(0)
	assert.True(t, ok)
	assert.Equal(t, s.Arrivals[0].At, off)
	_, ok = p.Offset(uint64(len(s.Arrivals)))
	assert.False(t, ok)
	assert.Equal(t, 100.0, p.Rate(0))
}

func TestTargeterRoundRobinAndSizes(t *testing.T) {
	s, err := NewSchedule(spec(t, "standard"), 300, 3, 0, time.Second)
	require.NoError(t, err)
	bases := []string{"127.0.0.1:1", "http://127.0.0.1:2/", "http://h:3"}
	tg, err := NewTargeter(s, bases, "work")
	require.NoError(t, err)
	// vegeta's workers call the targeter concurrently.
	urls := make([]string, len(s.Arrivals))
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	for range 8 {
		wg.Go(func() {
			for {
				var tgt vegeta.Target
				if err := tg.Target(&tgt); err != nil {
					assert.ErrorIs(t, err, vegeta.ErrNoTargets)
					return
				}
				assert.Equal(t, "GET", tgt.Method)
				mu.Lock()
				urls[next] = tgt.URL
				next++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Equal(t, len(s.Arrivals), next, "one target per arrival, then ErrNoTargets")
	var want []string
	norm := []string{"http://127.0.0.1:1", "http://127.0.0.1:2", "http://h:3"}
	for k, a := range s.Arrivals {
		want = append(want, fmt.Sprintf("%s/work?ms=%s", norm[k%3], FormatMs(a.SizeMs)))
	}
	sort.Strings(want)
	got := append([]string(nil), urls...)
	sort.Strings(got)
	assert.Equal(t, want, got, "every arrival's size goes to its round-robin node")
	per := map[string]int{}
	for _, u := range urls {
		per[strings.SplitN(u, "/work", 2)[0]]++
	}
	for _, n := range norm {
		assert.InDelta(t, len(urls)/3, per[n], 1, "round robin spreads evenly over %s", n)
	}
}

func TestTargeterNeedsTargets(t *testing.T) {
	s, err := NewSchedule(spec(t, "standard"), 10, 1, 0, time.Second)
	require.NoError(t, err)
	_, err = NewTargeter(s, nil, "/work")
	assert.Error(t, err)
	_, err = NewTargeter(s, []string{"ftp://x"}, "/work")
	assert.Error(t, err)
}

func TestNormalizeBase(t *testing.T) {
	cases := []struct {
		in, want string
		ok       bool
	}{
		// A bare HOST:PORT gets http://.
		{"127.0.0.1:8080", "http://127.0.0.1:8080", true},
		// A trailing slash is dropped so paths join cleanly.
		{"http://node-1:8080/", "http://node-1:8080", true},
		// https is kept.
		{"https://n:443", "https://n:443", true},
		// Empty is an error.
		{"", "", false},
		// Other schemes are errors.
		{"ftp://n:21", "", false},
	}
	for _, c := range cases {
		got, err := NormalizeBase(c.in)
		if !c.ok {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got)
	}
}

// TestTargeterMixedClasses: in a mixed workload each arrival goes to its
// class's path, /work/NAME, with its size.
func TestTargeterMixedClasses(t *testing.T) {
	s, err := NewSchedule(spec(t, "mixed"), 200, 4, 0, 5*time.Second)
	require.NoError(t, err)
	tg, err := NewTargeter(s, []string{"127.0.0.1:1"}, "/work")
	require.NoError(t, err)
	seen := map[string]int{}
	for k, a := range s.Arrivals {
		var tgt vegeta.Target
		require.NoError(t, tg.Target(&tgt))
		name := s.Spec.Classes[a.Class].Name
		assert.Equal(t, "http://127.0.0.1:1/work/"+name+"?ms="+FormatMs(a.SizeMs), tgt.URL, "arrival %d", k)
		seen[name]++
	}
	assert.Positive(t, seen["light"])
	assert.Positive(t, seen["heavy"])
	assert.Greater(t, seen["light"], 5*seen["heavy"], "90 %% light")
}
