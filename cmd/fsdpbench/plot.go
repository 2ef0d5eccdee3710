package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/results/plot"
)

func newPlotCmd() *cobra.Command {
	var (
		out, baseline, history, metric string
		rules                          []string
	)
	cmd := &cobra.Command{
		Use:   "plot DIR",
		Short: "Draw the results as PNG and SVG charts: scaling, memory, batch search, checkpoint, breakdown, regression, trend",
		Long: `plot reads the runs under DIR and writes each chart that applies to them, as PNG and
SVG, into --out (default DIR/plots, or plots/ beside an exported JSON file):

  scaling     tokens/s per rank and scaling efficiency vs world size, one line per strategy
  memory      peak allocated and reserved memory per rank, bars by strategy and world size
  batch       throughput and peak memory vs batch per device, checkpointing on and off
  checkpoint  checkpoint save and load seconds and the largest rank's bytes vs world size
  breakdown   where each run's step went: a bar per run, stacked compute / exposed
              communication / other, labelled with the axes that vary
  regression  with --baseline A: each run's change vs A, against the gate's limits
  trend       with --history H: --metric over the nights stored in H (fsdpbench gate --history)`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			runs, err := results.LoadPath(args[0])
			if err != nil {
				return usageError(err)
			}
			if out == "" {
				out = filepath.Join(args[0], "plots")
				if st, err := os.Stat(args[0]); err == nil && !st.IsDir() {
					// An exported JSON file: the charts go beside it, not under it.
					out = filepath.Join(filepath.Dir(args[0]), "plots")
				}
			}
			figs, err := plot.All(runs)
			if err != nil {
				return failure(err)
			}
			if baseline != "" {
				ruleList, err := results.ParseRules(rules, "--rule")
				if err != nil {
					return usageError(err)
				}
				base, err := results.LoadPath(baseline)
				if err != nil {
					return usageError(fmt.Errorf("--baseline: %w", err))
				}
				cmp, err := results.Compare(base, runs, results.CompareOptions{
					Metrics: []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}})
				if err != nil {
					return usageError(err)
				}
				f, err := plot.Regression(cmp, ruleList)
				if err != nil {
					return failure(err)
				}
				figs = append(figs, f)
			}
			if history != "" {
				f, err := plot.TrendHistory(history, metric)
				if err != nil {
					return usageError(err)
				}
				figs = append(figs, f)
			}
			if len(figs) == 0 {
				return usageError(fmt.Errorf("%s: no chart applies (one world size, one batch, no memory figures); "+
					"add --baseline or --history, or sweep more points", args[0]))
			}
			paths, err := plot.WriteAll(out, figs)
			if err != nil {
				return failure(err)
			}
			for _, p := range paths {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "", "directory for the charts (default DIR/plots)")
	cmd.Flags().StringVar(&baseline, "baseline", "", "baseline results (directory or exported JSON): adds the regression chart")
	cmd.Flags().StringArrayVar(&rules, "rule", nil, "gate rules whose limits the regression chart draws (default 5% drop, 3% rise)")
	cmd.Flags().StringVar(&history, "history", "", "history `DIR` that fsdpbench gate --history keeps: adds the trend chart")
	cmd.Flags().StringVar(&metric, "metric", "tokens_per_s_per_rank", "metric of the trend chart")
	return cmd
}
