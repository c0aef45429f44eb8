package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/swderr"
	"github.com/swd-project/swd/internal/transfer"
)

// A node whose app is not ready refuses transfers with a marked refusal
// (so the sender puts them back), and a transferred request whose app
// refuses the connection is refused the same way instead of answered 502;
// the refused connection tells readiness at once. Issue 17, item 2.
func TestTransfersRefusedWhileAppDown(t *testing.T) {
	transferred := func(t *testing.T) (*http.Request, transfer.Inbound) {
		m := transfer.ToMessage(transfer.Outbound{ID: "x", Request: httptest.NewRequest(http.MethodGet, "/", nil), Arrival: time.Now(), From: "node-a"})
		r, in, err := transfer.FromMessage(context.Background(), m)
		require.NoError(t, err)
		return r, in
	}
	t.Run("not ready", func(t *testing.T) {
		n := newNode(t, "node-b", nodeOpts{})
		n.h.SetAppReadiness(func() bool { return false }, nil)
		r, in := transferred(t)
		rec := httptest.NewRecorder()
		err := n.h.ServeTransferred(rec, r, in)
		require.ErrorIs(t, err, swderr.ErrAppUnavailable)
		assert.True(t, swderr.IsRefusal(swderr.ToGRPC(err)))
		assert.Zero(t, n.app.total())
		assert.False(t, rec.Flushed || rec.Body.Len() > 0, "a refusal writes nothing")
	})
	t.Run("app refuses the connection", func(t *testing.T) {
		n := newNode(t, "node-b", nodeOpts{})
		var downs atomic.Int32
		n.h.SetAppReadiness(func() bool { return true }, func() { downs.Add(1) })
		n.app.srv.Close() // the app is dead: connections are refused
		r, in := transferred(t)
		rec := httptest.NewRecorder()
		err := n.h.ServeTransferred(rec, r, in)
		require.ErrorIs(t, err, swderr.ErrAppUnavailable)
		assert.Zero(t, rec.Body.Len(), "a refusal writes nothing")
		assert.EqualValues(t, 1, downs.Load(), "readiness was not told")
		// A client's own request still gets 502 at once.
		res := await(t, goDo(newHTTPClient(t), newReq(t, context.Background(), http.MethodGet, n.front.URL, "/", "y", nil)))
		require.NoError(t, res.err)
		assert.Equal(t, http.StatusBadGateway, res.resp.StatusCode)
	})
}
