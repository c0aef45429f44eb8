// Command swdctl is SWD's operator CLI: cluster status, live policy
// switching, offline planning, local clusters and development certificates.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/swd-project/swd/internal/auth"
	"github.com/swd-project/swd/internal/config"
	"github.com/swd-project/swd/internal/policy"
	"github.com/swd-project/swd/internal/tlsutil"
	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

func main() {
	if err := newRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "swdctl:", err)
		os.Exit(1)
	}
}

type globals struct {
	addr    string
	token   string
	output  string
	timeout time.Duration
	tlsCert string
	tlsKey  string
	tlsCA   string
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:   "swdctl",
		Short: "Operate an SWD cluster: status, policies, plans, local clusters",
		Long: `swdctl talks to any swd's control API (--addr, default 127.0.0.1:7070).
Flags also read SWDCTL_<FLAG> environment variables, then SWD_<FLAG>; --addr
also reads SWD_ADDR and --token SWD_CONTROL_TOKEN.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := config.LoadFlags(cmd.Flags(), "SWDCTL", envWithAliases); err != nil {
				return err
			}
			if g.output != "table" && g.output != "json" {
				return fmt.Errorf("-o %q: want table or json", g.output)
			}
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", "127.0.0.1:7070", "gRPC address of any swd (env SWD_ADDR)")
	pf.StringVar(&g.token, "token", "", "control token (env SWD_CONTROL_TOKEN)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&g.timeout, "timeout", 5*time.Second, "deadline for each call")
	pf.StringVar(&g.tlsCert, "tls-cert", "", "client certificate for an mTLS gRPC port")
	pf.StringVar(&g.tlsKey, "tls-key", "", "key for --tls-cert")
	pf.StringVar(&g.tlsCA, "tls-ca", "", "CA that signed the nodes' certificates")
	config.AddConfigFlag(pf)
	root.AddCommand(statusCmd(g), nodesCmd(g), policyCmd(g), drainCmd(g), planCmd(g), localCmd(g), certsCmd(g), gossipKeyCmd(g))
	return root
}

// envWithAliases reads SWDCTL_* and the documented aliases SWD_ADDR and
// SWD_CONTROL_TOKEN.
func envWithAliases(k string) (string, bool) {
	if v, ok := os.LookupEnv(k); ok && v != "" {
		return v, true
	}
	switch k {
	case "SWDCTL_ADDR":
		return os.LookupEnv("SWD_ADDR")
	case "SWDCTL_TOKEN":
		return os.LookupEnv("SWD_CONTROL_TOKEN")
	case "SWDCTL_CONFIG":
		return "", false
	}
	// The interfaces spec's SWD_<FLAG> also works (e.g. SWD_TLS_CERT), so
	// swdctl run beside an swd picks up the same certificate settings.
	if name, ok := strings.CutPrefix(k, "SWDCTL_"); ok {
		if v, ok := os.LookupEnv("SWD_" + name); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

func (g *globals) client() (swdv1.ControlClient, func(), error) {
	opts := []grpc.DialOption{}
	if g.tlsCert != "" || g.tlsKey != "" || g.tlsCA != "" {
		opt, err := tlsutil.ClientOption(g.tlsCert, g.tlsKey, g.tlsCA)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, opt)
	} else {
		opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if g.token != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(auth.Bearer{Token: g.token, Secure: g.tlsCA != ""}))
	}
	cc, err := grpc.NewClient(g.addr, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("bad --addr %q: %w", g.addr, err)
	}
	return swdv1.NewControlClient(cc), func() { _ = cc.Close() }, nil
}

func (g *globals) ctx(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return context.WithTimeout(cmd.Context(), g.timeout)
}

// explain turns gRPC errors into messages that say what to do.
func (g *globals) explain(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		return fmt.Errorf("cannot reach swd at %s (%s): is it running? set --addr or SWD_ADDR", g.addr, st.Message())
	case codes.Unauthenticated:
		return fmt.Errorf("swd at %s refused the control token: pass --token or set SWD_CONTROL_TOKEN", g.addr)
	}
	return fmt.Errorf("%s: %s", strings.ToLower(st.Code().String()), st.Message())
}

// call dials the control API, makes one call (a method expression such as
// swdv1.ControlClient.Status) within the --timeout deadline, and closes the
// connection. A gRPC error comes back explained.
func call[Req, Resp any](g *globals, cmd *cobra.Command,
	rpc func(swdv1.ControlClient, context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	var zero Resp
	cl, closeFn, err := g.client()
	if err != nil {
		return zero, err
	}
	defer closeFn()
	ctx, cancel := g.ctx(cmd)
	defer cancel()
	resp, err := rpc(cl, ctx, req)
	if err != nil {
		return zero, g.explain(err)
	}
	return resp, nil
}

// nodeResult is one member's answer to a change made node by node.
type nodeResult interface {
	GetNode() string
	GetOk() bool
	GetError() string
}

// resultColumns says how printResults shows one kind of nodeResult.
type resultColumns[R nodeResult] struct {
	header  string                 // table columns after NODE and RESULT
	cells   func(R) string         // a row's cells after NODE and RESULT
	json    func(R) map[string]any // a node's JSON object
	failure string                 // ends "N of M nodes ...", the error when some failed
}

// printResults prints the per-node results as a JSON array or a table and
// returns an error naming how many nodes failed, nil if none did.
func printResults[R nodeResult](g *globals, cmd *cobra.Command, results []R, cols resultColumns[R]) error {
	failed := 0
	for _, res := range results {
		if !res.GetOk() {
			failed++
		}
	}
	if g.output == "json" {
		out := []map[string]any{}
		for _, res := range results {
			out = append(out, cols.json(res))
		}
		if err := printJSON(cmd.OutOrStdout(), out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tRESULT\t"+cols.header)
		for _, res := range results {
			result := "ok"
			if !res.GetOk() {
				result = "FAILED: " + res.GetError()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", res.GetNode(), result, cols.cells(res))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes %s", failed, len(results), cols.failure)
	}
	return nil
}

// printJSON writes v as one line of JSON (as the interfaces spec shows for
// `plan`), which scripts and jq read line by line.
func printJSON(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show one node's status and its view of the cluster's load",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := call(g, cmd, swdv1.ControlClient.Status, &swdv1.StatusRequest{})
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if g.output == "json" {
				return printJSON(out, statusJSON(s))
			}
			fmt.Fprintf(out, "node %s (ring %d, %s)  policy %s epoch %d  activation %s\n", s.GetNode(), s.GetRingId(), s.GetRole(),
				s.GetPolicy().GetName(), s.GetPolicy().GetEpoch(), time.Duration(s.GetPolicy().GetActivationIntervalNanos()))
			fmt.Fprintf(out, "queue %d  in flight %d  m %d  members %d  draining %v  version %s\n\n", s.GetQueueLength(), s.GetInFlight(),
				s.GetConcurrency(), s.GetMembers(), s.GetDraining(), s.GetVersion())
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "RING\tNODE\tLOAD\tM\tAGE\tPOLICY")
			for _, v := range s.GetView() {
				age := "stale"
				if v.GetKnown() {
					age = time.Duration(v.GetAgeNanos()).Round(time.Microsecond * 100).String()
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s@%d\n", v.GetRingId(), v.GetName(), v.GetLoad(), v.GetConcurrency(), age, v.GetPolicy(), v.GetEpoch())
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if err := printRoutes(out, s.GetRoutes()); err != nil {
				return err
			}
			keys := make([]string, 0, len(s.GetCounters()))
			for k := range s.GetCounters() {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			if len(keys) > 0 {
				fmt.Fprintln(out)
				for _, k := range keys {
					fmt.Fprintf(out, "%-45s %d\n", k, s.GetCounters()[k])
				}
			}
			return nil
		},
	}
}

type peerJSON struct {
	Name        string  `json:"name"`
	RingID      int32   `json:"ring_id"`
	Load        int64   `json:"load"`
	Concurrency int32   `json:"concurrency"`
	Known       bool    `json:"known"`
	AgeMs       float64 `json:"age_ms"`
	Policy      string  `json:"policy"`
	Epoch       int64   `json:"epoch"`
}

func statusJSON(s *swdv1.StatusResponse) any {
	view := []peerJSON{}
	for _, v := range s.GetView() {
		view = append(view, peerJSON{v.GetName(), v.GetRingId(), v.GetLoad(), v.GetConcurrency(), v.GetKnown(),
			float64(v.GetAgeNanos()) / 1e6, v.GetPolicy(), v.GetEpoch()})
	}
	return map[string]any{
		"node": s.GetNode(), "ring_id": s.GetRingId(), "role": s.GetRole(),
		"policy": policyJSON(s.GetPolicy()), "queue_length": s.GetQueueLength(), "in_flight": s.GetInFlight(),
		"concurrency": s.GetConcurrency(), "members": s.GetMembers(), "draining": s.GetDraining(),
		"version": s.GetVersion(), "view": view, "counters": s.GetCounters(),
		"routes": routesJSON(s.GetRoutes()),
	}
}

func policyJSON(p *swdv1.PolicyState) map[string]any {
	return map[string]any{"name": p.GetName(), "epoch": p.GetEpoch(),
		"activation_interval": time.Duration(p.GetActivationIntervalNanos()).String()}
}

func nodesCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "List the cluster's members as one node sees them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := call(g, cmd, swdv1.ControlClient.Nodes, &swdv1.NodesRequest{})
			if err != nil {
				return err
			}
			ms := r.GetMembers()
			sort.Slice(ms, func(i, j int) bool { return ms[i].GetName() < ms[j].GetName() })
			if g.output == "json" {
				out := []map[string]any{}
				for _, m := range ms {
					out = append(out, map[string]any{"name": m.GetName(), "ring_id": m.GetRingId(), "role": m.GetRole(),
						"state": m.GetState(), "gossip": m.GetGossipAddr(), "grpc": m.GetGrpcAddr()})
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tRING\tROLE\tSTATE\tGOSSIP\tGRPC")
			for _, m := range ms {
				ring := strconv.Itoa(int(m.GetRingId()))
				if m.GetRingId() < 0 {
					ring = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.GetName(), ring, m.GetRole(), m.GetState(), m.GetGossipAddr(), m.GetGrpcAddr())
			}
			return tw.Flush()
		},
	}
}

func policyCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "Get or set the balancing policy"}
	get := &cobra.Command{
		Use:   "get",
		Short: "Show the policy a node runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := call(g, cmd, swdv1.ControlClient.GetPolicy, &swdv1.GetPolicyRequest{})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), policyJSON(p))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s (epoch %d, activation %s)\n", p.GetName(), p.GetEpoch(), time.Duration(p.GetActivationIntervalNanos()))
			return nil
		},
	}
	var clusterWide bool
	var activation time.Duration
	set := &cobra.Command{
		Use:       "set NAME",
		Short:     "Switch a node's policy, or every member's with --cluster",
		Args:      cobra.ExactArgs(1),
		ValidArgs: policy.Names(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := policy.Lookup(args[0]); err != nil {
				return err
			}
			r, err := call(g, cmd, swdv1.ControlClient.SetPolicy,
				&swdv1.SetPolicyRequest{Name: args[0], Cluster: clusterWide, ActivationIntervalNanos: int64(activation)})
			if err != nil {
				return err
			}
			return printResults(g, cmd, r.GetResults(), resultColumns[*swdv1.NodeResult]{
				header: "POLICY\tEPOCH",
				cells: func(res *swdv1.NodeResult) string {
					return fmt.Sprintf("%s\t%d", res.GetState().GetName(), res.GetState().GetEpoch())
				},
				json: func(res *swdv1.NodeResult) map[string]any {
					return map[string]any{"node": res.GetNode(), "addr": res.GetAddr(), "ok": res.GetOk(),
						"error": res.GetError(), "policy": policyJSON(res.GetState())}
				},
				failure: "did not switch; they adopt the new epoch from gossip once reachable",
			})
		},
	}
	set.Flags().BoolVar(&clusterWide, "cluster", false, "switch every member of the cluster")
	set.Flags().DurationVar(&activation, "activation-interval", 0, "also change the activation interval (0 keeps it)")
	cmd.AddCommand(get, set)
	return cmd
}

func drainCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "drain",
		Short: "Drain a node gracefully (as SIGTERM does): it leaves the cluster and exits",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := call(g, cmd, swdv1.ControlClient.Drain, &swdv1.DrainRequest{})
			if err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), map[string]any{"waiting": r.GetWaiting(), "in_flight": r.GetInFlight()})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "draining: %d waiting, %d in flight\n", r.GetWaiting(), r.GetInFlight())
			return nil
		},
	}
}
