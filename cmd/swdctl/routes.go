package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	swdv1 "github.com/swd-project/swd/proto/swd/v1"
)

// printRoutes prints what a node learnt per route (status), if anything.
func printRoutes(out io.Writer, routes []*swdv1.RouteStat) error {
	if len(routes) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tCOST\tSAMPLES\tLIMIT")
	for _, r := range routes {
		limit := "-" // not limited (no per-route admission)
		if r.GetLimit() > 0 {
			limit = fmt.Sprint(r.GetLimit())
		}
		fmt.Fprintf(tw, "%s\t%.3fms\t%d\t%s\n", r.GetName(), r.GetCostSeconds()*1000, r.GetSamples(), limit)
	}
	return tw.Flush()
}

type routeJSON struct {
	Name    string  `json:"name"`
	CostMs  float64 `json:"cost_ms"`
	Samples uint64  `json:"samples"`
	// Limit is the learnt per-route limit (--admission page|sqs), 0 when
	// the route is not limited.
	Limit int32 `json:"limit"`
}

func routesJSON(routes []*swdv1.RouteStat) []routeJSON {
	out := []routeJSON{}
	for _, r := range routes {
		out = append(out, routeJSON{r.GetName(), r.GetCostSeconds() * 1000, r.GetSamples(), r.GetLimit()})
	}
	return out
}
