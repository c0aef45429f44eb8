package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/workload"
)

// RunConfig is one open-loop run at one rate.
type RunConfig struct {
	// Policy labels the run's row ("current" when empty); Run itself does
	// not switch policies (Sweep does).
	Policy string
	// Targets are the base URLs requests go to, round robin (one entry: a
	// dispatcher).
	Targets []string
	// Path is the application's endpoint; the size goes in ?ms=.
	Path     string
	Workload workload.Spec
	// Rate is the offered load in requests per second.
	Rate float64
	// Warmup is sent but not measured; Duration is measured.
	Warmup   time.Duration
	Duration time.Duration
	Seed     uint64
	// Timeout bounds each request.
	Timeout time.Duration
	// Workers is vegeta's initial worker count; MaxWorkers caps it (0: no
	// cap, which keeps the schedule whatever the cluster does).
	Workers    uint64
	MaxWorkers uint64
	// Connections is the most idle connections kept per target host.
	Connections int
	// ResultsFile, if set, receives the measured results in vegeta's gob
	// encoding (parent directories are created).
	ResultsFile string
	// Keys, if N > 0, gives every request a user key (a keyed workload).
	Keys KeySpec
	// Apps, if set, are the apps' host:port addresses: the run reads their
	// cache counters (dummyapp /stats) when the warm-up ends and at the end,
	// and reports the measured window's in RunResult.Cache.
	Apps []string
}

// DefaultRunConfig is the paper's standard workload at 40 req/s for a
// minute after a 10 s warm-up. Targets must still be set.
func DefaultRunConfig() RunConfig {
	std, _ := workload.Lookup("standard")
	return RunConfig{
		Path:        "/work",
		Workload:    std,
		Rate:        40,
		Warmup:      10 * time.Second,
		Duration:    60 * time.Second,
		Seed:        1,
		Timeout:     30 * time.Second,
		Workers:     64,
		Connections: 10000,
		Keys:        DefaultKeySpec(),
	}
}

// Validate reports the first problem with c.
func (c RunConfig) Validate() error {
	switch {
	case len(c.Targets) == 0:
		return errors.New("no targets: give node addresses (--targets) or a dispatcher (--dispatcher)")
	case !(c.Rate > 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate must be a positive number of requests per second, got %v", c.Rate)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %v", c.Duration)
	case c.Warmup < 0:
		return fmt.Errorf("warm-up must not be negative, got %v", c.Warmup)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout must be positive, got %v", c.Timeout)
	case c.Workers == 0:
		return errors.New("workers must be at least 1")
	case c.MaxWorkers != 0 && c.MaxWorkers < c.Workers:
		return fmt.Errorf("max workers (%d) must be 0 (no cap) or at least workers (%d)", c.MaxWorkers, c.Workers)
	case c.Connections < 1:
		return fmt.Errorf("connections must be at least 1, got %d", c.Connections)
	}
	for _, t := range append(append([]string(nil), c.Targets...), c.Apps...) {
		if _, err := NormalizeBase(t); err != nil {
			return err
		}
	}
	if err := c.Keys.Validate(); err != nil {
		return err
	}
	return c.Workload.Validate()
}

// Label is the row's policy label.
func (c RunConfig) Label() string {
	if c.Policy == "" {
		return "current"
	}
	return c.Policy
}

// RunResult is what a run measured.
type RunResult struct {
	Row Row
	// Sent counts every request sent, warm-up included.
	Sent int
	// MaxSendLag is the longest a request left after its scheduled time;
	// large values mean this machine could not keep the schedule (the
	// response times still count from the scheduled time).
	MaxSendLag time.Duration
	// Codes counts measured responses by status (0: no response).
	Codes map[uint16]int
	// ServedBy counts measured responses by their X-Served-By header.
	ServedBy map[string]int
	// Wall is how long the run took.
	Wall time.Duration
	// Cache is the apps' cache lookups in the measured window (nil without
	// RunConfig.Apps, or when they could not be read: CacheErr says why).
	Cache    *CacheStats
	CacheErr error
}

// Run offers c's schedule to c's targets and waits for every answer (or
// timeout). It returns the partial result and ctx's error when ctx ends
// first.
func Run(ctx context.Context, c RunConfig) (RunResult, error) {
	if err := c.Validate(); err != nil {
		return RunResult{}, err
	}
	sched, err := NewSchedule(c.Workload, c.Rate, c.Seed, c.Warmup, c.Duration)
	if err != nil {
		return RunResult{}, err
	}
	tg, err := NewTargeter(sched, c.Targets, c.Path)
	if err != nil {
		return RunResult{}, err
	}
	if c.Keys.N > 0 {
		if err := tg.Keyed(c.Keys, c.Keys.Draw(len(sched.Arrivals), c.Seed)); err != nil {
			return RunResult{}, err
		}
	}
	pacer := NewSchedulePacer(sched)

	var enc vegeta.Encoder
	var flush func() error
	if c.ResultsFile != "" {
		if err := os.MkdirAll(filepath.Dir(c.ResultsFile), 0o755); err != nil {
			return RunResult{}, fmt.Errorf("create results directory: %w", err)
		}
		f, err := os.Create(c.ResultsFile)
		if err != nil {
			return RunResult{}, fmt.Errorf("create results file: %w", err)
		}
		defer f.Close()
		bw := bufio.NewWriterSize(f, 1<<16)
		enc = vegeta.NewEncoder(bw)
		flush = func() error {
			if err := bw.Flush(); err != nil {
				return err
			}
			return f.Close()
		}
	}

	maxWorkers := c.MaxWorkers
	if maxWorkers == 0 {
		maxWorkers = vegeta.DefaultMaxWorkers
	}
	// Our own transport: its idle connections are closed after the run (a
	// sweep would otherwise pile them up), and every request carries ctx so
	// stopping a run aborts what is in flight. No proxy: the response times
	// must be the cluster's.
	tr := &http.Transport{
		DialContext:         (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: c.Connections,
	}
	defer tr.CloseIdleConnections()
	atk := vegeta.NewAttacker(
		vegeta.Client(&http.Client{Transport: ctxTransport{ctx: ctx, base: tr}}),
		vegeta.Timeout(c.Timeout),
		vegeta.Workers(c.Workers),
		vegeta.MaxWorkers(maxWorkers),
		vegeta.MaxBody(0),
	)

	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-ctx.Done():
			atk.Stop()
		case <-stop:
		}
	}()

	res := RunResult{Codes: map[uint16]int{}, ServedBy: map[string]int{}}
	cache := c.watchCache(ctx)
	var ok []time.Duration
	measured, failed := 0, 0
	start := time.Now()
	var encErr error
	name := c.Label() + "@" + FormatRate(c.Rate)
	for r := range atk.Attack(tg.Target, pacer, 0, name) {
		res.Sent++
		off, known := pacer.Offset(r.Seq)
		if !known {
			continue
		}
		scheduled := pacer.Began().Add(off)
		if lag := r.Timestamp.Sub(scheduled); lag > res.MaxSendLag {
			res.MaxSendLag = lag
		}
		if off < sched.Warmup {
			continue
		}
		end := r.End()
		r.Timestamp = scheduled
		r.Latency = end.Sub(scheduled)
		measured++
		res.Codes[r.Code]++
		if r.Error != "" || r.Code < 200 || r.Code > 299 {
			failed++
		} else {
			ok = append(ok, r.Latency)
		}
		if by := r.Headers.Get("X-Served-By"); by != "" {
			res.ServedBy[by]++
		}
		if enc != nil && encErr == nil {
			r.Body = nil
			encErr = enc.Encode(r)
		}
	}
	res.Wall = time.Since(start)
	res.Cache, res.CacheErr = cache()
	// Requests the pacer never released (the run was stopped) still count:
	// they were offered in the measured window.
	for k := res.Sent; k < len(sched.Arrivals) && ctx.Err() != nil; k++ {
		if sched.Measured(k) {
			measured++
			failed++
		}
	}
	res.Row = Summarize(c.Label(), c.Rate, measured, failed, ok)
	if flush != nil {
		if err := flush(); err != nil && encErr == nil {
			encErr = err
		}
	}
	if encErr != nil {
		return res, fmt.Errorf("write results file: %w", encErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// ctxTransport gives every request the run's context.
type ctxTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t ctxTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return t.base.RoundTrip(r.WithContext(t.ctx))
}

// watchCache reads the apps' cache counters when c's warm-up ends (at once
// without one); the returned function reads them again and gives the
// difference. Without c.Apps it does nothing.
func (c RunConfig) watchCache(ctx context.Context) func() (*CacheStats, error) {
	if len(c.Apps) == 0 {
		return func() (*CacheStats, error) { return nil, nil }
	}
	type snap struct {
		st  CacheStats
		err error
	}
	first := make(chan snap, 1)
	read := func() { st, err := ReadCacheStats(ctx, c.Apps); first <- snap{st, err} }
	var timer *time.Timer
	if c.Warmup > 0 {
		timer = time.AfterFunc(c.Warmup, read)
	} else {
		read()
	}
	return func() (*CacheStats, error) {
		if timer != nil && timer.Stop() {
			return nil, errors.New("the run ended before its warm-up did")
		}
		s := <-first // read, or being read
		if s.err != nil {
			return nil, s.err
		}
		end, err := ReadCacheStats(ctx, c.Apps)
		if err != nil {
			return nil, err
		}
		return &CacheStats{Hits: end.Hits - s.st.Hits, Misses: end.Misses - s.st.Misses}, nil
	}
}
