package sim

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestParseCalibrationBounds(t *testing.T) {
	for _, c := range []struct {
		name, body, err string
	}{
		{"good", `{"version":1,"profiles":{"h100-sxm":{"efficiency":0.4,"mem_factors":{"activations":1.2},"reserved_factor":1.05,"overhead_bytes":1000,"fit":{"runs":3}}}}`, ""},
		{"other version", `{"version":2,"profiles":{"cpu":{"efficiency":0.1,"fit":{}}}}`, "version 2, this fsdpbench reads version 1"},
		{"unknown key", `{"version":1,"profiles":{"cpu":{"efficency":0.1,"fit":{}}}}`, `unknown field "efficency"`},
		{"no profiles", `{"version":1,"profiles":{}}`, "no profiles"},
		{"efficiency zero", `{"version":1,"profiles":{"cpu":{"efficiency":0,"fit":{}}}}`, "profiles.cpu.efficiency: 0 is outside [0.001, 1]"},
		{"efficiency above 1", `{"version":1,"profiles":{"cpu":{"efficiency":1.5,"fit":{}}}}`, "efficiency: 1.5 is outside"},
		{"bandwidth factor", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"inter_node_bw_factor":100,"fit":{}}}}`, "inter_node_bw_factor: 100 is outside [0.01, 10]"},
		{"overlap", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"forward_overlap":2,"fit":{}}}}`, "forward_overlap: 2 is outside [0, 1]"},
		{"rank share", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"rank_share_exponent":0.2,"fit":{}}}}`, ""},
		{"rank share negative", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"rank_share_exponent":-0.1,"fit":{}}}}`, "rank_share_exponent: -0.1 is outside [0, 2]"},
		{"memory category", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"mem_factors":{"weights":1},"fit":{}}}}`, "mem_factors.weights: not a memory category"},
		{"memory factor", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"mem_factors":{"grads":0},"fit":{}}}}`, "mem_factors.grads: 0 is outside [0.05, 20]"},
		{"reserved below 1", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"reserved_factor":0.5,"fit":{}}}}`, "reserved_factor: 0.5 is outside [1, 4]"},
		{"negative overhead", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"overhead_bytes":-1,"fit":{}}}}`, "overhead_bytes: -1 is outside"},
		{"step overhead", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"step_overhead_s":99,"fit":{}}}}`, "step_overhead_s: 99 is outside [0, 10]"},
		{"backend key", `{"version":1,"profiles":{"cpu/gotrain":{"efficiency":0.1,"fit":{}}}}`, ""},
		{"empty backend", `{"version":1,"profiles":{"cpu/":{"efficiency":0.1,"fit":{}}}}`, `key "cpu/": give a hardware profile, or PROFILE/BACKEND`},
		{"empty hardware", `{"version":1,"profiles":{"/gotrain":{"efficiency":0.1,"fit":{}}}}`, "give a hardware profile"},
		{"loo rows", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"fit":{"leave_one_out":[{"run":"a","mem_err":-0.5,"tput_err":2,"tput_repeat_spread":0.3}]}}}}`, ""},
		{"loo error below -1", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"fit":{"leave_one_out":[{"run":"a","tput_err":-3}]}}}}`, "fit.leave_one_out[0].tput_err: -3 is below -1"},
		{"negative spread", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"fit":{"leave_one_out":[{"run":"a"},{"run":"b","tput_repeat_spread":-0.1}]}}}}`, "fit.leave_one_out[1].tput_repeat_spread: -0.1 is below 0"},
		{"trailing data", `{"version":1,"profiles":{"cpu":{"efficiency":0.1,"fit":{}}}} {}`, "data after the calibration object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParseCalibration([]byte(c.body))
			if c.err == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
		})
	}
}

func TestLoadCalibrationSaysWhatToDo(t *testing.T) {
	dir := t.TempDir()
	_, err := LoadCalibration(filepath.Join(dir, "missing.json"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fsdpbench calibrate")

	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version":1,"profiles":{"cpu":{"efficiency":7,"fit":{}}}}`), 0o644))
	_, err = LoadCalibration(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), bad)
	assert.Contains(t, err.Error(), "write it again")

	_, err = ParseOptions(map[string]any{"calibration": bad})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "backend_options.calibration")
}

// TestCalibratedPrediction checks that each constant moves the prediction by
// what its formula says, and that a calibrated prediction says so.
func TestCalibratedPrediction(t *testing.T) {
	rc := sweeps.RunConfig{Hardware: "h100-sxm", Model: "llama-1b", SeqLen: 2048, WorldSize: 8, GPUsPerNode: 8,
		BatchPerDevice: 2, Sharding: sweeps.FullShard}
	base, err := PredictCalibrated(rc, nil, nil)
	require.NoError(t, err)
	require.Nil(t, base.Calibration)

	with := func(k Constants) Prediction {
		t.Helper()
		p, err := PredictCalibrated(rc, nil, &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"h100-sxm": k}})
		require.NoError(t, err)
		require.NotNil(t, p.Calibration)
		assert.Contains(t, joinNotes(p.Notes), "calibrated: constants for h100-sxm")
		return p
	}
	eff := base.Hardware.Efficiency
	t.Run("efficiency", func(t *testing.T) {
		// The efficiency is the matmuls': half of it doubles their time; the
		// attention and elementwise kernels keep theirs.
		p := with(Constants{Efficiency: eff / 2})
		require.Greater(t, base.matmulS, 0.0)
		require.Less(t, base.matmulS, base.ComputeS)
		assert.InEpsilon(t, base.ComputeS+base.matmulS, p.ComputeS, 1e-9)
	})
	t.Run("size exponent", func(t *testing.T) {
		p := with(Constants{Efficiency: eff, EfficiencySizeExponent: 0.5})
		scale := (float64(base.Shape.Params()) / RefParams)
		assert.InEpsilon(t, base.ComputeS-base.matmulS+base.matmulS/math.Sqrt(scale), p.ComputeS, 1e-9)
	})
	t.Run("memory factors", func(t *testing.T) {
		p := with(Constants{Efficiency: eff, MemFactors: map[string]float64{MemActivations: 2}})
		assert.Equal(t, 2*base.Breakdown[MemActivations], p.Breakdown[MemActivations])
		assert.Equal(t, base.PeakMemAllocatedBytes+base.Breakdown[MemActivations], p.PeakMemAllocatedBytes)
	})
	t.Run("reserved and overhead", func(t *testing.T) {
		over := int64(3 << 30)
		p := with(Constants{Efficiency: eff, ReservedFactor: 1.5, OverheadBytes: &over})
		assert.Equal(t, ceilBytes(float64(base.PeakMemAllocatedBytes)*1.5), p.PeakMemReservedBytes)
		assert.Equal(t, p.PeakMemReservedBytes+over, p.PeakDeviceMemBytes)
	})
	t.Run("fixed costs", func(t *testing.T) {
		p := with(Constants{Efficiency: eff, StepOverheadS: 0.01, CollectiveLatencyS: 1e-4})
		wu, err := unitsFor(base.Shape, WrapTransformer)
		require.NoError(t, err)
		pt := point{rc: rc, shape: base.Shape}
		pt.rc.GradAccum = 1
		calls := collectiveCalls(&pt, sweeps.FullShard, wu)
		assert.InEpsilon(t, base.StepTimeS+0.01+float64(calls)*1e-4, p.StepTimeS, 1e-9)
		assert.InEpsilon(t, float64(p.TokensPerStep)/p.StepTimeS, p.TokensPerS, 1e-12)
	})
	t.Run("recompute repeats the overhead", func(t *testing.T) {
		ac := rc
		ac.ActivationCheckpointing = true
		cal := &Calibration{Profiles: map[string]Constants{"h100-sxm": {Efficiency: eff}}}
		full := map[string]any{"checkpointing": CheckpointFull}
		bare, err := PredictCalibrated(ac, full, cal)
		require.NoError(t, err)
		cal.Profiles["h100-sxm"] = Constants{Efficiency: eff, StepOverheadS: 0.01}
		p, err := PredictCalibrated(ac, full, cal)
		require.NoError(t, err)
		// Full checkpointing runs the forward's ops again: 1 + share/3 of the
		// overhead, as of the FLOPs (the share uncalibrated: gpuRecomputeShare).
		assert.InEpsilon(t, bare.StepTimeS+0.01*(1+gpuRecomputeShare/3), p.StepTimeS, 1e-9)
		assert.InEpsilon(t, 1+gpuRecomputeShare/3, flopsS(bare)/flopsS(base), 1e-9)
	})
	t.Run("bandwidth factor scales fabric curves too", func(t *testing.T) {
		two := rc
		two.Nodes, two.WorldSize = 2, 16
		two.BackendOptions = map[string]any{"inter_node_fabric": "tcp"}
		cal := func(f float64) *Calibration {
			return &Calibration{Profiles: map[string]Constants{"h100-sxm": {Efficiency: eff, InterNodeBWFactor: f}}}
		}
		slow, err := PredictCalibrated(two, nil, cal(0.5))
		require.NoError(t, err)
		fast, err := PredictCalibrated(two, nil, cal(1))
		require.NoError(t, err)
		lat := fullShardLatency(fast, 16, 2) // NCCL's latency does not scale with the busbw
		assert.InEpsilon(t, 2*(fast.CommS-lat), slow.CommS-lat, 1e-9, "half the busbw, twice the time")
	})
	t.Run("rank share on the cpu profile", func(t *testing.T) {
		cpu := sweeps.RunConfig{Hardware: "cpu", Model: "tiny", SeqLen: 64, WorldSize: 2, GPUsPerNode: 2,
			BatchPerDevice: 4, Sharding: sweeps.DDP, MixedPrecision: sweeps.FP32}
		even, err := PredictCalibrated(cpu, nil, nil)
		require.NoError(t, err)
		share := 0.25
		p, err := PredictCalibrated(cpu, nil, &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{
			"cpu": {Efficiency: even.Hardware.Efficiency, RankShareExponent: &share}}})
		require.NoError(t, err)
		// Uncalibrated each of 2 ranks has half the host's peak; at exponent
		// 0.25 it has 2^-0.25 of it.
		assert.InEpsilon(t, even.PeakFlopsPerS*2*math.Pow(2, -share), p.PeakFlopsPerS, 1e-12)
		assert.InEpsilon(t, even.ComputeS*math.Pow(2, share-1), p.ComputeS, 1e-9)
		assert.Contains(t, joinNotes(p.Notes), "calibrated rank_share_exponent 0.25")
	})
	t.Run("another profile's constants do not apply", func(t *testing.T) {
		p, err := PredictCalibrated(rc, nil, &Calibration{Version: CalibrationVersion, Profiles: map[string]Constants{"a100-80g": {Efficiency: 0.1}}})
		require.NoError(t, err)
		assert.Nil(t, p.Calibration)
		assert.Equal(t, base.StepTimeS, p.StepTimeS)
		assert.Contains(t, joinNotes(p.Notes), "uncalibrated: the calibration")
	})
}

// TestCalibratedRunSaysSoInMetrics runs the sim backend with the calibration
// option: the result's extra names the calibration and the notes say so.
func TestCalibratedRunSaysSoInMetrics(t *testing.T) {
	path := filepath.Join(t.TempDir(), CalibrationFile)
	cal := &Calibration{Profiles: map[string]Constants{"h100-sxm": {Efficiency: 0.3, Fit: FitReport{Runs: 5}}}}
	require.NoError(t, cal.Write(path))
	rc := sweeps.RunConfig{Backend: Name, Hardware: "h100-sxm", Model: "llama-1b", SeqLen: 1024, WorldSize: 8, GPUsPerNode: 8,
		BatchPerDevice: 1, Steps: 2, BackendOptions: map[string]any{"calibration": path}}
	res, err := New().Run(context.Background(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status)
	use, ok := res.Extra["calibration"].(*CalibrationUse)
	require.True(t, ok, "extra.calibration: %#v", res.Extra["calibration"])
	assert.Equal(t, path, use.File)
	assert.Equal(t, 5, use.Runs)
	assert.Contains(t, joinNotes(res.Extra["notes"].([]string)), "calibrated from "+path)
}

func TestMeasurementsLeaveOutWhatCannotCalibrate(t *testing.T) {
	tps, alloc := 1000.0, int64(1<<20)
	run := func(id string, edit func(*results.Run)) results.Run {
		r := results.Run{Config: sweeps.RunConfig{ID: id, Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: 64, WorldSize: 1, BatchPerDevice: 1},
			Metrics: results.Metrics{Status: results.StatusOK, TokensPerS: &tps, PeakMemAllocatedBytes: &alloc}}
		if edit != nil {
			edit(&r)
		}
		return r
	}
	ms, skipped := Measurements([]results.Run{
		run("good", nil),
		run("predicted", func(r *results.Run) { r.Metrics.Predicted = true }),
		run("oom", func(r *results.Run) { r.Metrics.Status = results.StatusOOM }),
		run("auto", func(r *results.Run) { r.Config.Hardware = "auto"; r.Metrics.Env.Hardware = "h100-sxm" }),
		run("unknown hw", func(r *results.Run) { r.Config.Hardware = "auto" }),
		run("no figures", func(r *results.Run) { r.Metrics.TokensPerS, r.Metrics.PeakMemAllocatedBytes = nil, nil }),
		run("repeated", func(r *results.Run) { r.Metrics.Samples = map[string][]float64{"tokens_per_s": {900, 1000, 1350}} }),
		run("whole run", func(r *results.Run) { r.Metrics.WholeRunWallTime = true }),
	}, false)
	require.Len(t, ms, 4)
	// A whole-run (†) throughput is no steady state: its memory is fitted, its
	// tokens/s only when asked.
	assert.Equal(t, "whole run", ms[3].Run)
	assert.Zero(t, ms[3].TokensPerS)
	assert.Positive(t, ms[3].AllocatedBytes)
	assert.Equal(t, "good", ms[0].Run)
	assert.Zero(t, ms[0].TokensPerSSpread, "one repeat has no spread")
	assert.InDelta(t, 0.5, ms[2].TokensPerSSpread, 1e-12, "max / min − 1 of the repeats")
	assert.Equal(t, "h100-sxm", ms[1].Config.Hardware)
	assert.Len(t, skipped, 5)
	assert.Contains(t, skipped[0], "predicted, not measured")
	assert.Contains(t, skipped[4], "whole run: tokens/s over the whole run's wall time (†")
	ms, _ = Measurements([]results.Run{run("whole run", func(r *results.Run) { r.Metrics.WholeRunWallTime = true })}, true)
	assert.Positive(t, ms[0].TokensPerS, "--whole-run keeps it")
}

func joinNotes(ns []string) string {
	s := ""
	for _, n := range ns {
		s += n + "\n"
	}
	return s
}

func TestCalibrationLookup(t *testing.T) {
	c := &Calibration{Profiles: map[string]Constants{
		"cpu/gotrain": {Efficiency: 0.1}, "cpu/torchrun": {Efficiency: 0.2},
		"h100-sxm/torchrun": {Efficiency: 0.3}, "a100-80g": {Efficiency: 0.4}, "a100-80g/gotrain": {Efficiency: 0.5},
	}}
	for _, tc := range []struct {
		hw, backend, key string
	}{
		{"cpu", "gotrain", "cpu/gotrain"},
		{"cpu", "torchrun", "cpu/torchrun"},
		{"cpu", "sim", ""}, // two backends' constants and neither asked for
		{"h100-sxm", "sim", "h100-sxm/torchrun"},
		{"h100-sxm", "", "h100-sxm/torchrun"},
		{"a100-80g", "gotrain", "a100-80g/gotrain"},
		{"a100-80g", "torchrun", "a100-80g"},
		{"h200", "sim", ""},
	} {
		key, k, ok := c.lookup(tc.hw, tc.backend, false)
		assert.Equal(t, tc.key != "", ok, "%s %s", tc.hw, tc.backend)
		assert.Equal(t, tc.key, key, "%s %s", tc.hw, tc.backend)
		if ok {
			assert.Equal(t, c.Profiles[key].Efficiency, k.Efficiency)
		}
	}
}

// TestLoadCalibrationDuplicateProfile: a calibration.json that lists a profile
// twice is refused at the second, not read as the last one.
func TestLoadCalibrationDuplicateProfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calibration.json")
	require.NoError(t, os.WriteFile(path, []byte("{\"version\":1,\"profiles\":{\n"+
		"\"cpu\":{\"efficiency\":0.1,\"fit\":{}},\n\"cpu\":{\"efficiency\":0.9,\"fit\":{}}}}"), 0o644))
	_, err := LoadCalibration(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:3:1: the key "cpu" is given twice in one object (first at line 2, column 1)`)
}
