// Package admission is swd's overload control that protects sessions
// (paper 001, Session-aware Queue Scheduling; docs/admission.md). It has
// two parts:
//
//   - Scheduler (--admission page and sqs) is a queue.Scheduler that gives
//     every route (internal/route: the same routes internal/cost learns
//     costs for) its own FIFO with at most a learnt limit of that route's
//     requests at the app. Each limit is hill-climbed in steps of 1 on the
//     route's own measured throughput (Climber). The queue's m still bounds
//     the node's total in flight, and the load the node gossips is still
//     the requests it holds.
//   - Gate (--admission sqs) holds requests that start a new session (no
//     session cookie, or one not seen within the idle time) in a bounded
//     session queue and admits at most one per session interval; the
//     interval grows while the page queues are long and shrinks while they
//     are short. Requests of admitted sessions pass at once. A new session
//     that could not be admitted within its wait bound is refused at once
//     (swderr.ErrSessionRefused: 503 with Retry-After).
//
// Time is injected (Config.Now). Concurrency contracts are on each type.
package admission

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Mode is the admission control in force.
type Mode string

// The modes of --admission.
const (
	ModeNone Mode = "none" // no control beyond the queue's m (FIFO)
	ModePage Mode = "page" // per-route limits (Scheduler)
	ModeSQS  Mode = "sqs"  // per-route limits and session admission (Gate)
)

// ParseMode parses --admission.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.TrimSpace(s)); m {
	case ModeNone, ModePage, ModeSQS:
		return m, nil
	case "":
		return ModeNone, nil
	}
	return "", fmt.Errorf("--admission %q: want none, page or sqs", s)
}

// Config configures admission control. Messages name swd's flags.
type Config struct {
	// Mode is none, page or sqs (--admission).
	Mode Mode

	// Window is the history window (--admission-window): a route's
	// throughput is measured over one window at each limit, and its limit
	// moves by at most 1 per window.
	Window time.Duration
	// InitialLimit is every route's limit before it has learnt one
	// (--admission-initial-limit); capped by m.
	InitialLimit int

	// SessionCookie names the cookie that identifies a session
	// (--session-cookie).
	SessionCookie string
	// SessionIdle is how long a session stays known without a request
	// (--session-idle).
	SessionIdle time.Duration
	// MaxSessions bounds the known sessions; beyond it the least recently
	// seen is forgotten (--max-sessions).
	MaxSessions int
	// SessionQueue bounds the new sessions waiting (--session-queue).
	SessionQueue int
	// SessionMaxWait is the longest a new session may wait for admission
	// (--session-max-wait): one whose predicted admission lies further
	// ahead is refused at once.
	SessionMaxWait time.Duration
	// Interval is the initial session interval; MinInterval and
	// MaxInterval bound it (--session-interval, --session-interval-min,
	// --session-interval-max).
	Interval, MinInterval, MaxInterval time.Duration
	// Threshold is the page-queue length (requests waiting in the node's
	// page queues, averaged over AdaptWindow) above which the interval
	// grows and below which it shrinks (--session-threshold).
	Threshold float64
	// AdaptEvery is how often the page-queue length is sampled and the
	// interval adapted; AdaptWindow how many samples the mean covers.
	AdaptEvery  time.Duration
	AdaptWindow int
	// Step is what the interval grows by at an adaptation above the
	// threshold and shrinks by below it (--session-interval-step). Additive
	// steps keep the lag between admitting a session and its pages reaching
	// the queues from swinging the interval between its bounds, which
	// multiplicative ones did (docs/admission.md).
	Step time.Duration

	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// DefaultConfig is off, with the defaults docs/admission.md gives.
func DefaultConfig() Config {
	return Config{
		Mode:           ModeNone,
		Window:         time.Second,
		InitialLimit:   2,
		SessionCookie:  "SWDSESSION",
		SessionIdle:    5 * time.Minute,
		MaxSessions:    100000,
		SessionQueue:   256,
		SessionMaxWait: time.Second,
		Interval:       100 * time.Millisecond,
		MinInterval:    time.Millisecond,
		MaxInterval:    2 * time.Second,
		Threshold:      2,
		AdaptEvery:     100 * time.Millisecond,
		AdaptWindow:    5,
		Step:           2 * time.Millisecond,
	}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	switch {
	case c.Window < time.Millisecond:
		return fmt.Errorf("--admission-window must be at least 1ms, got %s", c.Window)
	case c.InitialLimit < 1:
		return fmt.Errorf("--admission-initial-limit must be at least 1, got %d", c.InitialLimit)
	case c.Mode != ModeSQS:
		return nil
	case c.SessionCookie == "" || !validCookieName(c.SessionCookie):
		return fmt.Errorf("--session-cookie %q: want a cookie name", c.SessionCookie)
	case c.SessionIdle <= 0:
		return fmt.Errorf("--session-idle must be positive, got %s", c.SessionIdle)
	case c.MaxSessions < 1:
		return fmt.Errorf("--max-sessions must be at least 1, got %d", c.MaxSessions)
	case c.SessionQueue < 1:
		return fmt.Errorf("--session-queue must be at least 1, got %d", c.SessionQueue)
	case c.SessionMaxWait <= 0:
		return fmt.Errorf("--session-max-wait must be positive, got %s", c.SessionMaxWait)
	case c.MinInterval <= 0 || c.MaxInterval < c.MinInterval:
		return fmt.Errorf("--session-interval-min %s and --session-interval-max %s: want 0 < min <= max", c.MinInterval, c.MaxInterval)
	case c.Interval < c.MinInterval || c.Interval > c.MaxInterval:
		return fmt.Errorf("--session-interval %s must lie within [%s, %s]", c.Interval, c.MinInterval, c.MaxInterval)
	case !(c.Threshold >= 0):
		return fmt.Errorf("--session-threshold must not be negative, got %v", c.Threshold)
	case c.AdaptEvery < time.Millisecond:
		return fmt.Errorf("session adaptation period must be at least 1ms, got %s", c.AdaptEvery)
	case c.AdaptWindow < 1:
		return fmt.Errorf("session adaptation window must be at least 1 sample, got %d", c.AdaptWindow)
	case c.Step <= 0:
		return fmt.Errorf("--session-interval-step must be positive, got %s", c.Step)
	}
	return nil
}

// validCookieName reports whether s is a cookie name net/http accepts.
func validCookieName(s string) bool {
	c := &http.Cookie{Name: s, Value: "x"}
	return c.Valid() == nil
}

func (c Config) clock() func() time.Time {
	if c.Now != nil {
		return c.Now
	}
	return time.Now
}
