package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/transfer"
)

// A transferred request's claimed arrival time orders it in the queue
// (--placement arrival), but only when it is plausible: one from the
// distant past or the future is placed as if it arrived now, behind
// requests already waiting, and gets a fresh deadline. Issue 17, item 8.
func TestForgedArrivalDoesNotJumpQueue(t *testing.T) {
	cases := []struct {
		name    string
		arrival time.Time
		want    []string // waiting, head first
	}{
		// An honest arrival a moment before y: ahead of y.
		{"honest, earlier", time.Now().Add(-time.Second), []string{"x", "y"}},
		// 1970 plus a nanosecond: forged, behind y.
		{"1970", time.Unix(0, 1), []string{"y", "x"}},
		// An hour ago, with a 30 s queue timeout: forged, behind y.
		{"an hour ago", time.Now().Add(-time.Hour), []string{"y", "x"}},
		// An hour in the future would otherwise sort last forever; as now: behind y.
		{"future", time.Now().Add(time.Hour), []string{"y", "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nb := newNode(t, "node-b", nodeOpts{})
			c := newHTTPClient(t)
			holder := hold(t, c, nb, "holder")
			y := goDo(c, newReq(t, context.Background(), http.MethodGet, nb.front.URL, "/", "y", nil))
			eventually(t, func() bool { return nb.q.Waiting() == 1 }, "y never queued")
			m := transfer.ToMessage(transfer.Outbound{ID: "x", Request: httptest.NewRequest(http.MethodGet, "/", nil),
				Arrival: tc.arrival, From: "node-a"})
			r, in, err := transfer.FromMessage(context.Background(), m)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- nb.h.ServeTransferred(httptest.NewRecorder(), r, in) }()
			eventually(t, func() bool { return nb.q.Waiting() == 2 }, "x never queued")
			assert.Equal(t, tc.want, waiting(nb.q))
			nb.app.releaseAll()
			require.NoError(t, await(t, holder).err)
			require.NoError(t, await(t, y).err)
			require.NoError(t, <-done)
		})
	}
}
