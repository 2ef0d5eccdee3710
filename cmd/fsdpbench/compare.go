package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
)

func newCompareCmd() *cobra.Command {
	var (
		metrics []string
		format  string
		alpha   float64
		table   tableFlags
	)
	cmd := &cobra.Command{
		Use:   "compare A B",
		Short: "Compare two sets of results side by side, benchstat style",
		Long: `compare matches the runs of B with A's by run ID and prints, per metric, each run's
figure on both sides and the change, with a geometric-mean row. A and B are results
directories or files written by ` + "`fsdpbench export --format json`" + `.

With at least 6 repeats per side a figure is the median ± its 95% CI, and the change
carries the Mann-Whitney U p-value ("~" when not significant), as benchstat prints
them; with fewer, the change is the headline figures' ratio, marked ¹.

Tables fit the terminal as report's do (--width, $COLUMNS, --wide): run IDs lose
their hash when the slugs alone tell the runs apart, then long headings and run
names are cut with "…".`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !(alpha > 0 && alpha < 1) {
				return usageError(fmt.Errorf("--alpha %v: give a significance level between 0 and 1 (exclusive), such as 0.05", alpha))
			}
			base, err := results.LoadPath(args[0])
			if err != nil {
				return usageError(err)
			}
			cur, err := results.LoadPath(args[1])
			if err != nil {
				return usageError(err)
			}
			cmp, err := results.Compare(base, cur, results.CompareOptions{Metrics: metrics, Alpha: alpha,
				BaselineName: args[0], CurrentName: args[1]})
			if err != nil {
				return usageError(err)
			}
			width, err := table.resolve(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			if err := cmp.Fit(width); err != nil {
				return usageError(err)
			}
			if err := cmp.Write(cmd.OutOrStdout(), format); err != nil {
				return usageError(fmt.Errorf("--format: %w", err))
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&metrics, "metric", nil, "metrics to compare (default: throughput, step time, MFU, peak memory)")
	cmd.Flags().StringVar(&format, "format", results.FormatTable, "table, markdown or json")
	cmd.Flags().Float64Var(&alpha, "alpha", results.DefaultAlpha, "significance level")
	table.add(cmd)
	return cmd
}
