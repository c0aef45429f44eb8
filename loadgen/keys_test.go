package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/dummyapp"
)

func TestKeySpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*KeySpec)
		err  string
	}{
		// No keys: nothing else is checked.
		{"off", func(k *KeySpec) { k.Dist = "bogus" }, ""},
		// Uniform and zipf keys.
		{"uniform", func(k *KeySpec) { k.N = 10 }, ""},
		{"zipf", func(k *KeySpec) { k.N, k.Dist = 10, "zipf" }, ""},
		// A negative count.
		{"negative", func(k *KeySpec) { k.N = -1 }, "--keys"},
		// An unknown distribution.
		{"dist", func(k *KeySpec) { k.N, k.Dist = 10, "pareto" }, "--key-dist"},
		// Zipf needs s > 1.
		{"zipf s", func(k *KeySpec) { k.N, k.Dist, k.ZipfS = 10, "zipf", 1 }, "--key-zipf-s"},
		// The header must be a header name.
		{"header", func(k *KeySpec) { k.N, k.Header = 10, "a b" }, "--key-header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := DefaultKeySpec()
			tc.mod(&k)
			err := k.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// TestKeyDraw: the same seed gives the same keys; uniform keys are drawn
// about equally often; zipf keys fall off with their rank.
func TestKeyDraw(t *testing.T) {
	u := DefaultKeySpec()
	u.N = 20
	a, b := u.Draw(40000, 1), u.Draw(40000, 1)
	require.Equal(t, a, b, "deterministic")
	assert.NotEqual(t, a, u.Draw(40000, 2), "another seed, other keys")
	count := make([]int, u.N)
	for _, k := range a {
		require.True(t, k >= 0 && k < u.N)
		count[k]++
	}
	for k, c := range count {
		assert.InDelta(t, 2000, c, 300, "uniform key %d", k)
	}

	z := u
	z.Dist = "zipf"
	zc := make([]int, z.N)
	for _, k := range z.Draw(40000, 1) {
		require.True(t, k >= 0 && k < z.N)
		zc[k]++
	}
	assert.Greater(t, zc[0], zc[1])
	assert.Greater(t, zc[1], zc[4])
	assert.Greater(t, zc[4], zc[19])
	assert.Nil(t, DefaultKeySpec().Draw(10, 1), "no keys")
}

// TestTargeterKeyed: every request carries its key in the header, and in
// the cookie when swd's affinity reads a cookie.
func TestTargeterKeyed(t *testing.T) {
	s, err := NewSchedule(tiny, 100, 3, 0, 100e6)
	require.NoError(t, err)
	tg, err := NewTargeter(s, []string{"127.0.0.1:1"}, "/work")
	require.NoError(t, err)
	ks := DefaultKeySpec()
	ks.N, ks.Source = 5, affinity.Source{Kind: affinity.KindCookie, Name: "sid"}
	keys := ks.Draw(len(s.Arrivals), 3)
	require.Error(t, tg.Keyed(ks, keys[:1]), "one key per arrival")
	require.NoError(t, tg.Keyed(ks, keys))
	for i := range s.Arrivals {
		var tgt vegeta.Target
		require.NoError(t, tg.Target(&tgt))
		want := KeyName(keys[i])
		assert.Equal(t, want, tgt.Header.Get("X-User"))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header = tgt.Header
		assert.Equal(t, want, ks.Source.Key(r))
	}
}

// TestRunReportsHitRatio: a keyed run against cache-mode apps reports the
// lookups of its measured window.
func TestRunReportsHitRatio(t *testing.T) {
	var apps []string
	var targets []string
	for _, name := range []string{"a", "b"} {
		cfg := dummyapp.DefaultConfig()
		cfg.Mode, cfg.Name, cfg.CacheSize, cfg.MissMs = dummyapp.ModeSleep, name, 8, 1
		app, err := dummyapp.New(cfg, nil)
		require.NoError(t, err)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		targets = append(targets, srv.URL)
		apps = append(apps, strings.TrimPrefix(srv.URL, "http://"))
	}
	c := tinyRun(targets...)
	c.Keys.N, c.Apps = 4, apps
	res, err := Run(context.Background(), c)
	require.NoError(t, err)
	require.NoError(t, res.CacheErr)
	require.NotNil(t, res.Cache)
	lookups := res.Cache.Hits + res.Cache.Misses
	assert.Positive(t, lookups)
	assert.LessOrEqual(t, lookups, uint64(res.Sent), "at most one lookup per request")
	// Four keys fit in each app's cache: after the warm-up they all hit,
	// but for keys the warm-up did not bring to that app.
	assert.LessOrEqual(t, res.Cache.Misses, uint64(8))
	assert.Greater(t, res.Cache.HitRatio(), 0.5)
}

// TestReadCacheStatsErrors: an app that cannot be read is an error.
func TestReadCacheStatsErrors(t *testing.T) {
	bad := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(bad.Close)
	_, err := ReadCacheStats(context.Background(), []string{bad.URL})
	require.Error(t, err)
	_, err = ReadCacheStats(context.Background(), []string{"127.0.0.1:1"})
	require.Error(t, err)
}
