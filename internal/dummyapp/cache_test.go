package dummyapp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func cacheApp(t *testing.T, size int, missMs float64) *App {
	t.Helper()
	c := sleepConfig()
	c.CacheSize, c.MissMs = size, missMs
	a, err := New(c, nil)
	require.NoError(t, err)
	return a
}

// work sends GET /work?ms=0 with key (none if "") and returns the answer.
func work(t *testing.T, a *App, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/work?ms=0", nil)
	if key != "" {
		r.Header.Set("X-User", key)
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	return w
}

// TestCacheLRU: hits and misses follow LRU replacement, each miss pays
// MissMs more service time, and /stats counts them.
func TestCacheLRU(t *testing.T) {
	a := cacheApp(t, 2, 5)
	for i, step := range []struct {
		key, want string
	}{
		{"A", "miss"}, // {A}
		{"B", "miss"}, // {A, B}
		{"A", "hit"},  // A most recent
		{"C", "miss"}, // evicts B, the least recently used
		{"B", "miss"}, // evicts A
		{"C", "hit"},
		{"A", "miss"}, // evicts B
		{"", ""},      // no key: not a cache access
	} {
		w := work(t, a, step.key)
		assert.Equal(t, step.want, w.Header().Get(HeaderCache), "step %d (%s)", i, step.key)
		spent, err := strconv.ParseFloat(w.Header().Get(HeaderServiceMs), 64)
		require.NoError(t, err)
		if step.want == "miss" {
			assert.GreaterOrEqual(t, spent, 5.0, "step %d: a miss spends MissMs", i)
		}
	}
	st := a.Stats()
	assert.Equal(t, uint64(2), st.CacheHits)
	assert.Equal(t, uint64(5), st.CacheMisses)
	assert.Equal(t, 2, st.CacheSize)
	assert.Equal(t, 2, st.CacheEntries)

	// /stats reports them; reset zeroes the counters, not the contents.
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/stats/reset", nil))
	var after Stats
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &after))
	assert.Zero(t, after.CacheHits+after.CacheMisses)
	assert.Equal(t, 2, after.CacheEntries)
	assert.Equal(t, "hit", work(t, a, "A").Header().Get(HeaderCache), "A stayed cached")
}

// TestCacheOff: without cache mode nothing is counted or marked, and
// /stats keeps its old shape.
func TestCacheOff(t *testing.T) {
	a := newSleepApp(t)
	assert.Empty(t, work(t, a, "A").Header().Get(HeaderCache))
	rec := httptest.NewRecorder()
	a.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/stats", nil))
	assert.NotContains(t, rec.Body.String(), "cache_")
}

func TestCacheConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		err  string
	}{
		// A negative size is refused.
		{"size", func(c *Config) { c.CacheSize = -1 }, "cache-size"},
		// A miss cannot cost more than a request may ask for.
		{"miss", func(c *Config) { c.CacheSize, c.MissMs = 10, c.MaxMs+1 }, "miss-ms"},
		// The key's header must be a header name.
		{"header", func(c *Config) { c.CacheSize, c.CacheHeader = 10, "" }, "cache-header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sleepConfig()
			tc.mod(&c)
			require.ErrorContains(t, c.Validate(), tc.err)
		})
	}
}
