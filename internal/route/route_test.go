package route

import (
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error, "" for valid
	}{
		// The defaults are valid.
		{"defaults", func(*Config) {}, ""},
		// Patterns in ServeMux syntax, with wildcards, are valid.
		{"patterns", func(c *Config) { c.Patterns = []string{"GET /items/{id}", "/static/", "POST /orders"} }, ""},
		// Learning nothing is allowed: every unmatched request is Other.
		{"no learning", func(c *Config) { c.MaxLearnt = 0 }, ""},
		{"negative learnt", func(c *Config) { c.MaxLearnt = -1 }, "must not be negative"},
		{"zero path length", func(c *Config) { c.MaxPathLen = 0 }, "must be positive"},
		// 4096 routes at most, patterns, Other and learnt together.
		{"too many", func(c *Config) { c.MaxLearnt = 4096 }, "exceed 4096"},
		{"empty pattern", func(c *Config) { c.Patterns = []string{" "} }, "empty pattern"},
		{"duplicate", func(c *Config) { c.Patterns = []string{"GET /a", "GET /a"} }, "duplicate"},
		// ServeMux refuses a pattern without a path; New must not panic.
		{"malformed", func(c *Config) { c.Patterns = []string{"GET"} }, "bad pattern"},
		// Two patterns matching the same requests with no precedence
		// between them conflict.
		{"conflict", func(c *Config) { c.Patterns = []string{"GET /a/{x}", "GET /{y}/b"} }, "bad pattern"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				_, err = New(c)
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			_, err = New(c)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestOf(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Patterns = []string{"GET /items/{id}", "/static/", "POST /orders"}
	cfg.MaxLearnt = 2
	cfg.MaxPathLen = 10
	tab, err := New(cfg)
	require.NoError(t, err)

	cases := []struct {
		method, target string
		want           string
	}{
		// A pattern with a wildcard names every item.
		{"GET", "/items/1", "GET /items/{id}"},
		{"GET", "/items/2?x=1", "GET /items/{id}"},
		// GET patterns also match HEAD (ServeMux's rule).
		{"HEAD", "/items/3", "GET /items/{id}"},
		// A pattern without a method matches every method; "/static/"
		// matches the whole subtree.
		{"DELETE", "/static/css/a.css", "/static/"},
		{"POST", "/orders", "POST /orders"},
		// Unmatched requests are learnt by method and path (query left out).
		{"GET", "/login?next=/", "GET /login"},
		{"PUT", "/orders", "PUT /orders"},
		// The two learnt routes are the cap: a third method+path is Other.
		{"GET", "/other", OtherName},
		// Known learnt routes keep their route after the cap.
		{"GET", "/login", "GET /login"},
		// A path longer than MaxPathLen is never learnt.
		{"GET", "/a/very/long/path", OtherName},
	}
	for _, tc := range cases {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		id := tab.Of(r)
		assert.Equal(t, tc.want, tab.Name(id), "%s %s", tc.method, tc.target)
	}
	// IDs: patterns in order, then Other, then learnt routes in order.
	assert.Equal(t, []string{"GET /items/{id}", "/static/", "POST /orders", OtherName, "GET /login", "PUT /orders"}, tab.Names())
	assert.Equal(t, ID(3), tab.Other())
	assert.Equal(t, 6, tab.Len())
	assert.Equal(t, 6, tab.Max())
	assert.Equal(t, "", tab.Name(99), "an ID never handed out names nothing")
	assert.Equal(t, "", tab.Name(-1))
}

// TestLearningIsBounded is a property test: whatever paths many goroutines
// send, the table never holds more than Max routes, IDs are dense, every ID
// handed out has a name, and a method+path keeps one ID for the table's
// life.
func TestLearningIsBounded(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		cfg := DefaultConfig()
		cfg.MaxLearnt = int(seed % 7)
		tab, err := New(cfg)
		require.NoError(t, err)
		var mu sync.Mutex
		seen := map[string]ID{}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				for range 200 {
					path := fmt.Sprintf("/p%d", rng.IntN(12))
					id := tab.Of(httptest.NewRequest("GET", path, nil))
					name := tab.Name(id)
					assert.NotEmpty(t, name, "every ID handed out has a name")
					if name == OtherName {
						continue
					}
					mu.Lock()
					if prev, ok := seen[path]; ok {
						assert.Equal(t, prev, id, "seed %d: %s changed route", seed, path)
					}
					seen[path] = id
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		assert.LessOrEqual(t, tab.Len(), tab.Max(), "seed %d", seed)
		assert.Equal(t, 1+min(cfg.MaxLearnt, 12), tab.Len(), "seed %d: the cap is reached exactly (12 distinct paths)", seed)
		for i, n := range tab.Names() {
			assert.Equal(t, n, tab.Name(ID(i)))
		}
	}
}
