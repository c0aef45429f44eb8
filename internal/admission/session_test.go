package admission

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/swderr"
)

func gateConfig(clk *fakeClock) Config {
	cfg := DefaultConfig()
	cfg.Mode, cfg.Now = ModeSQS, clk.Now
	cfg.Interval, cfg.MinInterval, cfg.MaxInterval = 100*time.Millisecond, 10*time.Millisecond, time.Second
	cfg.SessionQueue, cfg.SessionMaxWait = 3, 350*time.Millisecond
	cfg.AdaptWindow, cfg.Threshold, cfg.Step = 1, 2, 100*time.Millisecond
	return cfg
}

func request(cookie string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/login", nil)
	if cookie != "" {
		r.AddCookie(&http.Cookie{Name: "SWDSESSION", Value: cookie})
	}
	return r
}

// admitAsync runs Admit in a goroutine and returns its result channel.
func admitAsync(g *Gate, r *http.Request) chan error {
	ch := make(chan error, 1)
	go func() { ch <- g.Admit(context.Background(), r) }()
	return ch
}

// waitQueued polls until n sessions wait (bounded).
func waitQueued(t *testing.T, g *Gate, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return g.Stats().Queue == n }, 5*time.Second, time.Millisecond)
}

func pending(ch chan error) bool {
	select {
	case err := <-ch:
		ch <- err
		return false
	default:
		return true
	}
}

func TestGateAdmitsNewSessionsInOrderAtTheInterval(t *testing.T) {
	clk := newFakeClock()
	g, err := NewGate(gateConfig(clk), nil)
	require.NoError(t, err)
	// The first new session of an idle gate goes at once.
	require.NoError(t, g.Admit(context.Background(), request("")))
	a := admitAsync(g, request(""))
	waitQueued(t, g, 1)
	b := admitAsync(g, request(""))
	waitQueued(t, g, 2)
	// Nothing before the interval has passed.
	clk.Add(99 * time.Millisecond)
	g.fire()
	assert.True(t, pending(a))
	assert.True(t, pending(b))
	// One per interval, in arrival order.
	clk.Add(time.Millisecond)
	g.fire()
	require.NoError(t, <-a)
	assert.True(t, pending(b))
	clk.Add(100 * time.Millisecond)
	g.fire()
	require.NoError(t, <-b)
	st := g.Stats()
	assert.Equal(t, uint64(3), st.Admitted)
	assert.Equal(t, 0, st.Queue)
}

func TestGateNeverHoldsAdmittedSessions(t *testing.T) {
	clk := newFakeClock()
	g, err := NewGate(gateConfig(clk), nil)
	require.NoError(t, err)
	// "s1" starts a session (admitted at once: the gate is idle).
	require.NoError(t, g.Admit(context.Background(), request("s1")))
	// New sessions queue behind the interval...
	waiting := admitAsync(g, request(""))
	waitQueued(t, g, 1)
	// ...but s1's pages pass at once, every time.
	for range 5 {
		require.NoError(t, g.Admit(context.Background(), request("s1")))
	}
	// A cookie the app set on an admitted answer is known too.
	resp := &http.Response{Header: http.Header{}}
	resp.Header.Add("Set-Cookie", (&http.Cookie{Name: "SWDSESSION", Value: "s2"}).String())
	g.Observe(resp)
	require.NoError(t, g.Admit(context.Background(), request("s2")))
	assert.True(t, pending(waiting))
	clk.Add(100 * time.Millisecond)
	g.fire()
	require.NoError(t, <-waiting)
}

func TestGateForgetsIdleSessions(t *testing.T) {
	clk := newFakeClock()
	cfg := gateConfig(clk)
	cfg.SessionIdle = time.Minute
	g, err := NewGate(cfg, nil)
	require.NoError(t, err)
	require.NoError(t, g.Admit(context.Background(), request("s1"))) // new, admitted at once
	clk.Add(30 * time.Second)
	require.NoError(t, g.Admit(context.Background(), request("s1"))) // known
	assert.Equal(t, uint64(1), g.Stats().Admitted)
	clk.Add(61 * time.Second) // idle too long: a new session again
	require.NoError(t, g.Admit(context.Background(), request("s1")))
	assert.Equal(t, uint64(2), g.Stats().Admitted)
}

func TestGateRefusesAtOnce(t *testing.T) {
	cases := []struct {
		name  string
		queue int           // SessionQueue
		wait  time.Duration // SessionMaxWait
		// waiting is how many sessions wait before the refused one.
		waiting int
	}{
		// the session queue holds 2: the third is refused
		{name: "queue full", queue: 2, wait: time.Hour, waiting: 2},
		// 100 ms interval, 250 ms bound: the third waiter would be
		// admitted 300 ms from now
		{name: "predicted wait past the bound", queue: 100, wait: 250 * time.Millisecond, waiting: 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			cfg := gateConfig(clk)
			cfg.SessionQueue, cfg.SessionMaxWait = c.queue, c.wait
			g, err := NewGate(cfg, nil)
			require.NoError(t, err)
			require.NoError(t, g.Admit(context.Background(), request(""))) // sets next
			for i := range c.waiting {
				admitAsync(g, request(""))
				waitQueued(t, g, i+1)
			}
			// refused without waiting: the call returns with the clock
			// standing still
			err = g.Admit(context.Background(), request(""))
			require.ErrorIs(t, err, swderr.ErrSessionRefused)
			assert.Equal(t, http.StatusServiceUnavailable, swderr.HTTPStatus(err))
			assert.True(t, swderr.RetryAfter(err))
			assert.Equal(t, uint64(1), g.Stats().Refused)
		})
	}
}

func TestGateRefusesWaitersWhenTheIntervalGrows(t *testing.T) {
	clk := newFakeClock()
	cfg := gateConfig(clk)
	cfg.SessionMaxWait = 250 * time.Millisecond
	g, err := NewGate(cfg, func() float64 { return 3 }) // above the threshold, not paused
	require.NoError(t, err)
	require.NoError(t, g.Admit(context.Background(), request("")))
	a := admitAsync(g, request("")) // predicted at +100 ms
	waitQueued(t, g, 1)
	b := admitAsync(g, request("")) // predicted at +200 ms
	waitQueued(t, g, 2)
	g.Adapt() // interval 100 -> 200 ms: b's admission moves to +400 ms
	err = <-b
	require.ErrorIs(t, err, swderr.ErrSessionRefused)
	assert.True(t, pending(a))
	assert.Equal(t, 200*time.Millisecond, g.Interval())
}

func TestGateIntervalAdapts(t *testing.T) {
	cases := []struct {
		name    string
		samples []float64
		want    time.Duration
	}{
		// above the threshold (2): one step (100 ms) each time
		{name: "grows", samples: []float64{5, 5}, want: 300 * time.Millisecond},
		// below: one step down each time
		{name: "shrinks", samples: []float64{0, 1}, want: 10 * time.Millisecond},
		// at the threshold: stays
		{name: "stays", samples: []float64{2, 2}, want: 100 * time.Millisecond},
		// bounded by MaxInterval
		{name: "max", samples: []float64{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, want: time.Second},
		// bounded by MinInterval
		{name: "min", samples: []float64{0, 0, 0, 0, 0}, want: 10 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newFakeClock()
			var cur atomic.Value
			cur.Store(0.0)
			g, err := NewGate(gateConfig(clk), func() float64 { return cur.Load().(float64) })
			require.NoError(t, err)
			for _, v := range c.samples {
				cur.Store(v)
				g.Adapt()
			}
			assert.Equal(t, c.want, g.Interval())
		})
	}
}

func TestGateMeanOverTheAdaptWindow(t *testing.T) {
	clk := newFakeClock()
	cfg := gateConfig(clk)
	cfg.AdaptWindow = 4
	samples := []float64{8, 0, 0, 0}
	var cur atomic.Value
	cur.Store(0.0)
	g, err := NewGate(cfg, func() float64 { return cur.Load().(float64) })
	require.NoError(t, err)
	// means 8, 4, 2.67 (above 2: a step up each), then 2 (at the
	// threshold: stays)
	want := []time.Duration{200, 300, 400, 400}
	for k, v := range samples {
		cur.Store(v)
		g.Adapt()
		assert.Equal(t, want[k]*time.Millisecond, g.Interval(), "after sample %d", k)
	}
}

func TestGateClientGoneWhileWaiting(t *testing.T) {
	clk := newFakeClock()
	g, err := NewGate(gateConfig(clk), nil)
	require.NoError(t, err)
	require.NoError(t, g.Admit(context.Background(), request("")))
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- g.Admit(ctx, request("")) }()
	waitQueued(t, g, 1)
	cancel()
	err = <-ch
	require.True(t, errors.Is(err, swderr.ErrClientGone), "%v", err)
	assert.Equal(t, 0, g.Stats().Queue)
}

func TestSessionsBounded(t *testing.T) {
	s := newSessions(2)
	now := time.Unix(0, 0)
	s.add("a", now)
	s.add("b", now)
	s.add("c", now) // forgets a, the least recently seen
	assert.Equal(t, 2, s.len())
	assert.False(t, s.touch("a", now, time.Hour))
	assert.True(t, s.touch("b", now, time.Hour))
	assert.True(t, s.touch("c", now, time.Hour))
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		ok   bool
	}{
		// the defaults, off
		{name: "default", mod: func(*Config) {}, ok: true},
		// sqs with the defaults
		{name: "sqs", mod: func(c *Config) { c.Mode = ModeSQS }, ok: true},
		// an unknown mode
		{name: "mode", mod: func(c *Config) { c.Mode = "fast" }},
		// a cookie name with a space
		{name: "cookie", mod: func(c *Config) { c.Mode, c.SessionCookie = ModeSQS, "a b" }},
		// an interval outside its bounds
		{name: "interval", mod: func(c *Config) { c.Mode, c.Interval = ModeSQS, time.Hour }},
		// a window too short
		{name: "window", mod: func(c *Config) { c.Window = 0 }},
		// a factor that does not grow
		{name: "step", mod: func(c *Config) { c.Mode, c.Step = ModeSQS, 0 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mod(&cfg)
			if c.ok {
				require.NoError(t, cfg.Validate())
			} else {
				require.Error(t, cfg.Validate())
			}
		})
	}
}

func TestGatePausesWhilePageQueuesAreLong(t *testing.T) {
	clk := newFakeClock()
	var long atomic.Value
	long.Store(5.0) // above PauseFactor x threshold (2 x 2)
	g, err := NewGate(gateConfig(clk), func() float64 { return long.Load().(float64) })
	require.NoError(t, err)
	// Even an idle gate does not admit while the page queues are long.
	a := admitAsync(g, request(""))
	waitQueued(t, g, 1)
	clk.Add(200 * time.Millisecond) // within its 350 ms wait bound
	g.mu.Lock()
	g.releaseLocked(clk.Now())
	g.mu.Unlock()
	assert.True(t, pending(a))
	// Once they shrink, it goes.
	g.mu.Lock()
	long.Store(0.0)
	g.releaseLocked(clk.Now())
	g.mu.Unlock()
	require.NoError(t, <-a)
}
