package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// rawConn opens a TCP connection to an httptest server.
func rawConn(t *testing.T, base string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	c, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// stalledUpload sends a request head announcing length bytes and only
// sent of them.
func stalledUpload(t *testing.T, base string, length, sent int) net.Conn {
	t.Helper()
	c := rawConn(t, base)
	_, err := fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", length, strings.Repeat("a", sent))
	require.NoError(t, err)
	return c
}

// A slow upload holds its connection, never the app slot: with m = 1 and
// one client stalled after its head (Content-Length 2,000,000, no body),
// another request is served at once; the stalled one gets 408 once no byte
// came for the body idle timeout. Issue 17, item 3.
func TestSlowUploadHoldsNoSlot(t *testing.T) {
	cases := []struct {
		name string
		idle time.Duration // --body-idle-timeout
	}{
		// The upload stays stalled for the whole test: a GET is served.
		{"stalled upload, GET served", 3 * waitLimit},
		// The upload is cut off with 408 after 200 ms without a byte.
		{"stalled upload, 408", 200 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			qc := testQueue()
			qc.Timeout = 2 * time.Second
			n := newNode(t, "node-a", nodeOpts{queue: qc, cfg: func(c *Config) { c.BodyIdleTimeout = tc.idle }})
			c := stalledUpload(t, n.front.URL, 2_000_000, 0)
			res := await(t, goDo(newHTTPClient(t), newReq(t, context.Background(), http.MethodGet, n.front.URL, "/x", "get", nil)))
			require.NoError(t, res.err)
			assert.Equal(t, http.StatusOK, res.resp.StatusCode, "a request waited behind a slow upload: %s", res.body)
			if tc.idle > time.Second {
				return
			}
			require.NoError(t, c.SetReadDeadline(time.Now().Add(waitLimit)))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			require.NoError(t, err)
			assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode)
			assert.Zero(t, n.app.total()-1, "the stalled upload reached the app")
		})
	}
}

// Buffered bodies share one memory budget: while one stalled upload holds
// 600 KiB of a 1 MiB budget, a second 600 KiB body is refused with 503
// instead of buffered; once the first is gone, the budget is whole again.
// Issue 17, item 4.
func TestBodyBudget(t *testing.T) {
	n := newNode(t, "node-a", nodeOpts{cfg: func(c *Config) {
		c.MaxTransferBody = 600 << 10
		c.MaxBufferedBytes = 1 << 20
	}})
	c := stalledUpload(t, n.front.URL, 600<<10, 1)
	eventually(t, func() bool { return n.h.memBudget.used.Load() == 600<<10 }, "the stalled upload reserved no buffer")
	cl := newHTTPClient(t)
	body := bytes.Repeat([]byte("b"), 600<<10)
	res := await(t, goDo(cl, newReq(t, context.Background(), http.MethodPost, n.front.URL, "/x", "second", bytes.NewReader(body))))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusServiceUnavailable, res.resp.StatusCode)
	assert.Contains(t, res.resp.Header.Get("X-Swd-Error"), "buffers full")
	require.NoError(t, c.Close())
	eventually(t, func() bool { return n.h.memBudget.used.Load() == 0 }, "the budget was not given back")
	res = await(t, goDo(cl, newReq(t, context.Background(), http.MethodPost, n.front.URL, "/x", "third", bytes.NewReader(body))))
	require.NoError(t, res.err)
	assert.Equal(t, http.StatusOK, res.resp.StatusCode)
	assert.Equal(t, "node-a POST 614400", string(res.body))
}

// A body of known length is received into one buffer of exactly that
// length (no doubling). Issue 17, item 4.
func TestBodyBufferSizedFromContentLength(t *testing.T) {
	for _, size := range []int{1, 511, 4096, 300_000, 1 << 20} {
		n := newNode(t, "node-a", nodeOpts{})
		r := httptest.NewRequest(http.MethodPost, "/x", bytes.NewReader(make([]byte, size)))
		p := &pending{r: r}
		_, err := n.h.readBody(httptest.NewRecorder(), r, p)
		require.NoError(t, err)
		assert.Len(t, p.body, size)
		assert.Equal(t, size, cap(p.body), "buffer for %d bytes", size)
		n.h.free(&p.held)
	}
}

// Bodies beyond --max-transfer-body are received whole into a spool file
// (known length and chunked), reach the app intact, leave no file behind,
// and count against --max-spool-bytes; spool directories of processes that
// are gone are removed when a handler starts.
func TestLargeBodiesSpooled(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(spoolRoot(dir), "2147483646-old")
	require.NoError(t, os.MkdirAll(stale, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(stale, "body-1"), []byte("left by a crash"), 0o600))
	n := newNode(t, "node-a", nodeOpts{cfg: func(c *Config) {
		c.SpoolDir = dir
		c.MaxSpoolBytes = 4 << 20
	}})
	_, err := os.Stat(stale)
	assert.ErrorIs(t, err, os.ErrNotExist, "the dead process's spool directory is still there")
	cl := newHTTPClient(t)
	body := bytes.Repeat([]byte("s"), 3<<20)
	cases := []struct {
		name   string
		body   io.Reader
		status int
		answer string
	}{
		// Known length, 3 MiB: spooled, served whole.
		{"content-length", bytes.NewReader(body), http.StatusOK, "node-a POST 3145728"},
		// Chunked, 3 MiB: in memory up to 1 MiB, then spooled.
		{"chunked", io.MultiReader(bytes.NewReader(body)), http.StatusOK, "node-a POST 3145728"},
		// 5 MiB is more than the whole spool budget: 503.
		{"over the spool budget", bytes.NewReader(bytes.Repeat([]byte("s"), 5<<20)), http.StatusServiceUnavailable, ""},
	}
	for _, tc := range cases {
		res := await(t, goDo(cl, newReq(t, context.Background(), http.MethodPost, n.front.URL, "/x", tc.name, tc.body)))
		require.NoError(t, res.err, tc.name)
		assert.Equal(t, tc.status, res.resp.StatusCode, tc.name)
		if tc.answer != "" {
			assert.Equal(t, tc.answer, string(res.body), tc.name)
		}
		eventually(t, func() bool { return n.h.spoolBudget.used.Load() == 0 && n.h.memBudget.used.Load() == 0 },
			"%s: budgets not given back", tc.name)
	}
	dirs, err := os.ReadDir(spoolRoot(dir))
	require.NoError(t, err)
	for _, d := range dirs {
		files, err := os.ReadDir(filepath.Join(spoolRoot(dir), d.Name()))
		require.NoError(t, err)
		assert.Empty(t, files, "spool files left behind in %s", d.Name())
	}
}

// A queued request with a large body whose client left never reaches the
// app: its body was received before it queued, so the client's leaving is
// seen and the request leaves the queue. Issue 17, item 8.
func TestQueuedLargeBodyClientGone(t *testing.T) {
	var arrived atomic.Int64
	release := make(chan struct{})
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			arrived.Add(1)
		} else {
			<-release
		}
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(app.Close)
	q, err := queue.New(testQueue())
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.NodeName, cfg.App = "node-a", app.URL
	h, err := New(cfg, q, nil, peerMap{}, nil)
	require.NoError(t, err)
	front := httptest.NewServer(h)
	t.Cleanup(front.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	held := goDo(newHTTPClient(t), newReq(t, context.Background(), http.MethodGet, front.URL, "/hold", "", nil))
	eventually(t, func() bool { return q.InFlight() == 1 }, "the holder never got the slot")
	c := rawConn(t, front.URL)
	size := 3 << 19 // 1.5 MiB
	go func() {
		_, _ = fmt.Fprintf(c, "POST /big HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", size)
		_, _ = c.Write(bytes.Repeat([]byte("x"), size))
	}()
	eventually(t, func() bool { return q.Waiting() == 1 }, "the large request never queued")
	require.NoError(t, c.Close())
	eventually(t, func() bool { return q.Waiting() == 0 }, "the request of a client that left stayed queued")
	close(release)
	require.NoError(t, await(t, held).err)
	eventually(t, func() bool { return q.InFlight() == 0 && q.Waiting() == 0 }, "the queue never emptied")
	assert.Zero(t, arrived.Load(), "a request whose client left reached the app")
}
