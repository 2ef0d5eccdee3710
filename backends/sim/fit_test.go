package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// syntheticRuns predicts a grid with known constants and returns the figures as
// if measured: what Fit must recover the constants from.
func syntheticRuns(t *testing.T, hw string, truth Constants) []Measurement {
	t.Helper()
	cal := &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{hw: truth}}
	var ms []Measurement
	for _, model := range []string{"gpt2-124m", "llama3-8b"} {
		for _, nodes := range []int{1, 2} {
			for _, sh := range []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.DDP, sweeps.HybridShard} {
				for _, pf := range []string{sweeps.BackwardPre, sweeps.PrefetchNone} {
					for _, ga := range []int{1, 2} {
						if (sh == sweeps.HybridShard && nodes == 1) || (ga > 1 && sh != sweeps.FullShard) {
							continue
						}
						rc := sweeps.RunConfig{Hardware: hw, Model: model, SeqLen: 1024, Nodes: nodes, GPUsPerNode: 8, WorldSize: 8 * nodes,
							BatchPerDevice: 1, GradAccum: ga, Sharding: sh, BackwardPrefetch: pf, MixedPrecision: sweeps.BF16,
							// Checkpointing on half the large model's runs, so that
							// the recompute share is told apart from the size exponent.
							ActivationCheckpointing: model == "llama3-8b" && pf == sweeps.BackwardPre}
						pred, err := predict(rc, Options{Calibration: cal})
						require.NoError(t, err)
						ms = append(ms, Measurement{Run: rc.MakeSlug() + "-" + model, Config: rc,
							TokensPerS: pred.TokensPerS, AllocatedBytes: pred.PeakMemAllocatedBytes,
							ReservedBytes: pred.PeakMemReservedBytes, DeviceBytes: pred.PeakDeviceMemBytes})
					}
				}
			}
		}
	}
	return ms
}

func TestFitRecoversSyntheticConstants(t *testing.T) {
	overlap, recompute := 0.8, 0.7
	overhead := int64(1536 << 20)
	truth := Constants{RecomputeShare: &recompute,
		Efficiency: 0.38, EfficiencySizeExponent: 0.07,
		IntraNodeBWFactor: 0.7, InterNodeBWFactor: 1.6, ForwardOverlap: &overlap,
		MemFactors: map[string]float64{MemParams: 1.1, MemGrads: 0.9, MemOptimizer: 1.0,
			MemActivations: 1.3, MemLogits: 0.6, MemBuffers: 1.2},
		ReservedFactor: 1.07, OverheadBytes: &overhead,
		StepOverheadS: 0.004, CollectiveLatencyS: 30e-6,
	}
	ms := syntheticRuns(t, "h100-sxm", truth)
	cal, err := Fit(ms)
	require.NoError(t, err)
	got := cal.Profiles["h100-sxm"]
	for _, c := range []struct {
		name      string
		want, got float64
	}{
		{ConstEfficiency, truth.Efficiency, got.Efficiency},
		{ConstSizeExponent, truth.EfficiencySizeExponent, got.EfficiencySizeExponent},
		{ConstIntraBW, truth.IntraNodeBWFactor, got.IntraNodeBWFactor},
		{ConstInterBW, truth.InterNodeBWFactor, got.InterNodeBWFactor},
		{ConstForwardOverlap, overlap, *got.ForwardOverlap},
		{ConstRecompute, recompute, *got.RecomputeShare},
		{ConstReserved, truth.ReservedFactor, got.ReservedFactor},
		{ConstStepOverhead, truth.StepOverheadS, got.StepOverheadS},
		{ConstLatency, truth.CollectiveLatencyS, got.CollectiveLatencyS},
		{ConstOverhead, float64(overhead), float64(*got.OverheadBytes)},
	} {
		assert.InEpsilon(t, c.want, c.got, 0.02, c.name)
	}
	for cat, f := range truth.MemFactors {
		assert.InEpsilon(t, f, got.MemFactors[cat], 0.02, "mem_factors."+cat)
	}
	require.Len(t, got.Fit.LeaveOneOut, len(ms))
	for _, row := range got.Fit.LeaveOneOut {
		require.NotNil(t, row.MemErr, row.Run)
		require.NotNil(t, row.TputErr, row.Run)
		assert.Less(t, abs(*row.MemErr), 0.02, row.Run)
		assert.Less(t, abs(*row.TputErr), 0.02, row.Run)
	}
}

// TestFitRecoversRankShareOnCPU: runs on the cpu profile at one and two ranks
// per host, generated with a known rank share exponent (and the other time
// constants), give it back; the model's even share (1) would mispredict them.
func TestFitRecoversRankShareOnCPU(t *testing.T) {
	share := 0.15
	truth := Constants{Efficiency: 0.3, StepOverheadS: 0.001, CollectiveLatencyS: 100e-6, IntraNodeBWFactor: 0.5, RankShareExponent: &share}
	cal := &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"cpu": truth}}
	var ms []Measurement
	for _, ws := range []int{1, 2, 4} {
		for _, bs := range []int{1, 4, 16} {
			for _, sh := range []string{sweeps.FullShard, sweeps.DDP} {
				rc := sweeps.RunConfig{Hardware: "cpu", Model: "tiny", SeqLen: 64, Nodes: 1, GPUsPerNode: ws, WorldSize: ws,
					BatchPerDevice: bs, GradAccum: 1, Sharding: sh, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.FP32,
					ForwardPrefetch: true}
				pred, err := predict(rc, Options{Calibration: cal})
				require.NoError(t, err)
				ms = append(ms, Measurement{Run: rc.MakeSlug(), Config: rc, TokensPerS: pred.TokensPerS})
			}
		}
	}
	got, err := Fit(ms)
	require.NoError(t, err)
	k := got.Profiles["cpu"]
	require.NotNil(t, k.RankShareExponent)
	assert.InDelta(t, share, *k.RankShareExponent, 0.01)
	assert.InEpsilon(t, truth.Efficiency, k.Efficiency, 0.02)
	assert.Contains(t, k.Fit.Fitted, ConstRankShare)
	for _, row := range k.Fit.LeaveOneOut {
		require.NotNil(t, row.TputErr, row.Run)
		assert.Less(t, abs(*row.TputErr), 0.02, row.Run)
	}

	// One rank per host everywhere: the exponent is not told, and is kept.
	var one []Measurement
	for _, m := range ms {
		if m.Config.WorldSize == 1 {
			one = append(one, m)
		}
	}
	got, err = Fit(one)
	require.NoError(t, err)
	assert.Nil(t, got.Profiles["cpu"].RankShareExponent)
	assert.Contains(t, got.Profiles["cpu"].Fit.Kept, ConstRankShare+": every run has the same number of ranks on a host")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// A fit with fewer throughput runs than the constants it sets says so: it
// matches its runs whatever the model's error (calibrate fitted four constants
// to one whole-run figure without a word).
func TestFitWarnsWhenUnderdetermined(t *testing.T) {
	ms := syntheticRuns(t, "h100-sxm", Constants{Efficiency: 0.4})
	cal, err := Fit(ms[:1])
	require.NoError(t, err)
	w := cal.Profiles["h100-sxm"].Fit.Warnings
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "throughput constants fitted to 1 run(s)")

	cal, err = Fit(ms)
	require.NoError(t, err)
	assert.Empty(t, cal.Profiles["h100-sxm"].Fit.Warnings)
}
