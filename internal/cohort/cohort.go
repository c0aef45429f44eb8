// Package cohort is the cache-aware local order of paper 000 (Yamamoto &
// Tai, cache-aware cohort scheduling; docs/affinity.md) as a
// queue.Scheduler: swd keeps a model of which keys the application holds in
// its cache and gives a free app slot to
//
//  1. the ticket that has waited longest, if it has waited more than
//     MaxWait (no starvation): its wait counts from its arrival, the
//     queue's Key (arrival time in Unix nanoseconds: the push time, or a
//     transferred request's arrival at the node its client called);
//  2. else the first ticket of the highest priority class above 0 (a
//     high-priority request goes first, cached or not);
//  3. else the first ticket, in arrival order, whose key the model holds
//     (the in-cache cohort), or that has no key (it cannot miss);
//  4. else the first ticket in arrival order (the out-of-cache cohort);
//
// and never to a ticket whose key already has a request at the app: one key
// never runs twice at once on a node. When every waiting ticket's key is
// running, the slot stays idle until one finishes.
//
// The model: a granted ticket's key enters the model (the app loads it on a
// miss). When the model is full, it evicts as the paper's agent server
// does: first the idle entry (not running, no ticket waiting for it) that
// finished longest ago; else the busy entry (tickets wait for it) that
// finished most recently; never a running one. If every entry is running
// (Capacity below m), the model holds more than Capacity until one
// finishes. The model predicts an LRU application exactly as long as the
// two choose the same victim, which cohort order makes the common case (a
// cached key with waiting tickets runs before any miss evicts it); see
// docs/affinity.md.
//
// The paper's rule "run the agent just processed again while it has
// messages, up to a bound" is not implemented: with one slot per key it
// only saves a switch the paper's runtime paid and swd does not.
//
// Time is injected (Config.Now); nothing here reads the clock otherwise.
//
// Concurrency: the queue calls Pick, Granted and Released under its lock,
// one at a time; Stats may be called from any goroutine (atomics).
package cohort

import (
	"container/list"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/swd-project/swd/internal/queue"
)

// Config configures a Scheduler. Messages name swd's flags.
type Config struct {
	// Enabled installs the cohort order (--cohort).
	Enabled bool
	// Capacity is how many keys the application's cache holds
	// (--cohort-cache).
	Capacity int
	// MaxWait is the starvation bound: a ticket that has waited longer
	// goes next regardless of class and cache (--cohort-max-wait).
	MaxWait time.Duration
	// Priority marks the high-priority class (--cohort-priority): a
	// request carrying this header (with this value, if given) gets
	// Priority 1. The zero value marks nothing.
	Priority PriorityRule
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// DefaultConfig is off, 1000 keys, a 2 s starvation bound and no
// priority class.
func DefaultConfig() Config {
	return Config{Capacity: 1000, MaxWait: 2 * time.Second}
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.Capacity < 1:
		return fmt.Errorf("--cohort-cache must be at least 1 key, got %d", c.Capacity)
	case c.MaxWait <= 0:
		return fmt.Errorf("--cohort-max-wait must be positive, got %s", c.MaxWait)
	}
	return nil
}

// PriorityRule says which requests are in the high-priority class: those
// with header Header, whose value equals Value when Value is not empty.
type PriorityRule struct {
	Header string
	Value  string
}

// ParsePriority parses "NAME" or "NAME=VALUE" (a header, and optionally
// the value that marks the high-priority class); "" is no class.
func ParsePriority(s string) (PriorityRule, error) {
	if s == "" {
		return PriorityRule{}, nil
	}
	name, value, _ := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, " \t\r\n:;,\"") {
		return PriorityRule{}, fmt.Errorf("--cohort-priority %q: want HEADER or HEADER=VALUE", s)
	}
	return PriorityRule{Header: http.CanonicalHeaderKey(name), Value: strings.TrimSpace(value)}, nil
}

// String is the form ParsePriority reads.
func (p PriorityRule) String() string {
	if p.Value == "" {
		return p.Header
	}
	return p.Header + "=" + p.Value
}

// Of is the priority class of a request with headers h: 1 if the rule
// marks it, else 0.
func (p PriorityRule) Of(h http.Header) int {
	if p.Header == "" {
		return 0
	}
	v := strings.TrimSpace(h.Get(p.Header))
	if v == "" || (p.Value != "" && v != p.Value) {
		return 0
	}
	return 1
}

// Class is why a ticket was picked.
type Class int

// The classes, in the order Pick tries them.
const (
	ClassStarved Class = iota
	ClassPriority
	ClassCached
	ClassUncached
	nClasses
)

func (c Class) String() string {
	return [...]string{"starved", "priority", "cached", "uncached"}[c]
}

// Stats are cumulative counters.
type Stats struct {
	// Picks counts the tickets picked, by class.
	Picks [nClasses]uint64
	// Holds counts Picks that left a free slot idle because every
	// waiting ticket's key was running.
	Holds uint64
	// Hits and Misses count the granted keyed tickets whose key the model
	// held, and did not.
	Hits, Misses uint64
	// Evictions counts keys the model evicted.
	Evictions uint64
}

// entry is one key in the model.
type entry struct {
	key     string
	elem    *list.Element // in Scheduler.order
	running int           // granted tickets of this key not yet released
	// waitMark == Scheduler.gen when the last Pick saw a ticket waiting
	// for this key.
	waitMark uint64
}

// Scheduler is the cohort order (see the package doc). Create it with New.
type Scheduler struct {
	cfg     Config
	now     func() time.Time
	entries map[string]*entry
	// order holds the entries, least recently finished (or loaded) first.
	// Every running key has an entry: Granted adds it and only idle
	// entries are evicted.
	order list.List
	gen   uint64

	picks                          [nClasses]atomic.Uint64
	holds, hits, misses, evictions atomic.Uint64
}

// The queue calls these methods.
var _ queue.Scheduler = (*Scheduler)(nil)

// New returns a Scheduler for cfg.
func New(cfg Config) (*Scheduler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Scheduler{cfg: cfg, now: now, entries: map[string]*entry{}}, nil
}

// ErrNotGranted is a programming error (a panic): Released with a keyed
// ticket the scheduler never saw granted.
var ErrNotGranted = errors.New("cohort: released a ticket that was not granted")

// Pick implements queue.Scheduler.
func (s *Scheduler) Pick(w *queue.Waiting) *queue.Ticket {
	s.gen++
	now, maxWait := s.now().UnixNano(), int64(s.cfg.MaxWait)
	var starved, high, cached, uncached *queue.Ticket
	for t := w.Front(); t != nil; t = w.Next(t) {
		k := t.Affinity
		e := s.entries[k]
		if k != "" {
			if e != nil {
				e.waitMark = s.gen
			}
			if e != nil && e.running > 0 {
				continue // one key never runs twice at once
			}
		}
		if starved == nil && now-t.Key > maxWait {
			starved = t // the first eligible in arrival order: the oldest
		}
		if t.Priority > 0 && (high == nil || t.Priority > high.Priority) {
			high = t
		}
		if k == "" || e != nil {
			if cached == nil {
				cached = t
			}
		} else if uncached == nil {
			uncached = t
		}
	}
	for c, t := range [...]*queue.Ticket{starved, high, cached, uncached} {
		if t != nil {
			s.picks[c].Add(1)
			return t
		}
	}
	s.holds.Add(1)
	return nil
}

// Granted implements queue.Scheduler: t's key is running and in the model.
func (s *Scheduler) Granted(t *queue.Ticket) {
	k := t.Affinity
	if k == "" {
		return
	}
	if e := s.entries[k]; e != nil {
		s.hits.Add(1)
		e.running++
		return
	}
	s.misses.Add(1)
	for len(s.entries) >= s.cfg.Capacity && s.evict() {
	}
	e := &entry{key: k, running: 1}
	e.elem = s.order.PushBack(e)
	s.entries[k] = e
}

// Released implements queue.Scheduler: t's key finished; it becomes the
// most recently finished entry.
func (s *Scheduler) Released(t *queue.Ticket) {
	k := t.Affinity
	if k == "" {
		return
	}
	e := s.entries[k]
	if e == nil || e.running <= 0 {
		panic(ErrNotGranted)
	}
	e.running--
	s.order.MoveToBack(e.elem)
}

// evict removes one entry by the paper's rule, reporting whether it
// found one: the least recently finished idle entry, else the most recently
// finished entry that tickets wait for; never a running one. "Waiting" is
// as the last Pick saw it.
func (s *Scheduler) evict() bool {
	for el := s.order.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*entry); e.running == 0 && e.waitMark != s.gen {
			s.drop(e)
			return true
		}
	}
	for el := s.order.Back(); el != nil; el = el.Prev() {
		if e := el.Value.(*entry); e.running == 0 {
			s.drop(e)
			return true
		}
	}
	return false
}

func (s *Scheduler) drop(e *entry) {
	s.order.Remove(e.elem)
	delete(s.entries, e.key)
	s.evictions.Add(1)
}

// Cached lists the keys the model holds, least recently finished first
// (for tests and status pages; O(n), call it under the queue's lock or
// when the queue is idle).
func (s *Scheduler) Cached() []string {
	out := make([]string, 0, len(s.entries))
	for el := s.order.Front(); el != nil; el = el.Next() {
		out = append(out, el.Value.(*entry).key)
	}
	return out
}

// Stats returns the counters. Safe from any goroutine.
func (s *Scheduler) Stats() Stats {
	var st Stats
	for c := range nClasses {
		st.Picks[c] = s.picks[c].Load()
	}
	st.Holds, st.Hits, st.Misses, st.Evictions = s.holds.Load(), s.hits.Load(), s.misses.Load(), s.evictions.Load()
	return st
}
