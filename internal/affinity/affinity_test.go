package affinity

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/policy"
)

func TestParseSource(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Source
		err      string
	}{
		// The empty string is affinity off.
		{"off", "", Source{}, ""},
		// A header name is canonicalised, as net/http stores it.
		{"header", "header:x-user", Source{KindHeader, "X-User"}, ""},
		// A cookie name is kept as given (cookie names are case-sensitive).
		{"cookie", "cookie:sid", Source{KindCookie, "sid"}, ""},
		// Another kind is refused.
		{"query", "query:u", Source{}, "want header:NAME or cookie:NAME"},
		// No colon is refused.
		{"bare", "X-User", Source{}, "want header:NAME or cookie:NAME"},
		// An empty name is refused.
		{"empty name", "header:", Source{}, "not a valid token"},
		// A name that could not be a token is refused.
		{"spaces", "cookie:a b", Source{}, "not a valid token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSource(tc.in)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			if tc.in != "" {
				assert.Equal(t, got, must(ParseSource(got.String())), "String is read back")
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestSourceKey(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen+1)
	for _, tc := range []struct {
		name string
		src  Source
		set  func(r *http.Request)
		want string
	}{
		// A header's value, trimmed.
		{"header", Source{KindHeader, "X-User"}, func(r *http.Request) { r.Header.Set("X-User", " u17 ") }, "u17"},
		// No header: no key.
		{"no header", Source{KindHeader, "X-User"}, func(*http.Request) {}, ""},
		// A cookie's value.
		{"cookie", Source{KindCookie, "sid"}, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "sid", Value: "abc"}) }, "abc"},
		// Another cookie is not the key.
		{"other cookie", Source{KindCookie, "sid"}, func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "x", Value: "abc"}) }, ""},
		// A key longer than MaxKeyLen becomes a short digest.
		{"long", Source{KindHeader, "X-User"}, func(r *http.Request) { r.Header.Set("X-User", long) }, "#"},
		// The zero Source reads nothing.
		{"off", Source{}, func(r *http.Request) { r.Header.Set("X-User", "u") }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			tc.set(r)
			got := tc.src.Key(r)
			if tc.want == "#" {
				assert.True(t, strings.HasPrefix(got, "#") && len(got) <= 17, "digest %q", got)
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestSourceSetRoundTrip: what Set writes, Key reads back.
func TestSourceSetRoundTrip(t *testing.T) {
	for _, src := range []Source{{KindHeader, "X-User"}, {KindCookie, "sid"}} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		src.Set(r.Header, "user-42")
		assert.Equal(t, "user-42", src.Key(r), src.String())
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		// The defaults are valid.
		{"default", func(*Config) {}, ""},
		// c below 1 would make every node overloaded at the mean.
		{"factor", func(c *Config) { c.Factor = 0.9 }, "--affinity-factor"},
		// A negative slack is refused.
		{"slack", func(c *Config) { c.Slack = -1 }, "--affinity-slack"},
		// A source with a name but no kind is refused.
		{"no kind", func(c *Config) { c.Source = Source{Name: "x"} }, "--affinity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

func names(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("node-%d", i)
	}
	return out
}

func keys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user-%d", i)
	}
	return out
}

// TestHashStabilityRemove is the property the issue asks for: removing one
// of n members moves exactly the keys that were at it (about 1/n of them)
// and no other key.
func TestHashStabilityRemove(t *testing.T) {
	ks := keys(10000)
	for n := 2; n <= 16; n++ {
		members := names(n)
		for gone := range n {
			rest := append(append([]string(nil), members[:gone]...), members[gone+1:]...)
			moved, wasThere := 0, 0
			for _, k := range ks {
				before := members[Home(k, members)]
				after := rest[Home(k, rest)]
				if before == members[gone] {
					wasThere++
				}
				if before != after {
					moved++
					require.Equal(t, members[gone], before, "n=%d: key %s moved although its home %s stayed", n, k, before)
				}
			}
			require.Equal(t, wasThere, moved, "n=%d: every key of the removed member moves", n)
			frac := float64(moved) / float64(len(ks))
			assert.InDelta(t, 1/float64(n), frac, 0.25/float64(n), "n=%d, removed %d: moved %.4f", n, gone, frac)
		}
	}
}

// TestHashStabilityAdd: adding a member moves about 1/(n+1) of the keys,
// every one of them to the new member.
func TestHashStabilityAdd(t *testing.T) {
	ks := keys(10000)
	for n := 1; n <= 16; n++ {
		members := names(n)
		grown := append(append([]string(nil), members...), "newcomer")
		moved := 0
		for _, k := range ks {
			before := members[Home(k, members)]
			after := grown[Home(k, grown)]
			if before != after {
				moved++
				require.Equal(t, "newcomer", after, "n=%d: key %s moved between old members", n, k)
			}
		}
		frac := float64(moved) / float64(len(ks))
		assert.InDelta(t, 1/float64(n+1), frac, 0.25/float64(n+1), "n=%d: moved %.4f", n, frac)
	}
}

// TestHashBalance: every member is home to about 1/n of the keys, and the
// order of the member list does not matter.
func TestHashBalance(t *testing.T) {
	ks := keys(20000)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{2, 3, 4, 8, 16, 64} {
		members := names(n)
		shuffled := append([]string(nil), members...)
		rng.Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		count := map[string]int{}
		for _, k := range ks {
			h := members[Home(k, members)]
			count[h]++
			require.Equal(t, h, shuffled[Home(k, shuffled)], "order of members matters for %s", k)
		}
		want := float64(len(ks)) / float64(n)
		for _, m := range members {
			assert.InDelta(t, want, float64(count[m]), 0.15*want, "n=%d: %s has %d keys", n, m, count[m])
		}
	}
	assert.Equal(t, -1, Home("k", nil))
}

// view builds a 4-node view (self node-0) with the given loads, all known.
func view(loads ...int) policy.View {
	v := policy.View{Self: 0}
	for i, l := range loads {
		v.Nodes = append(v.Nodes, policy.NodeLoad{Name: fmt.Sprintf("node-%d", i), Load: l, Concurrency: 1, Known: true})
	}
	return v
}

// keyHomedAt finds a key whose home among v's nodes is node i and whose
// second choice is node j (j < 0: any).
func keyHomedAt(t *testing.T, v policy.View, i, j int) string {
	t.Helper()
	all := make([]string, len(v.Nodes))
	for k, n := range v.Nodes {
		all[k] = n.Name
	}
	for k := range 100000 {
		key := fmt.Sprintf("key-%d", k)
		if Home(key, all) != i {
			continue
		}
		if j < 0 {
			return key
		}
		rest := append(append([]string(nil), all[:i]...), all[i+1:]...)
		second := Home(key, rest)
		if second >= i {
			second++
		}
		if second == j {
			return key
		}
	}
	t.Fatalf("no key homed at %d then %d", i, j)
	return ""
}

func TestBound(t *testing.T) {
	c := Config{Factor: 1.25, Slack: 2}
	for _, tc := range []struct {
		name  string
		v     policy.View
		bound int
	}{
		// Idle cluster: ceil(1.25 × 1 / 4) + 2 = 3.
		{"idle", view(0, 0, 0, 0), 3},
		// 20 requests on 4 nodes: ceil(1.25 × 21 / 4) + 2 = 7 + 2.
		{"busy", view(5, 5, 5, 5), 9},
		// Unknown nodes count neither in the sum nor in n: 10 on 2 known
		// nodes gives ceil(1.25 × 11 / 2) + 2 = 7 + 2.
		{"unknown", func() policy.View {
			v := view(5, 5, 100, 100)
			v.Nodes[2].Known, v.Nodes[3].Known = false, false
			return v
		}(), 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.bound, NewPlacement(tc.v, c).Bound())
		})
	}
	// HAProxy's own bound, slack 0: ceil(1.25 × (L+1) / n).
	assert.Equal(t, 7, NewPlacement(view(5, 5, 5, 5), Config{Factor: 1.25}).Bound())
}

func TestPlace(t *testing.T) {
	c := Config{Factor: 1.25, Slack: 0}
	base := view(1, 1, 1, 1) // bound ceil(1.25 × 5 / 4) = 2
	k12 := keyHomedAt(t, base, 1, 2)
	for _, tc := range []struct {
		name string
		v    policy.View
		want int
	}{
		// Home within the bound: home.
		{"home", view(1, 1, 1, 1), 1},
		// Home past the bound: the key's second choice.
		{"spill", view(0, 5, 0, 0), 2},
		// Every node but one past the bound (ceil(1.25 × 28 / 4) = 9):
		// that one.
		{"spill twice", view(0, 9, 9, 9), 0},
		// Every node past the bound is impossible with c ≥ 1 at the mean,
		// but a home with nothing known within stays home: one known node.
		{"alone", func() policy.View {
			v := view(0, 9, 9, 9)
			v.Nodes[0].Known = false // self is forced known below: use node 1 as self
			v.Self = 1
			v.Nodes[2].Known, v.Nodes[3].Known = false, false
			return v
		}(), 1},
		// An unknown home is skipped, as if removed: the second choice.
		{"home unknown", func() policy.View {
			v := view(1, 1, 1, 1)
			v.Nodes[1].Known = false
			return v
		}(), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlacement(tc.v, c)
			assert.Equal(t, tc.want, p.Place(k12), "bound %d", p.Bound())
		})
	}
	assert.Equal(t, -1, NewPlacement(policy.View{Self: -1}, c).Place("k"), "no known node")
}

// TestPlaceProperty: on random views, Place returns a known node, within
// the bound whenever any known node is, and the same node as the key's
// first node within the bound in the order of Home over shrinking sets.
func TestPlaceProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 2000 {
		n := 1 + rng.IntN(12)
		v := policy.View{Self: rng.IntN(n)}
		for i := range n {
			v.Nodes = append(v.Nodes, policy.NodeLoad{Name: fmt.Sprintf("n%d", i), Load: rng.IntN(12), Known: rng.IntN(5) > 0})
		}
		c := Config{Factor: 1 + rng.Float64(), Slack: rng.IntN(3)}
		p := NewPlacement(v, c)
		key := fmt.Sprintf("k%d", trial)
		got := p.Place(key)
		// Reference: remove nodes from the candidate set in rendezvous order.
		var cand []int
		for i, nl := range v.Nodes {
			if nl.Known || i == v.Self {
				cand = append(cand, i)
			}
		}
		want, home := -1, -1
		for len(cand) > 0 {
			nm := make([]string, len(cand))
			for k, i := range cand {
				nm[k] = v.Nodes[i].Name
			}
			best := cand[Home(key, nm)]
			if home < 0 {
				home = best
			}
			if v.Nodes[best].Load < p.Bound() {
				want = best
				break
			}
			cand = slicesDelete(cand, best)
		}
		if want < 0 {
			want = home
		}
		require.Equal(t, want, got, "trial %d", trial)
		require.Equal(t, home, p.Home(key), "trial %d", trial)
	}
}

func slicesDelete(s []int, v int) []int {
	out := s[:0:0]
	for _, x := range s {
		if x != v {
			out = append(out, x)
		}
	}
	return out
}

func TestMayMove(t *testing.T) {
	c := Config{Factor: 1.25, Slack: 0}
	v := view(1, 1, 1, 1)
	atSelf := keyHomedAt(t, v, 0, 2) // home is self (node-0), then node-2
	elsewhere := keyHomedAt(t, v, 1, 2)
	for _, tc := range []struct {
		name string
		v    policy.View
		key  string
		to   int
		want bool
	}{
		// Home here, within the bound: the key stays.
		{"home within", view(1, 1, 1, 1), atSelf, 2, false},
		// Home here but past the bound: it may go to its next choice...
		{"home past, to second", view(6, 0, 0, 0), atSelf, 2, true},
		// ... or to another node within the bound.
		{"home past, to other within", view(6, 0, 0, 0), atSelf, 3, true},
		// Not to a node past the bound that is not its place.
		{"home past, to loaded", view(6, 0, 0, 5), atSelf, 3, false},
		// A key whose place is another node may go there.
		{"not home, to place", view(1, 1, 1, 1), elsewhere, 1, true},
		// Never to itself or off the ring.
		{"self", view(6, 0, 0, 0), atSelf, 0, false},
		{"off ring", view(6, 0, 0, 0), atSelf, 9, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPlacement(tc.v, c)
			assert.Equal(t, tc.want, p.MayMove(tc.key, tc.to), "bound %d, place %d", p.Bound(), p.Place(tc.key))
		})
	}
}
