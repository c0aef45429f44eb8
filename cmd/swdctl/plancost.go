package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/swd-project/swd/internal/policy"
)

// parseCosts parses `swdctl plan --costs`: nodes separated by commas, each
// node's requests' predicted costs in ms separated by colons, head of the
// queue first ("310:10,10,,310:310": node 2 holds nothing).
func parseCosts(s string) ([][]time.Duration, error) {
	nodes := strings.Split(s, ",")
	out := make([][]time.Duration, len(nodes))
	for i, n := range nodes {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		for k, c := range strings.Split(n, ":") {
			ms, err := strconv.ParseFloat(strings.TrimSpace(c), 64)
			if err != nil || !(ms >= 0) || ms > 1e9 {
				return nil, fmt.Errorf("--costs: request %d of node %d (%q) is not a non-negative number of ms", k, i, c)
			}
			out[i] = append(out[i], time.Duration(ms*float64(time.Millisecond)))
		}
	}
	return out, nil
}

// planWork prints the plan of --costs: what every node would move under
// the work load index.
func planWork(out io.Writer, planner policy.Planner, costs [][]time.Duration, m int, jsonOut bool) error {
	plan, err := policy.PlanClusterWork(planner, costs, m)
	if err != nil {
		return err
	}
	if jsonOut {
		return printJSON(out, plan)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tTO\tCOUNT\tWORK")
	for _, t := range plan.Transfers {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%gms\n", t.From, t.To, t.Count, t.WorkMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	before := make([]float64, len(costs))
	counts := make([]int, len(costs))
	for i, cs := range costs {
		counts[i] = len(cs)
		for _, c := range cs {
			before[i] += float64(c) / float64(time.Millisecond)
		}
	}
	fmt.Fprintf(out, "before %v requests, work %v ms\nafter  %v requests, work %v ms\n", counts, before, plan.After, plan.AfterWorkMs)
	return nil
}
