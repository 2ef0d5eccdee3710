package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

const gib = 1 << 30

func newPlanCmd() *cobra.Command {
	var sets, ncclTests []string
	var calibration string
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
			return printPlan(cmd, plan, be, extra, cal)
		},
	}
	setFlag(cmd, &sets)
	ncclTestsFlag(cmd, &ncclTests)
	cmd.Flags().StringVar(&calibration, "calibration", "", "calibration file (from `fsdpbench calibrate`) the predictions use")
	return cmd
}

func printPlan(cmd *cobra.Command, plan *sweeps.Plan, be backends.Backend, extra map[string]any, cal *sim.Calibration) error {
	w := cmd.OutOrStdout()
	axes := plan.Axes
	header := append(append([]string{"run"}, axes...), "peak reserved GiB", "device GiB", "step s", "tokens/s", "predicted")
	rows := make([][]string, 0, len(plan.Runs))
	// Reasons are long: they go under the table, one line per refused run.
	var reasons []string
	// The assumptions each prediction rests on, printed once per distinct set.
	var assumed []string
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
		} else {
			if a := strings.Join(pred.Notes, "; "); !slices.Contains(assumed, a) {
				assumed = append(assumed, a)
			}
			row = append(row,
				fmt.Sprintf("%.1f", float64(pred.PeakMemReservedBytes)/gib),
				fmt.Sprintf("%.1f", float64(pred.DeviceMemBytes)/gib),
				fmt.Sprintf("%.3g", pred.StepTimeS),
				fmt.Sprintf("%.0f", pred.TokensPerS),
			)
		}
		reason := ""
		// host is the refusal `sweep` records for this run, word for word.
		switch err, host := be.Validate(cmd.Context(), rc), harness.HostCapacity(plan, rc); {
		case err != nil:
			reason = err.Error()
		case host != "":
			reason = host
		case perr != nil:
			reason = "no prediction: " + perr.Error()
		case !pred.Feasible:
			reason = pred.Reason
		}
		if reason == "" {
			feasible++
			row = append(row, "feasible")
		} else {
			row = append(row, "infeasible")
			reasons = append(reasons, fmt.Sprintf("%s: infeasible: %s", rc.ID, reason))
		}
		rows = append(rows, row)
	}
	if err := writeTable(w, header, rows); err != nil {
		return err
	}
	for _, r := range reasons {
		fmt.Fprintln(w, r)
	}
	for _, a := range assumed {
		fmt.Fprintln(w, "predicted assuming: "+a)
	}
	if err := printSearchPrediction(w, plan, extra, cal); err != nil {
		return err
	}
	how := "predicted by sim"
	if cal != nil {
		how += ", " + cu.say(cal)
	}
	fmt.Fprintf(w, "%s: %d runs, %d feasible, %d infeasible (backend %s; memory and time %s); nothing was run\n",
		plan.Name, len(plan.Runs), feasible, len(plan.Runs)-feasible, plan.Backend, how)
	return nil
}

// printSearchPrediction walks each max_fit search as the harness would, with the
// analytic model standing in for the runs, and prints where it predicts the wall.
func printSearchPrediction(w io.Writer, plan *sweeps.Plan, extra map[string]any, cal *sim.Calibration) error {
	var rows [][]string
	for _, rc := range plan.Runs {
		if rc.Search == "" {
			continue
		}
		fit, lastFit := "none fits", ""
		for range 30 {
			pred, err := sim.PredictCalibrated(rc, extra, cal)
			if err != nil || !pred.Feasible {
				break
			}
			lastFit = rc.ID
			fit = fmt.Sprint(axisValues(rc, []string{rc.Search})[0])
			next, ok := sweeps.NextSearchPoint(rc)
			if !ok {
				break
			}
			rc = next
		}
		rows = append(rows, []string{rc.SearchGroup, rc.Search, fit, lastFit})
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	return writeTable(w, []string{"search group", "axis", "predicted max fit", "run"}, rows)
}

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
	has := strings.Join(slices.Sorted(maps.Keys(cal.Profiles)), ", ")
	switch {
	case u.predicted > 0 && u.used == u.predicted:
		return "calibrated by " + cal.Path()
	case u.used > 0:
		return fmt.Sprintf("calibrated by %s for %d of %d predictions (it has no constants for %s; it has %s)",
			cal.Path(), u.used, u.predicted, strings.Join(u.missing, ", "), has)
	case len(u.missing) > 0:
		return fmt.Sprintf("uncalibrated: %s has no constants for %s (it has %s)", cal.Path(), strings.Join(u.missing, ", "), has)
	}
	return "uncalibrated: nothing was predicted"
}
