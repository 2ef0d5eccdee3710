package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

func newReportCmd() *cobra.Command {
	var (
		opt      results.ReportOptions
		table    tableFlags
		timeline string
	)
	cmd := &cobra.Command{
		Use:   "report DIR | report --timeline RUN",
		Short: "Print a comparison table of the runs stored in a results directory",
		Long: `report reads every finished run under DIR (one sweep's directory, or a results
directory holding several) and prints the chosen metrics with the chosen axes as rows
and columns.

The table of one row per run is fitted to the terminal (see --width): it shows the
axes that tell the runs apart and the key figures, and when that is still too wide,
abbreviates the headings, then drops figures (scaling eff., step time, memory
saving, MFU, peak memory, in this order; tokens/s/rank stays), then cuts long text
cells with "…"; a note names what is not shown. --wide, Markdown, CSV and JSON
hold every column.

With --timeline RUN (a run's directory, runs/<run-id> in a sweep's), report
prints where the run's time went instead: the path of its timeline.json (Chrome
Trace Event format: open it in https://ui.perfetto.dev or chrome://tracing),
and for the run and each rank the median step's compute, collectives (all-gather,
reduce-scatter, all-reduce), exposed communication (time a collective runs or
is waited on and no computation runs), other (data, host overhead) and overlap
(1 - exposed / collectives), from metrics.json. The timeline is read before it is
offered: one that is not a Chrome trace of sane spans (not JSON, cut, over 50 MB,
nested past 32 levels, a negative or non-finite ts or dur), or a FIFO, directory,
device or broken link in its place, is named with what is wrong; the breakdown is
still printed, and the command exits 2.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if timeline != "" {
				if len(args) > 0 {
					return fmt.Errorf("--timeline takes the run's directory as its value; give no DIR with it (got %q)", args[0])
				}
				return nil
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeline != "" {
				if err := reportTimeline(cmd.OutOrStdout(), timeline); err != nil {
					return usageError(err)
				}
				return nil
			}
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
	cmd.Flags().StringVar(&timeline, "timeline", "", "a run's directory: print its timeline's path and where each rank's step went")
	table.add(cmd)
	return cmd
}

// reportTimeline prints a run's timeline path and its step breakdowns, the
// run's and each rank's, from metrics.json. It reads only what every backend
// writes (results.TimelineFile, metrics.json's step_breakdown), so it is the
// same for gotrain, torchrun and any plugin.
func reportTimeline(w io.Writer, runDir string) error {
	path := filepath.Join(runDir, results.MetricsFile)
	data, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--timeline %s: no %s there; give a run's directory (<results>/<sweep>/runs/<run-id>) of a finished run", runDir, results.MetricsFile)
		}
		return fmt.Errorf("--timeline: %w", err)
	}
	var m results.Metrics
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("--timeline: %s: %v (the file is damaged; rerun the run)", contract.JSONPos(path, data, err), err)
	}
	if err := results.CheckMetrics(nil, &m); err != nil {
		return fmt.Errorf("--timeline: %s: %w", path, err)
	}
	// The timeline is read before it is offered: a file Perfetto cannot open (not
	// JSON, cut, past its bound, spans of negative time), or a FIFO, a directory,
	// a link to a device or a loop in its place, is named with what is wrong, and
	// the breakdown, which is metrics.json's, is still printed; the command then
	// fails, so a script sees it.
	tl := filepath.Join(runDir, results.TimelineFile)
	info, tlErr := results.CheckTimeline(tl)
	switch {
	case tlErr == nil:
		fmt.Fprintf(w, "timeline: %s (%s; open it in https://ui.perfetto.dev or chrome://tracing)\n",
			termsafe.Line(tl), results.FormatBytes(float64(info.Bytes)))
	case errors.Is(tlErr, results.ErrNoTimeline):
		tlErr = nil
		fmt.Fprintf(w, "timeline: none (the run's backend wrote no %s)\n", results.TimelineFile)
	default:
		fmt.Fprintf(w, "timeline: not offered: %s\n", termsafe.Line(tlErr.Error()))
		tlErr = fmt.Errorf("the timeline cannot be opened: %w; rerun the run to record it again", tlErr)
	}
	if err := printBreakdowns(w, &m); err != nil {
		return err
	}
	if tlErr != nil {
		return fmt.Errorf("--timeline: %w", tlErr)
	}
	return nil
}

// printBreakdowns prints the run's and each rank's step breakdown from m.
func printBreakdowns(w io.Writer, m *results.Metrics) error {
	type row struct {
		name string
		b    *results.StepBreakdown
	}
	rows := []row{}
	if m.StepBreakdown != nil {
		rows = append(rows, row{"run", m.StepBreakdown})
	}
	for _, pr := range m.PerRank {
		if pr.StepBreakdown != nil {
			rows = append(rows, row{strconv.Itoa(pr.Rank), pr.StepBreakdown})
		}
	}
	if len(rows) == 0 {
		fmt.Fprintf(w, "run %s (%s): no step breakdown in %s: the backend did not measure where the step went\n",
			termsafe.Line(m.RunID), m.Status, results.MetricsFile)
		return nil
	}
	src := rows[0].b.Source
	fmt.Fprintf(w, "run %s (%s): where the median step went (source %s; shares of the step)\n",
		termsafe.Line(m.RunID), m.Status, termsafe.Line(src))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rank\tstep\tcompute\tcollectives\texposed comm\tother\toverlap\tall-gather\treduce-scatter\tall-reduce")
	for _, r := range rows {
		b := r.b
		share := func(v float64) string {
			if b.StepS <= 0 {
				return secondsText(v)
			}
			return fmt.Sprintf("%s (%.0f%%)", secondsText(v), 100*v/b.StepS)
		}
		opt := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return secondsText(*v)
		}
		overlap := "-"
		if o := b.Overlap(); o != nil {
			overlap = fmt.Sprintf("%.0f%%", 100**o)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.name, secondsText(b.StepS), share(b.ComputeS),
			share(b.CollectiveS), share(b.ExposedCommS), share(b.OtherS), overlap,
			opt(b.AllGatherS), opt(b.ReduceScatterS), opt(b.AllReduceS))
	}
	return tw.Flush()
}

// secondsText is a duration in seconds with three figures in a fitting unit.
func secondsText(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
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
