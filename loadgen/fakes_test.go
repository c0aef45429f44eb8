package loadgen

import (
	"context"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// fakeControl is a Control server that records SetPolicy calls and
// answers with one NodeResult per configured node.
type fakeControl struct {
	swdv1.UnimplementedControlServer
	addr string
	// nodes are the addresses reported; refuse makes those refuse.
	nodes  []string
	refuse map[string]string

	mu    sync.Mutex
	calls []*swdv1.SetPolicyRequest
}

func (f *fakeControl) SetPolicy(_ context.Context, req *swdv1.SetPolicyRequest) (*swdv1.SetPolicyResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
	resp := &swdv1.SetPolicyResponse{}
	nodes := f.nodes
	if !req.GetCluster() {
		nodes = []string{f.addr}
	}
	for i, n := range nodes {
		r := &swdv1.NodeResult{Node: "node-" + string(rune('a'+i)), Addr: n, Ok: true, State: &swdv1.PolicyState{Name: req.GetName(), Epoch: int64(len(f.calls))}}
		if msg, bad := f.refuse[n]; bad {
			r.Ok, r.Error = false, msg
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func (f *fakeControl) recorded() []*swdv1.SetPolicyRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*swdv1.SetPolicyRequest(nil), f.calls...)
}

// startFakeControl serves f on a loopback port; f.addr is set.
func startFakeControl(t *testing.T, f *fakeControl) *fakeControl {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = lis.Addr().String()
	if f.nodes == nil {
		f.nodes = []string{f.addr}
	}
	s := grpc.NewServer()
	swdv1.RegisterControlServer(s, f)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return f
}
