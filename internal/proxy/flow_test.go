package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"

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
