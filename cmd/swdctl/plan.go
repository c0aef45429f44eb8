package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/swd-project/swd/internal/policy"
)

func planCmd(g *globals) *cobra.Command {
	var name, loads, costs string
	var m int
	cmd := &cobra.Command{
		Use:   "plan --policy NAME --loads 5,0,3,8 | --costs 310:310:310,10:10:10,,10",
		Short: "Print what every node would transfer if all ran a policy at once on an exact view",
		Long: `plan runs the daemon's own policy code for every node of the given load
vector (node IDs are absolute ring IDs) and prints the transfers and the loads
after them. It contacts no node.

With --costs instead of --loads it plans under --load-index work: each node's
requests are given by their predicted costs in ms, head of the queue first
(colons between requests, commas between nodes); the first --concurrency of a
node's requests are in service and never move. It prints the requests and
the work each transfer carries and every node's requests and work after.`,
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
			plan, err := policy.PlanCluster(planner, vec, m)
			if err != nil {
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
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "policy", "nu", "policy to plan: "+strings.Join(policy.Names(), ", "))
	cmd.Flags().StringVar(&loads, "loads", "", "comma-separated load index of nodes 0..n-1")
	cmd.Flags().StringVar(&costs, "costs", "", "plan on work: each node's requests' predicted costs in ms, head first, colon-separated; nodes comma-separated")
	cmd.Flags().IntVar(&m, "concurrency", 1, "m of every node: requests in service that cannot move")
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
