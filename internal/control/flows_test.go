package control

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/swd-project/swd/internal/flow"
	"github.com/swd-project/swd/internal/metrics"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// flowDaemon is a fakeDaemon that keeps flow statistics.
type flowDaemon struct {
	*fakeDaemon
	samples []flow.Sample
	costs   []flow.Cost
}

func (f flowDaemon) FlowSamples(after time.Time) []flow.Sample {
	var out []flow.Sample
	for _, s := range f.samples {
		if s.At.After(after) {
			out = append(out, s)
		}
	}
	return out
}

func (f flowDaemon) HandoffCosts() []flow.Cost { return f.costs }

// TestStatusFlows: a daemon with flow statistics reports its hand-off
// costs always and its samples only when asked, newer than the given
// time; one without reports neither.
func TestStatusFlows(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	f := flowDaemon{fakeDaemon: threeMembers(), costs: []flow.Cost{{MaxBytes: 1024, Mean: 2 * time.Millisecond, Samples: 9}}}
	for i := range 3 {
		f.samples = append(f.samples, flow.Sample{
			At: t0.Add(time.Duration(i) * time.Second), Seconds: 1, Queue: i, Requests: 70, P50: 0.01, P99: 0.2,
			Edges: []flow.EdgeRate{{Peer: "node-0", Direction: metrics.DirOut, PerSecond: 12, BytesPerSecond: 300, Total: uint64(12 * i)}},
		})
	}
	cfg := DefaultConfig()
	s, err := New(cfg, Roles{Local: f, Policy: f, Members: f, Drainer: f, Keys: f, Dialer: noDialer{}})
	require.NoError(t, err)

	st, err := s.Status(context.Background(), &swdv1.StatusRequest{})
	require.NoError(t, err)
	assert.Empty(t, st.GetFlows(), "not asked for")
	require.Len(t, st.GetHandoffCosts(), 1)
	assert.Equal(t, int64(1024), st.GetHandoffCosts()[0].GetMaxBytes())
	assert.InDelta(t, 0.002, st.GetHandoffCosts()[0].GetSeconds(), 1e-12)
	assert.Equal(t, uint64(9), st.GetHandoffCosts()[0].GetSamples())

	st, err = s.Status(context.Background(), &swdv1.StatusRequest{Flows: true})
	require.NoError(t, err)
	require.Len(t, st.GetFlows(), 3, "all of them")
	st, err = s.Status(context.Background(), &swdv1.StatusRequest{Flows: true, FlowsAfterUnixNano: t0.UnixNano()})
	require.NoError(t, err)
	require.Len(t, st.GetFlows(), 2, "only those after t0")
	got := st.GetFlows()[1]
	assert.Equal(t, t0.Add(2*time.Second).UnixNano(), got.GetUnixNano())
	assert.Equal(t, int32(2), got.GetQueueLength())
	assert.InDelta(t, 70, got.GetRequestsPerSecond(), 0)
	assert.InDelta(t, 0.2, got.GetP99Seconds(), 0)
	require.Len(t, got.GetEdges(), 1)
	assert.Equal(t, "out", got.GetEdges()[0].GetDirection())
	assert.Equal(t, uint64(24), got.GetEdges()[0].GetTotal())

	plain := newService(t, threeMembers(), noDialer{}, "")
	st, err = plain.Status(context.Background(), &swdv1.StatusRequest{Flows: true})
	require.NoError(t, err)
	assert.Empty(t, st.GetFlows())
	assert.Empty(t, st.GetHandoffCosts())
}
