package sim

import (
	"strings"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Stored is the prediction, for a run of worldSize ranks, as a measured run
// keeps it beside its measurement (metrics.json extra.prediction).
func (p Prediction) Stored(worldSize int) results.Prediction {
	s := results.Prediction{
		TokensPerS:            p.TokensPerS,
		StepTimeS:             p.StepTimeS,
		PeakMemAllocatedBytes: p.PeakMemAllocatedBytes,
		PeakMemReservedBytes:  p.PeakMemReservedBytes,
		PeakDeviceMemBytes:    p.PeakDeviceMemBytes,
		Host:                  !p.Hardware.IsGPU,
		Feasible:              p.Feasible,
		StepBreakdown:         p.StepBreakdown(),
	}
	if worldSize > 0 {
		s.TokensPerSPerRank = p.TokensPerS / float64(worldSize)
	}
	if p.Calibration != nil {
		s.Calibration = p.Calibration.File
		if s.Calibration == "" {
			s.Calibration = "in memory"
		}
	}
	for _, n := range p.Notes {
		if rest, ok := strings.CutPrefix(n, ExtrapolatesNote); ok {
			s.Extrapolates = rest
		}
	}
	return s
}

// Annotator returns the harness hook that stores, beside each measured run,
// the sim's prediction of it (calibrated by cal when not nil): what `sweep
// --predict` and `recommend --measure` use. simOptions are the sim's
// backend_options for the predictions (bandwidths); the run's own options
// belong to its backend.
func Annotator(cal *Calibration, simOptions map[string]any) func(rc sweeps.RunConfig, m *results.Metrics) {
	return func(rc sweeps.RunConfig, m *results.Metrics) {
		if m.Predicted {
			return // the sim's own run: nothing to compare
		}
		if rc.Hardware == "" || rc.Hardware == "auto" {
			if m.Env.Hardware != "" {
				rc.Hardware = m.Env.Hardware
			}
		}
		var stored results.Prediction
		if pred, err := PredictCalibrated(rc, simOptions, cal); err != nil {
			stored.Error = err.Error()
		} else {
			stored = pred.Stored(max(rc.WorldSize, rc.Nodes*rc.GPUsPerNode, 1))
		}
		if m.Extra == nil {
			m.Extra = map[string]any{}
		}
		m.Extra[results.ExtraPrediction] = stored
	}
}
