package main

import (
	"fmt"
	"io"
	"math"

	"github.com/spf13/cobra"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/termsafe"
)

// predictFlags are `sweep --predict` and the calibration its predictions use.
type predictFlags struct {
	predict     bool
	calibration string
}

func (f *predictFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.predict, "predict", false, "store the sim's prediction beside each measured run (metrics.json extra.prediction) and print predicted vs measured")
	cmd.Flags().StringVar(&f.calibration, "calibration", "", "calibration `FILE` for the --predict predictions (written by fsdpbench calibrate)")
}

// annotator is the harness hook --predict asks for; nil without --predict.
func (f *predictFlags) annotator() (func(sweeps.RunConfig, *results.Metrics), error) {
	if !f.predict {
		if f.calibration != "" {
			return nil, fmt.Errorf("--calibration is for the predictions of --predict: add --predict")
		}
		return nil, nil
	}
	cal, err := loadCalibration(f.calibration)
	if err != nil {
		return nil, err
	}
	return sim.Annotator(cal, nil), nil
}

// loadCalibration reads path; "" is no calibration.
func loadCalibration(path string) (*sim.Calibration, error) {
	if path == "" {
		return nil, nil
	}
	cal, err := sim.LoadCalibration(path)
	if err != nil {
		return nil, fmt.Errorf("--calibration: %w", err)
	}
	return cal, nil
}

// printPredictedVsMeasured prints the sweep's measured runs beside their stored
// predictions, with the relative error of each figure and its mean magnitude.
func printPredictedVsMeasured(w io.Writer, sum harness.Summary) error {
	stored, err := results.Load(sum.Dir)
	if err != nil {
		return err
	}
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
	fmt.Fprintln(w)
	return writePredictedVsMeasured(w, runs)
}

// writePredictedVsMeasured is the predicted-vs-measured table of runs that
// carry a stored prediction.
func writePredictedVsMeasured(w io.Writer, runs []results.Run) error {
	var rows [][]string
	var tErr, mErr []float64
	var extrapolated []string
	// The memory cells wait for every figure, to share the unit that suits
	// them (a CPU run's MiB, an H100's GiB): memAt holds a row's pair.
	memAt := map[int][2]float64{}
	var mems []float64
	for i := range runs {
		r := &runs[i]
		p := r.Metrics.StoredPrediction()
		if p == nil || r.Metrics.Predicted {
			continue
		}
		row := []string{r.Config.ID, string(r.Metrics.Status)}
		if p.Extrapolates != "" {
			extrapolated = append(extrapolated, r.Config.ID+": predicted by a calibration that extrapolates: "+p.Extrapolates)
		}
		if p.Error != "" {
			rows = append(rows, append(row, "-", "-", "-", "-", "-", "-", "no prediction: "+p.Error))
			continue
		}
		meas := "-"
		te := "-"
		if r.Metrics.TokensPerSPerRank != nil && r.Metrics.Status == results.StatusOK {
			meas = fmt.Sprintf("%.4g", *r.Metrics.TokensPerSPerRank)
			if p.TokensPerSPerRank > 0 {
				e := p.TokensPerSPerRank / *r.Metrics.TokensPerSPerRank - 1
				te = fmt.Sprintf("%+.1f%%", e*100)
				tErr = append(tErr, math.Abs(e))
			}
		}
		row = append(row, fmt.Sprintf("%.4g", p.TokensPerSPerRank), meas, te)
		if pred, m, what, ok := results.MemoryPair(p, &r.Metrics); ok {
			e := float64(pred)/float64(m) - 1
			mErr = append(mErr, math.Abs(e))
			memAt[len(rows)] = [2]float64{float64(pred), float64(m)}
			mems = append(mems, float64(pred), float64(m))
			row = append(row, "", "", fmt.Sprintf("%+.1f%%", e*100), what)
		} else {
			row = append(row, "-", "-", "-", "")
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "no run carries a prediction")
		return nil
	}
	u := byteUnit(mems)
	for i, m := range memAt {
		rows[i][5], rows[i][6] = u.Format(m[0]), u.Format(m[1])
	}
	rows = append(rows, []string{"mean |error|", "", "", "", meanPct(tErr), "", "", meanPct(mErr), ""})
	header := []string{"run", "status", "pred tokens/s/rank", "measured", "error", "pred peak " + u.Name, "measured " + u.Name, "error", "memory figure"}
	header, rows = withExposedComm(header, rows, runs)
	fmt.Fprintln(w, "predicted vs measured (error = predicted / measured - 1)")
	if err := writeTable(w, header, rows); err != nil {
		return err
	}
	// Predictions outside the calibration's fitted range: their errors are
	// expected to be larger (issue 26). The text comes from metrics.json.
	for _, e := range extrapolated {
		fmt.Fprintln(w, termsafe.Text(e))
	}
	return nil
}

// withExposedComm adds the predicted and measured exposed communication (% of
// the step) to the table's rows, when some run measured its step breakdown:
// the check of the sim's overlap model. Without one the table is as it was.
// rows are writePredictedVsMeasured's, in runs' order less the runs without a
// prediction, the mean row last.
func withExposedComm(header []string, rows [][]string, runs []results.Run) ([]string, [][]string) {
	share := func(b *results.StepBreakdown) string {
		if s := b.ExposedShare(); s != nil {
			return fmt.Sprintf("%.1f%%", 100**s)
		}
		return "-"
	}
	var pred, meas []string
	measured := false
	for i := range runs {
		r := &runs[i]
		p := r.Metrics.StoredPrediction()
		if p == nil || r.Metrics.Predicted {
			continue
		}
		var m *results.StepBreakdown
		if r.Metrics.Status == results.StatusOK {
			m = r.Metrics.StepBreakdown
		}
		measured = measured || m != nil
		pred, meas = append(pred, share(p.StepBreakdown)), append(meas, share(m))
	}
	if !measured || len(pred) != len(rows)-1 {
		return header, rows
	}
	for i := range pred {
		rows[i] = append(rows[i], pred[i], meas[i])
	}
	rows[len(rows)-1] = append(rows[len(rows)-1], "", "")
	return append(header, "pred exposed comm", "measured"), rows
}

const mib = 1 << 20
