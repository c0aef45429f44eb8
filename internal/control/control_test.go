package control

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/cluster"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// fakeDaemon plays every role but the dialer, in memory.
type fakeDaemon struct {
	name  string
	own   Status
	peers []cluster.Peer

	mu      sync.Mutex
	pol     cluster.PolicyStamp
	keys    []string
	keyErr  error
	drained bool
}

func (f *fakeDaemon) Name() string          { return f.name }
func (f *fakeDaemon) Status() Status        { return f.own }
func (f *fakeDaemon) Peers() []cluster.Peer { return f.peers }
func (f *fakeDaemon) Members() int          { return len(f.peers) }

func (f *fakeDaemon) Policy() cluster.PolicyStamp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pol
}

func (f *fakeDaemon) ApplyPolicy(name string, epoch int64, act time.Duration) (cluster.PolicyStamp, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch < f.pol.Epoch {
		return f.pol, fmt.Errorf("stale policy epoch %d", epoch)
	}
	f.pol = cluster.PolicyStamp{Name: name, Epoch: epoch, ActivationInterval: act}
	return f.pol, nil
}

func (f *fakeDaemon) NextEpoch() int64 { return f.Policy().Epoch + 1 }

func (f *fakeDaemon) Drain() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.drained = true
	return f.own.QueueLength, f.own.InFlight
}

func (f *fakeDaemon) InstallKey(k []byte) error { return f.keyOp("+" + cluster.Fingerprint(k)) }
func (f *fakeDaemon) UseKey(k []byte) error     { return f.keyOp("*" + cluster.Fingerprint(k)) }
func (f *fakeDaemon) RemoveKey(k []byte) error  { return f.keyOp("-" + cluster.Fingerprint(k)) }

func (f *fakeDaemon) keyOp(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.keyErr != nil {
		return f.keyErr
	}
	f.keys = append(f.keys, op)
	return nil
}

func (f *fakeDaemon) KeyFingerprints() ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{"primary"}, f.keys...), f.keyErr
}

// noDialer fails every connection: single-node calls never dial.
type noDialer struct{}

func (noDialer) Conn(string) (*grpc.ClientConn, error) { return nil, errors.New("no network here") }

func newService(t *testing.T, f *fakeDaemon, d Dialer, token string) *Service {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Token = token
	s, err := New(cfg, Roles{Local: f, Policy: f, Members: f, Drainer: f, Keys: f, Dialer: d})
	require.NoError(t, err)
	return s
}

func threeMembers() *fakeDaemon {
	return &fakeDaemon{
		name: "node-1",
		own:  Status{Role: cluster.RoleNode, QueueLength: 3, InFlight: 1, Concurrency: 1, Version: "test", Counters: map[string]uint64{"requests/served_local": 7}},
		pol:  cluster.PolicyStamp{Name: "nu", Epoch: 5, ActivationInterval: 40 * time.Millisecond},
		peers: []cluster.Peer{
			{Name: "dispatcher", GRPCAddr: "127.0.0.1:1", Role: cluster.RoleDispatcher, State: "alive", RingID: -1},
			{Name: "node-0", GRPCAddr: "127.0.0.1:2", Role: cluster.RoleNode, State: "alive", RingID: 0, Load: 4, Known: true, Age: 10 * time.Millisecond, Policy: cluster.PolicyStamp{Name: "nu", Epoch: 5}},
			{Name: "node-1", GRPCAddr: "127.0.0.1:3", Role: cluster.RoleNode, State: "alive", RingID: 1, Self: true, Load: 4, Known: true},
		},
	}
}

// TestStatusAndNodes: the service builds the messages from the roles'
// plain values: its own state, the ring (dispatchers left out of the view)
// and every member.
func TestStatusAndNodes(t *testing.T) {
	f := threeMembers()
	s := newService(t, f, noDialer{}, "")
	st, err := s.Status(context.Background(), &swdv1.StatusRequest{})
	require.NoError(t, err)
	assert.Equal(t, "node-1", st.GetNode())
	assert.Equal(t, int32(1), st.GetRingId(), "the self peer's ring ID")
	assert.Equal(t, "nu", st.GetPolicy().GetName())
	assert.Equal(t, int64(5), st.GetPolicy().GetEpoch())
	assert.Equal(t, int64(40*time.Millisecond), st.GetPolicy().GetActivationIntervalNanos())
	assert.Equal(t, int64(3), st.GetQueueLength())
	assert.Equal(t, int64(1), st.GetInFlight())
	assert.Equal(t, int32(3), st.GetMembers())
	assert.Equal(t, map[string]uint64{"requests/served_local": 7}, st.GetCounters())
	require.Len(t, st.GetView(), 2, "ring members only")
	assert.Equal(t, "node-0", st.GetView()[0].GetName())
	assert.Equal(t, int64(10*time.Millisecond), st.GetView()[0].GetAgeNanos())

	nodes, err := s.Nodes(context.Background(), &swdv1.NodesRequest{})
	require.NoError(t, err)
	require.Len(t, nodes.GetMembers(), 3)
	assert.Equal(t, "dispatcher", nodes.GetMembers()[0].GetName())
	assert.Equal(t, int32(-1), nodes.GetMembers()[0].GetRingId())

	d, err := s.Drain(context.Background(), &swdv1.DrainRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), d.GetWaiting())
	assert.True(t, f.drained)
}

// TestSetPolicyLocal: a local switch applies through the policy holder;
// a bad name, a negative interval or a stale epoch is refused.
func TestSetPolicyLocal(t *testing.T) {
	tests := []struct {
		name string
		req  *swdv1.SetPolicyRequest
		want codes.Code
		pol  string // the policy in force afterwards
	}{
		// Epoch 0: the next one; interval 0: the current one.
		{"switch", &swdv1.SetPolicyRequest{Name: "ll"}, codes.OK, "ll"},
		// Unknown policies are a bad argument, applied nowhere.
		{"unknown policy", &swdv1.SetPolicyRequest{Name: "fastest"}, codes.InvalidArgument, "nu"},
		{"negative interval", &swdv1.SetPolicyRequest{Name: "ll", ActivationIntervalNanos: -1}, codes.InvalidArgument, "nu"},
		// An older epoch than the one in force fails the precondition.
		{"stale epoch", &swdv1.SetPolicyRequest{Name: "ll", Epoch: 4}, codes.FailedPrecondition, "nu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := threeMembers()
			resp, err := newService(t, f, noDialer{}, "").SetPolicy(context.Background(), tt.req)
			assert.Equal(t, tt.want, status.Code(err), "%v", err)
			assert.Equal(t, tt.pol, f.Policy().Name)
			if tt.want == codes.OK {
				require.Len(t, resp.GetResults(), 1, "local only: no fan-out")
				assert.Equal(t, "node-1", resp.GetResults()[0].GetNode())
				assert.Equal(t, int64(6), resp.GetResults()[0].GetState().GetEpoch())
				assert.Equal(t, int64(40*time.Millisecond), resp.GetResults()[0].GetState().GetActivationIntervalNanos())
			}
		})
	}
}

// TestGossipKeysLocal: keys are decoded once (cluster.ParseGossipKey) and
// handed to the keyring; bad keys and ops are refused before it.
func TestGossipKeysLocal(t *testing.T) {
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	fp := cluster.Fingerprint([]byte("0123456789abcdef"))
	tests := []struct {
		name   string
		req    *swdv1.GossipKeyRequest
		keyErr error
		want   codes.Code
		fps    []string
	}{
		// Listing needs no key.
		{"list", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_LIST}, nil, codes.OK, []string{"primary"}},
		// Each operation reaches the keyring with the decoded key.
		{"install", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_INSTALL, Key: key}, nil, codes.OK, []string{"primary", "+" + fp}},
		{"use", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_USE, Key: key}, nil, codes.OK, []string{"primary", "*" + fp}},
		{"remove", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_REMOVE, Key: key}, nil, codes.OK, []string{"primary", "-" + fp}},
		// Not base64, the wrong size, or missing: refused.
		{"not base64", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_INSTALL, Key: "*!"}, nil, codes.InvalidArgument, nil},
		{"short key", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_INSTALL, Key: base64.StdEncoding.EncodeToString([]byte("short"))}, nil, codes.InvalidArgument, nil},
		{"no key", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_USE}, nil, codes.InvalidArgument, nil},
		{"unknown op", &swdv1.GossipKeyRequest{Op: 99}, nil, codes.InvalidArgument, nil},
		// A keyring that fails (no encryption) fails the precondition.
		{"keyring fails", &swdv1.GossipKeyRequest{Op: swdv1.GossipKeyRequest_OP_INSTALL, Key: key}, cluster.ErrNoEncryption, codes.FailedPrecondition, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := threeMembers()
			f.keyErr = tt.keyErr
			resp, err := newService(t, f, noDialer{}, "").GossipKeys(context.Background(), tt.req)
			require.Equal(t, tt.want, status.Code(err), "%v", err)
			if tt.want == codes.OK {
				require.Len(t, resp.GetResults(), 1)
				assert.Equal(t, tt.fps, resp.GetResults()[0].GetFingerprints())
			}
		})
	}
}

// dialer connects to members over real loopback sockets (no token of its
// own: the service adds the cluster's to each call).
// dialer dials members as a node with key (auth.NodeCreds).
type dialer struct {
	t   *testing.T
	key auth.NodeKey
}

func (d dialer) Conn(addr string) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), auth.NodeCreds{Key: d.key}.DialOption())
	if err == nil {
		d.t.Cleanup(func() { _ = cc.Close() })
	}
	return cc, err
}

// TestClusterWideSwitch: a cluster-wide switch reaches every other member
// over gRPC with the cluster's token, each member's result is reported in
// name order, and a member that is down is reported, not waited on.
func TestClusterWideSwitch(t *testing.T) {
	const token = "s3cret"
	start := func(name string) (*fakeDaemon, string) {
		f := threeMembers()
		f.name = name
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		gs := grpc.NewServer(auth.ServerOptions(auth.ServerAuth{Token: token, NodeKey: auth.DeriveNodeKey(token)})...)
		swdv1.RegisterControlServer(gs, newService(t, f, noDialer{}, token))
		go func() { _ = gs.Serve(ln) }()
		t.Cleanup(gs.Stop)
		return f, ln.Addr().String()
	}
	b, addrB := start("node-b")
	c, addrC := start("node-c")
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addrDead := dead.Addr().String()
	require.NoError(t, dead.Close())

	a := threeMembers()
	a.name = "node-a"
	a.peers = []cluster.Peer{
		{Name: "node-a", GRPCAddr: "127.0.0.1:9", Self: true, RingID: 0},
		{Name: "node-c", GRPCAddr: addrC, RingID: 2},
		{Name: "node-b", GRPCAddr: addrB, RingID: 1},
		{Name: "node-d", GRPCAddr: addrDead, RingID: 3},
		{Name: "node-e", RingID: 4}, // no gRPC address yet: not called
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := newService(t, a, dialer{t, auth.DeriveNodeKey(token)}, token).SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: "ll", Cluster: true})
	require.NoError(t, err)
	var names []string
	for _, r := range resp.GetResults() {
		names = append(names, r.GetNode())
	}
	require.Equal(t, []string{"node-a", "node-b", "node-c", "node-d"}, names, "local first, then the others by name")
	for _, r := range resp.GetResults()[:3] {
		assert.True(t, r.GetOk(), "%s: %s", r.GetNode(), r.GetError())
		assert.Equal(t, int64(6), r.GetState().GetEpoch(), "one epoch for all")
	}
	assert.False(t, resp.GetResults()[3].GetOk(), "the dead member is reported as failed")
	assert.NotEmpty(t, resp.GetResults()[3].GetError())
	for _, f := range []*fakeDaemon{a, b, c} {
		assert.Equal(t, cluster.PolicyStamp{Name: "ll", Epoch: 6, ActivationInterval: 40 * time.Millisecond}, f.Policy(), f.name)
	}

	// Without the cluster's key the others refuse, and nothing changes there.
	resp, err = newService(t, a, dialer{t, auth.DeriveNodeKey("not-the-token")}, "not-the-token").SetPolicy(ctx, &swdv1.SetPolicyRequest{Name: "nu", Cluster: true})
	require.NoError(t, err)
	for _, r := range resp.GetResults()[1:3] {
		assert.False(t, r.GetOk(), r.GetNode())
		assert.Contains(t, r.GetError(), "Unauthenticated", r.GetNode())
	}
	assert.Equal(t, "ll", b.Policy().Name)
	assert.Equal(t, "ll", c.Policy().Name)
}

// TestNewNeedsEveryRole: a service missing a role is refused at New, not
// at its first call.
func TestNewNeedsEveryRole(t *testing.T) {
	f := threeMembers()
	_, err := New(DefaultConfig(), Roles{Local: f, Policy: f, Members: f, Drainer: f, Keys: f})
	assert.ErrorContains(t, err, "every role")
	cfg := DefaultConfig()
	cfg.Token = "two words"
	_, err = New(cfg, Roles{Local: f, Policy: f, Members: f, Drainer: f, Keys: f, Dialer: noDialer{}})
	assert.ErrorContains(t, err, "--control-token")
}
