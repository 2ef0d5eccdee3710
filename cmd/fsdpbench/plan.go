package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

const gib = 1 << 30

func newPlanCmd() *cobra.Command {
	var sets, ncclTests []string
	var calibration string
	var table tableFlags
	cmd := &cobra.Command{
		Use:   "plan SPEC",
		Short: "Expand and validate a spec and predict every run's memory and step time; run nothing",
		Long: `plan expands SPEC into runs, asks the spec's backend to validate each, and predicts
each run's peak memory and step time with the analytic model (sim), so that runs that
cannot fit show up before a GPU is spent on them. Nothing is run or written.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := newRegistry()
			if err != nil {
				return failure(err)
			}
			// A sim spec takes the files as backend_options (so its run IDs say
			// so); another backend's runs are only predicted with them.
			simSets, extra := ncclTests, map[string]any(nil)
			if len(ncclTests) > 0 && !isSimSpec(args[0], sets, reg) {
				simSets, extra = nil, map[string]any{"nccl_tests": slices.Clone(ncclTests)}
			}
			plan, err := loadPlanWithNCCLTests(args[0], sets, simSets, reg)
			if err != nil {
				return err
			}
			be, err := reg.Get(plan.Backend)
			if err != nil {
				return usageError(err)
			}
			if err := harness.Preflight(cmd.Context(), plan, reg); err != nil {
				return specFailure(err)
			}
			printWarnings(cmd.ErrOrStderr(), plan)
			cal, err := loadCalibration(calibration)
			if err != nil {
				return usageError(err)
			}
			width, err := table.resolve(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return printPlan(cmd, plan, be, extra, cal, planTable{width: width, wide: table.wide})
		},
	}
	setFlag(cmd, &sets)
	ncclTestsFlag(cmd, &ncclTests)
	cmd.Flags().StringVar(&calibration, "calibration", "", "calibration `FILE` the predictions use (written by fsdpbench calibrate)")
	table.add(cmd)
	return cmd
}

// planTable is how plan's table is drawn: fitted to width (0: whole), and with
// the total tokens/s beside the per-rank figure under --wide.
type planTable struct {
	width int
	wide  bool
}

// whyNot is why rc would not run ("" when it is feasible): the backend's
// refusal, then the host's (the refusal `sweep` records, word for word), then
// the prediction's.
func whyNot(cmd *cobra.Command, plan *sweeps.Plan, be backends.Backend, rc sweeps.RunConfig, pred sim.Prediction, perr error) string {
	switch err, host := be.Validate(cmd.Context(), rc), harness.HostCapacity(plan, rc); {
	case err != nil:
		return err.Error()
	case host != "":
		return host
	case perr != nil:
		return "no prediction: " + perr.Error()
	case !pred.Feasible:
		return pred.Reason
	}
	return ""
}

// planTableMax is the most runs plan draws one row each for without --wide: a
// legal spec can expand to 2^20 points, and a million-row table (half a GB of
// text, gigabytes of rows held to fit it) helps nobody read a plan.
const planTableMax = 500

func printPlan(cmd *cobra.Command, plan *sweeps.Plan, be backends.Backend, extra map[string]any, cal *sim.Calibration, pt planTable) error {
	if len(plan.Runs) > planTableMax && !pt.wide {
		return printPlanSummary(cmd, plan, be, extra, cal, pt)
	}
	w := cmd.OutOrStdout()
	axes := plan.Axes
	// Tokens/s per rank, as every other table; the total only under --wide.
	header := append(append([]string{"run"}, axes...), "peak reserved", "device", "step s", "tokens/s/rank")
	if pt.wide {
		header = append(header, "tokens/s")
	}
	header = append(header, "predicted")
	rows := make([][]string, 0, len(plan.Runs))
	// The memory cells wait for the table's figures to pick their unit (a CPU
	// plan's MiB are no 0.0 GiB): peakAt is the peak cell's index in a row.
	peakAt := 1 + len(axes)
	var peaks, devices []float64
	memRows := map[int][2]float64{}
	// Reasons are long: they go under the table, one line per refused run.
	var reasons []string
	// The assumptions each prediction rests on, printed once per distinct set;
	// the bandwidth between nodes, which a multi-node run's time turns on and
	// the profile only guesses, also above the table, as is a calibration
	// applied outside the range it was fitted on.
	var assumed, interNode, extrapolated []string
	feasible := 0
	var cu calibrationUse
	for _, rc := range plan.Runs {
		row := append([]string{rc.ID}, axisValues(rc, axes)...)
		pred, perr := sim.PredictCalibrated(rc, extra, cal)
		if perr == nil {
			cu.add(rc, pred)
		}
		if perr != nil {
			row = append(row, "-", "-", "-", "-")
			if pt.wide {
				row = append(row, "-")
			}
		} else {
			if a := strings.Join(pred.Notes, "; "); !slices.Contains(assumed, a) {
				assumed = append(assumed, a)
			}
			for _, n := range pred.Notes {
				if strings.HasPrefix(n, "inter-node:") && !slices.Contains(interNode, n) {
					interNode = append(interNode, n)
				}
				if strings.HasPrefix(n, sim.ExtrapolatesNote) && !slices.Contains(extrapolated, n) {
					extrapolated = append(extrapolated, n)
				}
			}
			peaks, devices = append(peaks, float64(pred.PeakMemReservedBytes)), append(devices, float64(pred.DeviceMemBytes))
			memRows[len(rows)] = [2]float64{float64(pred.PeakMemReservedBytes), float64(pred.DeviceMemBytes)}
			row = append(row, "", "",
				fmt.Sprintf("%.3g", pred.StepTimeS),
				fmt.Sprintf("%.0f", pred.TokensPerS/float64(rc.WorldSize)),
			)
			if pt.wide {
				row = append(row, fmt.Sprintf("%.0f", pred.TokensPerS))
			}
		}
		reason := whyNot(cmd, plan, be, rc, pred, perr)
		if reason == "" {
			feasible++
			row = append(row, "feasible")
			if perr == nil && pred.Verdict != "" {
				reasons = append(reasons, fmt.Sprintf("%s: near the memory limit: %s", rc.ID, pred.Verdict))
			}
		} else {
			row = append(row, "infeasible")
			reasons = append(reasons, fmt.Sprintf("%s: infeasible: %s", rc.ID, reason))
		}
		rows = append(rows, row)
	}
	peakUnit, deviceUnit := byteUnit(peaks), byteUnit(devices)
	header[peakAt] += " " + peakUnit.Name
	header[peakAt+1] += " " + deviceUnit.Name
	for i, m := range memRows {
		rows[i][peakAt], rows[i][peakAt+1] = peakUnit.Format(m[0]), deviceUnit.Format(m[1])
	}
	// Cut to the terminal: the device's size (the same on every row), then the
	// axes (the run IDs spell them), the rightmost first, then the step time.
	drop := []string{header[peakAt+1]}
	for i := len(axes) - 1; i >= 0; i-- {
		drop = append(drop, axes[i])
	}
	drop = append(drop, "step s")
	short := map[string]string{header[peakAt]: "peak " + peakUnit.Name, header[peakAt+1]: "device " + deviceUnit.Name,
		"tokens/s/rank": "tok/s/rank"}
	for _, n := range interNode {
		printWrapped(w, "predicted assuming "+n, pt.width)
	}
	for _, n := range extrapolated {
		printWrapped(w, "predicted by a "+n, pt.width)
	}
	if err := writeTableFit(w, header, rows, results.TableFit{Width: pt.width, RunIDs: true, Short: short, Drop: drop}); err != nil {
		return err
	}
	for _, r := range reasons {
		printWrapped(w, r, pt.width)
	}
	for _, a := range assumed {
		printWrapped(w, "predicted assuming: "+a, pt.width)
	}
	if err := printSearchPrediction(w, plan, extra, cal); err != nil {
		return err
	}
	how := "predicted by sim"
	if cal != nil {
		how += ", " + cu.say(cal)
	}
	printWrapped(w, fmt.Sprintf("%s: %d runs, %d feasible, %d infeasible (backend %s; memory and time %s); nothing was run",
		plan.Name, len(plan.Runs), feasible, len(plan.Runs)-feasible, plan.Backend, how), pt.width)
	return nil
}

// printSearchPrediction walks each max_fit search as the harness would (doubling,
// then bisection: sweeps.MaxFit), with the analytic model standing in for the
// runs, and prints where it predicts the wall and how many runs the search takes.
func printSearchPrediction(w io.Writer, plan *sweeps.Plan, extra map[string]any, cal *sim.Calibration) error {
	var rows [][]string
	for _, rc := range plan.Runs {
		if rc.Search == "" {
			continue
		}
		var walk sweeps.MaxFit
		var tried []int
		group := rc.SearchGroup
		var perr error
		for {
			pred, err := sim.PredictCalibrated(rc, extra, cal)
			tried = append(tried, rc.BatchPerDevice)
			if err != nil {
				// No prediction is no verdict on memory: the walk stops unknowing.
				perr = err
				break
			}
			next, ok := walk.Record(rc, pred.Feasible, "infeasible")
			if !ok {
				break
			}
			rc = next
		}
		sr := results.SearchResult{MaxFit: walk.Fit, Wall: walk.Wall, StoppedBy: walk.WallStatus}
		if walk.Wall == 0 {
			sr.StoppedBy = harness.StoppedExhausted
		}
		if perr != nil {
			sr.StoppedBy = "no prediction: " + perr.Error()
		}
		fit := sr.MaxFitText()
		rows = append(rows, []string{group, rc.Search, fit, walk.FitID, fmt.Sprint(walk.Runs), joinInts(tried)})
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return writeTable(w, []string{"search group", "axis", "predicted max fit", "run", "runs", "tried"}, rows)
}

// printPlanSummary is plan for a large sweep: counts instead of a row per run —
// feasibility by each axis's values, the commonest reasons a run does not fit,
// and the fastest feasible run — in memory that does not grow with the runs.
func printPlanSummary(cmd *cobra.Command, plan *sweeps.Plan, be backends.Backend, extra map[string]any, cal *sim.Calibration, pt planTable) error {
	w := cmd.OutOrStdout()
	axes := plan.Axes
	type tally struct{ runs, feasible int }
	byAxis := make([]map[string]*tally, len(axes))
	var order [][]string // each axis's values in the order first seen (the spec's)
	for i := range axes {
		byAxis[i] = map[string]*tally{}
		order = append(order, nil)
	}
	type reasonTally struct {
		n       int
		example string
	}
	reasons := map[string]*reasonTally{}
	var cu calibrationUse
	feasible := 0
	var best sweeps.RunConfig
	bestRate := -1.0
	for _, rc := range plan.Runs {
		if err := cmd.Context().Err(); err != nil {
			return &exitError{code: ExitInterrupted, err: errors.New("interrupted")}
		}
		pred, perr := sim.PredictCalibrated(rc, extra, cal)
		if perr == nil {
			cu.add(rc, pred)
		}
		reason := whyNot(cmd, plan, be, rc, pred, perr)
		ok := reason == ""
		if ok {
			feasible++
			if rate := pred.TokensPerS / float64(rc.WorldSize); rate > bestRate {
				best, bestRate = rc, rate
			}
		} else {
			// Reasons quote each run's figures: grouped with the numbers out.
			key := reasonShape.ReplaceAllString(reason, "N")
			rt := reasons[key]
			if rt == nil {
				rt = &reasonTally{example: rc.ID + ": " + reason}
				reasons[key] = rt
			}
			rt.n++
		}
		for i, v := range axisValues(rc, axes) {
			t := byAxis[i][v]
			if t == nil {
				t = &tally{}
				byAxis[i][v] = t
				order[i] = append(order[i], v)
			}
			t.runs++
			if ok {
				t.feasible++
			}
		}
	}
	how := "predicted by sim"
	if cal != nil {
		how += ", " + cu.say(cal)
	}
	fmt.Fprintf(w, "%s: %d runs, %d feasible, %d infeasible (backend %s; %s); nothing was run\n",
		plan.Name, len(plan.Runs), feasible, len(plan.Runs)-feasible, plan.Backend, how)
	fmt.Fprintf(w, "more than %d runs: a summary; --wide prints one row per run\n\n", planTableMax)
	var rows [][]string
	for i, a := range axes {
		for _, v := range order[i] {
			t := byAxis[i][v]
			rows = append(rows, []string{a, v, fmt.Sprint(t.runs), fmt.Sprint(t.feasible), fmt.Sprint(t.runs - t.feasible)})
		}
	}
	if err := writeTableFit(w, []string{"axis", "value", "runs", "feasible", "infeasible"}, rows, results.TableFit{Width: pt.width}); err != nil {
		return err
	}
	if len(reasons) > 0 {
		keys := slices.SortedFunc(maps.Keys(reasons), func(a, b string) int {
			if d := reasons[b].n - reasons[a].n; d != 0 {
				return d
			}
			return strings.Compare(a, b)
		})
		fmt.Fprintf(w, "\nwhy runs do not fit (%d kinds of reason; the commonest, each with one run):\n", len(keys))
		for _, k := range keys[:min(5, len(keys))] {
			printWrapped(w, fmt.Sprintf("%d runs, e.g. %s", reasons[k].n, reasons[k].example), pt.width)
		}
	}
	if bestRate >= 0 {
		fmt.Fprintf(w, "\nfastest feasible run: %s, %.0f tokens/s/rank predicted\n", best.ID, bestRate)
	}
	return nil
}

// reasonShape matches the figures in a reason, so that reasons differing only
// in them are counted together.
var reasonShape = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(e[-+]?[0-9]+)?`)

// calibrationUse counts the predictions a calibration changed: a file holding
// only another profile's constants (what calibrate writes from cpu runs) changes
// none, and the output must not say "calibrated" then.
type calibrationUse struct {
	used, predicted int
	// missing are the hardware profiles of the predictions it had no constants for.
	missing []string
}

func (u *calibrationUse) add(rc sweeps.RunConfig, pred sim.Prediction) {
	u.predicted++
	if pred.Calibration != nil {
		u.used++
		return
	}
	if hw := pred.Hardware.Name; !slices.Contains(u.missing, hw) {
		u.missing = append(u.missing, hw)
	}
}

// say is how the predictions were calibrated by cal: by it, for some of them,
// or not at all, with the profiles it lacks.
func (u *calibrationUse) say(cal *sim.Calibration) string {
	// Cut, as other lists are: a calibration of thousands of keys (user-defined
	// profiles) made this one line tens of kilobytes (issue 39 item 10).
	has := input.ClipList(slices.Sorted(maps.Keys(cal.Profiles)), 0)
	switch {
	case u.predicted > 0 && u.used == u.predicted:
		return "calibrated by " + cal.Path()
	case u.used > 0:
		return fmt.Sprintf("calibrated by %s for %d of %d predictions (it has no constants for %s; it has %s)",
			cal.Path(), u.used, u.predicted, input.ClipList(u.missing, 0), has)
	case len(u.missing) > 0:
		return fmt.Sprintf("uncalibrated: %s has no constants for %s (it has %s)", cal.Path(), input.ClipList(u.missing, 0), has)
	}
	return "uncalibrated: nothing was predicted"
}
