package proxy

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cookieSeer is an Admitter that admits everything and records the
// session cookies of the answers it is shown.
type cookieSeer struct {
	mu   sync.Mutex
	seen []string
}

func (c *cookieSeer) Admit(context.Context, *http.Request) error { return nil }

func (c *cookieSeer) Observe(resp *http.Response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range resp.Cookies() {
		c.seen = append(c.seen, k.Name+"="+k.Value)
	}
}

func (c *cookieSeer) cookies() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.seen...)
}

// The admitter of the node a client called learns the session cookie set
// by the app that served it, whether that app is its own (local) or a
// peer's (the request moved): otherwise the session's next page would look
// new where its client calls.
func TestAdmitterSeesCookiesOfTransferredAnswers(t *testing.T) {
	seer := &cookieSeer{}
	na, nb := pair(t, nodeOpts{admitter: seer}, nodeOpts{})
	c := newHTTPClient(t)

	// Served locally.
	res := await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/session", "local", nil)))
	require.NoError(t, res.err)
	require.Equal(t, "node-a", res.resp.Header.Get("X-Served-By"))

	// Moved to node-b, whose app sets the cookie.
	holder := hold(t, c, na, "holder")
	x := goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/session", "moved", nil))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued")
	require.Equal(t, 1, na.q.HandOff(1, "node-b"))
	res = await(t, x)
	require.NoError(t, res.err)
	require.Equal(t, "node-b", res.resp.Header.Get("X-Served-By"))
	assert.Equal(t, 1, nb.app.count("moved"))
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)

	assert.ElementsMatch(t, []string{"SID=s-local", "SID=s-moved"}, seer.cookies())
}
