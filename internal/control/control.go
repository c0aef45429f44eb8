// Package control implements SWD's Control gRPC service: status, nodes,
// policy get/set with cluster-wide epochs, drain and gossip keys.
//
// A cluster-wide policy switch is stamped with an epoch higher than any the
// node knows of, applied locally, then sent to every other member
// concurrently with a deadline of one second; each member's result is
// reported, and a member that is down is reported as failed, not waited on.
// Members that miss the call (or join later) adopt the epoch from gossip.
//
// The service sees the daemon through small roles (Roles): the node
// itself, the policy holder, the members, the drainer, the gossip keyring
// and a connection pool, each returning plain values; this package builds
// every protobuf message. Access is guarded by the cluster's token
// (internal/auth), checked by the gRPC server's interceptors.
//
// Concurrency: Service is safe for concurrent use; it calls its roles from
// many goroutines at once, so they must be safe for concurrent use too.
package control

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// Local is the daemon itself.
type Local interface {
	// Name is the daemon's node name.
	Name() string
	// Status is the daemon's own state (the cluster's comes from Members).
	Status() Status
}

// Status is a daemon's own state, as Control.Status reports it.
type Status struct {
	Role        string
	QueueLength int
	InFlight    int
	Concurrency int
	Draining    bool
	Version     string
	// Counters are the request, rejection and transfer counters that saw
	// an event, by key: "requests/<outcome>", "rejections/<reason>",
	// "transfers/<direction>/<outcome>/<peer>".
	Counters map[string]uint64
	// Routes is what the node learnt per route (internal/route), in route
	// ID order.
	Routes []RouteStat
}

// RouteStat is one route's learnt state (StatusResponse.routes).
type RouteStat struct {
	Name string
	// Cost is the route's learnt service time and Samples how many
	// completions it learnt from (internal/cost).
	Cost    time.Duration
	Samples uint64
	// Limit is the route's learnt most requests at the app at once under
	// per-route admission (internal/admission); 0 when not limited.
	Limit int
}

// PolicyHolder holds the policy in force.
type PolicyHolder interface {
	Policy() cluster.PolicyStamp
	// ApplyPolicy adopts the policy if epoch is higher than the current
	// one (or equal with the same name: idempotent) and returns the policy
	// in force afterwards.
	ApplyPolicy(name string, epoch int64, activation time.Duration) (cluster.PolicyStamp, error)
	// NextEpoch returns an epoch higher than any this node has seen.
	NextEpoch() int64
}

// Members is the membership as this node sees it (*cluster.Cluster).
type Members interface {
	// Peers lists every alive member, self included, sorted by name.
	Peers() []cluster.Peer
	// Members counts the alive members, self and dispatchers included.
	Members() int
}

// Drainer drains the daemon.
type Drainer interface {
	// Drain starts a graceful drain and returns what was queued.
	Drain() (waiting, inFlight int)
}

// Keyring manages the gossip encryption keys (*cluster.Cluster).
type Keyring interface {
	InstallKey(key []byte) error
	UseKey(key []byte) error
	RemoveKey(key []byte) error
	// KeyFingerprints lists the installed keys' fingerprints, primary first.
	KeyFingerprints() ([]string, error)
}

// Dialer hands out (cached) connections to members' gRPC addresses
// (*transfer.Client).
type Dialer interface {
	Conn(addr string) (*grpc.ClientConn, error)
}

// Roles are the parts of the daemon the service uses. All are required.
type Roles struct {
	Local   Local
	Policy  PolicyHolder
	Members Members
	Drainer Drainer
	Keys    Keyring
	Dialer  Dialer
}

func (r Roles) validate() error {
	if r.Local == nil || r.Policy == nil || r.Members == nil || r.Drainer == nil || r.Keys == nil || r.Dialer == nil {
		return errors.New("control: every role is required")
	}
	return nil
}

// target is a member to send a cluster-wide change to.
type target struct {
	name     string
	grpcAddr string
}

// Config configures the service.
type Config struct {
	// Token, if set, is the cluster's token: required on every call (see
	// internal/auth), and sent with the calls of a cluster-wide change.
	Token string
	// FanoutTimeout bounds each member's call in a cluster-wide switch.
	FanoutTimeout time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{FanoutTimeout: time.Second} }

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.FanoutTimeout <= 0 {
		return fmt.Errorf("control: fan-out timeout must be positive, got %s", c.FanoutTimeout)
	}
	if err := auth.ValidateToken(c.Token); err != nil {
		return fmt.Errorf("--control-token: %w", err)
	}
	return nil
}

// Service implements swdv1.ControlServer.
type Service struct {
	swdv1.UnimplementedControlServer
	cfg Config
	r   Roles
}

var _ swdv1.ControlServer = (*Service)(nil)

// New returns the Control service for the daemon r describes.
func New(cfg Config, r Roles) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, r: r}, nil
}

// policyMessage is the wire form of a policy stamp.
func policyMessage(p cluster.PolicyStamp) *swdv1.PolicyState {
	return &swdv1.PolicyState{Name: p.Name, Epoch: p.Epoch, ActivationIntervalNanos: int64(p.ActivationInterval)}
}

// Status implements Control.Status: the node's own state and its view of
// the ring.
func (s *Service) Status(_ context.Context, req *swdv1.StatusRequest) (*swdv1.StatusResponse, error) {
	own := s.r.Local.Status()
	resp := &swdv1.StatusResponse{
		Node:        s.r.Local.Name(),
		RingId:      -1,
		Role:        own.Role,
		Policy:      policyMessage(s.r.Policy.Policy()),
		QueueLength: int64(own.QueueLength),
		InFlight:    int64(own.InFlight),
		Concurrency: int32(own.Concurrency),
		Counters:    own.Counters,
		Draining:    own.Draining,
		Version:     own.Version,
		Members:     int32(s.r.Members.Members()),
	}
	for _, r := range own.Routes {
		resp.Routes = append(resp.Routes, &swdv1.RouteStat{Name: r.Name, CostSeconds: r.Cost.Seconds(), Samples: r.Samples, Limit: int32(r.Limit)})
	}
	for _, p := range s.r.Members.Peers() {
		if p.Self {
			resp.RingId = int32(p.RingID)
		}
		if p.RingID < 0 {
			continue
		}
		resp.View = append(resp.View, &swdv1.PeerLoad{
			Name: p.Name, RingId: int32(p.RingID), Load: int64(p.Load), Concurrency: int32(p.Concurrency),
			Known: p.Known, AgeNanos: int64(p.Age), Epoch: p.Policy.Epoch, Policy: p.Policy.Name,
		})
	}
	s.addFlows(resp, req)
	return resp, nil
}

// Nodes implements Control.Nodes: every alive member.
func (s *Service) Nodes(context.Context, *swdv1.NodesRequest) (*swdv1.NodesResponse, error) {
	resp := &swdv1.NodesResponse{}
	for _, p := range s.r.Members.Peers() {
		resp.Members = append(resp.Members, &swdv1.Member{
			Name: p.Name, GossipAddr: p.GossipAddr, GrpcAddr: p.GRPCAddr, State: p.State,
			RingId: int32(p.RingID), Role: p.Role,
		})
	}
	return resp, nil
}

// GetPolicy implements Control.GetPolicy.
func (s *Service) GetPolicy(context.Context, *swdv1.GetPolicyRequest) (*swdv1.PolicyState, error) {
	return policyMessage(s.r.Policy.Policy()), nil
}

// SetPolicy implements Control.SetPolicy.
func (s *Service) SetPolicy(ctx context.Context, req *swdv1.SetPolicyRequest) (*swdv1.SetPolicyResponse, error) {
	if _, err := policy.Lookup(req.GetName()); err != nil {
		return nil, swderr.ToGRPC(err)
	}
	if req.GetActivationIntervalNanos() < 0 {
		return nil, status.Error(codes.InvalidArgument, "activation interval must not be negative")
	}
	act := time.Duration(req.GetActivationIntervalNanos())
	if act == 0 {
		act = s.r.Policy.Policy().ActivationInterval
	}
	epoch := req.GetEpoch()
	if epoch == 0 {
		epoch = s.r.Policy.NextEpoch()
	}
	local := s.apply(s.r.Local.Name(), "local", req.GetName(), epoch, act)
	resp := &swdv1.SetPolicyResponse{Results: []*swdv1.NodeResult{local}}
	if !req.GetCluster() {
		if !local.GetOk() {
			return nil, status.Error(codes.FailedPrecondition, local.GetError())
		}
		return resp, nil
	}
	resp.Results = append(resp.Results, fanout(ctx, s, func(ctx context.Context, t target, cl swdv1.ControlClient, err error) *swdv1.NodeResult {
		r := &swdv1.NodeResult{Node: t.name, Addr: t.grpcAddr}
		var got *swdv1.SetPolicyResponse
		if err == nil {
			got, err = cl.SetPolicy(ctx, &swdv1.SetPolicyRequest{
				Name: req.GetName(), Epoch: epoch, ActivationIntervalNanos: int64(act),
			}, grpc.WaitForReady(false))
		}
		if err != nil {
			r.Error = err.Error()
		} else if len(got.GetResults()) > 0 {
			g := got.GetResults()[0]
			r.Ok, r.Error, r.State = g.GetOk(), g.GetError(), g.GetState()
		}
		return r
	})...)
	return resp, nil
}

// fanout runs call for every other member concurrently, each with its own
// FanoutTimeout deadline and the token; err is set when no connection could
// be had. Results come in member-name order.
func fanout[R any](ctx context.Context, s *Service, call func(ctx context.Context, t target, cl swdv1.ControlClient, err error) R) []R {
	var others []target
	for _, p := range s.r.Members.Peers() {
		if !p.Self && p.GRPCAddr != "" {
			others = append(others, target{name: p.Name, grpcAddr: p.GRPCAddr})
		}
	}
	sort.Slice(others, func(i, j int) bool { return others[i].name < others[j].name })
	results := make([]R, len(others))
	var wg sync.WaitGroup
	for i, t := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := s.r.Dialer.Conn(t.grpcAddr)
			var cl swdv1.ControlClient
			if err == nil {
				cl = swdv1.NewControlClient(cc)
			}
			cctx, cancel := context.WithTimeout(ctx, s.cfg.FanoutTimeout)
			defer cancel()
			// The token never leaves the node: the Dialer's connections
			// authenticate as a node (auth.NodeCreds).
			results[i] = call(cctx, t, cl, err)
		}()
	}
	wg.Wait()
	return results
}

func (s *Service) apply(node, addr, name string, epoch int64, act time.Duration) *swdv1.NodeResult {
	st, err := s.r.Policy.ApplyPolicy(name, epoch, act)
	r := &swdv1.NodeResult{Node: node, Addr: addr, Ok: err == nil, State: policyMessage(st)}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// Drain implements Control.Drain.
func (s *Service) Drain(context.Context, *swdv1.DrainRequest) (*swdv1.DrainResponse, error) {
	w, f := s.r.Drainer.Drain()
	return &swdv1.DrainResponse{Waiting: int64(w), InFlight: int64(f)}, nil
}

// GossipKeys implements Control.GossipKeys: one keyring operation on this
// node, or on every member with cluster set (each member's result is
// reported; a member that is down is reported, not waited on).
func (s *Service) GossipKeys(ctx context.Context, req *swdv1.GossipKeyRequest) (*swdv1.GossipKeyResponse, error) {
	var key []byte
	switch req.GetOp() {
	case swdv1.GossipKeyRequest_OP_LIST:
	case swdv1.GossipKeyRequest_OP_INSTALL, swdv1.GossipKeyRequest_OP_USE, swdv1.GossipKeyRequest_OP_REMOVE:
		k, err := cluster.ParseGossipKey(req.GetKey())
		if err == nil && k == nil {
			err = errors.New("no key given")
		}
		if err != nil {
			return nil, status.Error(codes.InvalidArgument, "key must be base64 of 16, 24 or 32 bytes: "+err.Error())
		}
		key = k
	default:
		return nil, status.Error(codes.InvalidArgument, "op must be list, install, use or remove")
	}
	fps, err := s.keyOp(req.GetOp(), key)
	local := &swdv1.NodeKeys{Node: s.r.Local.Name(), Ok: err == nil, Fingerprints: fps}
	if err != nil {
		local.Error = err.Error()
	}
	resp := &swdv1.GossipKeyResponse{Results: []*swdv1.NodeKeys{local}}
	if !req.GetCluster() {
		if err != nil {
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		return resp, nil
	}
	resp.Results = append(resp.Results, fanout(ctx, s, func(ctx context.Context, t target, cl swdv1.ControlClient, err error) *swdv1.NodeKeys {
		r := &swdv1.NodeKeys{Node: t.name}
		var got *swdv1.GossipKeyResponse
		if err == nil {
			got, err = cl.GossipKeys(ctx, &swdv1.GossipKeyRequest{Op: req.GetOp(), Key: req.GetKey()})
		}
		if err != nil {
			r.Error = err.Error()
		} else if len(got.GetResults()) > 0 {
			g := got.GetResults()[0]
			r.Ok, r.Error, r.Fingerprints = g.GetOk(), g.GetError(), g.GetFingerprints()
		}
		return r
	})...)
	return resp, nil
}

// keyOp runs one keyring operation (none for OP_LIST) and returns the
// installed keys' fingerprints afterwards.
func (s *Service) keyOp(op swdv1.GossipKeyRequest_Op, key []byte) ([]string, error) {
	var err error
	switch op {
	case swdv1.GossipKeyRequest_OP_INSTALL:
		err = s.r.Keys.InstallKey(key)
	case swdv1.GossipKeyRequest_OP_USE:
		err = s.r.Keys.UseKey(key)
	case swdv1.GossipKeyRequest_OP_REMOVE:
		err = s.r.Keys.RemoveKey(key)
	}
	if err != nil {
		return nil, err
	}
	return s.r.Keys.KeyFingerprints()
}
