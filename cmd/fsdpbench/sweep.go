package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func newSweepCmd() *cobra.Command {
	var (
		sets      []string
		ncclTests []string
		opts      harness.Options
		dryRun    bool
		progress  string
		pv        predictFlags
		table     tableFlags
	)
	cmd := &cobra.Command{
		Use:   "sweep SPEC",
		Short: "Run every point of a sweep spec, then print the results table",
		Long: `sweep expands SPEC into runs and executes them through its backend, writing
<results>/<name>/ (sweep.yaml, manifest.json, runs/<run-id>/...). Run the same command
again after an interruption: finished runs (ok, oom, infeasible) are skipped.

One process at a time writes a sweep's directory: a second sweep (or ingest) of
the same name and --results exits 2 at once, naming the process that holds it
(pid, host, start); --wait makes it wait instead. A killed sweep holds nothing:
its lock dies with it, so the same command resumes at once.

A run's repeats are interleaved across the sweep by default: round 1 runs repeat 1
of every run, round 2 repeat 2, and so on (--repeat-order sequential runs them back
to back). A killed sweep resumes each run at its next repeat.

The results table is fitted to the terminal as report's is (--width, --wide).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Jobs < 1 || opts.Jobs > harness.MaxJobs {
				return usageError(fmt.Errorf("--jobs %d: give 1 to %d runs at once (1, the default, keeps measurements from disturbing each other)", opts.Jobs, harness.MaxJobs))
			}
			if !slices.Contains(harness.RepeatOrders, opts.RepeatOrder) {
				return usageError(fmt.Errorf("--repeat-order %q: use %s", opts.RepeatOrder, strings.Join(harness.RepeatOrders, " or ")))
			}
			reg, err := newRegistry()
			if err != nil {
				return failure(err)
			}
			plan, err := loadPlanWithNCCLTests(args[0], sets, ncclTests, reg)
			if err != nil {
				return err
			}
			// Once, before anything runs: a results path that no run can write
			// under failed every run on its own.
			if err := checkResultsDir("results", opts.ResultsDir, plan.Name, plan.Runs); err != nil {
				return err
			}
			stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
			width, err := table.resolve(stdout)
			if err != nil {
				return err
			}
			printWarnings(stderr, plan)
			if dryRun {
				if err := harness.Preflight(cmd.Context(), plan, reg); err != nil {
					return specFailure(err)
				}
				return printDryRun(stdout, plan, harness.Preview(plan, opts), opts.ResultsDir)
			}
			if opts.Annotate, err = pv.annotator(); err != nil {
				return usageError(err)
			}
			opts.Registry = reg
			// The files read, which the sweep must never write over.
			opts.Inputs = append([]string{args[0]}, ncclTests...)
			opts.Out = stderr // progress is not a result: stdout stays a clean table
			opts.Env = results.Env{Fsdpbench: version(), Commit: commit()}
			switch m := harness.ProgressMode(progress); m {
			case "auto":
				opts.Progress = harness.ProgressAuto
			case harness.ProgressBars, harness.ProgressPlain, harness.ProgressNone:
				opts.Progress = m
			default:
				return usageError(fmt.Errorf("--progress %q: use auto, bars, plain or none", progress))
			}

			opts.OnConsole = notices.redirect
			sum, runErr := harness.Run(cmd.Context(), plan, opts)
			interrupted := cmd.Context().Err() != nil
			var refused *harness.RefusedError
			switch {
			case runErr != nil && !interrupted && errors.As(runErr, &refused):
				// Nothing ran: another sweep holds the directory, or it cannot be written.
				return usageError(runErr)
			case runErr != nil && !interrupted:
				return specFailure(runErr)
			case interrupted && sum.Dir == "":
				return &exitError{code: ExitInterrupted, err: errors.New("interrupted before any run started")}
			}
			if err := printSweepResults(stdout, sum, width); err != nil {
				return failure(err)
			}
			if pv.predict && sum.Dir != "" {
				if err := printPredictedVsMeasured(stdout, sum); err != nil {
					return failure(err)
				}
			}
			fmt.Fprintln(stderr, summaryLine(sum))
			if hint := sum.RerunHint(); hint != "" {
				fmt.Fprintln(stderr, hint)
			}
			if sum.Dir != "" {
				fmt.Fprintf(stderr, "results: %s\nCSV:     fsdpbench export %s --format csv -o %s.csv\n", sum.Dir, sum.Dir, plan.Name)
			}
			switch {
			case interrupted:
				return &exitError{code: ExitInterrupted, err: errors.New("interrupted; run the same command again to finish the sweep (finished runs are kept)")}
			case sum.Failures() > 0:
				return failure(fmt.Errorf("%d of %d runs failed or timed out; their errors are in %s/runs/<run-id>/stderr.log", sum.Failures(), sum.Total, sum.Dir))
			}
			return nil
		},
	}
	setFlag(cmd, &sets)
	ncclTestsFlag(cmd, &ncclTests)
	cmd.Flags().StringVar(&opts.ResultsDir, "results", harness.DefaultResultsDir, "results directory (one sub-directory per sweep)")
	cmd.Flags().IntVar(&opts.Jobs, "jobs", 1, fmt.Sprintf("runs to execute at once, 1 to %d (1 keeps measurements from disturbing each other)", harness.MaxJobs))
	cmd.Flags().StringVar(&opts.RepeatOrder, "repeat-order", harness.RepeatsInterleaved,
		"interleaved: repeat 1 of every run, then repeat 2, ... (a disturbed minute touches one sample of many runs); sequential: each run's repeats back to back")
	cmd.Flags().BoolVar(&opts.Rerun, "rerun", false, "rerun runs that a previous invocation finished")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list the runs and what would happen to each, run nothing")
	cmd.Flags().StringVar(&progress, "progress", "auto", "progress display: auto (bars on a terminal), bars, plain, none")
	pv.register(cmd)
	table.add(cmd)
	cmd.Flags().BoolVar(&opts.WaitLock, "wait", false, "when another process is writing this sweep's results directory, wait for it instead of exiting 2")
	return cmd
}

// printWarnings prints what the spec says that is legal but probably not meant
// (an exclude that matches nothing), and the notes on how it was read, one line
// each, on stderr.
func printWarnings(w io.Writer, plan *sweeps.Plan) {
	for _, warn := range plan.Warnings {
		fmt.Fprintln(w, "warning:", warn)
	}
	// How the spec was read where it left a choice (nodes from world_size).
	for _, n := range plan.Notes {
		fmt.Fprintln(w, "note:", n)
	}
}

// printSweepResults prints the report of the runs this sweep holds, fitted to
// width (0: whole), and what each max_fit search found.
func printSweepResults(w io.Writer, sum harness.Summary, width int) error {
	if sum.Dir == "" {
		return nil
	}
	stored, err := results.Load(sum.Dir)
	if err != nil {
		return err
	}
	// The directory may hold runs of an earlier version of the spec; show this one's.
	ours := map[string]bool{}
	for _, o := range sum.Runs {
		ours[o.Config.ID] = true
	}
	var runs []results.Run
	for _, r := range stored {
		if ours[r.Config.ID] {
			runs = append(runs, r)
		}
	}
	if len(runs) > 0 {
		if err := results.Report(w, runs, results.ReportOptions{Format: "table", Width: width}); err != nil {
			return err
		}
	}
	if len(sum.MaxFit) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	rows := make([][]string, 0, len(sum.MaxFit))
	for _, sr := range sum.MaxFit {
		// A search stopped before its wall (Ctrl-C, a failure) says what it
		// learned, not "none fits".
		rows = append(rows, []string{sr.Group, sr.Axis, sr.MaxFitText(), fmt.Sprint(len(sr.Tried)), joinInts(sr.Tried), sr.StoppedBy})
	}
	// The search doubles, then bisects: runs says what finding the wall cost.
	return writeTable(w, []string{"search group", "axis", "max fit", "runs", "tried", "stopped by"}, rows)
}

func summaryLine(sum harness.Summary) string {
	parts := []string{fmt.Sprintf("%d ok", sum.OK)}
	for _, c := range []struct {
		n    int
		name string
	}{{sum.OOM, "oom"}, {sum.Diverged, "diverged"}, {sum.Infeasible, "infeasible"}, {sum.Failed, "failed"}, {sum.Timeout, "timeout"}, {sum.Canceled, "canceled"}, {sum.NotStarted, "not started"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.name))
		}
	}
	line := fmt.Sprintf("%d runs: %s", sum.Total, strings.Join(parts, ", "))
	if sum.Skipped > 0 {
		line += fmt.Sprintf(" (%d skipped: done before)", sum.Skipped)
	}
	return line
}

func printDryRun(w io.Writer, plan *sweeps.Plan, planned []harness.Planned, resultsDir string) error {
	axes := plan.Axes
	rows := make([][]string, 0, len(planned))
	counts := map[string]int{}
	for _, p := range planned {
		what := p.Action + " (" + p.Why + ")"
		if p.Config.Search != "" {
			what += ", then search " + p.Config.Search
		}
		rows = append(rows, append(append([]string{p.Config.ID}, axisValues(p.Config, axes)...), what))
		counts[p.Action]++
	}
	if err := writeTable(w, append(append([]string{"run"}, axes...), "would"), rows); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d runs (%d to run, %d to rerun, %d to skip) into %s; nothing was run\n",
		plan.Name, len(planned), counts["run"], counts["rerun"], counts["skip"], resultsDir)
	return nil
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
