// Package route names the unit of work a request belongs to: its route.
// Features that keep per-kind state (per-route concurrency limits for
// overload control, per-route cost statistics for a work-based load index)
// share this one notion, so "the same route" means the same thing to all of
// them.
//
// A route is either one of the operator's patterns (net/http ServeMux
// pattern syntax, e.g. "GET /items/{id}" or "/static/"), matched with the
// standard library's own precedence rules, or, for a request no pattern
// matches, its method and path ("GET /login"), learnt as requests arrive.
// Learnt routes are capped (Config.MaxLearnt): once the cap is reached,
// unmatched requests of a new method and path share the route Other, so a
// client sending random paths cannot grow per-route state without bound.
// Paths longer than MaxPathLen are never learnt.
//
// Routes are numbered (ID) in the order they become known: the operator's
// patterns first (0..len(Patterns)-1, in the order given), then Other, then
// learnt routes. IDs are dense and never reused or renumbered, so a caller
// may keep per-route state in slices indexed by ID.
//
// Concurrency: a Table is safe for concurrent use. Of does one ServeMux
// lookup and, for unmatched requests, one read of an immutable map behind an
// atomic pointer; learning a route takes a mutex and copies the map (rare:
// at most MaxLearnt times over the table's life).
package route

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
)

// ID identifies a route within one Table.
type ID int

// OtherName is the name of the route shared by unmatched requests once the
// learnt routes reached their cap.
const OtherName = "other"

// Config configures a Table.
type Config struct {
	// Patterns are the operator's routes, in net/http ServeMux pattern
	// syntax ("[METHOD ][HOST]/PATH", wildcards {name} and {name...}). A
	// pattern's name is the pattern itself. Default: none.
	Patterns []string
	// MaxLearnt is how many routes are learnt from unmatched requests
	// (method + path) before the rest share OtherName. Default 64; 0
	// learns none (every unmatched request is Other).
	MaxLearnt int
	// MaxPathLen is the longest path that is learnt as a route of its own;
	// longer ones are Other. Default 256.
	MaxPathLen int
}

// DefaultConfig returns the defaults: no patterns, 64 learnt routes, paths
// up to 256 bytes.
func DefaultConfig() Config {
	return Config{MaxLearnt: 64, MaxPathLen: 256}
}

// maxRoutes bounds everything a Table may hold, patterns included.
const maxRoutes = 4096

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.MaxLearnt < 0:
		return fmt.Errorf("route: max learnt routes must not be negative, got %d", c.MaxLearnt)
	case c.MaxPathLen < 1:
		return fmt.Errorf("route: max path length must be positive, got %d", c.MaxPathLen)
	case len(c.Patterns)+1+c.MaxLearnt > maxRoutes:
		return fmt.Errorf("route: %d patterns and %d learnt routes exceed %d routes", len(c.Patterns), c.MaxLearnt, maxRoutes)
	}
	seen := map[string]bool{}
	for _, p := range c.Patterns {
		if strings.TrimSpace(p) == "" {
			return errors.New("route: empty pattern")
		}
		if seen[p] {
			return fmt.Errorf("route: duplicate pattern %q", p)
		}
		seen[p] = true
	}
	// ServeMux panics on a malformed or conflicting pattern; turn that
	// into an error here so New never panics.
	_, err := buildMux(c.Patterns)
	return err
}

// Table maps requests to routes.
type Table struct {
	cfg   Config
	mux   *http.ServeMux // nil without patterns
	byPat map[string]ID  // pattern -> ID, read-only
	other ID

	mu     sync.Mutex                    // serialises learning
	learnt atomic.Pointer[map[string]ID] // "METHOD path" -> ID, copy on write
	names  atomic.Pointer[[]string]      // ID -> name, copy on write
	full   atomic.Bool                   // learnt routes reached MaxLearnt
}

// New returns a table for cfg.
func New(cfg Config) (*Table, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mux, err := buildMux(cfg.Patterns)
	if err != nil {
		return nil, err
	}
	t := &Table{cfg: cfg, mux: mux, byPat: make(map[string]ID, len(cfg.Patterns))}
	names := make([]string, 0, len(cfg.Patterns)+1)
	for i, p := range cfg.Patterns {
		t.byPat[p] = ID(i)
		names = append(names, p)
	}
	t.other = ID(len(names))
	names = append(names, OtherName)
	t.names.Store(&names)
	learnt := map[string]ID{}
	t.learnt.Store(&learnt)
	t.full.Store(cfg.MaxLearnt == 0)
	return t, nil
}

func buildMux(patterns []string) (mux *http.ServeMux, err error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	mux = http.NewServeMux()
	defer func() {
		if v := recover(); v != nil {
			mux, err = nil, fmt.Errorf("route: bad pattern: %v", v)
		}
	}()
	for _, p := range patterns {
		mux.Handle(p, http.NotFoundHandler())
	}
	return mux, nil
}

// Of returns the route of r.
func (t *Table) Of(r *http.Request) ID {
	if t.mux != nil {
		if _, pat := t.mux.Handler(r); pat != "" {
			if id, ok := t.byPat[pat]; ok {
				return id
			}
		}
	}
	return t.learn(r.Method, r.URL.Path)
}

// learn returns the learnt route of method and path, learning it if there
// is room.
func (t *Table) learn(method, path string) ID {
	if len(path) > t.cfg.MaxPathLen || len(method) > 32 {
		return t.other
	}
	key := method + " " + path
	if id, ok := (*t.learnt.Load())[key]; ok {
		return id
	}
	if t.full.Load() {
		return t.other
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := *t.learnt.Load()
	if id, ok := cur[key]; ok {
		return id
	}
	if len(cur) >= t.cfg.MaxLearnt {
		t.full.Store(true)
		return t.other
	}
	names := *t.names.Load()
	id := ID(len(names))
	next := make(map[string]ID, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[key] = id
	nn := make([]string, len(names), len(names)+1)
	copy(nn, names)
	nn = append(nn, key)
	// Publish the name before the ID can be handed out.
	t.names.Store(&nn)
	t.learnt.Store(&next)
	if len(next) >= t.cfg.MaxLearnt {
		t.full.Store(true)
	}
	return id
}

// Other is the ID of the route shared by unmatched requests beyond the cap.
func (t *Table) Other() ID { return t.other }

// Len is how many routes are known now (IDs 0..Len()-1).
func (t *Table) Len() int { return len(*t.names.Load()) }

// Name returns a route's name: its pattern, OtherName, or "METHOD path" for
// a learnt route. An ID the table never handed out names nothing ("").
func (t *Table) Name(id ID) string {
	names := *t.names.Load()
	if id < 0 || int(id) >= len(names) {
		return ""
	}
	return names[id]
}

// Names returns every known route's name, indexed by ID.
func (t *Table) Names() []string {
	names := *t.names.Load()
	out := make([]string, len(names))
	copy(out, names)
	return out
}

// Max is the most routes the table will ever hold: per-route state sized
// by it never needs to grow.
func (t *Table) Max() int { return len(t.cfg.Patterns) + 1 + t.cfg.MaxLearnt }
