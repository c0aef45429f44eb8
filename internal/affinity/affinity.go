// Package affinity gives a keyed request a home node: the node whose
// application keeps that key's objects in its cache (paper 000, cache-aware
// cohort scheduling; docs/affinity.md).
//
// A request's key comes from a header or a cookie (Source). Its home is
// chosen by rendezvous (highest random weight) hashing over the ring's
// members: every member gets a score hash(key, member), and the home is the
// member with the highest score. Adding or removing one of n members moves
// only the keys whose highest score was on that member, about 1/n of them,
// and every node that sees the same members computes the same home.
//
// Bounded load, in the spirit of consistent hashing with bounded loads
// (Mirrokni, Thorup, Zadimoghaddam) and HAProxy's hash-balance-factor: a
// node is within the bound when its load index (requests waiting plus in
// service) is below
//
//	bound = ceil(c × (L + 1) / n) + slack
//
// where L is the sum of the known nodes' loads, n their number, c the
// Factor (≥ 1) and slack the Slack (requests). The +1 counts the request
// being placed, as HAProxy does. A keyed request is placed on the first node
// of its key's rendezvous order (its home first) that is known and within
// the bound; only when none is, on its home regardless. Unknown nodes (stale
// gossip, ejected peers) are skipped, which is the same as removing them
// from the hash: their keys go to each key's next node, and come back when
// they do.
//
// Everything here is a pure function of its arguments: no clock, no random
// source, no shared state. Placement is an immutable snapshot.
//
// Concurrency: Sources, Configs and Placements are values, safe for
// concurrent use once built.
package affinity

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/swd-project/swd/internal/policy"
)

// MaxKeyLen is the longest key kept as it is; a longer one is replaced by
// a fixed-length digest of it, so a key's memory is bounded.
const MaxKeyLen = 128

// Source says where a request's key is.
type Source struct {
	// Kind is "header" or "cookie"; "" means no key (affinity off).
	Kind string
	// Name is the header's or the cookie's name.
	Name string
}

// The kinds of Source.
const (
	KindHeader = "header"
	KindCookie = "cookie"
)

// ParseSource parses "header:NAME" or "cookie:NAME". The empty string gives
// the zero Source (no key).
func ParseSource(s string) (Source, error) {
	if s == "" {
		return Source{}, nil
	}
	kind, name, ok := strings.Cut(s, ":")
	if !ok || (kind != KindHeader && kind != KindCookie) {
		return Source{}, fmt.Errorf("key source %q: want header:NAME or cookie:NAME", s)
	}
	if name == "" || strings.ContainsAny(name, " \t\r\n:;,=\"") {
		return Source{}, fmt.Errorf("key source %q: %s name %q is not a valid token", s, kind, name)
	}
	if kind == KindHeader {
		name = http.CanonicalHeaderKey(name)
	}
	return Source{Kind: kind, Name: name}, nil
}

// Enabled reports whether s names a key.
func (s Source) Enabled() bool { return s.Kind != "" }

// String is the form ParseSource reads ("" for none).
func (s Source) String() string {
	if !s.Enabled() {
		return ""
	}
	return s.Kind + ":" + s.Name
}

// Key returns r's key: the header's first value or the cookie's value,
// trimmed of spaces; "" when r has none. A key longer than MaxKeyLen is
// replaced by "#" and its 64-bit xxhash in hex.
func (s Source) Key(r *http.Request) string {
	var k string
	switch s.Kind {
	case KindHeader:
		k = r.Header.Get(s.Name)
	case KindCookie:
		if c, err := r.Cookie(s.Name); err == nil {
			k = c.Value
		}
	}
	k = strings.TrimSpace(k)
	if len(k) > MaxKeyLen {
		k = "#" + strconv.FormatUint(xxhash.Sum64String(k), 16)
	}
	return k
}

// Set puts key into h where s reads it (a header, or a Cookie header), for
// clients such as the load generator.
func (s Source) Set(h http.Header, key string) {
	switch s.Kind {
	case KindHeader:
		h.Set(s.Name, key)
	case KindCookie:
		h.Add("Cookie", (&http.Cookie{Name: s.Name, Value: key}).String())
	}
}

// Config is the affinity of a node: where keys come from and the bound on
// a home's load.
type Config struct {
	// Source is where a request's key is; zero means affinity is off.
	Source Source
	// Factor is c: a node holding c times the mean load (plus Slack) is
	// past the bound. At least 1.
	Factor float64
	// Slack is added to the bound, in requests, so that short queues at
	// low load never count as overload. At least 0.
	Slack int
}

// DefaultConfig is affinity off, with c = 1.25 (HAProxy's recommended
// hash-balance-factor 125) and a slack of 4 requests: a spilled request
// misses at the node it spills to and evicts one of that node's keys, which
// costs more than waiting behind a few requests at home
// (docs/affinity.md has the measurements).
func DefaultConfig() Config { return Config{Factor: 1.25, Slack: 4} }

// Validate reports the first problem with c; messages name swd's flags.
func (c Config) Validate() error {
	switch {
	case math.IsNaN(c.Factor) || math.IsInf(c.Factor, 0) || c.Factor < 1:
		return fmt.Errorf("--affinity-factor must be a number of at least 1, got %v", c.Factor)
	case c.Slack < 0:
		return fmt.Errorf("--affinity-slack must not be negative, got %d", c.Slack)
	case c.Source.Enabled() && c.Source.Kind != KindHeader && c.Source.Kind != KindCookie:
		return fmt.Errorf("--affinity %q: want header:NAME or cookie:NAME", c.Source)
	case c.Source.Kind == "" && c.Source.Name != "":
		return errors.New("--affinity: a name without a kind (want header:NAME or cookie:NAME)")
	}
	return nil
}

// KeyHash is the hash of a key that Score combines with a member's.
func KeyHash(key string) uint64 { return xxhash.Sum64String(key) }

// MemberHash is the hash of a member's name that Score combines with a
// key's.
func MemberHash(name string) uint64 { return xxhash.Sum64String(name) }

// Score is the rendezvous weight of a (key, member) pair from their hashes:
// the two combined and passed through a 64-bit finaliser (splitmix64), so
// that the scores of one key over different members behave as independent
// random draws.
func Score(keyHash, memberHash uint64) uint64 {
	z := keyHash ^ (memberHash * 0x9e3779b97f4a7c15)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Home returns the index in members of key's home: the member with the
// highest score (ties, which need equal 64-bit scores, go to the lower
// index). It returns -1 for no members.
func Home(key string, members []string) int {
	kh := KeyHash(key)
	best, bestScore := -1, uint64(0)
	for i, m := range members {
		if s := Score(kh, MemberHash(m)); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Placement places keyed requests on a view of the cluster: an immutable
// snapshot of which nodes are known, their loads and the bound.
type Placement struct {
	self   int
	nodes  []policy.NodeLoad
	hashes []uint64
	bound  int
}

// NewPlacement snapshots v (copying its nodes) for c's bound. The Self
// entry always counts as known.
func NewPlacement(v policy.View, c Config) Placement {
	p := Placement{self: v.Self, nodes: append([]policy.NodeLoad(nil), v.Nodes...), hashes: make([]uint64, len(v.Nodes))}
	total, known := 0, 0
	for i := range p.nodes {
		if i == v.Self {
			p.nodes[i].Known = true
		}
		p.hashes[i] = MemberHash(p.nodes[i].Name)
		if p.nodes[i].Known {
			total += max(p.nodes[i].Load, 0)
			known++
		}
	}
	if known > 0 {
		p.bound = int(math.Ceil(c.Factor*float64(total+1)/float64(known))) + c.Slack
	}
	return p
}

// Bound is the load a node must stay below to take keyed requests.
func (p Placement) Bound() int { return p.bound }

// Self is the ring ID the placement was built for.
func (p Placement) Self() int { return p.self }

// Name is node i's name.
func (p Placement) Name(i int) string { return p.nodes[i].Name }

// Index is the ring ID of the node called name, -1 if it is not in the
// placement.
func (p Placement) Index(name string) int {
	for i, n := range p.nodes {
		if n.Name == name {
			return i
		}
	}
	return -1
}

// Within reports whether node i is known and its load is below the bound.
func (p Placement) Within(i int) bool {
	return i >= 0 && i < len(p.nodes) && p.nodes[i].Known && p.nodes[i].Load < p.bound
}

// Home is key's home among the known nodes: the known node with the highest
// score (-1 when none is known).
func (p Placement) Home(key string) int {
	kh := KeyHash(key)
	best, bestScore := -1, uint64(0)
	for i, n := range p.nodes {
		if !n.Known {
			continue
		}
		if s := Score(kh, p.hashes[i]); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// Place is the ring ID of the node a request for key should run on: the
// first node of key's rendezvous order (highest score first) that is known
// and within the bound; when none is, key's home among the known nodes.
// It returns -1 only for a placement with no known node.
func (p Placement) Place(key string) int {
	kh := KeyHash(key)
	home := p.Home(key)
	if home < 0 || p.nodes[home].Load < p.bound {
		return home // the common case: one pass, no allocation
	}
	type cand struct {
		i     int
		score uint64
	}
	order := make([]cand, 0, len(p.nodes))
	for i, n := range p.nodes {
		if n.Known && i != home {
			order = append(order, cand{i, Score(kh, p.hashes[i])})
		}
	}
	slices.SortFunc(order, func(a, b cand) int { return cmp.Compare(b.score, a.score) })
	for _, c := range order {
		if p.nodes[c.i].Load < p.bound {
			return c.i
		}
	}
	return home
}

// MayMove is the rule for moving a waiting keyed request off this node
// (Self) to node to: only when the key's place is not here (its home is
// past the bound, or the request is not at its home), and only to the
// key's place or another node within the bound. Requests without a key are
// not this package's concern (the caller lets them move).
func (p Placement) MayMove(key string, to int) bool {
	if to == p.self || to < 0 || to >= len(p.nodes) {
		return false
	}
	place := p.Place(key)
	if place == p.self || place < 0 {
		return false
	}
	return to == place || p.Within(to)
}
