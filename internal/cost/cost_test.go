package cost

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const ms = time.Millisecond

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for valid
	}{
		// The defaults are valid.
		{"defaults", func(*Config) {}, ""},
		// θ = 1: the first sample alone, then the moving average.
		{"theta 1", func(c *Config) { c.Theta = 1 }, ""},
		{"theta 0", func(c *Config) { c.Theta = 0 }, "theta must be in [1,"},
		{"theta huge", func(c *Config) { c.Theta = MaxTheta + 1 }, "theta must be in [1,"},
		// w = 0 keeps only the latest sample after θ: allowed.
		{"weight 0", func(c *Config) { c.Weight = 0 }, ""},
		// w = 1 would never learn again.
		{"weight 1", func(c *Config) { c.Weight = 1 }, "weight must be in [0, 1)"},
		{"weight negative", func(c *Config) { c.Weight = -0.1 }, "weight must be in [0, 1)"},
		{"prior 0", func(c *Config) { c.Prior = 0 }, "prior must be positive"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			_, err = NewTable(c, 1)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestStatHandComputed checks SPLiT's equation (1) against sequences worked
// out by hand: the arithmetic mean while n < θ, then a(n+1) = a(n)·w +
// x·(1−w).
func TestStatHandComputed(t *testing.T) {
	cases := []struct {
		name    string
		theta   int
		weight  float64
		samples []time.Duration
		want    []time.Duration // the statistic after each sample
	}{
		{
			// θ = 3: mean of 10, of 10 and 20 (15), of 10, 20, 30 (20);
			// then 20·0.5 + 40·0.5 = 30, 30·0.5 + 0·0.5 = 15.
			name: "mean then halves", theta: 3, weight: 0.5,
			samples: []time.Duration{10 * ms, 20 * ms, 30 * ms, 40 * ms, 0},
			want:    []time.Duration{10 * ms, 15 * ms, 20 * ms, 30 * ms, 15 * ms},
		},
		{
			// θ = 1: the first sample is the statistic; then w = 0.9:
			// 100·0.9 + 200·0.1 = 110, 110·0.9 + 200·0.1 = 119.
			name: "theta 1", theta: 1, weight: 0.9,
			samples: []time.Duration{100 * ms, 200 * ms, 200 * ms},
			want:    []time.Duration{100 * ms, 110 * ms, 119 * ms},
		},
		{
			// w = 0 after θ = 2: mean 4 of (2, 6), then each new sample.
			name: "weight 0", theta: 2, weight: 0,
			samples: []time.Duration{2 * ms, 6 * ms, 9 * ms, 1 * ms},
			want:    []time.Duration{2 * ms, 4 * ms, 9 * ms, 1 * ms},
		},
		{
			// A negative sample counts as 0: mean of 0 and 8 is 4.
			name: "negative sample", theta: 5, weight: 0.5,
			samples: []time.Duration{-3 * ms, 8 * ms},
			want:    []time.Duration{0, 4 * ms},
		},
		{
			// θ larger than the sequence: a plain mean throughout,
			// (7+8+12)/3 = 9.
			name: "only the mean", theta: 100, weight: 0.99,
			samples: []time.Duration{7 * ms, 8 * ms, 12 * ms},
			want:    []time.Duration{7 * ms, 7500 * time.Microsecond, 9 * ms},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Theta: tc.theta, Weight: tc.weight, Prior: ms}
			require.NoError(t, c.Validate())
			var s Stat
			assert.Zero(t, s.Value())
			for i, x := range tc.samples {
				s.Observe(x, c)
				assert.Equal(t, tc.want[i], s.Value(), "after sample %d", i+1)
				assert.Equal(t, uint64(i+1), s.Samples())
			}
		})
	}
}

// TestStatLearnsWithinTenPercent: a route whose service times vary by
// SD/mean 0.3 is learnt within 10 % of its true mean once θ samples are in
// (the standard error of a mean of 100 such samples is 3 %), and the moving
// average stays there.
func TestStatLearnsWithinTenPercent(t *testing.T) {
	c := DefaultConfig()
	const mean = 40 * ms
	for seed := range 20 {
		rng := rand.New(rand.NewPCG(uint64(seed), 2))
		var s Stat
		for i := range 3 * c.Theta {
			x := time.Duration(float64(mean) * (1 + 0.3*rng.NormFloat64()))
			s.Observe(x, c)
			if i+1 >= c.Theta {
				assert.InDelta(t, float64(mean), float64(s.Value()), 0.1*float64(mean), "seed %d after %d samples", seed, i+1)
			}
		}
	}
}

func TestPredictFallbacks(t *testing.T) {
	c := DefaultConfig()
	var route, all Stat
	// Nothing learnt: the prior.
	assert.Equal(t, c.Prior, Predict(route, all, c))
	// Another route was served: the node's statistic over every route.
	all.Observe(30*ms, c)
	assert.Equal(t, 30*ms, Predict(route, all, c))
	// The route itself was served: its own statistic.
	route.Observe(300*ms, c)
	all.Observe(300*ms, c)
	assert.Equal(t, 300*ms, Predict(route, all, c))

	// Table.Predict follows the same rule.
	tab, err := NewTable(c, 3)
	require.NoError(t, err)
	assert.Equal(t, c.Prior, tab.Predict(1))
	require.NoError(t, tab.Observe(0, 30*ms))
	assert.Equal(t, 30*ms, tab.Predict(1), "route 1 unseen: every route's statistic")
	require.NoError(t, tab.Observe(1, 300*ms))
	assert.Equal(t, 300*ms, tab.Predict(1))
	assert.Equal(t, 165*ms, tab.Predict(2), "route 2 unseen: mean of 30 and 300")
	assert.Equal(t, 165*ms, tab.Predict(-1), "an ID outside the table is unseen")
	require.ErrorIs(t, tab.Observe(3, ms), ErrUnknownRoute)
	assert.Equal(t, []Route{{ID: 0, Cost: 30 * ms, Samples: 1}, {ID: 1, Cost: 300 * ms, Samples: 1}}, tab.Routes())
}

func TestTableConcurrent(t *testing.T) {
	c := Config{Theta: 1 << 20, Weight: 0.5, Prior: ms}
	tab, err := NewTable(c, 2)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for range 1000 {
				require.NoError(t, tab.Observe(g%2, time.Duration(g%2+1)*ms))
				_ = tab.Predict(g % 2)
			}
		})
	}
	wg.Wait()
	r := tab.Routes()
	require.Len(t, r, 2)
	// Below θ the statistic is the exact mean, whatever the interleaving.
	assert.Equal(t, Route{ID: 0, Cost: ms, Samples: 4000}, r[0])
	assert.Equal(t, Route{ID: 1, Cost: 2 * ms, Samples: 4000}, r[1])
}

func TestRemaining(t *testing.T) {
	cases := []struct {
		name          string
		cost, elapsed time.Duration
		want          time.Duration
	}{
		// Not started: the whole cost.
		{"fresh", 40 * ms, 0, 40 * ms},
		{"part done", 40 * ms, 15 * ms, 25 * ms},
		// Past its prediction a request is not assumed finished: it
		// counts its whole cost again.
		{"at prediction", 40 * ms, 40 * ms, 40 * ms},
		{"overrun", 40 * ms, 100 * ms, 40 * ms},
		// A clock that went backwards counts as not started.
		{"negative elapsed", 40 * ms, -ms, 40 * ms},
		{"zero cost", 0, 5 * ms, 0},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, Remaining(tc.cost, tc.elapsed), tc.name)
	}
}

// fakeClock is an injectable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeClock) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeClock) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestLedger(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	l := NewLedger(clk.now)
	assert.Zero(t, l.Remaining())
	// A heavy request starts: 310 ms remain.
	a := l.Start(310 * ms)
	assert.Equal(t, 310*ms, l.Remaining())
	clk.add(100 * ms)
	assert.Equal(t, 210*ms, l.Remaining(), "100 ms into service, 210 ms remain")
	// A light one starts beside it (m = 2).
	b := l.Start(10 * ms)
	clk.add(50 * ms)
	assert.Equal(t, 160*ms+10*ms, l.Remaining(), "the light one overran: counts its 10 ms again")
	assert.Equal(t, 50*ms, l.Finish(b))
	assert.Zero(t, l.Finish(b), "a second Finish does nothing")
	assert.Equal(t, 160*ms, l.Remaining())
	clk.add(300 * ms)
	assert.Equal(t, 310*ms, l.Remaining(), "past its prediction the heavy one is not assumed finished")
	assert.Equal(t, 450*ms, l.Finish(a))
	assert.Zero(t, l.Remaining())
	// Finishing in any order keeps the others counted.
	x, y, z := l.Start(ms), l.Start(2*ms), l.Start(4*ms)
	l.Finish(x)
	assert.Equal(t, 6*ms, l.Remaining())
	l.Finish(z)
	assert.Equal(t, 2*ms, l.Remaining())
	l.Finish(y)
	assert.Zero(t, l.Remaining())
}

func TestLedgerConcurrent(t *testing.T) {
	l := NewLedger(nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				s := l.Start(ms)
				_ = l.Remaining()
				l.Finish(s)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, l.Remaining())
}
