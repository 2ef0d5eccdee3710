package sim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// gotrainCPURuns predicts the Go trainer's cpu runs at 2 and 4 ranks, three
// micro-batches, full_shard without prefetch, under known constants, and returns
// them as if measured, with their step breakdowns when breakdowns is set.
func gotrainCPURuns(t *testing.T, truth Constants, breakdowns bool) []Measurement {
	t.Helper()
	cal := &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"cpu": truth}}
	var ms []Measurement
	for _, ws := range []int{2, 4} {
		for _, bs := range []int{1, 4, 16} {
			rc := sweeps.RunConfig{Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: 64, Nodes: 1, GPUsPerNode: ws, WorldSize: ws,
				BatchPerDevice: bs, GradAccum: 1, Sharding: sweeps.FullShard, BackwardPrefetch: sweeps.PrefetchNone, MixedPrecision: sweeps.FP32}
			pred, err := predict(rc, Options{Calibration: cal})
			require.NoError(t, err)
			m := Measurement{Run: rc.MakeSlug(), Backend: "gotrain", Config: rc, TokensPerS: pred.TokensPerS}
			if breakdowns {
				b := pred.StepBreakdown()
				require.NotNil(t, b)
				b.Source = "gotrain"
				m.Breakdown = b
			}
			ms = append(ms, m)
		}
	}
	return ms
}

// TestFitRecoversCommunicationFromBreakdowns: the step times of these runs
// tell the compute (it grows with the micro-batch) but not how their fixed
// part divides between communication (link bandwidth, per-call latency) and
// the per-step overhead: two world sizes give two intercepts for three
// constants. The measured breakdown tells them apart, so a fit to it recovers
// the constants and predicts the collectives' and the exposed time; a fit to
// step times alone matches the steps but not where they went.
func TestFitRecoversCommunicationFromBreakdowns(t *testing.T) {
	share, wait := 0.4, 0.3
	truth := Constants{Efficiency: 0.3, RankShareExponent: &share, HostWaitShare: &wait, IntraNodeBWFactor: 0.3,
		CollectiveLatencyS: 200e-6, StepOverheadS: 1e-3}

	cal, err := Fit(gotrainCPURuns(t, truth, true))
	require.NoError(t, err)
	got := cal.Profiles["cpu/gotrain"]
	require.NotNil(t, got.RankShareExponent)
	require.NotNil(t, got.HostWaitShare)
	for _, c := range []struct {
		name      string
		want, got float64
	}{
		{ConstEfficiency, truth.Efficiency, got.Efficiency},
		{ConstRankShare, share, *got.RankShareExponent},
		{ConstHostWait, wait, *got.HostWaitShare},
		{ConstIntraBW, truth.IntraNodeBWFactor, got.IntraNodeBWFactor},
		{ConstLatency, truth.CollectiveLatencyS, got.CollectiveLatencyS},
		{ConstStepOverhead, truth.StepOverheadS, got.StepOverheadS},
	} {
		assert.InEpsilon(t, c.want, c.got, 0.02, c.name)
	}
	for _, row := range got.Fit.LeaveOneOut {
		require.NotNil(t, row.TputErr, row.Run)
		assert.Less(t, abs(*row.TputErr), 0.02, row.Run)
	}

	// Step times alone: as close on the steps, not on their parts.
	steps := gotrainCPURuns(t, truth, false)
	cal, err = Fit(steps)
	require.NoError(t, err)
	only := cal.Profiles["cpu/gotrain"]
	assert.Nil(t, only.HostWaitShare, "a step time cannot tell waiting from computing")
	assert.Contains(t, only.Fit.Kept, ConstHostWait+": no run that shares a host among communicating ranks measured its step breakdown")
	worst := 0.0
	for _, m := range gotrainCPURuns(t, truth, true) {
		s, err := newSample(m)
		require.NoError(t, err)
		pred, err := s.predictWith("cpu", &only)
		require.NoError(t, err)
		assert.InEpsilon(t, m.TokensPerS, pred.TokensPerS, 0.02, m.Run)
		worst = max(worst, abs(pred.ExposedCommS/m.Breakdown.ExposedCommS-1))
	}
	assert.Greater(t, worst, 0.1, "a step-time fit should not find the exposed communication it was never shown (intra_node_bw_factor %g, collective_latency_s %g, step_overhead_s %g)",
		only.IntraNodeBWFactor, only.CollectiveLatencyS, only.StepOverheadS)
}

// TestGotrainCPUScheduleExposesBlockingCollectives: the Go trainer on a cpu
// runs its reductions and unprefetched all-gathers on the training goroutine,
// so the sim predicts them all exposed; prefetching (backward_pre with
// forward_prefetch) hides all-gathers. PyTorch's schedule (torchrun) hides
// reductions under the backward even without prefetch.
func TestGotrainCPUScheduleExposesBlockingCollectives(t *testing.T) {
	run := func(backend, sharding, bwd string, fwd bool) Prediction {
		rc := sweeps.RunConfig{Backend: backend, Hardware: "cpu", Model: "tiny", SeqLen: 128, Nodes: 1, GPUsPerNode: 2, WorldSize: 2,
			BatchPerDevice: 2, GradAccum: 1, Sharding: sharding, BackwardPrefetch: bwd, ForwardPrefetch: fwd, MixedPrecision: sweeps.FP32}
		pred, err := Predict(rc)
		require.NoError(t, err)
		require.Positive(t, pred.CommS)
		return pred
	}
	for _, sh := range []string{sweeps.FullShard, sweeps.DDP} {
		p := run("gotrain", sh, sweeps.PrefetchNone, false)
		assert.InEpsilon(t, p.CommS, p.ExposedCommS, 1e-9, sh+": every collective blocks")
	}
	// (DDP's one 25 MiB bucket of this model cannot hide under PyTorch either.)
	assert.Less(t, run("torchrun", sweeps.FullShard, sweeps.PrefetchNone, false).ExposedCommS,
		run("torchrun", sweeps.FullShard, sweeps.PrefetchNone, false).CommS*0.9, "full_shard under PyTorch's schedule")
	none, pre := run("gotrain", sweeps.FullShard, sweeps.PrefetchNone, false), run("gotrain", sweeps.FullShard, sweeps.BackwardPre, true)
	assert.Less(t, pre.ExposedCommS, none.ExposedCommS*0.9, "prefetched all-gathers run under compute")
	// The reduce-scatters still block: at least their time stays exposed.
	assert.GreaterOrEqual(t, pre.ExposedCommS, pre.reduceScatterS)
	post := run("gotrain", sweeps.FullShard, sweeps.BackwardPost, false)
	assert.InEpsilon(t, post.CommS, post.ExposedCommS, 1e-9, "backward_post's all-gather hides behind the blocking reduce-scatter only")
}

// TestHostWaitMovesComputeToExposed: the host wait share moves part of what
// sharing the host costs from compute to exposed communication, and leaves
// the step as it was.
func TestHostWaitMovesComputeToExposed(t *testing.T) {
	share, wait := 0.5, 0.6
	rc := sweeps.RunConfig{Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: 64, Nodes: 1, GPUsPerNode: 2, WorldSize: 2,
		BatchPerDevice: 4, GradAccum: 1, Sharding: sweeps.DDP, BackwardPrefetch: sweeps.PrefetchNone, MixedPrecision: sweeps.FP32}
	k := Constants{Efficiency: 0.3, RankShareExponent: &share}
	pred := func(k Constants) Prediction {
		p, err := PredictCalibrated(rc, nil, &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"cpu": k}})
		require.NoError(t, err)
		return p
	}
	base := pred(k)
	k.HostWaitShare = &wait
	got := pred(k)
	w := wait * base.ComputeS * (1 - 1/math.Sqrt2)
	assert.InEpsilon(t, base.StepTimeS, got.StepTimeS, 1e-12)
	assert.InEpsilon(t, base.ComputeS-w, got.ComputeS, 1e-9)
	assert.InEpsilon(t, base.ExposedCommS+w, got.ExposedCommS, 1e-9)
	b := got.StepBreakdown()
	require.NotNil(t, b)
	require.NotNil(t, b.AllReduceS)
	assert.InEpsilon(t, b.CollectiveS, *b.AllReduceS, 1e-9)

	_, err := ParseCalibration([]byte(`{"version": 1, "profiles": {"cpu": {"efficiency": 0.3, "host_wait_share": 1.5}}}`))
	require.ErrorContains(t, err, "host_wait_share: 1.5 is outside [0, 1]")
}

// TestMeasurementsKeepMeasuredBreakdowns: a run's measured step breakdown
// reaches the fit; the sim's own (a predicted breakdown), one that fails its
// bounds, and one beside a throughput the fit does not use do not.
func TestMeasurementsKeepMeasuredBreakdowns(t *testing.T) {
	tps := 1000.0
	run := func(id string, b *results.StepBreakdown, wholeRun bool) results.Run {
		return results.Run{Config: sweeps.RunConfig{ID: id, Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: 64, WorldSize: 2, BatchPerDevice: 1},
			Metrics: results.Metrics{Status: results.StatusOK, TokensPerS: &tps, StepBreakdown: b, WholeRunWallTime: wholeRun}}
	}
	good := &results.StepBreakdown{StepS: 0.01, ComputeS: 0.006, CollectiveS: 0.004, ExposedCommS: 0.003, OtherS: 0.001, Source: "gotrain"}
	simB := *good
	simB.Source = SourceSim
	bad := *good
	bad.ExposedCommS = 0.005 // more than the collectives
	ms, _ := Measurements([]results.Run{run("good", good, false), run("sim", &simB, false), run("bad", &bad, false),
		run("whole", good, true)}, false)
	require.Len(t, ms, 3) // "whole" has no figure the fit uses
	require.NotNil(t, ms[0].Breakdown)
	assert.Equal(t, *good, *ms[0].Breakdown)
	assert.Nil(t, ms[1].Breakdown)
	assert.Nil(t, ms[2].Breakdown)
}
