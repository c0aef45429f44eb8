package dummyapp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func sleepConfig() Config {
	c := DefaultConfig()
	c.Mode = ModeSleep
	c.Name = "node-a"
	return c
}

func newSleepApp(t testing.TB) *App {
	t.Helper()
	a, err := New(sleepConfig(), nil)
	require.NoError(t, err)
	return a
}

// shared busy app: calibration burns CPU, so do it once per test binary.
var (
	busyOnce sync.Once
	busyApp  *App
	busyErr  error
)

func newBusyApp(t *testing.T) *App {
	t.Helper()
	busyOnce.Do(func() {
		c := DefaultConfig()
		c.Name = "busy-a"
		c.Calibration = 100 * time.Millisecond
		busyApp, busyErr = New(c, nil)
	})
	require.NoError(t, busyErr)
	return busyApp
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*Config)
		errs   []string // substrings; none means valid
	}{
		// the defaults are valid
		{name: "defaults", mutate: func(*Config) {}},
		// sleep mode needs no calibration
		{name: "sleep without calibration", mutate: func(c *Config) { c.Mode = ModeSleep; c.Calibration = 0 }},
		// only busy and sleep exist
		{name: "bad mode", mutate: func(c *Config) { c.Mode = "idle" }, errs: []string{`mode "idle"`}},
		// an address is needed
		{name: "empty listen", mutate: func(c *Config) { c.Listen = "" }, errs: []string{"listen"}},
		// max-ms must be positive and finite
		{name: "zero max", mutate: func(c *Config) { c.MaxMs = 0 }, errs: []string{"max-ms"}},
		// busy mode needs a calibration long enough to measure
		{name: "short calibration", mutate: func(c *Config) { c.Calibration = time.Millisecond }, errs: []string{"calibration"}},
		// a negative shutdown timeout makes no sense
		{name: "negative shutdown", mutate: func(c *Config) { c.ShutdownTimeout = -1 }, errs: []string{"shutdown-timeout"}},
		// slog levels only
		{name: "bad level", mutate: func(c *Config) { c.LogLevel = "loud" }, errs: []string{"log-level"}},
		// text or json only
		{name: "bad format", mutate: func(c *Config) { c.LogFormat = "xml" }, errs: []string{"log-format"}},
		// a worker limit cannot be negative (0 means none)
		{name: "negative concurrency", mutate: func(c *Config) { c.Concurrency = -1 }, errs: []string{"concurrency"}},
		// the waiting room is bounded: at least one place
		{name: "zero queue limit", mutate: func(c *Config) { c.QueueLimit = 0 }, errs: []string{"queue-limit"}},
		// every problem is reported at once
		{name: "several", mutate: func(c *Config) { c.Mode = ""; c.LogFormat = "" }, errs: []string{"mode", "log-format"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mutate(&cfg)
			err := cfg.Validate()
			if len(c.errs) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, s := range c.errs {
				assert.Contains(t, err.Error(), s)
			}
		})
	}
}

func TestNewLogger(t *testing.T) {
	var buf bytes.Buffer
	l, err := NewLogger(&buf, "warn", "json")
	require.NoError(t, err)
	l.Info("hidden")
	l.Warn("shown", "k", 1)
	assert.NotContains(t, buf.String(), "hidden")
	assert.Contains(t, buf.String(), `"msg":"shown"`)
	_, err = NewLogger(&buf, "info", "xml")
	assert.Error(t, err)
	_, err = NewLogger(&buf, "", "text")
	assert.Error(t, err)
}

func TestHandler(t *testing.T) {
	a := newSleepApp(t)
	cases := []struct {
		name       string
		method     string
		target     string
		body       string
		wantStatus int
		wantBody   string // substring
		serviceMs  bool   // X-Service-Ms expected
	}{
		// the normal case: a decimal service time
		{name: "work", method: "GET", target: "/work?ms=1.5", wantStatus: 200, wantBody: `"served_by":"node-a"`, serviceMs: true},
		// zero is a valid (instant) request
		{name: "zero", method: "GET", target: "/work?ms=0", wantStatus: 200, serviceMs: true},
		// any method works; the body is read and counted
		{name: "post with body", method: "POST", target: "/work?ms=1", body: "hello", wantStatus: 200, wantBody: `"body_bytes":5`, serviceMs: true},
		// PUT is fine too
		{name: "put", method: "PUT", target: "/work?ms=0", wantStatus: 200, serviceMs: true},
		// exponent notation parses
		{name: "exponent", method: "GET", target: "/work?ms=1e0", wantStatus: 200, serviceMs: true},
		// /work/NAME is /work under a route of the caller's (mixed workloads)
		{name: "named route", method: "GET", target: "/work/heavy?ms=1", wantStatus: 200, wantBody: `"requested_ms":1`, serviceMs: true},
		{name: "deeper route", method: "GET", target: "/work/a/b?ms=0", wantStatus: 200, serviceMs: true},
		{name: "named route, bad ms", method: "GET", target: "/work/light?ms=x", wantStatus: 400, wantBody: "not a number"},
		// no ms at all
		{name: "missing ms", method: "GET", target: "/work", wantStatus: 400, wantBody: "missing ms"},
		// ms present but empty
		{name: "empty ms", method: "GET", target: "/work?ms=", wantStatus: 400, wantBody: "missing ms"},
		// negative time
		{name: "negative", method: "GET", target: "/work?ms=-1", wantStatus: 400, wantBody: "negative"},
		// NaN parses as a float but is no duration
		{name: "nan", method: "GET", target: "/work?ms=NaN", wantStatus: 400, wantBody: "finite"},
		// infinity likewise
		{name: "inf", method: "GET", target: "/work?ms=Inf", wantStatus: 400, wantBody: "finite"},
		// beyond the configured maximum
		{name: "too large", method: "GET", target: "/work?ms=60001", wantStatus: 400, wantBody: "maximum"},
		// words are not numbers
		{name: "not a number", method: "GET", target: "/work?ms=abc", wantStatus: 400, wantBody: "not a number"},
		// health check
		{name: "healthz", method: "GET", target: "/healthz", wantStatus: 200, wantBody: "ok"},
		// stats is JSON with the spec's fields
		{name: "stats", method: "GET", target: "/stats", wantStatus: 200, wantBody: `"max_in_flight":`},
		// reset must be a POST
		{name: "reset by GET", method: "GET", target: "/stats/reset", wantStatus: 405},
		// stats is read-only
		{name: "stats by POST", method: "POST", target: "/stats", wantStatus: 405},
		// unknown paths
		{name: "not found", method: "GET", target: "/nope", wantStatus: 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			assert.Equal(t, c.wantStatus, rec.Code, rec.Body.String())
			assert.Contains(t, rec.Body.String(), c.wantBody)
			assert.Equal(t, "node-a", rec.Header().Get(HeaderServedBy), "every answer says who served it")
			if c.serviceMs {
				got, err := strconv.ParseFloat(rec.Header().Get(HeaderServiceMs), 64)
				require.NoError(t, err)
				var reply WorkReply
				require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &reply))
				assert.GreaterOrEqual(t, got, reply.RequestedMs, "service time is never below the request")
			} else {
				assert.Empty(t, rec.Header().Get(HeaderServiceMs))
			}
		})
	}
}

func TestParseMsMax(t *testing.T) {
	ms, err := ParseMs("60000", 60000)
	require.NoError(t, err)
	assert.InDelta(t, 60000.0, ms, 0)
	_, err = ParseMs("10.5", 10)
	assert.Error(t, err)
}

func getStats(t *testing.T, h http.Handler) Stats {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/stats", nil))
	require.Equal(t, 200, rec.Code)
	var s Stats
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &s))
	return s
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// In sleep mode, N concurrent requests are all in flight at once; the
// counters see them, and reset keeps max_in_flight at the current in_flight.
func TestInFlightAccounting(t *testing.T) {
	a := newSleepApp(t)
	srv := httptest.NewServer(a)
	defer srv.Close()

	const n = 8
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/work?ms=60000")
			if err != nil {
				return
			}
			codes[i] = resp.StatusCode
			_ = resp.Body.Close()
		}()
	}
	eventually(t, "all requests in flight", func() bool { return a.Stats().InFlight == n })
	s := getStats(t, a)
	assert.EqualValues(t, n, s.InFlight)
	assert.EqualValues(t, n, s.MaxInFlight)
	assert.Zero(t, s.Served)
	assert.Equal(t, ModeSleep, s.Mode)
	assert.Equal(t, "node-a", s.Name)
	assert.Zero(t, s.CalibrationItersPerMs, "no calibration in sleep mode")

	// reset while they run: max_in_flight = in_flight
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("POST", "/stats/reset", nil))
	require.Equal(t, 200, rec.Code)
	assert.EqualValues(t, n, a.Stats().MaxInFlight)

	// the clients go away: the requests are cancelled, not served
	srv.CloseClientConnections()
	wg.Wait()
	eventually(t, "in_flight back to zero", func() bool { return a.Stats().InFlight == 0 })
	s = a.Stats()
	assert.EqualValues(t, n, s.MaxInFlight)
	assert.Zero(t, s.Served)
	assert.EqualValues(t, n, s.Cancelled)

	// short requests are served and counted; reset then clears max_in_flight
	for range 3 {
		resp, err := http.Get(srv.URL + "/work?ms=1")
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	assert.EqualValues(t, 3, a.Stats().Served)
	a.ResetStats()
	s = a.Stats()
	assert.Zero(t, s.Served)
	assert.Zero(t, s.MaxInFlight)
	assert.Zero(t, s.Cancelled)
}

// Concurrent short requests under -race: served counts every one and
// max_in_flight never exceeds the number of clients.
func TestConcurrentServed(t *testing.T) {
	a := newSleepApp(t)
	const clients, each = 8, 10
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				rec := httptest.NewRecorder()
				a.ServeHTTP(rec, httptest.NewRequest("GET", "/work?ms=0.1", nil))
				assert.Equal(t, 200, rec.Code)
			}
		}()
	}
	wg.Wait()
	s := a.Stats()
	assert.EqualValues(t, clients*each, s.Served)
	assert.Zero(t, s.InFlight)
	assert.LessOrEqual(t, s.MaxInFlight, int64(clients))
	assert.GreaterOrEqual(t, s.MaxInFlight, int64(1))
}

// Sleep mode gives up when the request's context ends, long before ms.
func TestSleepRespectsCancel(t *testing.T) {
	a := newSleepApp(t)
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest("GET", "/work?ms=60000", nil).WithContext(ctx)
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		a.ServeHTTP(rec, req)
		close(done)
	}()
	eventually(t, "request in flight", func() bool { return a.Stats().InFlight == 1 })
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not return after cancel")
	}
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
	assert.EqualValues(t, 1, a.Stats().Cancelled)
	assert.Zero(t, a.Stats().Served)
}

func TestHoldAndBurnCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// an already-cancelled context returns at once, in both modes
	assert.ErrorIs(t, hold(ctx, 60000), context.Canceled)
	assert.ErrorIs(t, hold(ctx, 0), context.Canceled)
	assert.ErrorIs(t, burn(ctx, 60000, 1000), context.Canceled)
	// zero time with a live context is no error
	require.NoError(t, hold(context.Background(), 0))
	require.NoError(t, burn(context.Background(), 0, 1000))
}

// Busy mode: calibration gives a positive rate, and a request reports at
// least the requested time (never asserting how fast the machine is).
func TestBusyMode(t *testing.T) {
	a := newBusyApp(t)
	assert.Greater(t, a.ItersPerMs(), 0.0)
	for _, ms := range []float64{0, 2.5, 20} {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("GET", "/work?ms="+strconv.FormatFloat(ms, 'f', -1, 64), nil))
		require.Equal(t, 200, rec.Code, rec.Body.String())
		got, err := strconv.ParseFloat(rec.Header().Get(HeaderServiceMs), 64)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, got, ms)
	}
	s := getStats(t, a)
	assert.Equal(t, ModeBusy, s.Mode)
	assert.Greater(t, s.CalibrationItersPerMs, 0.0)
}

// Busy mode stops burning when the request's context ends.
func TestBusyRespectsCancel(t *testing.T) {
	a := newBusyApp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest("GET", "/work?ms=60000", nil).WithContext(ctx))
	assert.Equal(t, http.StatusServiceUnavailable, rec.Code)
}

func TestCalibrate(t *testing.T) {
	assert.Greater(t, Calibrate(10*time.Millisecond), 0.0)
	assert.Greater(t, Calibrate(0), 0.0, "even a zero budget yields a rate")
}

// Serve on a real socket: answers, then shuts down gracefully when its
// context ends, letting a request in progress finish.
func TestServeGraceful(t *testing.T) {
	a := newSleepApp(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()

	resp, err := http.Get(base + "/healthz")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, "ok", string(b))

	// a request in progress when shutdown starts still gets its answer
	type result struct {
		code int
		err  error
	}
	slow := make(chan result, 1)
	go func() {
		resp, err := http.Get(base + "/work?ms=200")
		if err != nil {
			slow <- result{err: err}
			return
		}
		_ = resp.Body.Close()
		slow <- result{code: resp.StatusCode}
	}()
	eventually(t, "slow request in flight", func() bool { return a.Stats().InFlight == 1 })
	cancel()
	r := <-slow
	require.NoError(t, r.err)
	assert.Equal(t, 200, r.code)
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	// a second Serve is refused
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	assert.Error(t, a.Serve(context.Background(), ln2))
}

// A shutdown timeout cuts off requests that run past it and says so.
func TestServeShutdownTimeout(t *testing.T) {
	c := sleepConfig()
	c.ShutdownTimeout = 50 * time.Millisecond
	a, err := New(c, nil)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()

	go func() {
		resp, err := http.Get("http://" + ln.Addr().String() + "/work?ms=60000")
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	eventually(t, "request in flight", func() bool { return a.Stats().InFlight == 1 })
	cancel()
	select {
	case err := <-served:
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), err.Error())
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	eventually(t, "cut-off request ends", func() bool { return a.Stats().InFlight == 0 })
}

// BenchmarkSleepHandler measures the handler's own overhead in sleep mode
// (ms=0: parse, accounting, JSON reply), in parallel.
func BenchmarkSleepHandler(b *testing.B) {
	a := newSleepApp(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest("GET", "/work?ms=0", nil)
		for pb.Next() {
			rec := httptest.NewRecorder()
			a.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d", rec.Code)
			}
		}
	})
}

// With Concurrency 2 and QueueLimit 2, five long requests: two are served,
// two wait, the fifth is refused with 503 at once; the waiting ones are
// served when the first ones end.
func TestConcurrencyLimit(t *testing.T) {
	cfg := sleepConfig()
	cfg.Concurrency, cfg.QueueLimit = 2, 2
	a, err := New(cfg, nil)
	require.NoError(t, err)
	srv := httptest.NewServer(a)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	long := func() {
		defer wg.Done()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/work?ms=60000", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	wg.Add(2)
	go long()
	go long()
	eventually(t, "two in flight", func() bool { return a.Stats().InFlight == 2 })
	short := make(chan int, 2)
	for range 2 {
		go func() {
			resp, err := http.Get(srv.URL + "/work?ms=1")
			if err != nil {
				short <- 0
				return
			}
			_ = resp.Body.Close()
			short <- resp.StatusCode
		}()
	}
	eventually(t, "two waiting", func() bool { return a.Stats().Waiting == 2 })
	s := a.Stats()
	assert.EqualValues(t, 2, s.InFlight, "never more than Concurrency at once")
	assert.EqualValues(t, 2, s.MaxInFlight)

	resp, err := http.Get(srv.URL + "/work?ms=1")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the waiting room is full")

	cancel()
	wg.Wait()
	assert.Equal(t, 200, <-short)
	assert.Equal(t, 200, <-short)
	s = a.Stats()
	assert.Zero(t, s.Waiting)
	assert.EqualValues(t, 2, s.MaxInFlight)
	assert.EqualValues(t, 2, s.Served)
	assert.EqualValues(t, 2, s.Cancelled)
}

// With one worker, waiting requests are served in the order they arrived.
func TestConcurrencyFIFO(t *testing.T) {
	cfg := sleepConfig()
	cfg.Concurrency = 1
	a, err := New(cfg, nil)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	blocked := make(chan struct{})
	go func() {
		defer close(blocked)
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("GET", "/work?ms=60000", nil).WithContext(ctx))
	}()
	eventually(t, "the worker busy", func() bool { return a.Stats().InFlight == 1 })

	// The answer is written while the request holds the worker, so the
	// order of first writes is the order of service.
	const n = 5
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &orderWriter{ResponseRecorder: httptest.NewRecorder(), onWrite: func() {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			}}
			a.ServeHTTP(w, httptest.NewRequest("GET", "/work?ms=0", nil))
		}()
		eventually(t, "request "+strconv.Itoa(i)+" waiting", func() bool { return a.Stats().Waiting == int64(i+1) })
	}
	cancel()
	<-blocked
	wg.Wait()
	assert.Equal(t, []int{0, 1, 2, 3, 4}, order)
}

// orderWriter calls onWrite once, when the handler first writes its
// status or body.
type orderWriter struct {
	*httptest.ResponseRecorder
	onWrite func()
	once    sync.Once
}

func (w *orderWriter) WriteHeader(code int) {
	w.once.Do(w.onWrite)
	w.ResponseRecorder.WriteHeader(code)
}

func (w *orderWriter) Write(b []byte) (int, error) {
	w.once.Do(w.onWrite)
	return w.ResponseRecorder.Write(b)
}

// WorkReply.Order numbers /work requests in the order the app started
// them, counting those it refused with 400 (bad ms) not at all.
func TestWorkReplyOrder(t *testing.T) {
	a := newSleepApp(t)
	paths := []struct {
		path  string
		order uint64 // 0: refused, no place in the order
	}{
		{"/work?ms=0", 1},     // first request started
		{"/work?ms=bad", 0},   // refused before it starts
		{"/work?ms=0.1", 2},   // second started
		{"/work?ms=0&x=1", 3}, // third
	}
	for _, p := range paths {
		rec := httptest.NewRecorder()
		a.ServeHTTP(rec, httptest.NewRequest("GET", p.path, nil))
		if p.order == 0 {
			assert.Equal(t, http.StatusBadRequest, rec.Code, p.path)
			continue
		}
		require.Equal(t, http.StatusOK, rec.Code, p.path)
		var r WorkReply
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &r))
		assert.Equal(t, p.order, r.Order, p.path)
	}
}
