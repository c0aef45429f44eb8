package dummyapp

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/simplelru"
)

// HeaderCache says whether a /work request's key was in the cache: "hit"
// or "miss" (absent when the cache is off or the request has no key).
const HeaderCache = "X-Cache"

// cache is cache mode: an LRU of the keys requests carry (Config.CacheSize
// keys), standing in for an application that keeps per-user objects in
// memory (paper 000). A request whose key is missing pays Config.MissMs
// more service time (loading the object) and puts the key in, evicting the
// least recently used one when full. The key enters when its request starts,
// so a second request for it that starts meanwhile is a hit.
type cache struct {
	header string
	mu     sync.Mutex
	lru    *simplelru.LRU

	hits, misses atomic.Uint64
}

func newCache(size int, header string) *cache {
	lru, err := simplelru.NewLRU(size, nil)
	if err != nil { // only for size <= 0, which Validate refuses
		panic(err)
	}
	return &cache{header: header, lru: lru}
}

// access looks up r's key, inserting it on a miss. It reports the key ("" for
// none: the request is not counted) and whether it was a hit.
func (c *cache) access(r *http.Request) (key string, hit bool) {
	key = strings.TrimSpace(r.Header.Get(c.header))
	if key == "" {
		return "", false
	}
	c.mu.Lock()
	if _, hit = c.lru.Get(key); !hit {
		c.lru.Add(key, struct{}{})
	}
	c.mu.Unlock()
	if hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
	return key, hit
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
