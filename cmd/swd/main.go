// Command swd is the Server Wrapper Daemon: one per node, in front of the
// local application. See README.md and `swd --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/affinity"
	"github.com/swd-project/swd/internal/cluster"
	"github.com/swd-project/swd/internal/cohort"
	"github.com/swd-project/swd/internal/config"
	"github.com/swd-project/swd/internal/cpuset"
	"github.com/swd-project/swd/internal/node"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/tlsutil"
)

func main() {
	if err := newCommand(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "swd:", err)
		os.Exit(2)
	}
}

type flags struct {
	cfg        node.Config
	joinList   []string
	gossipKey  string
	tokenFile  string
	logLevel   string
	logFormat  string
	tlsCert    string
	tlsKey     string
	tlsCA      string
	staleAfter time.Duration
	hostName   string
	fwd        forwarding
	cpus       string
	// affinity and cohortPriority are parsed in run (docs/affinity.md).
	affinity, cohortPriority string
}

// forwarding holds the flags a node's front (node.Config.Proxy) and a
// dispatcher's (node.Config.Dispatcher) share; run sets both from them, and
// the role's own is validated.
type forwarding struct {
	maxTransferBody int64
	idempotent      []string
	retryAfter      time.Duration
	transferTimeout time.Duration
}

func (w forwarding) apply(c *node.Config) {
	c.Proxy.MaxTransferBody, c.Dispatcher.MaxTransferBody = w.maxTransferBody, w.maxTransferBody
	c.Proxy.IdempotentMethods, c.Dispatcher.IdempotentMethods = w.idempotent, w.idempotent
	c.Proxy.RetryAfter, c.Dispatcher.RetryAfter = w.retryAfter, w.retryAfter
	c.Proxy.TransferTimeout, c.Dispatcher.TransferTimeout = w.transferTimeout, w.transferTimeout
}

func newCommand(stdout, stderr io.Writer) *cobra.Command {
	f := &flags{cfg: node.DefaultConfig()}
	f.hostName, _ = os.Hostname()
	cmd := &cobra.Command{
		Use:   "swd",
		Short: "Server Wrapper Daemon: queue, balance and transfer requests across a cluster",
		Long: `swd runs on every node in front of the local application. It queues every
HTTP request, hands at most --concurrency of them to the app at once, shares
its load with the other nodes over gossip, and moves waiting requests to
other nodes as the policy decides. The node a client called answers it.

Every flag can also be set with an environment variable SWD_<FLAG> (dashes as
underscores) or in a YAML file given with --config; flags win over the
environment, which wins over the file.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.LoadFlags(cmd.Flags(), "SWD", os.LookupEnv); err != nil {
				return err
			}
			return run(cmd.Context(), f, stderr)
		},
	}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	fs := cmd.Flags()
	c := &f.cfg
	fs.StringVar(&c.Listen, "listen", c.Listen, "HTTP address clients send requests to")
	fs.StringVar(&c.Proxy.App, "app", c.Proxy.App, "the local application's base URL")
	fs.IntVar(&c.Queue.Concurrency, "concurrency", c.Queue.Concurrency, "m: most requests in flight to the app at once")
	fs.IntVar(&c.Queue.Limit, "queue-limit", c.Queue.Limit, "most requests waiting; beyond it, 503 with Retry-After")
	fs.DurationVar(&c.Queue.Timeout, "queue-timeout", c.Queue.Timeout, "longest wait in the queue; beyond it, 503")
	fs.StringVar(&c.NodeName, "node-name", f.hostName, "unique name of this node in the cluster")
	fs.StringVar(&c.GRPC, "grpc", c.GRPC, "transfer + control gRPC address")
	fs.StringVar(&c.Admin, "admin", c.Admin, "admin HTTP address: /metrics, /healthz, /readyz, /ui")
	fs.StringVar(&c.Cluster.GossipAddr, "gossip", c.Cluster.GossipAddr, "memberlist bind address (host:port)")
	fs.StringVar(&c.Cluster.Advertise, "advertise", "", "address (host:port) other nodes reach this node's gossip on, if not the bind address")
	fs.StringSliceVar(&f.joinList, "join", nil, "comma-separated seed addresses or DNS names to join (retried with backoff)")
	fs.StringVar(&c.Policy, "policy", c.Policy, "initial policy: "+strings.Join(policy.Names(), ", "))
	fs.StringVar(&c.Role, "role", c.Role, `"node", or "dispatcher" (front door for rr/ct/cq, no local app)`)
	fs.DurationVar(&c.Cluster.GossipInterval, "gossip-interval", c.Cluster.GossipInterval, "how often load is disseminated")
	fs.DurationVar(&f.staleAfter, "stale-after", 0, "age after which a peer's load counts as unknown (default 5 gossip intervals)")
	fs.DurationVar(&c.ActivationInterval, "activation-interval", c.ActivationInterval, "how often a transfer policy runs")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "longest graceful drain on SIGTERM before answering the rest with 503")
	fs.Int64Var(&c.Proxy.MaxBody, "max-body", c.Proxy.MaxBody, "largest request body in bytes; beyond it, 413")
	fs.Int64Var(&f.fwd.maxTransferBody, "max-transfer-body", c.Proxy.MaxTransferBody, "largest body held in memory (moved in one transfer message); larger bodies are spooled to a file and move by a streamed transfer")
	fs.IntVar(&c.Proxy.MaxHops, "max-hops", c.Proxy.MaxHops, "how many times a request may be transferred (0 disables transfers)")
	fs.StringVar(&c.Proxy.Placement, "placement", c.Proxy.Placement, `where a transferred request lands in the target's queue: "arrival" (by original arrival time) or "tail"`)
	fs.StringSliceVar(&f.fwd.idempotent, "idempotent-methods", c.Proxy.IdempotentMethods, "methods run locally once if a transfer fails after the peer may have started them")
	fs.DurationVar(&f.fwd.retryAfter, "retry-after", c.Proxy.RetryAfter, "Retry-After advice on 503 answers")
	fs.DurationVar(&f.fwd.transferTimeout, "transfer-timeout", c.Proxy.TransferTimeout, "longest a transfer may take, from hand-off to the end of the peer's answer")
	fs.BoolVar(&c.Proxy.EarlyReject, "early-reject", c.Proxy.EarlyReject, "answer 503 at once when the predicted wait exceeds --queue-timeout")
	fs.StringVar(&c.TransferCost, "transfer-cost", c.TransferCost, `"measured": move a request only if the wait it saves exceeds its measured hand-off cost for its body size; "off": move what the policy plans`)
	fs.StringVar(&f.gossipKey, "gossip-key", "", "base64 AES key (16, 24 or 32 bytes) that encrypts gossip")
	fs.StringVar(&c.Control.Token, "control-token", "", "token required on the control API (required when --grpc is beyond loopback)")
	fs.StringVar(&f.tokenFile, "control-token-file", "", "file holding the control token")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "PEM certificate for the gRPC port (mTLS)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "PEM private key for --tls-cert")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "PEM CA that signs every node's certificate")
	fs.BoolVar(&c.Insecure, "insecure", false, "allow a plaintext gRPC port, and gossip without --gossip-key, beyond loopback")
	fs.BoolVar(&c.Pprof, "pprof", false, "serve /debug/pprof on the admin port")
	fs.IntVar(&c.MaxHeaderBytes, "max-header-bytes", c.MaxHeaderBytes, "largest request header block")
	fs.DurationVar(&c.ReadHeaderTimeout, "read-header-timeout", c.ReadHeaderTimeout, "time allowed to read request headers (slowloris guard)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "keep-alive idle timeout")
	fs.IntVar(&c.MaxConcurrentStreams, "max-concurrent-streams", c.MaxConcurrentStreams, "most concurrent HTTP/2 streams per client connection")
	fs.IntVar(&c.MaxConnections, "max-connections", 0, "most concurrent client connections (0: no cap); an idle keep-alive connection costs about 24 KiB")
	fs.IntVar(&c.GRPCMaxMessageSize, "grpc-max-message", c.GRPCMaxMessageSize, "largest gRPC message in bytes")
	fs.StringVar(&c.LoadIndex, "load-index", c.LoadIndex, `what transfer policies plan on and gossip carries: "count" (requests) or "work" (predicted work: each request's learnt route cost)`)
	fs.IntVar(&c.Cost.Theta, "cost-theta", c.Cost.Theta, "completions of a route averaged before its learnt cost becomes a moving average (SPLiT's theta)")
	fs.Float64Var(&c.Cost.Weight, "cost-weight", c.Cost.Weight, "the learnt cost's moving-average weight of the old value (SPLiT's w), in [0, 1)")
	fs.StringArrayVar(&c.Routes.Patterns, "route", nil, "a route in net/http ServeMux pattern syntax, e.g. 'GET /items/{id}' (repeatable); other requests are routes by method and path, the first 64 learnt")
	fs.StringVar(&f.cpus, "cpus", "", "pin swd's threads to these CPUs (Linux), e.g. 0 or 0,2-3, to keep it off the app's cores; empty: no pinning")
	fs.StringVar(&f.affinity, "affinity", "", "key of a request for affinity: header:NAME or cookie:NAME; a keyed request runs on its home node (rendezvous hash over the ring) unless that node is past the load bound")
	fs.Float64Var(&c.Affinity.Factor, "affinity-factor", c.Affinity.Factor, "load bound factor c: a node holding c x the mean load plus --affinity-slack takes no more keyed requests (HAProxy's hash-balance-factor / 100)")
	fs.IntVar(&c.Affinity.Slack, "affinity-slack", c.Affinity.Slack, "requests added to the load bound, so that short queues at low load are not overload")
	fs.BoolVar(&c.Cohort.Enabled, "cohort", false, "cache-aware order (needs --affinity): cached keys first, one request per key at the app, a priority class, a starvation bound")
	fs.IntVar(&c.Cohort.Capacity, "cohort-cache", c.Cohort.Capacity, "how many keys the app's cache holds (swd's model of it)")
	fs.DurationVar(&c.Cohort.MaxWait, "cohort-max-wait", c.Cohort.MaxWait, "starvation bound: a request waiting longer since its arrival goes next regardless of cache and class")
	fs.StringVar(&f.cohortPriority, "cohort-priority", "", "high-priority class: requests with header NAME (NAME=VALUE: with that value) go first")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json")
	// Hardening (issue 17): bodies, slots, upgrades.
	fs.Int64Var(&c.Proxy.MaxBufferedBytes, "max-buffered-bytes", c.Proxy.MaxBufferedBytes, "most request body bytes held in memory at once, over all requests; beyond it, 503")
	fs.Int64Var(&c.Proxy.MaxSpoolBytes, "max-spool-bytes", c.Proxy.MaxSpoolBytes, "most bytes of bodies larger than --max-transfer-body spooled to temporary files at once; beyond it, 503")
	fs.StringVar(&c.Proxy.SpoolDir, "spool-dir", "", "directory for spooled request bodies (default the system's temporary directory)")
	fs.DurationVar(&c.Proxy.BodyIdleTimeout, "body-idle-timeout", c.Proxy.BodyIdleTimeout, "longest a client may send no byte of its request body; then 408")
	fs.DurationVar(&c.Proxy.AbandonAfter, "abandon-after", c.Proxy.AbandonAfter, "how long the app may go on with a request whose client left (it keeps its slot) before swd closes the app connection")
	fs.StringVar(&c.Proxy.UpgradeSlot, "upgrade-slot", c.Proxy.UpgradeSlot, `"hold": an upgraded connection (WebSocket) keeps its app slot for its life; "free": the slot is freed once the switch is made`)
	fs.StringVar(&c.TransferSecret, "transfer-secret", "", "cluster secret nodes authenticate transfers to each other with (default: derived from the control token, which never leaves the node)")
	addAdmissionFlags(fs, c)
	config.AddConfigFlag(fs)
	return cmd
}

func run(ctx context.Context, f *flags, stderr io.Writer) error {
	log, err := config.NewLogger(stderr, f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	if f.cpus != "" {
		cpus, err := cpuset.Parse(f.cpus)
		if err == nil {
			err = cpuset.Apply(cpus)
		}
		if err != nil {
			return fmt.Errorf("--cpus: %w", err)
		}
		log.Info("pinned to CPUs", "cpus", cpuset.Format(cpus))
	}
	c := f.cfg
	c.Logger = log
	c.Cluster.Join = f.joinList
	c.Cluster.StaleAfter = f.staleAfter
	f.fwd.apply(&c)
	if c.Affinity.Source, err = affinity.ParseSource(f.affinity); err != nil {
		return fmt.Errorf("--affinity: %w", err)
	}
	if c.Cohort.Priority, err = cohort.ParsePriority(f.cohortPriority); err != nil {
		return err
	}
	if c.Cluster.GossipKey, err = cluster.ParseGossipKey(f.gossipKey); err != nil {
		return fmt.Errorf("--gossip-key: %w", err)
	}
	if f.tokenFile != "" {
		if c.Control.Token != "" {
			return errors.New("give --control-token or --control-token-file, not both")
		}
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return fmt.Errorf("--control-token-file: %w", err)
		}
		c.Control.Token = strings.TrimSpace(string(b))
	}
	if c.Control.Token == "" && !node.IsLoopback(c.GRPC) {
		return fmt.Errorf("--grpc %s listens beyond loopback: set --control-token (or SWD_CONTROL_TOKEN, or --control-token-file)", c.GRPC)
	}
	if f.tlsCert != "" || f.tlsKey != "" || f.tlsCA != "" {
		srv, cli, err := tlsutil.Load(f.tlsCert, f.tlsKey, f.tlsCA)
		if err != nil {
			return err
		}
		c.ServerCreds = srv
		c.Transfer.DialOptions = append(c.Transfer.DialOptions, cli)
	}
	n, err := node.New(c)
	if err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	select {
	case s := <-sigs:
		log.Info("signal received; draining", "signal", s.String())
	case err := <-n.Errors():
		if err != nil {
			log.Error("server failed", "err", err)
			_ = n.Shutdown(context.Background())
			return err
		}
	case <-ctx.Done():
	}
	go func() {
		<-sigs
		log.Warn("second signal: exiting now")
		os.Exit(1)
	}()
	return n.Shutdown(context.Background())
}
