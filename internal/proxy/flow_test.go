package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/metrics"
)

// histSum returns the sample count and sum of a histogram family's series
// whose label name has value, from the handler's registry.
func histSum(t *testing.T, m *metrics.Metrics, family, name, value string) (uint64, float64) {
	t.Helper()
	mfs, err := m.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("%s{%s=%q} not found", family, name, value)
	return 0, 0
}

// TestFlowStatistics: one request served locally and one moved to the
// peer are counted on every edge they cross, with their body bytes, on
// both nodes; the moved one's hand-off (decision to the peer's queue) is
// observed under its body's size class.
func TestFlowStatistics(t *testing.T) {
	na, nb := pair(t, nodeOpts{}, nodeOpts{})
	c := newHTTPClient(t)
	holder := hold(t, c, na, "holder")

	x := goDo(c, newReq(t, context.Background(), http.MethodPost, na.front.URL, "/work", "x", strings.NewReader("payload")))
	eventually(t, func() bool { return na.q.Waiting() == 1 }, "x never queued on node-a")
	require.Equal(t, 1, na.q.HandOff(1, "node-b"))
	res := await(t, x)
	require.NoError(t, res.err)
	require.Equal(t, "node-b POST 7", string(res.body))
	na.app.releaseAll()
	require.NoError(t, await(t, holder).err)
	eventually(t, func() bool { return na.h.m.Snapshot().Flow.Requests[metrics.EdgeClient] == 2 }, "both client requests counted")

	a, b := na.h.m.Snapshot().Flow, nb.h.m.Snapshot().Flow
	assert.Equal(t, map[metrics.Edge]uint64{
		metrics.EdgeClient: 2, metrics.EdgeApp: 1, metrics.EdgeTransferOut: 1, metrics.EdgeTransferIn: 0,
	}, a.Requests, "node-a: two clients, its app served the holder, x moved out")
	assert.Equal(t, map[metrics.Edge]uint64{
		metrics.EdgeClient: 0, metrics.EdgeApp: 1, metrics.EdgeTransferOut: 0, metrics.EdgeTransferIn: 1,
	}, b.Requests, "node-b: x came in and ran on its app")

	bytes := func(f metrics.FlowSnapshot) map[string]uint64 {
		out := map[string]uint64{}
		for _, b := range f.Bytes {
			out[string(b.Direction)+"/"+b.Peer+"/"+string(b.Body)] = b.Bytes
		}
		return out
	}
	answer := uint64(len("node-b POST 7"))
	assert.Equal(t, map[string]uint64{"out/node-b/request": 7, "out/node-b/response": answer}, bytes(a))
	assert.Equal(t, map[string]uint64{"in/node-a/request": 7, "in/node-a/response": answer}, bytes(b))

	// The client edge carried x's 7 bytes in and both answers out.
	n, sum := histSum(t, na.h.m, "swd_request_body_bytes", "edge", "client")
	assert.Equal(t, uint64(2), n)
	assert.InDelta(t, 7, sum, 0)
	_, sum = histSum(t, na.h.m, "swd_response_body_bytes", "edge", "client")
	holderAnswer := len(await(t, goDo(c, newReq(t, context.Background(), http.MethodGet, na.front.URL, "/work", "y", nil))).body)
	assert.InDelta(t, float64(answer)+float64(holderAnswer), sum, 0, "x's answer and the holder's (same length as y's)")

	// x's hand-off was timed, in the smallest class; no other class saw one.
	for cl, h := range a.Handoff {
		if cl == metrics.Size4KiB {
			assert.Equal(t, uint64(1), h.Count)
			assert.Positive(t, h.Seconds)
		} else {
			assert.Zero(t, h.Count, "class %s", cl)
		}
	}
	for _, h := range b.Handoff {
		assert.Zero(t, h.Count, "node-b moved nothing")
	}
}

// TestUpgradeThroughCountingWriters: the byte-counting writers the flow
// statistics wrap around a request's ResponseWriter keep protocol upgrades
// working: ReverseProxy hijacks through them (http.ResponseController
// unwraps), and the upgraded connection carries bytes both ways.
func TestUpgradeThroughCountingWriters(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	}))
	defer app.Close()
	n := newNode(t, "node-a", nodeOpts{cfg: func(c *Config) { c.App = app.URL }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.front.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(waitLimit)))
	_, err = conn.Write([]byte("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n"))
	require.NoError(t, err)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, err = conn.Write([]byte("hello\n"))
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo hello\n", line)
}
