package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/policy"
)

func planCmd(g *globals) *cobra.Command {
	var name, loads, handoff, costs string
	var m int
	var service time.Duration
	var body int64
	cmd := &cobra.Command{
		Use:   "plan --policy NAME --loads 5,0,3,8 | --costs 310:310:310,10:10:10,,10",
		Short: "Print what every node would transfer if all ran a policy at once on an exact view",
		Long: `plan runs the daemon's own policy code for every node of the given load
vector (node IDs are absolute ring IDs) and prints the transfers and the loads
after them. It contacts no node.

With --service (the app's mean service time) it applies the transfer-cost
rule the daemon applies (swd --transfer-cost measured): a request moves only
if the wait it saves exceeds its hand-off cost (--handoff, by body size) for
its body (--body, every waiting request's); moves it keeps home are counted.

With --costs instead of --loads it plans under --load-index work: each node's
requests are given by their predicted costs in ms, head of the queue first
(colons between requests, commas between nodes); the first --concurrency of a
node's requests are in service and never move. It prints the requests and
the work each transfer carries and every node's requests and work after.`,
		Example: `  swdctl plan --policy nu --loads 5,0,3,8
  swdctl plan --policy nu --loads 5,0,3,8 --service 40ms --body 1MiB --handoff 1KiB=0.4ms,1MiB=50ms
  swdctl plan --policy nu --costs 310:310:310,10:10:10,10:10:10,10:10:10`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := policy.Lookup(name)
			if err != nil {
				return err
			}
			if p.Kind != policy.KindTransfer && p.Kind != policy.KindNone {
				return fmt.Errorf("policy %s dispatches arrivals and moves nothing queued; plan a transfer policy (ll, nu, nu-exact) or none", name)
			}
			if (loads == "") == (costs == "") {
				return fmt.Errorf("give --loads (requests per node) or --costs (each request's cost per node), not both or neither")
			}
			planner := p.Planner
			if planner == nil {
				planner = policy.PlannerFunc(func(policy.View) []policy.Move { return nil })
			}
			if costs != "" {
				if service > 0 {
					return fmt.Errorf("--costs plans under the work load index; the transfer-cost rule (--service) is not applied to it")
				}
				cs, err := parseCosts(costs)
				if err != nil {
					return err
				}
				return planWork(cmd.OutOrStdout(), planner, cs, m, g.output == "json")
			}
			vec, err := parseLoads(loads)
			if err != nil {
				return err
			}
			var plan policy.ClusterPlan
			if service > 0 {
				c, err := parseHandoff(handoff)
				if err != nil {
					return err
				}
				c.Service = service
				plan, err = policy.PlanClusterCost(planner, vec, m, body, c)
				if err != nil {
					return err
				}
			} else if plan, err = policy.PlanCluster(planner, vec, m); err != nil {
				return err
			}
			if g.output == "json" {
				return printJSON(cmd.OutOrStdout(), plan)
			}
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "FROM\tTO\tCOUNT")
			for _, t := range plan.Transfers {
				fmt.Fprintf(tw, "%d\t%d\t%d\n", t.From, t.To, t.Count)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(out, "before %v\nafter  %v\n", vec, plan.After)
			if service > 0 {
				fmt.Fprintf(out, "held back by the transfer-cost rule: %d\n", plan.HeldBack)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "policy", "nu", "policy to plan: "+strings.Join(policy.Names(), ", "))
	cmd.Flags().StringVar(&loads, "loads", "", "comma-separated load index of nodes 0..n-1")
	cmd.Flags().StringVar(&costs, "costs", "", "plan on work: each node's requests' predicted costs in ms, head first, colon-separated; nodes comma-separated")
	cmd.Flags().IntVar(&m, "concurrency", 1, "m of every node: requests in service that cannot move")
	cmd.Flags().DurationVar(&service, "service", 0, "the app's mean service time: applies the transfer-cost rule (0: off)")
	cmd.Flags().StringVar(&handoff, "handoff", "", "hand-off cost by body size for the rule, ascending: SIZE=DURATION,... (SIZE in bytes, or with KiB or MiB)")
	cmd.Flags().Var(byteSize{&body}, "body", "body size of every waiting request for the rule (bytes, or with KiB or MiB)")
	_ = cmd.RegisterFlagCompletionFunc("policy", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return policy.Names(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

func parseLoads(s string) ([]int, error) {
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("--loads: element %d (%q) is not a non-negative integer", i, p)
		}
		out = append(out, v)
	}
	if len(out) < 1 {
		return nil, fmt.Errorf("--loads: give at least one load")
	}
	return out, nil
}

// byteSize is a flag of bytes: a number, or one followed by KiB or MiB.
type byteSize struct{ v *int64 }

func (b byteSize) String() string {
	if b.v == nil {
		return "0"
	}
	return strconv.FormatInt(*b.v, 10)
}

func (b byteSize) Set(s string) error {
	v, err := parseBytes(s)
	if err != nil {
		return err
	}
	*b.v = v
	return nil
}

func (byteSize) Type() string { return "bytes" }

func parseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20} {
		if rest, ok := strings.CutSuffix(s, suffix); ok {
			s, mult = rest, m
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a byte size (a non-negative number, optionally with KiB or MiB)", s)
	}
	return v * mult, nil
}

// parseHandoff reads --handoff: SIZE=DURATION pairs, ascending by size.
func parseHandoff(s string) (policy.TransferCost, error) {
	var c policy.TransferCost
	if strings.TrimSpace(s) == "" {
		return c, nil
	}
	for _, part := range strings.Split(s, ",") {
		size, dur, ok := strings.Cut(part, "=")
		if !ok {
			return c, fmt.Errorf("--handoff: %q is not SIZE=DURATION", part)
		}
		n, err := parseBytes(size)
		if err != nil {
			return c, fmt.Errorf("--handoff: %w", err)
		}
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil {
			return c, fmt.Errorf("--handoff: %q: %w", dur, err)
		}
		c.Handoff = append(c.Handoff, policy.SizeCost{MaxBytes: n, Cost: d})
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("--handoff: %w", err)
	}
	return c, nil
}
