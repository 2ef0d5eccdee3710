package main

import (
	"context"
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
			// Streamed: a grid of a million points is walked once, holding none
			// of its runs (issue 39 item 16).
			plan, err := loadPlanStream(args[0], sets, simSets, reg)
			if err != nil {
				return err
			}
			be, err := reg.Get(plan.Backend)
			if err != nil {
				return usageError(err)
			}
			// The spec's errors come first, then the flags' (as when the
			// preflight ran before these were read); the walk needs the
			// calibration, so a bad one is read first and reported later.
			cal, calErr := loadCalibration(calibration)
			pt := planTable{wide: table.wide}
			var out planOutput = newPlanSummary(plan.Axes)
			if plan.Len() <= planTableMax || pt.wide {
				out = &planRows{wide: pt.wide, axes: plan.Axes, memRows: map[int][2]float64{}}
			}
			if err := walkPlan(cmd, plan, be, reg, extra, cal, out); err != nil {
				return err
			}
			printWarnings(cmd.ErrOrStderr(), plan)
			if calErr != nil {
				return usageError(calErr)
			}
			pt.width, err = table.resolve(cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return out.print(cmd.OutOrStdout(), plan, extra, cal, pt)
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
// refusal (verr, Validate's error), then the host's (the refusal `sweep`
// records, word for word), then the prediction's.
func whyNot(verr error, host string, pred sim.Prediction, perr error) string {
	switch {
	case verr != nil:
		return verr.Error()
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

// planOutput is what plan prints, gathered one run at a time (add, in the
// plan's order) and printed once every run has passed the preflight.
type planOutput interface {
	add(rc sweeps.RunConfig, pred sim.Prediction, perr error, reason string)
	print(w io.Writer, plan *sweeps.Plan, extra map[string]any, cal *sim.Calibration, pt planTable) error
}

// walkPlan passes over the plan's runs once: the preflight's checks
// (harness.Preflight's, run by run), and for each run its prediction and why
// it would not run, given to out. Each distinct run the sim reads is
// predicted and validated once (sim.Memo): a seed axis of five values is one
// prediction, not fifteen (Preflight's Validate, the prediction, whyNot's
// Validate, five seeds). It returns the spec error the preflight found (exit
// 2), or an interruption.
func walkPlan(cmd *cobra.Command, plan *sweeps.Plan, be backends.Backend, reg *backends.Registry, extra map[string]any, cal *sim.Calibration, out planOutput) error {
	ctx := cmd.Context()
	memo := sim.NewMemo(extra, cal)
	host := memo
	if extra != nil || cal != nil {
		host = sim.NewMemo(nil, nil) // HostCapacity's is sim.Predict's
	}
	var validate func(context.Context, backends.Backend, sweeps.RunConfig) error
	if _, isSim := be.(*sim.Backend); isSim {
		validate = func(ctx context.Context, b backends.Backend, rc sweeps.RunConfig) error {
			if b != be {
				return b.Validate(ctx, rc)
			}
			return memo.Validate(ctx, rc)
		}
	}
	pf := harness.NewPreflighter(plan, reg)
	for rc := range plan.All() {
		if ctx.Err() != nil {
			if err := pf.Err(); err != nil {
				return specFailure(err)
			}
			return &exitError{code: ExitInterrupted, err: errors.New("interrupted")}
		}
		verr := pf.Check(ctx, rc, validate)
		if pf.Failed() {
			continue // plan prints only the spec's errors now: no need to predict
		}
		pred, perr := memo.Predict(rc)
		out.add(rc, pred, perr, whyNot(verr, harness.HostCapacityBy(plan, rc, host.Predict), pred, perr))
	}
	if err := pf.Err(); err != nil {
		return specFailure(err)
	}
	return nil
}

// planRows is plan's table: one row per run.
type planRows struct {
	wide bool
	rows [][]string
	// The memory cells wait for the table's figures to pick their unit (a CPU
	// plan's MiB are no 0.0 GiB): memRows holds them by row.
	peaks, devices []float64
	memRows        map[int][2]float64
	// Reasons are long: they go under the table, one line per refused run.
	reasons []string
	// The assumptions each prediction rests on, printed once per distinct set;
	// the bandwidth between nodes, which a multi-node run's time turns on and
	// the profile only guesses, also above the table, as is a calibration
	// applied outside the range it was fitted on.
	assumed, interNode, extrapolated []string
	feasible, runs                   int
	cu                               calibrationUse
	axes                             []string
}

func (t *planRows) add(rc sweeps.RunConfig, pred sim.Prediction, perr error, reason string) {
	t.runs++
	row := append([]string{rc.ID}, axisValues(rc, t.axes)...)
	if perr == nil {
		t.cu.add(rc, pred)
	}
	if perr != nil {
		row = append(row, "-", "-", "-", "-")
		if t.wide {
			row = append(row, "-")
		}
	} else {
		if a := strings.Join(pred.Notes, "; "); !slices.Contains(t.assumed, a) {
			t.assumed = append(t.assumed, a)
		}
		for _, n := range pred.Notes {
			if strings.HasPrefix(n, "inter-node:") && !slices.Contains(t.interNode, n) {
				t.interNode = append(t.interNode, n)
			}
			if strings.HasPrefix(n, sim.ExtrapolatesNote) && !slices.Contains(t.extrapolated, n) {
				t.extrapolated = append(t.extrapolated, n)
			}
		}
		t.peaks, t.devices = append(t.peaks, float64(pred.PeakMemReservedBytes)), append(t.devices, float64(pred.DeviceMemBytes))
		t.memRows[len(t.rows)] = [2]float64{float64(pred.PeakMemReservedBytes), float64(pred.DeviceMemBytes)}
		row = append(row, "", "",
			fmt.Sprintf("%.3g", pred.StepTimeS),
			fmt.Sprintf("%.0f", pred.TokensPerS/float64(rc.WorldSize)),
		)
		if t.wide {
			row = append(row, fmt.Sprintf("%.0f", pred.TokensPerS))
		}
	}
	if reason == "" {
		t.feasible++
		row = append(row, "feasible")
		if perr == nil && pred.Verdict != "" {
			t.reasons = append(t.reasons, fmt.Sprintf("%s: near the memory limit: %s", rc.ID, pred.Verdict))
		}
	} else {
		row = append(row, "infeasible")
		t.reasons = append(t.reasons, fmt.Sprintf("%s: infeasible: %s", rc.ID, reason))
	}
	t.rows = append(t.rows, row)
}

func (t *planRows) print(w io.Writer, plan *sweeps.Plan, extra map[string]any, cal *sim.Calibration, pt planTable) error {
	axes := plan.Axes
	// Tokens/s per rank, as every other table; the total only under --wide.
	header := append(append([]string{"run"}, axes...), "peak reserved", "device", "step s", "tokens/s/rank")
	if pt.wide {
		header = append(header, "tokens/s")
	}
	header = append(header, "predicted")
	// peakAt is the peak cell's index in a row.
	peakAt := 1 + len(axes)
	peakUnit, deviceUnit := byteUnit(t.peaks), byteUnit(t.devices)
	header[peakAt] += " " + peakUnit.Name
	header[peakAt+1] += " " + deviceUnit.Name
	for i, m := range t.memRows {
		t.rows[i][peakAt], t.rows[i][peakAt+1] = peakUnit.Format(m[0]), deviceUnit.Format(m[1])
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
	for _, n := range t.interNode {
		printWrapped(w, "predicted assuming "+n, pt.width)
	}
	for _, n := range t.extrapolated {
		printWrapped(w, "predicted by a "+n, pt.width)
	}
	if err := writeTableFit(w, header, t.rows, results.TableFit{Width: pt.width, RunIDs: true, Short: short, Drop: drop}); err != nil {
		return err
	}
	for _, r := range t.reasons {
		printWrapped(w, r, pt.width)
	}
	for _, a := range t.assumed {
		printWrapped(w, "predicted assuming: "+a, pt.width)
	}
	if err := printSearchPrediction(w, plan, extra, cal); err != nil {
		return err
	}
	how := "predicted by sim"
	if cal != nil {
		how += ", " + t.cu.say(cal)
	}
	printWrapped(w, fmt.Sprintf("%s: %d runs, %d feasible, %d infeasible (backend %s; memory and time %s); nothing was run",
		plan.Name, t.runs, t.feasible, t.runs-t.feasible, plan.Backend, how), pt.width)
	return nil
}

// printSearchPrediction walks each max_fit search as the harness would (doubling,
// then bisection: sweeps.MaxFit), with the analytic model standing in for the
// runs, and prints where it predicts the wall and how many runs the search takes.
func printSearchPrediction(w io.Writer, plan *sweeps.Plan, extra map[string]any, cal *sim.Calibration) error {
	var rows [][]string
	for rc := range plan.All() {
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

// planSummary is plan for a large sweep: counts instead of a row per run —
// feasibility by each axis's values, the commonest reasons a run does not fit,
// and the fastest feasible run — in memory that does not grow with the runs.
type planSummary struct {
	axes   []string
	byAxis []map[string]*planTally
	order  [][]string // each axis's values in the order first seen (the spec's)
	// cells formats the axes' values (axisValues, without its work per run).
	cells   *axisCells
	reasons map[string]*reasonTally
	// shapes caches reasons with their figures taken out (reasonShape):
	// the runs sharing a prediction share its reason.
	shapes         map[string]string
	cu             calibrationUse
	runs, feasible int
	best           sweeps.RunConfig
	bestRate       float64
}

type planTally struct{ runs, feasible int }

type reasonTally struct {
	n       int
	example string
}

func newPlanSummary(axes []string) *planSummary {
	s := &planSummary{axes: axes, byAxis: make([]map[string]*planTally, len(axes)), order: make([][]string, len(axes)),
		cells: newAxisCells(axes), reasons: map[string]*reasonTally{}, shapes: map[string]string{}, bestRate: -1}
	for i := range axes {
		s.byAxis[i] = map[string]*planTally{}
	}
	return s
}

func (s *planSummary) add(rc sweeps.RunConfig, pred sim.Prediction, perr error, reason string) {
	s.runs++
	if perr == nil {
		s.cu.add(rc, pred)
	}
	ok := reason == ""
	if ok {
		s.feasible++
		if rate := pred.TokensPerS / float64(rc.WorldSize); rate > s.bestRate {
			s.best, s.bestRate = rc, rate
		}
	} else {
		// Reasons quote each run's figures: grouped with the numbers out.
		key, seen := s.shapes[reason]
		if !seen {
			key = reasonShape.ReplaceAllString(reason, "N")
			if len(s.shapes) >= 1<<12 {
				clear(s.shapes) // a bound on its memory: reasons differ by the run's figures
			}
			s.shapes[reason] = key
		}
		rt := s.reasons[key]
		if rt == nil {
			rt = &reasonTally{example: rc.ID + ": " + reason}
			s.reasons[key] = rt
		}
		rt.n++
	}
	for i, v := range s.cells.values(&rc) {
		t := s.byAxis[i][v]
		if t == nil {
			t = &planTally{}
			s.byAxis[i][v] = t
			s.order[i] = append(s.order[i], v)
		}
		t.runs++
		if ok {
			t.feasible++
		}
	}
}

func (s *planSummary) print(w io.Writer, plan *sweeps.Plan, _ map[string]any, cal *sim.Calibration, pt planTable) error {
	how := "predicted by sim"
	if cal != nil {
		how += ", " + s.cu.say(cal)
	}
	fmt.Fprintf(w, "%s: %d runs, %d feasible, %d infeasible (backend %s; %s); nothing was run\n",
		plan.Name, s.runs, s.feasible, s.runs-s.feasible, plan.Backend, how)
	fmt.Fprintf(w, "more than %d runs: a summary; --wide prints one row per run\n\n", planTableMax)
	var rows [][]string
	for i, a := range s.axes {
		for _, v := range s.order[i] {
			t := s.byAxis[i][v]
			rows = append(rows, []string{a, v, fmt.Sprint(t.runs), fmt.Sprint(t.feasible), fmt.Sprint(t.runs - t.feasible)})
		}
	}
	if err := writeTableFit(w, []string{"axis", "value", "runs", "feasible", "infeasible"}, rows, results.TableFit{Width: pt.width}); err != nil {
		return err
	}
	if len(s.reasons) > 0 {
		keys := slices.SortedFunc(maps.Keys(s.reasons), func(a, b string) int {
			if d := s.reasons[b].n - s.reasons[a].n; d != 0 {
				return d
			}
			return strings.Compare(a, b)
		})
		fmt.Fprintf(w, "\nwhy runs do not fit (%d kinds of reason; the commonest, each with one run):\n", len(keys))
		for _, k := range keys[:min(5, len(keys))] {
			printWrapped(w, fmt.Sprintf("%d runs, e.g. %s", s.reasons[k].n, s.reasons[k].example), pt.width)
		}
	}
	if s.bestRate >= 0 {
		fmt.Fprintf(w, "\nfastest feasible run: %s, %.0f tokens/s/rank predicted\n", s.best.ID, s.bestRate)
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
