package loadgen

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGRPCSwitcherClusterWide(t *testing.T) {
	ctl := startFakeControl(t, &fakeControl{})
	sw := &GRPCSwitcher{Control: ctl.addr}
	require.NoError(t, sw.SetPolicy(context.Background(), "nu"))
	calls := ctl.recorded()
	require.Len(t, calls, 1)
	assert.Equal(t, "nu", calls[0].GetName())
	assert.True(t, calls[0].GetCluster(), "the switch is cluster-wide")
}

func TestGRPCSwitcherReportsRefusals(t *testing.T) {
	ctl := &fakeControl{nodes: []string{"n1:7070", "n2:7070"}, refuse: map[string]string{"n2:7070": "draining"}}
	startFakeControl(t, ctl)
	err := (&GRPCSwitcher{Control: ctl.addr}).SetPolicy(context.Background(), "ll")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of 2 nodes refused policy ll")
	assert.Contains(t, err.Error(), "draining")
}

func TestGRPCSwitcherDispatcher(t *testing.T) {
	disp := startFakeControl(t, &fakeControl{})
	cases := []struct {
		name      string
		policy    string
		reachDisp bool // the cluster-wide call already reached the dispatcher
		direct    int  // direct calls the dispatcher should get
	}{
		// A dispatch policy the cluster-wide call did not carry to the
		// dispatcher is set on it directly.
		{"rr not reached", "rr", false, 1},
		// Already reached: no second call (it would bump the epoch).
		{"ct reached", "ct", true, 0},
		// Transfer policies do not concern the dispatcher.
		{"nu", "nu", false, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(disp.recorded())
			nodes := []string{"n1:7070"}
			if c.reachDisp {
				nodes = append(nodes, disp.addr)
			}
			ctl := startFakeControl(t, &fakeControl{nodes: nodes})
			sw := &GRPCSwitcher{Control: ctl.addr, DispatcherControl: disp.addr}
			require.NoError(t, sw.SetPolicy(context.Background(), c.policy))
			calls := disp.recorded()[before:]
			require.Len(t, calls, c.direct)
			for _, call := range calls {
				assert.Equal(t, c.policy, call.GetName())
				assert.False(t, call.GetCluster(), "the direct call is for the dispatcher alone")
			}
		})
	}
}

func TestGRPCSwitcherErrors(t *testing.T) {
	err := (&GRPCSwitcher{}).SetPolicy(context.Background(), "nu")
	assert.ErrorContains(t, err, "no control address")
	err = (&GRPCSwitcher{Control: "127.0.0.1:1"}).SetPolicy(context.Background(), "bogus")
	assert.ErrorContains(t, err, "bogus")
	err = (&GRPCSwitcher{Control: "127.0.0.1:1"}).SetPolicy(context.Background(), "nu")
	assert.ErrorContains(t, err, "set policy on 127.0.0.1:1")
}
