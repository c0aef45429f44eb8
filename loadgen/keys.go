package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/swd-project/swd/internal/affinity"
)

// KeySpec is a keyed workload: every request carries a user key, drawn
// from N keys, for key affinity and cache-aware order (paper 000;
// docs/affinity.md). The zero value (N = 0) sends no keys.
type KeySpec struct {
	// N is how many distinct keys there are ("user-0" .. "user-<N-1>").
	N int
	// Dist is how keys are drawn: "uniform", or "zipf" (key k with
	// probability proportional to 1/(k+1)^ZipfS: a few hot keys).
	Dist string
	// ZipfS is the zipf exponent, above 1.
	ZipfS float64
	// Header is the header the key goes in (the apps' cache reads it, and
	// HAProxy's hash balancing).
	Header string
	// Source, if set, is also where the key is put: swd's --affinity when it
	// is a cookie (a header source is Header itself).
	Source affinity.Source
}

// DefaultKeySpec is no keys; when N is set, uniform keys in X-User.
func DefaultKeySpec() KeySpec { return KeySpec{Dist: "uniform", ZipfS: 1.1, Header: "X-User"} }

// Validate reports the first problem with k.
func (k KeySpec) Validate() error {
	switch {
	case k.N < 0:
		return fmt.Errorf("--keys must be 0 (no keys) or more, got %d", k.N)
	case k.N == 0:
		return nil
	case k.Dist != "uniform" && k.Dist != "zipf":
		return fmt.Errorf("--key-dist must be uniform or zipf, got %q", k.Dist)
	case k.Dist == "zipf" && (!(k.ZipfS > 1) || math.IsInf(k.ZipfS, 0)):
		return fmt.Errorf("--key-zipf-s must be a number above 1, got %v", k.ZipfS)
	case k.Header == "" || strings.ContainsAny(k.Header, " \t\r\n:"):
		return fmt.Errorf("--key-header %q is not a header name", k.Header)
	}
	return nil
}

// KeyName is the name of key i.
func KeyName(i int) string { return "user-" + strconv.Itoa(i) }

// Draw returns the key index of each of n requests, drawn with seed: the
// same arguments always give the same keys. It returns nil for N = 0.
func (k KeySpec) Draw(n int, seed uint64) []int {
	if k.N == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(seed^0x6b657973, seed+0x5eed))
	out := make([]int, n)
	if k.Dist == "zipf" {
		z := rand.NewZipf(rng, k.ZipfS, 1, uint64(k.N-1))
		for i := range out {
			out[i] = int(z.Uint64())
		}
		return out
	}
	for i := range out {
		out[i] = rng.IntN(k.N)
	}
	return out
}

// set puts key i into h: in Header, and where Source says if that is a
// cookie.
func (k KeySpec) set(h http.Header, i int) {
	name := KeyName(i)
	h.Set(k.Header, name)
	if k.Source.Kind == affinity.KindCookie {
		k.Source.Set(h, name)
	}
}

// CacheStats are cache-mode lookups counted by apps (dummyapp --cache-size)
// over a run's measured window.
type CacheStats struct {
	Hits, Misses uint64
}

// HitRatio is Hits / (Hits + Misses), NaN with no lookups.
func (c CacheStats) HitRatio() float64 {
	if c.Hits+c.Misses == 0 {
		return math.NaN()
	}
	return float64(c.Hits) / float64(c.Hits+c.Misses)
}

// appStats is the part of dummyapp's GET /stats a run reads.
type appStats struct {
	CacheHits   uint64 `json:"cache_hits"`
	CacheMisses uint64 `json:"cache_misses"`
}

// ReadCacheStats sums the cache counters of the apps at addrs (host:port)
// from their GET /stats.
func ReadCacheStats(ctx context.Context, addrs []string) (CacheStats, error) {
	var sum CacheStats
	c := &http.Client{Timeout: 5 * time.Second}
	for _, a := range addrs {
		base, err := NormalizeBase(a)
		if err != nil {
			return sum, err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/stats", nil)
		if err != nil {
			return sum, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return sum, fmt.Errorf("read %s/stats: %w", base, err)
		}
		var st appStats
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errors.New(resp.Status)
		}
		if err != nil {
			return sum, fmt.Errorf("read %s/stats: %w", base, err)
		}
		sum.Hits += st.CacheHits
		sum.Misses += st.CacheMisses
	}
	return sum, nil
}
