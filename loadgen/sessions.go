package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SessionConfig is one closed-loop session run (loadgen sessions; paper
// 001's workload): Clients clients, each looping over sessions. A session
// is the Pages in order, each page after Think; it ends when every page
// was answered 200, or at the first page that was not (a refusal, an
// error, or no answer within Timeout). A client whose first page was
// refused waits Backoff before starting again.
type SessionConfig struct {
	// Targets are the nodes' base URLs; client i calls Targets[i % n].
	Targets []string
	// Clients is how many clients run at once.
	Clients int
	// Duration is the measured time; Warmup runs before it, uncounted.
	Duration, Warmup time.Duration
	// Pages is a session's page sequence (paths, with a query if any).
	Pages []string
	// Think is the pause before each page after the first.
	Think time.Duration
	// Timeout bounds each request (the client gives up).
	Timeout time.Duration
	// Backoff is the pause after a refused or failed first page.
	Backoff time.Duration
	// Cookie is the session cookie's name: a client keeps the value the
	// app set for the rest of its session and drops it at the next.
	Cookie string
	// Client is the HTTP client (nil: one with enough idle connections).
	Client *http.Client
}

// Validate reports the first problem with c.
func (c SessionConfig) Validate() error {
	switch {
	case len(c.Targets) == 0:
		return errors.New("sessions: no target")
	case c.Clients < 1:
		return fmt.Errorf("sessions: clients must be at least 1, got %d", c.Clients)
	case c.Duration <= 0 || c.Warmup < 0:
		return errors.New("sessions: duration must be positive and warmup not negative")
	case len(c.Pages) == 0:
		return errors.New("sessions: a session needs at least one page")
	case c.Think < 0 || c.Backoff < 0:
		return errors.New("sessions: think time and backoff must not be negative")
	case c.Timeout <= 0:
		return errors.New("sessions: the client timeout must be positive")
	case c.Cookie == "":
		return errors.New("sessions: no session cookie name")
	}
	return nil
}

// SessionResult is what one run measured (counted in the measured window:
// a session counts when it ends there, a page when its answer arrives
// there).
type SessionResult struct {
	Clients int `json:"clients"`
	// Completed sessions, and per second of the window.
	Completed      uint64  `json:"completed"`
	SessionsPerSec float64 `json:"sessions_per_sec"`
	// FailedAfterStart: sessions whose first page was served but a later
	// one was not. WastedPages: the pages those sessions had been served.
	FailedAfterStart uint64 `json:"failed_after_start"`
	WastedPages      uint64 `json:"wasted_pages"`
	// FirstRefused: first pages answered 503 (refused at once);
	// FirstFailed: first pages that failed otherwise (timeout, error).
	FirstRefused uint64 `json:"first_refused"`
	FirstFailed  uint64 `json:"first_failed"`
	// Failures counts failed pages by page and cause ("PAGE status 503",
	// "PAGE timeout", ...).
	Failures map[string]uint64 `json:"failures,omitempty"`
	// PagesPerSec is the pages answered 200 per second, by page.
	PagesPerSec map[string]float64 `json:"pages_per_sec"`
	Window      time.Duration      `json:"window_ns"`
}

type sessionCounters struct {
	completed, failedAfter, wasted, firstRefused, firstFailed atomic.Uint64
	mu                                                        sync.Mutex
	pages                                                     map[string]uint64
	failures                                                  map[string]uint64
}

// RunSessions runs cfg and returns what it measured. It returns when the
// window has ended and every client stopped (requests still out are
// cancelled and not counted).
func RunSessions(ctx context.Context, cfg SessionConfig) (SessionResult, error) {
	if err := cfg.Validate(); err != nil {
		return SessionResult{}, err
	}
	targets := make([]string, len(cfg.Targets))
	for i, t := range cfg.Targets {
		b, err := NormalizeBase(t)
		if err != nil {
			return SessionResult{}, err
		}
		targets[i] = b
	}
	client := cfg.Client
	if client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConns, tr.MaxIdleConnsPerHost = cfg.Clients*2, cfg.Clients*2
		client = &http.Client{Transport: tr}
		defer tr.CloseIdleConnections()
	}
	start := time.Now()
	from, until := start.Add(cfg.Warmup), start.Add(cfg.Warmup+cfg.Duration)
	rctx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	c := &sessionCounters{pages: map[string]uint64{}, failures: map[string]uint64{}}
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runClient(rctx, cfg, client, targets[i%len(targets)], c, from)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return SessionResult{}, err
	}
	win := cfg.Duration
	res := SessionResult{
		Clients: cfg.Clients, Window: win,
		Completed: c.completed.Load(), FailedAfterStart: c.failedAfter.Load(), WastedPages: c.wasted.Load(),
		FirstRefused: c.firstRefused.Load(), FirstFailed: c.firstFailed.Load(),
		Failures: c.failures, PagesPerSec: map[string]float64{},
	}
	res.SessionsPerSec = float64(res.Completed) / win.Seconds()
	for p, n := range c.pages {
		res.PagesPerSec[p] = float64(n) / win.Seconds()
	}
	return res, nil
}

// pageName is a page's path without its query.
func pageName(p string) string {
	name, _, _ := strings.Cut(p, "?")
	return name
}

func runClient(ctx context.Context, cfg SessionConfig, client *http.Client, base string, c *sessionCounters, from time.Time) {
	sleep := func(d time.Duration) bool {
		if d <= 0 {
			return ctx.Err() == nil
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for ctx.Err() == nil {
		cookie := ""
		for i, page := range cfg.Pages {
			if i > 0 && !sleep(cfg.Think) {
				return
			}
			status, set, err := fetch(ctx, client, base+page, cfg.Cookie, cookie, cfg.Timeout)
			if ctx.Err() != nil {
				return // the run ended: not counted
			}
			counted := !time.Now().Before(from)
			if err == nil && status == http.StatusOK {
				if set != "" {
					cookie = set
				}
				if counted {
					c.mu.Lock()
					c.pages[pageName(page)]++
					c.mu.Unlock()
				}
				if i == len(cfg.Pages)-1 && counted {
					c.completed.Add(1)
				}
				continue
			}
			if counted {
				cause := "error"
				switch {
				case err == nil:
					cause = fmt.Sprintf("status %d", status)
				case errors.Is(err, context.DeadlineExceeded):
					cause = "timeout"
				}
				c.mu.Lock()
				if len(c.failures) < 64 {
					c.failures[pageName(page)+" "+cause]++
				}
				c.mu.Unlock()
				switch {
				case i > 0:
					c.failedAfter.Add(1)
					c.wasted.Add(uint64(i))
				case err == nil && status == http.StatusServiceUnavailable:
					c.firstRefused.Add(1)
				default:
					c.firstFailed.Add(1)
				}
			}
			if i == 0 && !sleep(cfg.Backoff) {
				return
			}
			break
		}
	}
}

// fetch GETs url with the session cookie (if value is set) within timeout,
// reads the answer and returns its status and the session cookie it sets.
func fetch(ctx context.Context, client *http.Client, url, name, value string, timeout time.Duration) (int, string, error) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if value != "" {
		req.AddCookie(&http.Cookie{Name: name, Value: value})
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil {
		return 0, "", err
	}
	set := ""
	for _, c := range resp.Cookies() {
		if c.Name == name {
			set = c.Value
		}
	}
	return resp.StatusCode, set, nil
}

// SessionRow is one mode's run at one client count.
type SessionRow struct {
	Mode string `json:"mode"`
	SessionResult
}

// SessionReport is a sweep over admission modes and client counts.
type SessionReport struct {
	Title string       `json:"title"`
	Rows  []SessionRow `json:"rows"`
}

// Summary is one mode's peak and its value at the most clients.
type SessionSummary struct {
	Mode        string  `json:"mode"`
	PeakPerSec  float64 `json:"peak_sessions_per_sec"`
	PeakClients int     `json:"peak_clients"`
	MaxClients  int     `json:"max_clients"`
	AtMax       float64 `json:"at_max_sessions_per_sec"`
	// Ratio is AtMax / PeakPerSec; FailedAfterStart the sum over the
	// mode's runs.
	Ratio            float64 `json:"ratio"`
	FailedAfterStart uint64  `json:"failed_after_start"`
}

// Summaries returns each mode's summary, in the order modes first appear.
func (r SessionReport) Summaries() []SessionSummary {
	var out []SessionSummary
	idx := map[string]int{}
	for _, row := range r.Rows {
		i, ok := idx[row.Mode]
		if !ok {
			i = len(out)
			idx[row.Mode] = i
			out = append(out, SessionSummary{Mode: row.Mode})
		}
		s := &out[i]
		if row.SessionsPerSec > s.PeakPerSec || s.PeakClients == 0 {
			s.PeakPerSec, s.PeakClients = row.SessionsPerSec, row.Clients
		}
		if row.Clients >= s.MaxClients {
			s.MaxClients, s.AtMax = row.Clients, row.SessionsPerSec
		}
		s.FailedAfterStart += row.FailedAfterStart
	}
	for i := range out {
		if out[i].PeakPerSec > 0 {
			out[i].Ratio = out[i].AtMax / out[i].PeakPerSec
		}
	}
	return out
}

// WriteTable writes the report as text tables.
func (r SessionReport) WriteTable(w io.Writer) error {
	var b strings.Builder
	if r.Title != "" {
		fmt.Fprintf(&b, "%s\n\n", r.Title)
	}
	pages := map[string]bool{}
	for _, row := range r.Rows {
		for p := range row.PagesPerSec {
			pages[p] = true
		}
	}
	names := make([]string, 0, len(pages))
	for p := range pages {
		names = append(names, p)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%-5s %7s %10s %9s %8s %9s %9s %7s", "mode", "clients", "sessions/s", "completed", "failed*", "wasted", "refused1", "failed1")
	for _, p := range names {
		fmt.Fprintf(&b, " %12s", p+"/s")
	}
	b.WriteString("\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%-5s %7d %10.2f %9d %8d %9d %9d %7d", row.Mode, row.Clients, row.SessionsPerSec, row.Completed,
			row.FailedAfterStart, row.WastedPages, row.FirstRefused, row.FirstFailed)
		for _, p := range names {
			fmt.Fprintf(&b, " %12.1f", row.PagesPerSec[p])
		}
		b.WriteString("\n")
	}
	b.WriteString("\nfailed* = sessions that failed after their first page was served; wasted = pages those sessions had been served;\n" +
		"refused1 = first pages answered 503; failed1 = first pages that timed out or failed otherwise.\n\n")
	fmt.Fprintf(&b, "%-5s %12s %12s %12s %12s %8s %8s\n", "mode", "peak sess/s", "at clients", "max clients", "sess/s there", "ratio", "failed*")
	for _, s := range r.Summaries() {
		fmt.Fprintf(&b, "%-5s %12.2f %12d %12d %12.2f %8.2f %8d\n", s.Mode, s.PeakPerSec, s.PeakClients, s.MaxClients, s.AtMax, s.Ratio, s.FailedAfterStart)
	}
	for _, row := range r.Rows {
		if len(row.Failures) == 0 {
			continue
		}
		keys := make([]string, 0, len(row.Failures))
		for k := range row.Failures {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Fprintf(&b, "\nfailures %s at %d clients:", row.Mode, row.Clients)
		for _, k := range keys {
			fmt.Fprintf(&b, " %s=%d", k, row.Failures[k])
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteCSV writes one line per run.
func (r SessionReport) WriteCSV(w io.Writer) error {
	var b strings.Builder
	b.WriteString("mode,clients,sessions_per_sec,completed,failed_after_start,wasted_pages,first_refused,first_failed\n")
	for _, row := range r.Rows {
		fmt.Fprintf(&b, "%s,%d,%.3f,%d,%d,%d,%d,%d\n", row.Mode, row.Clients, row.SessionsPerSec, row.Completed,
			row.FailedAfterStart, row.WastedPages, row.FirstRefused, row.FirstFailed)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
