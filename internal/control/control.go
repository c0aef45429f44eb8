// Package control implements SWD's Control gRPC service (status, nodes,
// policy get/set with cluster-wide epochs, drain) and its access control.
//
// A cluster-wide policy switch is stamped with an epoch higher than any the
// node knows of, applied locally, then sent to every other member
// concurrently with a deadline of one second; each member's result is
// reported, and a member that is down is reported as failed, not waited on.
// Members that miss the call (or join later) adopt the epoch from gossip.
//
// Access: when a token is configured, every Control and Transfer call must
// carry it as "authorization: Bearer TOKEN" metadata, else it fails with
// Unauthenticated; nodes send it with their transfers. mTLS and the
// membership check guard transfers further.
//
// Concurrency: Service is safe for concurrent use.
package control

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/swderr"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// PolicyMessage converts the policy a node runs to its wire form.
func PolicyMessage(s cluster.PolicyStamp) *swdv1.PolicyState {
	return &swdv1.PolicyState{Name: s.Name, Epoch: s.Epoch, ActivationIntervalNanos: int64(s.ActivationInterval)}
}

// Target is a member to send a cluster-wide change to.
type Target struct {
	Name     string
	GRPCAddr string
}

// Node is what the service needs from the daemon.
type Node interface {
	Status() *swdv1.StatusResponse
	Members() []*swdv1.Member
	Policy() cluster.PolicyStamp
	// ApplyPolicy adopts the policy if epoch is higher than the current
	// one (or equal with the same name: idempotent) and returns the state
	// in force afterwards.
	ApplyPolicy(name string, epoch int64, activation time.Duration) (cluster.PolicyStamp, error)
	// NextEpoch returns an epoch higher than any this node has seen.
	NextEpoch() int64
	// Others lists the other members (nodes and dispatchers).
	Others() []Target
	// Conn returns a (cached) connection to a member's gRPC address.
	Conn(addr string) (*grpc.ClientConn, error)
	// Drain starts a graceful drain and returns what was queued.
	Drain() (waiting, inFlight int)
	// GossipKey runs one keyring operation and returns the installed keys'
	// fingerprints afterwards.
	GossipKey(op swdv1.GossipKeyRequest_Op, key []byte) ([]string, error)
}

// Config configures the service.
type Config struct {
	// Token, if set, is required on every call.
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
	if strings.ContainsAny(c.Token, " \t\r\n") {
		return errors.New("control: token must not contain whitespace")
	}
	return nil
}

// Service implements swdv1.ControlServer.
type Service struct {
	swdv1.UnimplementedControlServer
	cfg  Config
	node Node
}

var _ swdv1.ControlServer = (*Service)(nil)

// New returns the Control service for node.
func New(cfg Config, node Node) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, node: node}, nil
}

// Status implements Control.Status.
func (s *Service) Status(context.Context, *swdv1.StatusRequest) (*swdv1.StatusResponse, error) {
	return s.node.Status(), nil
}

// Nodes implements Control.Nodes.
func (s *Service) Nodes(context.Context, *swdv1.NodesRequest) (*swdv1.NodesResponse, error) {
	return &swdv1.NodesResponse{Members: s.node.Members()}, nil
}

// GetPolicy implements Control.GetPolicy.
func (s *Service) GetPolicy(context.Context, *swdv1.GetPolicyRequest) (*swdv1.PolicyState, error) {
	return PolicyMessage(s.node.Policy()), nil
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
		act = s.node.Policy().ActivationInterval
	}
	epoch := req.GetEpoch()
	if epoch == 0 {
		epoch = s.node.NextEpoch()
	}
	self := s.node.Status()
	local := s.apply(self.GetNode(), "local", req.GetName(), epoch, act)
	resp := &swdv1.SetPolicyResponse{Results: []*swdv1.NodeResult{local}}
	if !req.GetCluster() {
		if !local.GetOk() {
			return nil, status.Error(codes.FailedPrecondition, local.GetError())
		}
		return resp, nil
	}
	resp.Results = append(resp.Results, fanout(ctx, s, func(ctx context.Context, t Target, cl swdv1.ControlClient, err error) *swdv1.NodeResult {
		r := &swdv1.NodeResult{Node: t.Name, Addr: t.GRPCAddr}
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
func fanout[R any](ctx context.Context, s *Service, call func(ctx context.Context, t Target, cl swdv1.ControlClient, err error) R) []R {
	others := s.node.Others()
	sort.Slice(others, func(i, j int) bool { return others[i].Name < others[j].Name })
	results := make([]R, len(others))
	var wg sync.WaitGroup
	for i, t := range others {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc, err := s.node.Conn(t.GRPCAddr)
			var cl swdv1.ControlClient
			if err == nil {
				cl = swdv1.NewControlClient(cc)
			}
			cctx, cancel := context.WithTimeout(ctx, s.cfg.FanoutTimeout)
			defer cancel()
			if s.cfg.Token != "" {
				cctx = metadata.AppendToOutgoingContext(cctx, "authorization", "Bearer "+s.cfg.Token)
			}
			results[i] = call(cctx, t, cl, err)
		}()
	}
	wg.Wait()
	return results
}

func (s *Service) apply(node, addr, name string, epoch int64, act time.Duration) *swdv1.NodeResult {
	st, err := s.node.ApplyPolicy(name, epoch, act)
	r := &swdv1.NodeResult{Node: node, Addr: addr, Ok: err == nil, State: PolicyMessage(st)}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// Drain implements Control.Drain.
func (s *Service) Drain(context.Context, *swdv1.DrainRequest) (*swdv1.DrainResponse, error) {
	w, f := s.node.Drain()
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
	self := s.node.Status().GetNode()
	fps, err := s.node.GossipKey(req.GetOp(), key)
	local := &swdv1.NodeKeys{Node: self, Ok: err == nil, Fingerprints: fps}
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
	resp.Results = append(resp.Results, fanout(ctx, s, func(ctx context.Context, t Target, cl swdv1.ControlClient, err error) *swdv1.NodeKeys {
		r := &swdv1.NodeKeys{Node: t.Name}
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

// guardedPrefixes are the method prefixes the token guards: the control API,
// and transfers (a node sends the cluster's token with every transfer, so
// only holders of it can run requests on a node's app through its gRPC port).
var guardedPrefixes = []string{"/swd.v1.Control/", "/swd.v1.Transfer/"}

// UnaryAuth returns an interceptor that checks the token on Control calls.
// With an empty token it allows everything.
func UnaryAuth(token string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, token, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamAuth returns an interceptor that checks the token on streaming
// calls (Transfer.Forward). With an empty token it allows everything.
func StreamAuth(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), token, info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

func checkToken(ctx context.Context, token, method string) error {
	guarded := false
	for _, p := range guardedPrefixes {
		guarded = guarded || strings.HasPrefix(method, p)
	}
	if token == "" || !guarded {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		got, ok := strings.CutPrefix(v, "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, "missing or wrong control token: pass --token or set SWD_CONTROL_TOKEN")
}

// TokenCredentials attaches a bearer token to every call of a client
// connection (for swdctl and loadgen).
type TokenCredentials struct {
	Token string
	// Secure requires transport security (set when using TLS).
	Secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (c TokenCredentials) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + c.Token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials.
func (c TokenCredentials) RequireTransportSecurity() bool { return c.Secure }
