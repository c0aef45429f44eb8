// Package node wires one SWD daemon: the local queue, the HTTP proxy (or,
// for a dispatcher, the dispatching front door), the cluster layer, the
// transfer and control gRPC services on one port, the admin HTTP server,
// and the policy runner that turns views into hand-offs.
//
// Concurrency: a Node's exported methods are safe for concurrent use. The
// current policy is an immutable value behind an atomic pointer; the policy
// runner is the only goroutine that hands tickets off.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	sockaddr "github.com/hashicorp/go-sockaddr"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/swd-project/swd/internal/admission"
	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/control"
	"github.com/swd-project/swd/internal/cost"
	"github.com/swd-project/swd/internal/flow"
	"github.com/swd-project/swd/internal/metrics"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/proxy"
	"github.com/swd-project/swd/internal/queue"
	"github.com/swd-project/swd/internal/route"
	"github.com/swd-project/swd/internal/transfer"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// Version is the daemon's version, set at build time.
var Version = "dev"

// Config configures a daemon. Every field a user sets has a flag in
// cmd/swd.
//
// Each role's configuration is validated whole: a node's Queue, Proxy and
// TransferServer, a dispatcher's Dispatcher, and for both the Cluster,
// Transfer (client) and Control parts and the fields here.
//
// Some fields of the parts are the daemon's, not the part's: Derived fills
// them in, the one place they are set, from the fields here. They are left
// zero in DefaultConfig; a part holding a different value is a conflict,
// which Validate (and New) refuse rather than overwrite:
//
//   - NodeName: Proxy, Dispatcher, Cluster and TransferServer.NodeName;
//   - Role: Cluster.Role;
//   - Logger: Proxy, Dispatcher and Cluster.Logger;
//   - Queue.Limit and Queue.Timeout: Dispatcher.HoldLimit and HoldTimeout
//     (a dispatcher's FIFO is bounded by the same flags as a node's queue);
//   - GRPCMaxMessageSize: Transfer.MaxMessageSize (the gRPC server's limit
//     is the same);
//   - Proxy.MaxHops: TransferServer.MaxHops, at least 1 (a dispatcher's
//     forward arrives with one hop, even on nodes that never transfer);
//   - Proxy.BodyIdleTimeout: TransferServer.BodyIdleTimeout (a streamed
//     transfer's body stalls like a client's);
//   - TransferSecret, else Control.Token: Transfer.Auth (the node key
//     transfers and fanned-out control calls are authenticated with; the
//     token itself never leaves the node; over TLS, only over TLS).
//
// Cluster.GRPCAddr, if empty, is the bound gRPC address, set by Start.
type Config struct {
	Role     string
	NodeName string
	// Listen is the client HTTP address; Admin serves /metrics, /healthz,
	// /readyz, /ui; GRPC serves Transfer and Control.
	Listen, Admin, GRPC string

	Queue          queue.Config
	Proxy          proxy.Config
	Dispatcher     proxy.DispatcherConfig
	Cluster        cluster.Config
	Transfer       transfer.ClientConfig
	TransferServer transfer.ServerConfig
	Control        control.Config
	// TransferSecret is the cluster secret nodes authenticate each other's
	// calls with (a key derived from it); empty means the control token's.
	TransferSecret string
	// Affinity routes keyed requests to their home node; Cohort orders the
	// queue by the app's cache (docs/affinity.md). Nodes only.
	Affinity affinity.Config
	Cohort   cohort.Config
	// Admission is the overload control that protects sessions
	// (--admission, docs/admission.md). Nodes only.
	Admission admission.Config

	// Policy is the initial policy; ActivationInterval how often a
	// transfer policy runs.
	Policy             string
	ActivationInterval time.Duration
	// DrainTimeout bounds a graceful shutdown.
	DrainTimeout time.Duration
	// TransferCost is "measured" (a request moves only if the wait it
	// saves exceeds its measured hand-off cost, flows.go) or "off".
	TransferCost string
	// Pprof exposes /debug/pprof on the admin port.
	Pprof bool
	// ServerCreds, if set, secure the gRPC port (mTLS).
	ServerCreds credentials.TransportCredentials
	// Insecure allows a plaintext gRPC port, and gossip without a key,
	// beyond loopback.
	Insecure bool
	// HTTP limits for the client listener.
	MaxHeaderBytes       int
	ReadHeaderTimeout    time.Duration
	IdleTimeout          time.Duration
	MaxConcurrentStreams int
	GRPCMaxMessageSize   int
	// MaxConnections caps concurrent client connections (0: no cap); each
	// idle keep-alive connection costs about 24 KiB of memory.
	MaxConnections int
	// LoadIndex is what transfer policies plan on and what the node
	// gossips beside its count: "count" (requests, the paper's) or "work"
	// (predicted work: internal/cost, docs/algorithms.md).
	LoadIndex string
	// Cost is the per-route cost statistic (--cost-theta, --cost-weight);
	// Routes the route table it is kept per (--route patterns).
	Cost   cost.Config
	Routes route.Config

	Logger *slog.Logger
}

// DefaultConfig returns the documented defaults, with the derived fields
// of the parts left zero (see Config).
func DefaultConfig() Config {
	cl := cluster.DefaultConfig()
	cl.NodeName, cl.Role = "", ""
	tc := transfer.DefaultClientConfig()
	tc.MaxMessageSize = 0
	ts := transfer.DefaultServerConfig()
	ts.MaxHops = 0
	ts.BodyIdleTimeout = 0
	dc := proxy.DefaultDispatcherConfig()
	dc.HoldLimit, dc.HoldTimeout = 0, 0
	return Config{
		Role:                 cluster.RoleNode,
		Listen:               ":8080",
		Admin:                "127.0.0.1:9100",
		GRPC:                 "127.0.0.1:7070",
		Queue:                queue.DefaultConfig(),
		Proxy:                proxy.DefaultConfig(),
		Dispatcher:           dc,
		Cluster:              cl,
		Transfer:             tc,
		TransferServer:       ts,
		Control:              control.DefaultConfig(),
		Affinity:             affinity.DefaultConfig(),
		Cohort:               cohort.DefaultConfig(),
		Admission:            admission.DefaultConfig(),
		Policy:               "nu",
		ActivationInterval:   40 * time.Millisecond,
		DrainTimeout:         30 * time.Second,
		TransferCost:         TransferCostMeasured,
		MaxHeaderBytes:       1 << 20,
		ReadHeaderTimeout:    10 * time.Second,
		IdleTimeout:          120 * time.Second,
		MaxConcurrentStreams: 100,
		GRPCMaxMessageSize:   4 << 20,
		LoadIndex:            policy.IndexCount.String(),
		Cost:                 cost.DefaultConfig(),
		Routes:               route.DefaultConfig(),
	}
}

// Derived returns c with the parts' derived fields filled in from c's own
// (the list is in Config's doc). A part's field that already holds another
// value is a conflict: Derived reports it rather than overwrite it.
func (c Config) Derived() (Config, error) {
	var errs []error
	derive(&errs, "Proxy.NodeName", &c.Proxy.NodeName, c.NodeName)
	derive(&errs, "Dispatcher.NodeName", &c.Dispatcher.NodeName, c.NodeName)
	derive(&errs, "Cluster.NodeName", &c.Cluster.NodeName, c.NodeName)
	derive(&errs, "TransferServer.NodeName", &c.TransferServer.NodeName, c.NodeName)
	derive(&errs, "Cluster.Role", &c.Cluster.Role, c.Role)
	derive(&errs, "Proxy.Logger", &c.Proxy.Logger, c.Logger)
	derive(&errs, "Dispatcher.Logger", &c.Dispatcher.Logger, c.Logger)
	derive(&errs, "Cluster.Logger", &c.Cluster.Logger, c.Logger)
	derive(&errs, "Dispatcher.HoldLimit", &c.Dispatcher.HoldLimit, c.Queue.Limit)
	derive(&errs, "Dispatcher.HoldTimeout", &c.Dispatcher.HoldTimeout, c.Queue.Timeout)
	derive(&errs, "Transfer.MaxMessageSize", &c.Transfer.MaxMessageSize, c.GRPCMaxMessageSize)
	derive(&errs, "TransferServer.MaxHops", &c.TransferServer.MaxHops, max(c.Proxy.MaxHops, 1))
	derive(&errs, "TransferServer.BodyIdleTimeout", &c.TransferServer.BodyIdleTimeout, c.Proxy.BodyIdleTimeout)
	derive(&errs, "Transfer.Auth", &c.Transfer.Auth, auth.NodeCreds{Key: c.nodeKey(), Secure: c.ServerCreds != nil})
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, nil
}

// derive sets *dst to v unless it holds another non-zero value, which is
// recorded as a conflict.
func derive[T comparable](errs *[]error, field string, dst *T, v T) {
	var zero T
	if *dst != zero && *dst != v {
		*errs = append(*errs, fmt.Errorf("config: %s is %v, but it is derived (%v here): leave it unset", field, *dst, v))
		return
	}
	*dst = v
}

// Validate reports the first problem with c: with its derived fields (see
// Derived), every part its role uses is validated whole.
func (c Config) Validate() error {
	c, err := c.Derived()
	if err != nil {
		return err
	}
	return c.validate()
}

// validate checks a derived config.
func (c Config) validate() error {
	if c.Role != cluster.RoleNode && c.Role != cluster.RoleDispatcher {
		return fmt.Errorf("role must be %q or %q, got %q", cluster.RoleNode, cluster.RoleDispatcher, c.Role)
	}
	if c.NodeName == "" {
		return errors.New("node name must not be empty")
	}
	for name, addr := range map[string]string{"listen": c.Listen, "admin": c.Admin, "grpc": c.GRPC} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("--%s %q: want host:port: %w", name, addr, err)
		}
	}
	if _, err := policy.Lookup(c.Policy); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	if c.ActivationInterval < time.Millisecond {
		return fmt.Errorf("--activation-interval must be at least 1ms, got %s", c.ActivationInterval)
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("--max-connections must not be negative, got %d", c.MaxConnections)
	}
	if err := validateTransferCost(c.TransferCost); err != nil {
		return err
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("--drain-timeout must not be negative, got %s", c.DrainTimeout)
	}
	if err := c.validateDefences(); err != nil {
		return err
	}
	if c.ServerCreds == nil && !c.Insecure && !IsLoopback(c.GRPC) {
		return fmt.Errorf("--grpc %s is beyond loopback without TLS: give --tls-cert/--tls-key/--tls-ca, or --insecure to accept plaintext", c.GRPC)
	}
	if err := c.validateCosts(); err != nil {
		return err
	}
	if len(c.Cluster.GossipKey) == 0 && !c.Insecure && !IsLoopback(c.Cluster.GossipAddr) {
		return fmt.Errorf("--gossip %s is beyond loopback without --gossip-key: anyone who reaches it could join the cluster; "+
			"give --gossip-key (or SWD_GOSSIP_KEY), or --insecure to accept unauthenticated gossip", c.Cluster.GossipAddr)
	}
	var parts []interface{ Validate() error }
	if c.Role == cluster.RoleNode {
		parts = append(parts, c.Queue, c.Proxy, c.TransferServer)
	} else {
		parts = append(parts, c.Dispatcher)
	}
	for _, p := range parts {
		if err := p.Validate(); err != nil {
			return err
		}
	}
	if err := c.validateAdmission(); err != nil {
		return err
	}
	if err := c.validateAffinity(); err != nil {
		return err
	}
	if c.GRPCMaxMessageSize < 64<<10 {
		return fmt.Errorf("--grpc-max-message must be at least 64 KiB, got %d", c.GRPCMaxMessageSize)
	}
	if err := c.Transfer.Validate(); err != nil {
		return err
	}
	if err := c.Control.Validate(); err != nil {
		return err
	}
	return c.Cluster.Validate()
}

// IsLoopback reports whether addr's host is a loopback address or localhost.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// policyState is the immutable current policy.
type policyState struct {
	p          policy.Policy
	epoch      int64
	activation time.Duration
}

// Node is one running daemon.
type Node struct {
	cfg  Config
	log  *slog.Logger
	q    *queue.Queue // nil for a dispatcher
	h    *proxy.Handler
	disp *proxy.Dispatcher
	cl   *cluster.Cluster
	tc   *transfer.Client
	m    *metrics.Metrics
	ctl  *control.Service
	hlth *peerHealth
	cost *costState // nil for a dispatcher
	// router and cohort are set with --affinity and --cohort.
	router *router
	cohort *cohort.Scheduler
	// adm is --admission page|sqs (admission.go).
	adm *admissionState
	// flows is the node's flow history (flows.go).
	flows *flow.Sampler
	// pl is the node's pulls (pull.go); nil for a dispatcher.
	pl *pulls
	// pullsWired is set once startPulling wired the queue's triggers.
	pullsWired atomic.Bool

	pol      atomic.Pointer[policyState]
	maxEpoch atomic.Int64 // highest epoch seen anywhere
	draining atomic.Bool
	// runnerStarted is set once the policy runner goroutine runs.
	runnerStarted atomic.Bool
	// shutdownErr is the first Shutdown's result.
	shutdownErr error
	policyCh    chan struct{} // poked when the policy changes
	drainCh     chan struct{} // closed when a drain starts
	stopOnce    sync.Once
	stopRun     chan struct{}
	runDone     chan struct{}
	readiness   *readiness

	httpSrv, adminSrv *http.Server
	grpcSrv           *grpc.Server
	httpLn, adminLn   net.Listener
	grpcLn            net.Listener
	serveErr          chan error
}

// New builds a daemon; Start runs it.
func New(cfg Config) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	cfg, err := cfg.Derived()
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		log:      log,
		policyCh: make(chan struct{}, 1),
		drainCh:  make(chan struct{}),
		stopRun:  make(chan struct{}),
		runDone:  make(chan struct{}),
		serveErr: make(chan error, 3),
	}
	n.hlth = newPeerHealth(time.Now, func() int {
		if n.cl == nil {
			return 0
		}
		return n.cl.Members() - 1
	})
	n.readiness = newReadiness(n)
	if n.flows, err = flow.NewSampler(flow.DefaultConfig()); err != nil {
		return nil, err
	}
	p, _ := policy.Lookup(cfg.Policy)
	n.pol.Store(&policyState{p: p, activation: cfg.ActivationInterval})

	if cfg.Role == cluster.RoleNode {
		qc := cfg.Queue
		if err := n.installAdmission(&qc); err != nil {
			return nil, err
		}
		if err := n.installAffinity(&qc); err != nil {
			return nil, err
		}
		q, err := queue.New(qc)
		if err != nil {
			return nil, err
		}
		n.q = q
		if n.cost, err = newCostState(cfg); err != nil {
			return nil, err
		}
	}
	n.m = metrics.New(metrics.Live{
		QueueLength: func() float64 { return float64(n.waiting()) },
		InFlight:    func() float64 { return float64(n.inFlight()) },
		Members: func() float64 {
			if n.cl == nil {
				return 0
			}
			return float64(n.cl.Members())
		},
		ViewAges:    n.viewAges,
		Concurrency: func() float64 { return float64(n.Concurrency()) },
		RouteCosts:  n.routeCosts,
		Work:        func() float64 { return n.work().Seconds() },
		GossipDropped: func() map[string]float64 {
			if n.cl == nil {
				return nil
			}
			st := n.cl.Stats()
			return map[string]float64{"malformed": float64(st.DroppedMalformed), "foreign": float64(st.DroppedForeign)}
		},
		CohortPicks: n.cohortPicks,
	})
	n.m.SetPolicy(p.Name, 0)
	n.m.SetNodeInfo(cfg.NodeName, cfg.Role, Version)
	tc, err := transfer.NewClient(cfg.Transfer)
	if err != nil {
		return nil, err
	}
	n.tc = tc
	return n, nil
}

func (n *Node) waiting() int {
	if n.q == nil {
		if n.disp == nil {
			return 0
		}
		return n.disp.Held()
	}
	return n.q.Waiting()
}

func (n *Node) inFlight() int {
	if n.q == nil {
		if n.disp == nil {
			return 0
		}
		total := 0
		for _, v := range n.disp.Outstanding() {
			total += v
		}
		return total
	}
	return n.q.InFlight()
}

// Load implements cluster.LocalState.
func (n *Node) Load() int {
	if n.q == nil {
		return 0
	}
	return n.q.Load()
}

// Concurrency implements cluster.LocalState.
func (n *Node) Concurrency() int {
	if n.q == nil {
		return 0
	}
	return n.q.Concurrency()
}

// Policy implements cluster.LocalState and control.PolicyHolder: the policy in
// force, its epoch and activation interval.
func (n *Node) Policy() cluster.PolicyStamp {
	s := n.pol.Load()
	return cluster.PolicyStamp{Name: s.p.Name, Epoch: s.epoch, ActivationInterval: s.activation}
}

// Extras implements cluster.LocalState: what the node gossips beyond its
// load and policy: the work load index (work.go) and whether the app is
// ready (health.go).
func (n *Node) Extras() cluster.Extras {
	x := n.extras()
	x.Unavailable = n.q != nil && !n.readiness.ready()
	return x
}

// The cluster layer reads the node's load and policy directly.
var _ cluster.LocalState = (*Node)(nil)

// Start binds every listener, joins the cluster and starts serving.
func (n *Node) Start() error {
	var err error
	if n.httpLn, err = net.Listen("tcp", n.cfg.Listen); err != nil {
		return fmt.Errorf("listen %s: %w", n.cfg.Listen, err)
	}
	if n.cfg.MaxConnections > 0 {
		n.httpLn = netutil.LimitListener(n.httpLn, n.cfg.MaxConnections)
	}
	n.httpLn = proxy.FramingGuard(n.httpLn, n.cfg.MaxHeaderBytes)
	if n.adminLn, err = net.Listen("tcp", n.cfg.Admin); err != nil {
		n.closeListeners()
		return fmt.Errorf("admin listen %s: %w", n.cfg.Admin, err)
	}
	if n.grpcLn, err = net.Listen("tcp", n.cfg.GRPC); err != nil {
		n.closeListeners()
		return fmt.Errorf("grpc listen %s: %w", n.cfg.GRPC, err)
	}
	ccfg := n.cfg.Cluster
	if ccfg.GRPCAddr == "" {
		ccfg.GRPCAddr = advertisable(n.grpcLn.Addr().String(), ccfg.Advertise, ccfg.GossipAddr)
	}
	if IsLoopback(ccfg.GRPCAddr) && !IsLoopback(ccfg.GossipAddr) && !unspecified(ccfg.GossipAddr) {
		n.closeListeners()
		return fmt.Errorf("gRPC would be advertised as %s while gossip runs on %s: other hosts could not reach it; "+
			"bind --grpc to a reachable address or set --advertise", ccfg.GRPCAddr, ccfg.GossipAddr)
	}
	n.cl, err = cluster.New(ccfg, n)
	if err != nil {
		n.closeListeners()
		return fmt.Errorf("cluster: %w", err)
	}
	n.cl.OnPolicy(func(ps cluster.PolicyStamp) {
		if _, err := n.ApplyPolicy(ps.Name, ps.Epoch, ps.ActivationInterval); err != nil {
			n.log.Warn("ignoring gossiped policy", "policy", ps.Name, "epoch", ps.Epoch, "err", err)
		}
	})

	// gRPC: Transfer + Control on one port.
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(n.cfg.GRPCMaxMessageSize),
		grpc.MaxSendMsgSize(n.cfg.GRPCMaxMessageSize),
	}
	opts = append(opts, auth.ServerOptions(auth.ServerAuth{
		Token:       n.cfg.Control.Token,
		NodeKey:     n.cfg.nodeKey(),
		Authorities: []string{n.cfg.GRPC, n.grpcLn.Addr().String(), ccfg.GRPCAddr},
	})...)
	opts = append(opts, transfer.ServerKeepalive()...)
	if n.cfg.ServerCreds != nil {
		opts = append(opts, grpc.Creds(n.cfg.ServerCreds))
	} else if !IsLoopback(n.cfg.GRPC) {
		n.log.Warn("gRPC port is plaintext beyond loopback (--insecure): transfers and control are unencrypted", "grpc", n.cfg.GRPC)
	}
	if len(n.cfg.Cluster.GossipKey) == 0 && !IsLoopback(n.cfg.Cluster.GossipAddr) {
		n.log.Warn("gossip is unauthenticated beyond loopback (--insecure): anyone who reaches it can join the cluster", "gossip", n.cfg.Cluster.GossipAddr)
	}
	if n.cfg.Control.Token == "" {
		if IsLoopback(n.cfg.GRPC) {
			n.log.Warn("control API is open: no --control-token configured (allowed on loopback only)", "grpc", n.cfg.GRPC)
		}
	}
	n.grpcSrv = grpc.NewServer(opts...)
	n.ctl, err = control.New(n.cfg.Control, control.Roles{Local: n, Policy: n, Members: n.cl, Drainer: n, Keys: n.cl, Dialer: n.tc})
	if err != nil {
		n.stopAll()
		return err
	}
	swdv1.RegisterControlServer(n.grpcSrv, n.ctl)

	var handler http.Handler
	if n.cfg.Role == cluster.RoleNode {
		n.h, err = proxy.New(n.cfg.Proxy, n.q, n.tc, n, n.m)
		if err != nil {
			n.stopAll()
			return err
		}
		n.h.OnTransfer(n.hlth.record)
		n.h.SetBacklog(n.clusterBacklog)
		n.h.SetCosts(n.cost.routes, n.cost.table, n.cost.ledger)
		n.h.SetAppReadiness(n.readiness.ready, n.readiness.markDown)
		if n.router != nil {
			n.h.SetRouter(n.router)
		}
		n.startAdmission()
		ts, err := transfer.NewServer(n.cfg.TransferServer, n.h, n)
		if err != nil {
			n.stopAll()
			return err
		}
		swdv1.RegisterTransferServer(n.grpcSrv, ts)
		handler = n.h
	} else {
		n.disp, err = proxy.NewDispatcher(n.cfg.Dispatcher, n.tc, n.backends, n.picker, n.m)
		if err != nil {
			n.stopAll()
			return err
		}
		n.disp.OnTransfer(n.hlth.record)
		n.disp.HoldWith(n.holder)
		handler = n.disp
	}

	if n.cfg.Role == cluster.RoleNode {
		go n.readiness.run(n.stopRun)
	}
	n.httpSrv = n.newHTTPServer(handler)
	n.adminSrv = &http.Server{Handler: n.adminMux(), ReadHeaderTimeout: 5 * time.Second}

	if n.cfg.Role == cluster.RoleNode {
		// Before serving: a transfer answering a pull reads the handler's
		// pull holds (SetPullHolds).
		n.startPulling()
	}
	go func() { n.serveErr <- ignoreClosed(n.grpcSrv.Serve(n.grpcLn)) }()
	go func() { n.serveErr <- ignoreClosed(n.adminSrv.Serve(n.adminLn)) }()
	go func() { n.serveErr <- ignoreClosed(n.httpSrv.Serve(n.httpLn)) }()
	n.runnerStarted.Store(true)
	go n.runPolicy()
	go n.runFlows()
	n.log.Info("swd started", "node", n.cfg.NodeName, "role", n.cfg.Role, "listen", n.httpLn.Addr().String(),
		"grpc", n.grpcLn.Addr().String(), "admin", n.adminLn.Addr().String(), "policy", n.pol.Load().p.Name,
		"concurrency", n.Concurrency(), "app", n.cfg.Proxy.App)
	return nil
}

// advertisable is the gRPC address other members dial: the bound address,
// or, when it is a wildcard, the --advertise host, else the gossip bind host
// if it is a specific address, else this host's private IP, else loopback.
func advertisable(bound, advertise, gossip string) string {
	host, port, _ := net.SplitHostPort(bound)
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsUnspecified() {
		return bound
	}
	if advertise != "" {
		ah, _, err := net.SplitHostPort(advertise)
		if err != nil {
			ah = strings.Trim(advertise, "[]") // a host without a port
		}
		return net.JoinHostPort(ah, port)
	}
	if gh, _, err := net.SplitHostPort(gossip); err == nil && gh != "" && !unspecified(gossip) {
		return net.JoinHostPort(gh, port)
	}
	if priv, err := sockaddr.GetPrivateIP(); err == nil && priv != "" {
		return net.JoinHostPort(priv, port)
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// unspecified reports whether addr's host is empty or a wildcard address.
func unspecified(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

func ignoreClosed(err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

func (n *Node) newHTTPServer(h http.Handler) *http.Server {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &protos,
		MaxHeaderBytes:    n.cfg.MaxHeaderBytes,
		ReadHeaderTimeout: n.cfg.ReadHeaderTimeout,
		IdleTimeout:       n.cfg.IdleTimeout,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: n.cfg.MaxConcurrentStreams},
		ErrorLog:          slog.NewLogLogger(n.log.Handler(), slog.LevelDebug),
	}
}

func (n *Node) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", n.readiness.serve)
	mux.Handle("GET /metrics", n.m.Handler())
	registerUI(mux, n)
	if n.cfg.Pprof {
		// No /debug/pprof/cmdline: the command line holds secrets
		// (--control-token, --gossip-key) and the admin port has no auth.
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Addrs reports the bound addresses (useful with port 0).
func (n *Node) Addrs() (listen, grpc, admin string) {
	return n.httpLn.Addr().String(), n.grpcLn.Addr().String(), n.adminLn.Addr().String()
}

// Errors reports fatal serve errors.
func (n *Node) Errors() <-chan error { return n.serveErr }

// Cluster returns the cluster layer (for tests and tools).
func (n *Node) Cluster() *cluster.Cluster { return n.cl }

// Queue returns the local queue (nil for a dispatcher).
func (n *Node) Queue() *queue.Queue { return n.q }

// Dispatcher returns the dispatcher front door (nil for a node).
func (n *Node) Dispatcher() *proxy.Dispatcher { return n.disp }

// Metrics returns the daemon's metrics.
func (n *Node) Metrics() *metrics.Metrics { return n.m }

// GRPCAddr implements proxy.Peers.
func (n *Node) GRPCAddr(name string) (string, bool) {
	p, ok := n.cl.Peer(name)
	if !ok || p.GRPCAddr == "" {
		return "", false
	}
	return p.GRPCAddr, true
}

// IsMember implements transfer.MembershipChecker.
func (n *Node) IsMember(name string) bool { return n.cl != nil && n.cl.IsMember(name) }

// backends lists the nodes a dispatcher may send to, in ring order: every
// alive ring member that is not ejected for failing transfers and whose app
// is ready (by gossip). A dispatcher
// keeps exact counts itself, so a node whose load gossip is late (a busy
// machine) is still a backend; memberlist's failure detection and the
// peer-health ejection take dead ones out.
func (n *Node) backends() []proxy.Backend {
	peers := n.cl.Peers()
	out := make([]proxy.Backend, 0, len(peers))
	for _, p := range peers {
		if p.RingID < 0 || p.GRPCAddr == "" || !n.hlth.healthy(p.Name) || p.Unavailable {
			continue
		}
		out = append(out, proxy.Backend{Name: p.Name, GRPCAddr: p.GRPCAddr, Concurrency: p.Concurrency})
	}
	return out // Peers is sorted by name: ring order
}

// clusterBacklog counts the requests waiting and the slots serving them
// over every node this node could move work to (itself when no transfer
// policy runs).
func (n *Node) clusterBacklog() (ahead, slots int) {
	st := n.pol.Load()
	if st.p.Kind != policy.KindTransfer || n.draining.Load() {
		return n.q.Waiting(), n.q.Concurrency()
	}
	v := n.planView(st)
	for i, nl := range v.Nodes {
		if nl.Known || i == v.Self {
			ahead += nl.Waiting()
			slots += max(nl.Concurrency, 1)
		}
	}
	return ahead, slots
}

func (n *Node) picker() policy.Picker {
	if p := n.pol.Load().p; p.Kind == policy.KindDispatch {
		return p.Picker
	}
	return policy.PickerFunc(policy.RoundRobin)
}

// holder is the current policy's Holder (cq), nil when it does not hold.
func (n *Node) holder() policy.Holder {
	if p := n.pol.Load().p; p.Kind == policy.KindDispatch {
		return p.Holder
	}
	return nil
}

func (n *Node) viewAges() map[string]float64 {
	if n.cl == nil {
		return nil
	}
	out := map[string]float64{}
	for _, p := range n.cl.Peers() {
		if p.Name != n.cfg.NodeName && p.RingID >= 0 && (p.Known || p.Age > 0) {
			out[p.Name] = p.Age.Seconds()
		}
	}
	return out
}

// ApplyPolicy implements control.PolicyHolder: a higher epoch wins; the same epoch
// and name is accepted idempotently.
func (n *Node) ApplyPolicy(name string, epoch int64, activation time.Duration) (cluster.PolicyStamp, error) {
	p, err := policy.Lookup(name)
	if err != nil {
		return n.Policy(), err
	}
	if activation <= 0 {
		activation = n.pol.Load().activation
	}
	if now := time.Now().UnixMilli(); epoch > now+cluster.MaxEpochLead.Milliseconds() {
		return n.Policy(), fmt.Errorf("policy epoch %d (%s) is more than %s ahead of this node's clock (%d): ignored",
			epoch, name, cluster.MaxEpochLead, now)
	}
	for {
		cur := n.pol.Load()
		if epoch < cur.epoch || (epoch == cur.epoch && name != cur.p.Name) {
			return n.Policy(), fmt.Errorf("stale policy epoch %d (%s): node runs epoch %d (%s)", epoch, name, cur.epoch, cur.p.Name)
		}
		if epoch == cur.epoch && activation == cur.activation {
			return n.Policy(), nil
		}
		next := &policyState{p: p, epoch: epoch, activation: activation}
		if n.pol.CompareAndSwap(cur, next) {
			n.bumpEpoch(epoch)
			n.syncOvertake()
			n.m.SetPolicy(name, epoch)
			n.log.Info("policy changed", "policy", name, "epoch", epoch, "activation_interval", activation.String())
			select {
			case n.policyCh <- struct{}{}:
			default:
			}
			return n.Policy(), nil
		}
	}
}

func (n *Node) bumpEpoch(e int64) {
	for {
		cur := n.maxEpoch.Load()
		if e <= cur || n.maxEpoch.CompareAndSwap(cur, e) {
			return
		}
	}
}

// NextEpoch implements control.PolicyHolder: wall-clock milliseconds, but always
// above every epoch this node has seen (its own and gossiped ones), except
// gossiped epochs more than cluster.MaxEpochLead ahead of its clock, which
// it ignores: so an operator's switch always wins over them. Epochs are
// wall-clock milliseconds, so an honest one is ahead only by the clock
// difference between nodes (and a millisecond per switch made faster than
// one a millisecond); one further ahead was made up.
func (n *Node) NextEpoch() int64 {
	now := time.Now().UnixMilli()
	seen := n.maxEpoch.Load()
	if n.cl != nil {
		for _, p := range n.cl.Peers() {
			if p.Policy.Epoch <= now+cluster.MaxEpochLead.Milliseconds() {
				seen = max(seen, p.Policy.Epoch)
			}
		}
	}
	return max(now, seen+1)
}

// Name implements control.Local.
func (n *Node) Name() string { return n.cfg.NodeName }

// Status implements control.Local: the daemon's own state.
func (n *Node) Status() control.Status {
	return control.Status{
		Role:        n.cfg.Role,
		QueueLength: n.waiting(),
		InFlight:    n.inFlight(),
		Concurrency: n.Concurrency(),
		Counters:    counters(n.m.Snapshot(), true),
		Draining:    n.draining.Load(),
		Version:     Version,
		Routes:      n.routeStats(),
	}
}

// Drain implements control.Drainer: it starts a graceful drain in the
// background (as SIGTERM does) and reports what was queued.
func (n *Node) Drain() (waiting, inFlight int) {
	w, f := n.waiting(), n.inFlight()
	go func() { _ = n.Shutdown(context.Background()) }()
	return w, f
}

func (n *Node) closeListeners() {
	for _, l := range []net.Listener{n.httpLn, n.adminLn, n.grpcLn} {
		if l != nil {
			_ = l.Close()
		}
	}
}

func (n *Node) stopAll() {
	n.closeListeners()
	if n.cl != nil {
		_ = n.cl.Shutdown()
	}
}

// counters keys the counters of s that saw an event as swdctl status and
// /ui show them: "requests/<outcome>", "rejections/<reason>" and, with
// transfers, "transfers/<direction>/<outcome>/<peer>".
func counters(s metrics.Snapshot, transfers bool) map[string]uint64 {
	out := map[string]uint64{}
	for o, v := range s.Requests {
		if v > 0 {
			out["requests/"+string(o)] = v
		}
	}
	for r, v := range s.Rejections {
		if v > 0 {
			out["rejections/"+string(r)] = v
		}
	}
	for r, v := range s.Pulls {
		if v > 0 {
			out["pulls/"+string(r)] = v
		}
	}
	if transfers {
		for _, t := range s.Transfers {
			out["transfers/"+string(t.Direction)+"/"+string(t.Outcome)+"/"+t.Peer] = t.Count
		}
	}
	return out
}
