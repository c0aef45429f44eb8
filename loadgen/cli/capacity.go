package cli

import (
	"github.com/spf13/cobra"

	"github.com/swd-project/swd/loadgen"
)

func newCapacityCommand(e *env) *cobra.Command {
	var rf reportFlags
	var percentile string
	cmd := &cobra.Command{
		Use:   "capacity [flags] FILE.csv",
		Short: "x-th percentile capacity per policy from a results CSV",
		Long: `capacity reads a results CSV (policy,rate,requests,errors,mean_ms,p50_ms,p95_ms,
p99_ms,p995_ms) and prints, per policy, the highest rate whose x-th percentile
response time stays within the limit, interpolating linearly between measured rates.

Rates where the PRT never crosses the limit print as "≥ highest rate"; a PRT already
over the limit at the lowest rate prints as "< lowest rate". With non-monotone data
the first crossing counts. A row whose error fraction exceeds --max-error-rate counts
as over any limit.`,
		Example: `  loadgen capacity --percentile 99 --limit 500ms loadgen-out/results.csv
  loadgen capacity --percentiles 95,99,99.5 --limit-from nu@320 results.csv`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("capacity takes one results CSV file, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if changed(cmd.Flags(), "percentile") {
				if changed(cmd.Flags(), "percentiles") {
					return usagef("give either --percentile or --percentiles, not both")
				}
				rf.percentiles = percentile
			}
			p, err := rf.parse()
			if err != nil {
				return err
			}
			if p.limits.Empty() {
				return usagef("no limit: give --limit DURATION (e.g. 500ms) or --limit-from POLICY@RATE (e.g. nu@320)")
			}
			rows, err := loadgen.ReadCSVFile(args[0])
			if err != nil {
				return err
			}
			report := loadgen.Report{
				Title:        "loadgen capacity: " + args[0],
				Rows:         rows,
				Percentiles:  p.percentiles,
				MaxErrorRate: rf.maxErrorRate,
			}
			report, err = report.WithCapacities(p.limits)
			if err != nil {
				return usageError{err}
			}
			if rf.out != "" && rf.plots {
				if _, err := report.WritePlots(rf.out); err != nil {
					return err
				}
			}
			return report.Write(e.stdout, rf.output)
		},
	}
	rf.add(cmd.Flags(), "", false)
	cmd.Flags().StringVar(&percentile, "percentile", "", "one percentile (same as --percentiles with one value)")
	cmd.Flags().Lookup("out").Usage = "directory for the plots (empty: none)"
	return cmd
}
