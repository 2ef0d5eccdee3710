package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// measured predicts rc under its own sim options and a truth calibration and
// returns the figures as a measurement of a sim-stated run.
func measured(t *testing.T, rc sweeps.RunConfig, truth Constants, eff float64) Measurement {
	t.Helper()
	opts, err := predictOptions(rc, nil)
	require.NoError(t, err)
	opts.Calibration = &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{rc.Hardware: truth}}
	opts.Efficiency = eff
	p, err := predict(rc, opts)
	require.NoError(t, err)
	return Measurement{Run: fmt.Sprintf("%s-%d-%d-%v", rc.Model, rc.Nodes, rc.BatchPerDevice, rc.ActivationCheckpointing), Config: rc,
		TokensPerS: p.TokensPerS, AllocatedBytes: p.PeakMemAllocatedBytes, ReservedBytes: p.PeakMemReservedBytes, DeviceBytes: p.PeakDeviceMemBytes}
}

// statedRuns are h100 runs stated with a stack other than the sim's
// defaults (fused loss, selective checkpointing, FSDP1, a fabric between nodes).
func statedRuns(t *testing.T, truth Constants, eff float64) []Measurement {
	var ms []Measurement
	for _, model := range []string{"llama3-8b", "llama-1b"} {
		for _, nodes := range []int{1, 2} {
			for _, b := range []int{1, 4} {
				for _, ac := range []bool{false, true} {
					rc := cfg(model, 8*nodes, sweeps.FullShard)
					rc.Nodes, rc.GPUsPerNode, rc.BatchPerDevice, rc.SeqLen, rc.ActivationCheckpointing = nodes, 8, b, 1024, ac
					rc = withOpts(rc, "loss", LossFused, "checkpointing", CheckpointSelective, "fsdp_version", 1, "inter_node_fabric", "ib-rail-8x400g")
					ms = append(ms, measured(t, rc, truth, eff))
				}
			}
		}
	}
	return ms
}

// TestFitPredictsEachRunUnderItsOwnOptions: runs measured under a stated stack
// (fused loss, selective checkpointing, FSDP1, InfiniBand between nodes) are
// fitted under it: the memory factors stay at 1 and every held-out error is
// nil. Fitted under the defaults instead (upcast loss, whole-block
// checkpointing, FSDP2, 25 GB/s), the factors absorbed the stack's difference
// and the errors did not vanish (issue 26).
func TestFitPredictsEachRunUnderItsOwnOptions(t *testing.T) {
	truth := Constants{Efficiency: 0.4}
	cal, err := Fit(statedRuns(t, truth, 0))
	require.NoError(t, err)
	k := cal.Profiles["h100-sxm"]
	for cat, f := range k.MemFactors {
		assert.InDelta(t, 1, f, 0.01, "mem_factors.%s: the run's own stack accounts for its memory", cat)
	}
	assert.InEpsilon(t, 0.4, k.Efficiency, 0.02)
	for _, row := range k.Fit.LeaveOneOut {
		require.NotNil(t, row.TputErr, row.Run)
		assert.Less(t, abs(*row.TputErr), 0.02, row.Run)
		assert.Less(t, abs(*row.MemErr), 0.01, row.Run)
	}
}

// TestFitKeepsConstantsInPlausibleRanges: runs measured faster than any GPU
// trains (0.95 of peak) fit an efficiency at the 0.75 cap, not above, and no
// calibrated model size is predicted past it; every fitted constant lies in
// its stated range.
func TestFitKeepsConstantsInPlausibleRanges(t *testing.T) {
	cal, err := Fit(statedRuns(t, Constants{Efficiency: 0.4}, 0.95))
	require.NoError(t, err)
	k := cal.Profiles["h100-sxm"]
	rg := rangesFor(true, true)
	t.Logf("efficiency %.3g, size exponent %.3g, intra %.3g, inter %.3g", k.Efficiency, k.EfficiencySizeExponent, k.IntraNodeBWFactor, k.InterNodeBWFactor)
	assert.LessOrEqual(t, k.Efficiency, MaxCalibratedEfficiency)
	assert.Greater(t, k.Efficiency, 0.7, "pressed against the cap")
	for _, c := range []struct {
		name string
		v    float64
		r    fitRange
	}{
		{ConstEfficiency, k.Efficiency, rg.efficiency}, {ConstSizeExponent, k.EfficiencySizeExponent, rg.sizeExponent},
		{ConstIntraBW, k.IntraNodeBWFactor, rg.intraBW}, {ConstInterBW, k.InterNodeBWFactor, rg.interBW},
		{ConstRecompute, *k.RecomputeShare, rg.recompute}, {ConstStepOverhead, k.StepOverheadS, rg.stepOverheadS},
		{ConstLatency, k.CollectiveLatencyS, rg.latencyS},
	} {
		assert.True(t, c.v >= c.r.lo && c.v <= c.r.hi, "%s %g outside %s", c.name, c.v, c.r)
	}
	for _, params := range []int64{1e8, 1e9, 1e10, 7e10, 1e12} {
		assert.LessOrEqual(t, k.efficiencyFor(params), MaxCalibratedEfficiency, "%d params", params)
	}
	// A file's hand-written exponent, with no range, is capped too.
	hand := Constants{Efficiency: 0.6, EfficiencySizeExponent: 0.5}
	assert.Equal(t, MaxCalibratedEfficiency, hand.efficiencyFor(7e10))
}

// TestCalibratedPredictionSaysItExtrapolates: constants fitted on one-node runs
// of two model sizes at one sequence length say so when applied to another
// size, more nodes or a longer sequence, and say nothing inside the range.
func TestCalibratedPredictionSaysItExtrapolates(t *testing.T) {
	var ms []Measurement
	for _, model := range []string{"gpt2-124m", "llama-1b"} {
		for _, b := range []int{1, 2} {
			rc := cfg(model, 8, sweeps.FullShard)
			rc.BatchPerDevice, rc.SeqLen = b, 1024
			ms = append(ms, measured(t, rc, Constants{Efficiency: 0.3}, 0))
		}
	}
	cal, err := Fit(ms)
	require.NoError(t, err)
	r := cal.Profiles["h100-sxm"].Fit.Range
	require.NotNil(t, r)
	assert.Equal(t, 1, r.MaxNodes)
	assert.Equal(t, 1024, r.MaxSeqLen)
	note := func(rc sweeps.RunConfig) string {
		p, err := PredictCalibrated(rc, nil, cal)
		require.NoError(t, err)
		i := slices.IndexFunc(p.Notes, func(n string) bool { return strings.HasPrefix(n, ExtrapolatesNote) })
		if i < 0 {
			return ""
		}
		return p.Notes[i]
	}
	inside := cfg("llama-1b", 8, sweeps.FullShard)
	inside.SeqLen = 1024
	assert.Empty(t, note(inside))
	big := cfg("llama3-8b", 16, sweeps.FullShard)
	big.Nodes, big.GPUsPerNode, big.SeqLen = 2, 8, 4096
	n := note(big)
	t.Log(n)
	assert.Contains(t, n, "8.03B params (fitted 124M–1.24B)")
	assert.Contains(t, n, "2 nodes (fitted 1)")
	assert.Contains(t, n, "seq_len 4096 (fitted 1024)")
}

// TestRecomputeShareFittedOnlyFromCheckpointedRuns: runs whose checkpointed
// steps cost less than the model's full recompute fit a share below 1, which
// then prices recompute in a calibrated prediction; runs that never checkpoint
// keep it unset, and the calibrated prediction of a checkpointed run pays the
// recompute in full (neutral).
func TestRecomputeShareFittedOnlyFromCheckpointedRuns(t *testing.T) {
	share := 0.7
	cal, err := Fit(statedRuns(t, Constants{Efficiency: 0.4, RecomputeShare: &share}, 0))
	require.NoError(t, err)
	k := cal.Profiles["h100-sxm"]
	require.NotNil(t, k.RecomputeShare)
	assert.InDelta(t, share, *k.RecomputeShare, 0.02)

	var plain []Measurement
	for _, m := range statedRuns(t, Constants{Efficiency: 0.4}, 0) {
		if !m.Config.ActivationCheckpointing {
			plain = append(plain, m)
		}
	}
	cal, err = Fit(plain)
	require.NoError(t, err)
	k = cal.Profiles["h100-sxm"]
	assert.Nil(t, k.RecomputeShare)
	assert.Contains(t, strings.Join(k.Fit.Kept, "\n"), ConstRecompute+": no run checkpoints activations")
	rc := cfg("llama3-8b", 8, sweeps.FullShard)
	rc.ActivationCheckpointing = true
	off := rc
	off.ActivationCheckpointing = false
	on, err := PredictCalibrated(rc, nil, cal)
	require.NoError(t, err)
	without, err := PredictCalibrated(off, nil, cal)
	require.NoError(t, err)
	assert.InEpsilon(t, 1+gpuRecomputeShare/3, flopsS(on)/flopsS(without), 1e-9, "recompute at the uncalibrated share")
}

// TestFitReadsTheSimOptionsOfAnIngestedRun: a run of no named backend (ingested
// from a folder) is fitted under the sim options its spec states and beside
// keys that are not the sim's, which neither break the fit nor apply.
func TestFitReadsTheSimOptionsOfAnIngestedRun(t *testing.T) {
	ms := statedRuns(t, Constants{Efficiency: 0.4}, 0)
	for i := range ms {
		ms[i].Config.Backend = ""
		ms[i].Config.BackendOptions["script"] = "train.py"
	}
	cal, err := Fit(ms)
	require.NoError(t, err)
	k := cal.Profiles["h100-sxm"]
	assert.InDelta(t, 1, k.MemFactors[MemLogits], 0.01, "fitted under loss fused, as stated")
}
