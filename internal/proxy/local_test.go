package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // "" for valid; else the flag the message names
	}{
		// Defaults plus a node name are valid.
		{"defaults", func(*Config) {}, ""},
		// Every node has a name.
		{"no name", func(c *Config) { c.NodeName = "" }, "node name"},
		// The app URL must be http(s) with a host.
		{"app without scheme", func(c *Config) { c.App = "127.0.0.1:9000" }, "--app"},
		{"app with other scheme", func(c *Config) { c.App = "ftp://h:1" }, "--app"},
		// Body limits must be ordered.
		{"negative max body", func(c *Config) { c.MaxBody = -1 }, "--max-body"},
		{"transfer body above max body", func(c *Config) { c.MaxTransferBody = c.MaxBody + 1 }, "--max-transfer-body"},
		// Placement is arrival or tail.
		{"tail placement", func(c *Config) { c.Placement = "tail" }, ""},
		{"unknown placement", func(c *Config) { c.Placement = "head" }, "--placement"},
		// Negative hops and retry advice make no sense.
		{"negative hops", func(c *Config) { c.MaxHops = -1 }, "--max-hops"},
		{"negative retry-after", func(c *Config) { c.RetryAfter = -time.Second }, "--retry-after"},
		// Every transfer is bounded in time.
		{"zero transfer timeout", func(c *Config) { c.TransferTimeout = 0 }, "--transfer-timeout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			c.NodeName = "n"
			tc.mutate(&c)
			if tc.wantErr == "" {
				assert.NoError(t, c.Validate())
			} else {
				assert.ErrorContains(t, c.Validate(), tc.wantErr)
			}
		})
	}
}

// TestLocalForwardingHeaders: the app sees X-Forwarded-*, the client's
// Host, end-to-end headers, the body, and no hop-by-hop headers; the client
// gets the app's answer with its trailers.
func TestLocalForwardingHeaders(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{})
	c := newHTTPClient(t)
	r := newReq(t, context.Background(), http.MethodPost, n.front.URL, "/echo?q=1", "local-1", strings.NewReader("hello"))
	r.Host = "front.example"
	r.Header.Set("Connection", "keep-alive, X-Hop")
	r.Header.Set("X-Hop", "secret")
	r.Header.Set("Keep-Alive", "timeout=5")
	r.Header.Set("Proxy-Authorization", "Basic eA==")
	r.Header.Set("Upgrade-Insecure-Requests", "1") // end-to-end despite its name
	r.Header.Set("X-End", "1")

	res := await(t, goDo(c, r))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))
	assert.Equal(t, "node-a POST 5", string(res.body))
	assert.Equal(t, "5", res.resp.Trailer.Get("X-Sum"), "trailers are kept")

	got, ok := n.app.request("local-1")
	require.True(t, ok)
	assert.Equal(t, "front.example", got.Host, "Host is preserved")
	assert.Equal(t, "/echo?q=1", got.Path)
	assert.Equal(t, "hello", string(got.Body))
	assert.Equal(t, "127.0.0.1", got.Header.Get("X-Forwarded-For"))
	assert.Equal(t, "http", got.Header.Get("X-Forwarded-Proto"))
	assert.Equal(t, "front.example", got.Header.Get("X-Forwarded-Host"))
	assert.Equal(t, "1", got.Header.Get("X-End"))
	assert.Equal(t, "1", got.Header.Get("Upgrade-Insecure-Requests"))
	for _, h := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization"} {
		assert.Empty(t, got.Header.Values(h), "hop-by-hop header %s reached the app", h)
	}
	for _, v := range got.Header.Values("Connection") {
		assert.NotContains(t, strings.ToLower(v), "x-hop")
	}
}

// TestLocalStreaming: the app's first flushed chunk reaches the client
// while the app is still running.
func TestLocalStreaming(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{})
	c := newHTTPClient(t)
	resp, err := c.Do(newReq(t, context.Background(), http.MethodGet, n.front.URL, "/stream", "s1", nil))
	require.NoError(t, err)
	defer resp.Body.Close()

	first := make(chan string, 1)
	go func() {
		buf := make([]byte, len("first"))
		_, err := io.ReadFull(resp.Body, buf)
		if err != nil {
			first <- "error: " + err.Error()
			return
		}
		first <- string(buf)
	}()
	select {
	case got := <-first:
		assert.Equal(t, "first", got)
	case <-time.After(waitLimit):
		t.Fatal("the first chunk did not reach the client while the app was running")
	}
	n.app.releaseAll()
	rest, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "second", string(rest))
}

// TestLocalAppCutOff: an app answer that breaks off mid-body reaches the
// client as a broken response, not a clean short one.
func TestLocalAppCutOff(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{})
	res := await(t, goDo(newHTTPClient(t), newReq(t, context.Background(), http.MethodGet, n.front.URL, "/cut", "cut-1", nil)))
	require.Error(t, res.err, "client must see the answer as broken")
}

func TestQueueFull(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{queue: queue.Config{Concurrency: 1, Limit: 1, Timeout: 3 * waitLimit}})
	c := newHTTPClient(t)
	holder := hold(t, c, n, "holder")
	w1 := goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/", "w1", nil))
	eventually(t, func() bool { return n.q.Waiting() == 1 }, "w1 never queued")

	res := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/", "over", nil)))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusServiceUnavailable, res.resp.StatusCode)
	assert.Equal(t, "1", res.resp.Header.Get("Retry-After"))
	assert.Contains(t, res.resp.Header.Get("X-Swd-Error"), "queue full")
	assert.Zero(t, n.app.count("over"))

	n.app.releaseAll()
	for _, ch := range []<-chan result{holder, w1} {
		r := await(t, ch)
		require.NoError(t, r.err)
		assert.Equal(t, http.StatusOK, r.resp.StatusCode)
	}
}

func TestQueueTimeout(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{queue: queue.Config{Concurrency: 1, Limit: 10, Timeout: 50 * time.Millisecond}})
	c := newHTTPClient(t)
	holder := goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/hold", "holder", nil))
	eventually(t, func() bool { return n.app.count("holder") == 1 }, "holder never reached the app")

	res := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/", "late", nil)))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusServiceUnavailable, res.resp.StatusCode)
	assert.Equal(t, "1", res.resp.Header.Get("Retry-After"))
	assert.Contains(t, res.resp.Header.Get("X-Swd-Error"), "queue timeout")
	assert.Zero(t, n.app.count("late"))
	n.app.releaseAll()
	require.NoError(t, await(t, holder).err)
}

// TestClientGoneWhileQueued: a client that disconnects while waiting never
// reaches the app, and its place is freed.
func TestClientGoneWhileQueued(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, n, "holder")
	ctx, cancel := context.WithCancel(context.Background())
	gone := goDo(c, newReq(t, ctx, http.MethodGet, n.front.URL, "/", "gone", nil))
	eventually(t, func() bool { return n.q.Waiting() == 1 }, "request never queued")
	cancel()
	assert.Error(t, await(t, gone).err)
	eventually(t, func() bool { return n.q.Waiting() == 0 }, "abandoned request still queued")

	n.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	after := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, n.front.URL, "/", "after", nil)))
	require.NoError(t, after.err)
	assert.Equal(t, http.StatusOK, after.resp.StatusCode)
	assert.Zero(t, n.app.count("gone"), "a request whose client left reached the app")
	assert.Equal(t, 2, n.app.total(), "only holder and after reached the app")
}

// chunked hides a reader's length so the client sends it chunked.
type chunked struct{ r io.Reader }

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p) }

func TestBodyTooLarge(t *testing.T) {
	const maxBody = 1024
	tests := []struct {
		name        string
		maxTransfer int64
		chunked     bool
		// appMaySee: when the body streams past MaxTransferBody, the app
		// has started reading it before the limit is hit.
		appMaySee bool
	}{
		// Declared too large: refused before anything is read.
		{"content-length", 512, false, false},
		// Chunked, all of it bufferable: refused while buffering.
		{"chunked, buffered", maxBody, true, false},
		// Chunked, streaming to the app past MaxTransferBody: the limit
		// hits while the app reads, and the answer is still 413.
		{"chunked, streamed", 512, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // the 413s wait out net/http's lingering close
			n := newNode(t, "node-a", nodeOpts{cfg: func(c *Config) { c.MaxBody = maxBody; c.MaxTransferBody = tc.maxTransfer }})
			var body io.Reader = bytes.NewReader(bytes.Repeat([]byte("x"), 2*maxBody))
			if tc.chunked {
				body = chunked{body}
			}
			r := newReq(t, context.Background(), http.MethodPost, n.front.URL, "/", "big", body)
			if tc.chunked {
				r.ContentLength = -1 // unknown: sent chunked
			}
			res := await(t, goDo(newHTTPClient(t), r))
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusRequestEntityTooLarge, res.resp.StatusCode)
			assert.Zero(t, n.app.count("big"), "the app never completes reading a too-large body")
			if !tc.appMaySee {
				assert.Zero(t, n.app.total())
			}
		})
	}
}

// TestSpooledBodyTransferred: a body larger than MaxTransferBody (spooled
// to a file, and larger than one gRPC message) moves to an idle peer by
// ForwardStream and the peer's app gets exactly its bytes; a peer that
// cannot hold it refuses before taking it, and the request is served where
// it is.
func TestSpooledBodyTransferred(t *testing.T) {
	const size = 6 << 20 // above the 4 MiB gRPC message limit
	tests := []struct {
		name    string
		chunked bool
		peer    func(c *Config) // node-b's settings
		served  string          // the node whose app serves it
	}{
		// Declared length above MaxTransferBody: moves.
		{"content-length", false, nil, "node-b"},
		// Chunked: found out while buffering; moves all the same.
		{"chunked", true, nil, "node-b"},
		// The peer's spool budget cannot hold it: refused, served here.
		{"peer spool budget full", false, func(c *Config) { c.MaxSpoolBytes = 1 << 20 }, "node-a"},
		// The peer's --max-body is smaller: refused, served here.
		{"peer max body smaller", false, func(c *Config) { c.MaxBody = 1 << 20 }, "node-a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			big := func(c *Config) { c.MaxBody = 8 << 20; c.MaxTransferBody = 64 << 10 }
			peer := func(c *Config) {
				big(c)
				if tc.peer != nil {
					tc.peer(c)
				}
			}
			na, nb := pair(t, nodeOpts{cfg: big}, nodeOpts{cfg: peer})
			c := newHTTPClient(t)
			holder := hold(t, c, na, "holder")
			payload := make([]byte, size)
			_, _ = rand.NewChaCha8([32]byte{byte(len(tc.name))}).Read(payload)
			var body io.Reader = bytes.NewReader(payload)
			if tc.chunked {
				body = chunked{body}
			}
			r := newReq(t, context.Background(), http.MethodPost, na.front.URL, "/", "big", body)
			if tc.chunked {
				r.ContentLength = -1 // unknown: sent chunked
			}
			res := goDo(c, r)
			eventually(t, func() bool { return na.q.Waiting() == 1 }, "big never queued")
			// Movable, with its whole size for the transfer-cost rule (its
			// size class), also when it came chunked.
			mv := na.q.Movable(1)
			require.Len(t, mv, 1, "a spooled body is transferable")
			assert.EqualValues(t, size, mv[0].Size)
			require.Equal(t, 1, na.q.HandOff(1, "node-b"))
			if tc.served == "node-a" {
				// Refused by node-b: back in node-a's queue, behind the holder.
				eventually(t, func() bool { return na.q.Waiting() == 1 }, "big never put back")
			}
			na.app.releaseAll()
			require.NoError(t, await(t, holder).err)
			got := await(t, res)
			require.NoError(t, got.err)
			assert.Equal(t, http.StatusOK, got.resp.StatusCode)
			assert.Equal(t, fmt.Sprintf("%s POST %d", tc.served, size), string(got.body))
			app, other := na.app, nb.app
			if tc.served == "node-b" {
				app, other = nb.app, na.app
			}
			seen, ok := app.request("big")
			require.True(t, ok)
			assert.Equal(t, sha256.Sum256(payload), sha256.Sum256(seen.Body), "the app got the exact bytes")
			assert.Equal(t, 1, app.count("big"))
			assert.Zero(t, other.count("big"))
		})
	}
}

func TestConnectRefused(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{})
	rec := httptest.NewRecorder()
	n.h.ServeHTTP(rec, httptest.NewRequest(http.MethodConnect, "front.example:443", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Zero(t, n.app.total())
	assert.Zero(t, n.q.Load())
}
