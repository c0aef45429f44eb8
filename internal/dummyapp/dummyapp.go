// Package dummyapp is SWD's stand-in application: an HTTP server that spends
// a requested service time per request, either burning CPU in a calibrated
// loop (busy mode, the paper's dummy application) or holding the request on
// a timer (sleep mode). With Config.Concurrency > 0 it serves at most that
// many /work requests at once and queues the others in arrival order, as a
// server with that many workers would; balancers that do not bound the
// requests they send a server (HAProxy without maxconn, nginx, Caddy) then
// meet the same capacity as swd does with m.
//
// Cache mode (Config.CacheSize > 0) keeps an LRU of the keys /work
// requests carry in header Config.CacheHeader: a request whose key is not
// cached spends Config.MissMs more (loading it) and puts it in; /stats
// counts hits and misses. It stands in for an application that keeps
// per-user objects in a bounded cache (paper 000; docs/affinity.md).
//
// Endpoints:
//
//	ANY  /work?ms=37.5  spend 37.5 ms (plus MissMs on a cache miss); 200
//	                    with X-Service-Ms (actual), X-Served-By and, for a
//	                    keyed request in cache mode, X-Cache: hit|miss;
//	                    400 for a missing or bad ms; 503 when
//	                    Concurrency > 0 and QueueLimit requests already
//	                    wait. A request body is read and discarded (its
//	                    size is counted).
//	ANY  /work/NAME?ms=X the same: NAME (any path) lets a caller give
//	                    requests of different kinds routes of their own
//	                    (the load generator's mixed workloads)
//	GET  /stats         JSON Stats
//	POST /stats/reset   zero served/cancelled/body_bytes/cache_hits/cache_misses,
//	                    max_in_flight := in_flight
//	GET  /healthz       200 "ok"
//
// Concurrency: an App is safe for concurrent use by any number of requests;
// its counters are atomics. Stats is a snapshot whose fields are read one by
// one, so under load they need not be mutually consistent at one instant;
// ResetStats racing with requests may lose or keep a count of those requests.
// Config is a plain value. Serve may be called once per App.
package dummyapp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// Response headers.
const (
	// HeaderServiceMs carries the service time actually spent, in ms.
	HeaderServiceMs = "X-Service-Ms"
	// HeaderServedBy carries Config.Name.
	HeaderServedBy = "X-Served-By"
)

// Stats is the JSON body of GET /stats.
type Stats struct {
	// Served counts /work requests answered 200 since start or reset.
	Served uint64 `json:"served"`
	// InFlight is the number of /work requests being served now.
	InFlight int64 `json:"in_flight"`
	// MaxInFlight is the largest InFlight seen since start or reset.
	MaxInFlight int64 `json:"max_in_flight"`
	// Waiting is the number of /work requests waiting for a worker now
	// (always 0 without a concurrency limit).
	Waiting int64 `json:"waiting"`
	// Cancelled counts /work requests whose context ended before their
	// service time was spent (client gone, or shutdown timeout).
	Cancelled uint64 `json:"cancelled"`
	// BodyBytes counts request body bytes read on /work.
	BodyBytes uint64 `json:"body_bytes"`
	// Mode is busy or sleep.
	Mode Mode `json:"mode"`
	// Name is the X-Served-By value.
	Name string `json:"name"`
	// CacheHits and CacheMisses count cache-mode lookups of keyed /work
	// requests since start or reset; CacheSize is the capacity in keys and
	// CacheEntries the keys held now (all 0 when cache mode is off).
	CacheHits    uint64 `json:"cache_hits,omitempty"`
	CacheMisses  uint64 `json:"cache_misses,omitempty"`
	CacheSize    int    `json:"cache_size,omitempty"`
	CacheEntries int    `json:"cache_entries,omitempty"`
	// CalibrationItersPerMs is the busy loop's rate (busy mode only).
	CalibrationItersPerMs float64 `json:"calibration_iters_per_ms,omitempty"`
}

// WorkReply is the JSON body of a 200 answer of /work.
type WorkReply struct {
	ServedBy    string  `json:"served_by"`
	RequestedMs float64 `json:"requested_ms"`
	ServiceMs   float64 `json:"service_ms"`
	BodyBytes   int64   `json:"body_bytes"`
	// Order is this request's place in the order the app started /work
	// requests (1 for the first since start), so a client can tell the
	// order the app served requests in without comparing clocks.
	Order uint64 `json:"order"`
}

// App is the dummy application; it is an http.Handler.
type App struct {
	cfg        Config
	log        *slog.Logger
	itersPerMs float64 // busy mode only
	mux        *http.ServeMux
	// workers admits Config.Concurrency requests at once, the others in
	// arrival order (semaphore.Weighted is FIFO); nil: no limit.
	workers *semaphore.Weighted

	served      atomic.Uint64
	started     atomic.Uint64 // /work requests started (WorkReply.Order)
	cancelled   atomic.Uint64
	bodyBytes   atomic.Uint64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	waiting     atomic.Int64
	serving     atomic.Bool
	// cache is cache mode's LRU (nil: off).
	cache *cache
}

// New validates cfg and returns an App. In busy mode it first calibrates
// the loop for cfg.Calibration (burning one CPU meanwhile) and logs the
// result at info. A nil logger discards logs.
func New(cfg Config, logger *slog.Logger) (*App, error) {
	if cfg.Name == "" {
		cfg.Name = hostName()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	a := &App{cfg: cfg, log: logger}
	if cfg.Concurrency > 0 {
		a.workers = semaphore.NewWeighted(int64(cfg.Concurrency))
	}
	if cfg.CacheSize > 0 {
		a.cache = newCache(cfg.CacheSize, cfg.CacheHeader)
	}
	if cfg.Mode == ModeBusy {
		a.itersPerMs = Calibrate(cfg.Calibration)
		logger.Info("calibrated busy loop", "iters_per_ms", math.Round(a.itersPerMs), "took", cfg.Calibration.String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/work", a.handleWork)
	mux.HandleFunc("/work/{route...}", a.handleWork) // the same, under a route of the caller's choosing
	if err := a.addRoutes(mux); err != nil {
		return nil, err
	}
	mux.HandleFunc("GET /stats", a.handleStats)
	mux.HandleFunc("POST /stats/reset", a.handleReset)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok")
	})
	a.mux = mux
	return a, nil
}

// Config returns the App's configuration (with Name filled in).
func (a *App) Config() Config { return a.cfg }

// ItersPerMs returns the calibrated busy-loop rate (0 in sleep mode).
func (a *App) ItersPerMs() float64 { return a.itersPerMs }

// ServeHTTP sets X-Served-By on every answer and routes the request.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderServedBy, a.cfg.Name)
	a.mux.ServeHTTP(w, r)
}

// Stats returns a snapshot of the counters.
func (a *App) Stats() Stats {
	st := Stats{
		Served:                a.served.Load(),
		InFlight:              a.inFlight.Load(),
		MaxInFlight:           a.maxInFlight.Load(),
		Waiting:               a.waiting.Load(),
		Cancelled:             a.cancelled.Load(),
		BodyBytes:             a.bodyBytes.Load(),
		Mode:                  a.cfg.Mode,
		Name:                  a.cfg.Name,
		CalibrationItersPerMs: a.itersPerMs,
	}
	if a.cache != nil {
		st.CacheHits, st.CacheMisses = a.cache.hits.Load(), a.cache.misses.Load()
		st.CacheSize, st.CacheEntries = a.cfg.CacheSize, a.cache.len()
	}
	return st
}

// ResetStats zeroes served, cancelled, body_bytes and the cache's hits and
// misses (not its contents), and sets max_in_flight to the current
// in_flight (requests still running stay counted there).
func (a *App) ResetStats() {
	a.served.Store(0)
	a.cancelled.Store(0)
	a.bodyBytes.Store(0)
	a.maxInFlight.Store(a.inFlight.Load())
	if a.cache != nil {
		a.cache.hits.Store(0)
		a.cache.misses.Store(0)
	}
}

// ParseMs parses the ms parameter of /work: a finite decimal number in
// [0, maxMs].
func ParseMs(raw string, maxMs float64) (float64, error) {
	if raw == "" {
		return 0, errors.New("missing ms parameter: want /work?ms=N (milliseconds)")
	}
	ms, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return 0, fmt.Errorf("ms %q is not a number", raw)
	}
	switch {
	case math.IsNaN(ms) || math.IsInf(ms, 0):
		return 0, fmt.Errorf("ms %q is not a finite number", raw)
	case ms < 0:
		return 0, fmt.Errorf("ms %q is negative", raw)
	case ms > maxMs:
		return 0, fmt.Errorf("ms %q exceeds the maximum %v", raw, maxMs)
	}
	return ms, nil
}

func (a *App) handleWork(w http.ResponseWriter, r *http.Request) {
	ms, err := ParseMs(r.URL.Query().Get("ms"), a.cfg.MaxMs)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	a.work(w, r, ms, nil)
}

// work serves a request that costs ms (a route's, rt, when not nil: its
// contention model scales ms once the request runs).
func (a *App) work(w http.ResponseWriter, r *http.Request, ms float64, rt *appRoute) {
	var err error
	if a.workers != nil {
		if !a.awaitWorker(w, r) {
			return
		}
		defer a.workers.Release(1)
	}

	order := a.started.Add(1)
	n := a.inFlight.Add(1)
	defer a.inFlight.Add(-1)
	for {
		m := a.maxInFlight.Load()
		if n <= m || a.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}

	body, err := io.Copy(io.Discard, r.Body)
	a.bodyBytes.Add(uint64(body))
	if err != nil {
		http.Error(w, "read request body: "+err.Error(), http.StatusBadRequest)
		return
	}

	spend := ms
	if rt != nil {
		a.setSession(w, r)
		spend = rt.start()
		defer rt.finish()
	}
	if a.cache != nil {
		if key, hit := a.cache.access(r); key != "" {
			if hit {
				w.Header().Set(HeaderCache, "hit")
			} else {
				w.Header().Set(HeaderCache, "miss")
				spend += a.cfg.MissMs
			}
		}
	}
	ctx := r.Context()
	start := time.Now()
	if a.cfg.Mode == ModeBusy {
		err = burn(ctx, spend, a.itersPerMs)
	} else {
		err = hold(ctx, spend)
	}
	// rounded up to the microsecond, so it is never below the requested ms
	spent := math.Ceil(float64(time.Since(start))/float64(time.Microsecond)) / 1000
	if err != nil {
		a.cancelled.Add(1)
		a.log.Debug("work cancelled", "requested_ms", ms, "spent_ms", spent, "err", err)
		http.Error(w, "request cancelled: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	a.served.Add(1)

	w.Header().Set(HeaderServiceMs, strconv.FormatFloat(spent, 'f', 3, 64))
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(WorkReply{
		ServedBy:    a.cfg.Name,
		RequestedMs: ms,
		ServiceMs:   spent,
		BodyBytes:   body,
		Order:       order,
	})
	a.log.Debug("work done", "requested_ms", ms, "spent_ms", spent, "body_bytes", body)
}

// awaitWorker waits in arrival order for one of Config.Concurrency workers.
// It answers 503 itself and returns false when QueueLimit requests already
// wait or the request is cancelled while waiting.
func (a *App) awaitWorker(w http.ResponseWriter, r *http.Request) bool {
	if a.waiting.Add(1) > int64(a.cfg.QueueLimit) {
		a.waiting.Add(-1)
		http.Error(w, "queue full: "+strconv.Itoa(a.cfg.QueueLimit)+" requests wait for a worker", http.StatusServiceUnavailable)
		return false
	}
	err := a.workers.Acquire(r.Context(), 1)
	a.waiting.Add(-1)
	if err != nil {
		a.cancelled.Add(1)
		http.Error(w, "request cancelled while waiting for a worker: "+err.Error(), http.StatusServiceUnavailable)
		return false
	}
	return true
}

func (a *App) handleStats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(a.Stats())
}

func (a *App) handleReset(w http.ResponseWriter, _ *http.Request) {
	a.ResetStats()
	a.handleStats(w, nil)
}

// Serve answers HTTP on ln until ctx is done, then shuts down gracefully:
// it stops accepting, lets requests in progress finish for up to
// Config.ShutdownTimeout, and cuts off the rest. It logs "listening" with
// the address at info first. It returns nil after a graceful shutdown, an
// error wrapping context.DeadlineExceeded if requests had to be cut off,
// and the server's error if serving failed. It closes ln.
func (a *App) Serve(ctx context.Context, ln net.Listener) error {
	if !a.serving.CompareAndSwap(false, true) {
		_ = ln.Close()
		return errors.New("dummyapp: serve called twice")
	}
	srv := &http.Server{
		Handler:           a,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(a.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	a.log.Info("listening", "addr", ln.Addr().String(), "mode", string(a.cfg.Mode), "name", a.cfg.Name)

	select {
	case err := <-errc:
		return fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	a.log.Info("shutting down", "in_flight", a.inFlight.Load(), "timeout", a.cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc // http.ErrServerClosed once Shutdown has begun
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	a.log.Info("stopped", "served", a.served.Load())
	return nil
}
