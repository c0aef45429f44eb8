package proxy

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/queue"
)

// upgradeApp switches "Upgrade: test" requests to an echo connection and
// answers anything else with "ok".
func upgradeApp(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "test" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
		_ = brw.Flush()
		_, _ = io.Copy(c, brw) // echo until the client closes
	}))
	t.Cleanup(s.Close)
	return s
}

// An upgraded connection (a WebSocket) holds its app slot for its whole
// life by default; with --upgrade-slot free the slot is freed once the
// switch is made, so with m = 1 another request is served meanwhile.
// Issue 17, item 8.
func TestUpgradeSlot(t *testing.T) {
	cases := []struct {
		mode string
		want int // the GET's status while the upgraded connection is open
	}{
		// hold: the GET waits for the slot and times out.
		{"hold", http.StatusServiceUnavailable},
		// free: the GET is served.
		{"free", http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.mode, func(t *testing.T) {
			app := upgradeApp(t)
			q, err := queue.New(queue.Config{Concurrency: 1, Limit: 10, Timeout: 500 * time.Millisecond})
			require.NoError(t, err)
			cfg := DefaultConfig()
			cfg.NodeName, cfg.App, cfg.UpgradeSlot, cfg.EarlyReject = "node-a", app.URL, tc.mode, false
			h, err := New(cfg, q, nil, peerMap{}, nil)
			require.NoError(t, err)
			front := httptest.NewServer(h)
			t.Cleanup(front.Close)

			c := rawConn(t, front.URL)
			_, err = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			require.NoError(t, err)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			_, err = io.WriteString(c, "ping")
			require.NoError(t, err)
			echo := make([]byte, 4)
			_, err = io.ReadFull(br, echo)
			require.NoError(t, err)
			assert.Equal(t, "ping", string(echo))

			res := await(t, goDo(newHTTPClient(t), newReq(t, context.Background(), http.MethodGet, front.URL, "/x", "", nil)))
			require.NoError(t, res.err)
			assert.Equal(t, tc.want, res.resp.StatusCode, "%s", res.body)
			require.NoError(t, c.Close())
			eventually(t, func() bool { return q.InFlight() == 0 }, "the upgraded connection's slot was never freed")
		})
	}
}
