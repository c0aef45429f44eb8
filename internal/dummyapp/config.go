package dummyapp

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/config"
)

// Mode is how the application spends a request's service time.
type Mode string

const (
	// ModeBusy burns CPU in a calibrated loop (the paper's dummy application):
	// concurrent requests compete for the CPU like a real CPU-bound server.
	ModeBusy Mode = "busy"
	// ModeSleep holds the request on a timer without using CPU, so that many
	// nodes can share a small machine while queueing (swd never sends more
	// than m requests at once) stays exact.
	ModeSleep Mode = "sleep"
)

// ErrInvalidConfig is wrapped by every error Validate returns.
var ErrInvalidConfig = errors.New("invalid dummyapp config")

// Config is everything a dummyapp needs. The zero value is not valid: start
// from DefaultConfig. A Config is a plain value; copy it freely.
type Config struct {
	// Listen is the HTTP address (host:port, port 0 for any).
	Listen string
	// Mode is busy or sleep.
	Mode Mode
	// Name goes into X-Served-By; "" means the host name.
	Name string
	// MaxMs is the largest service time a request may ask for, in ms.
	MaxMs float64
	// Concurrency is the most /work requests served at once, like a server
	// with that many workers: the others wait in arrival order. 0 serves
	// every request at once (sleep mode then has no capacity limit of its
	// own: swd's m is the only one).
	Concurrency int
	// QueueLimit is the most /work requests waiting for a worker when
	// Concurrency > 0; beyond it the app answers 503 at once.
	QueueLimit int
	// CacheSize turns cache mode on: an LRU of this many keys, the key
	// being header CacheHeader of a /work request (0: off).
	CacheSize int
	// CacheHeader is the header carrying a request's key in cache mode.
	CacheHeader string
	// MissMs is the service time a request whose key is not cached pays on
	// top of its ms (loading the key's object), in ms.
	MissMs float64
	// Routes are paths with service times of their own and a contention
	// model (routes.go; --route).
	Routes []RouteSpec
	// SessionCookie, if set, names a cookie the app sets (to a fresh
	// random value) on an answer of a Routes path to a request that does
	// not carry it: a session's first page (--session-cookie).
	SessionCookie string
	// Calibration is how long busy mode measures its loop at start.
	Calibration time.Duration
	// ShutdownTimeout bounds the graceful shutdown: requests still running
	// after it are cut off.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// LogFormat is text or json.
	LogFormat string
}

// DefaultConfig returns the defaults of the interfaces spec.
func DefaultConfig() Config {
	return Config{
		Listen:          ":9000",
		Mode:            ModeBusy,
		Name:            hostName(),
		MaxMs:           60000,
		Concurrency:     0,
		QueueLimit:      10000,
		CacheHeader:     "X-User",
		Calibration:     300 * time.Millisecond,
		ShutdownTimeout: 10 * time.Second,
		LogLevel:        "info",
		LogFormat:       "text",
	}
}

func hostName() string {
	if h, err := os.Hostname(); err == nil && h != "" {
		return h
	}
	return "dummyapp"
}

// Validate reports every problem of c at once; each error wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Listen == "" {
		bad("listen address is empty")
	}
	if c.Mode != ModeBusy && c.Mode != ModeSleep {
		bad("mode %q: want busy or sleep", c.Mode)
	}
	if math.IsNaN(c.MaxMs) || math.IsInf(c.MaxMs, 0) || c.MaxMs <= 0 {
		bad("max-ms %v: want a positive number", c.MaxMs)
	}
	if c.Concurrency < 0 {
		bad("concurrency %d: want 0 (no limit) or more", c.Concurrency)
	}
	if c.QueueLimit < 1 {
		bad("queue-limit %d: want at least 1", c.QueueLimit)
	}
	if c.CacheSize < 0 {
		bad("cache-size %d: want 0 (off) or more keys", c.CacheSize)
	}
	if math.IsNaN(c.MissMs) || math.IsInf(c.MissMs, 0) || c.MissMs < 0 || c.MissMs > c.MaxMs {
		bad("miss-ms %v: want a number between 0 and max-ms", c.MissMs)
	}
	if c.CacheSize > 0 && (c.CacheHeader == "" || strings.ContainsAny(c.CacheHeader, " \t\r\n:")) {
		bad("cache-header %q: want a header name", c.CacheHeader)
	}
	if c.Mode == ModeBusy && c.Calibration < 10*time.Millisecond {
		bad("calibration %v: want at least 10ms", c.Calibration)
	}
	if err := c.validateRoutes(); err != nil {
		bad("%v", err)
	}
	if c.ShutdownTimeout < 0 {
		bad("shutdown-timeout %v: want zero or more", c.ShutdownTimeout)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		bad("%v", err)
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		bad("log-format %q: want text or json", c.LogFormat)
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) { return config.ParseLogLevel(s) }

// NewLogger returns a slog logger writing to w at level (debug, info, warn,
// error) in format (text or json); see config.NewLogger.
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	return config.NewLogger(w, level, format)
}
