package main

import (
	"bytes"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/results"
)

func newReportCmd() *cobra.Command {
	var (
		opt   results.ReportOptions
		table tableFlags
	)
	cmd := &cobra.Command{
		Use:   "report DIR",
		Short: "Print a comparison table of the runs stored in a results directory",
		Long: `report reads every finished run under DIR (one sweep's directory, or a results
directory holding several) and prints the chosen metrics with the chosen axes as rows
and columns.

The table of one row per run is fitted to the terminal (see --width): it shows the
axes that tell the runs apart and the key figures, and when that is still too wide,
abbreviates the headings, then drops figures (scaling eff., step time, memory
saving, MFU, peak memory, in this order; tokens/s/rank stays), then cuts long text
cells with "…"; a note names what is not shown. --wide, Markdown, CSV and JSON
hold every column.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			width, err := table.resolve(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			opt.Width = width
			runs, err := results.Load(args[0])
			if err != nil {
				return usageError(err)
			}
			if err := results.Report(cmd.OutOrStdout(), runs, opt); err != nil {
				return usageError(err)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&opt.Rows, "rows", nil, "axes that make the rows, e.g. world_size,batch_per_device")
	cmd.Flags().StringSliceVar(&opt.Cols, "cols", nil, "axes that make the columns, e.g. sharding")
	cmd.Flags().StringSliceVar(&opt.Metrics, "metric", nil, "metrics to show, e.g. tokens_per_s_per_rank,peak_mem_reserved_bytes")
	cmd.Flags().StringVar(&opt.Format, "format", "table", "table, markdown, csv or json")
	table.add(cmd)
	return cmd
}

func newExportCmd() *cobra.Command {
	var (
		format string
		output string
	)
	cmd := &cobra.Command{
		Use:   "export DIR",
		Short: "Write every stored run (config and metrics) as CSV, JSON or Go benchmark format",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var write func(io.Writer, []results.Run) error
			switch format {
			case "csv":
				write = results.WriteCSV
			case "json":
				write = results.WriteJSON
			case "benchfmt":
				write = results.WriteBenchfmt
			default:
				return usageError(fmt.Errorf("--format %q: use csv, json or benchfmt", format))
			}
			runs, err := results.Load(args[0])
			if err != nil {
				return usageError(err)
			}
			if output == "" || results.IsStdout(output) {
				if err := write(cmd.OutOrStdout(), runs); err != nil {
					return failure(err)
				}
				return nil
			}
			var buf bytes.Buffer
			if err := write(&buf, runs); err != nil {
				return failure(err)
			}
			if err := writeOutput("-o", output, buf.Bytes(), cmd.OutOrStdout()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "wrote %d runs to %s\n", len(runs), output)
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "csv", "csv, json, or benchfmt (Go benchmark format, for benchstat)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "file to write (default: stdout); - is stdout, a device or FIFO is written through, a regular file replaced atomically")
	return cmd
}
