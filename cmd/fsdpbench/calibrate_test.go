package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/results"
)

// gotrainCalSpec is a small grid of real CPU training runs: world size,
// micro-batch, sharding and checkpointing all vary, so every constant the cpu
// runs can tell is fitted.
const gotrainCalSpec = `name: cal
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 4
warmup_steps: 1
repeats: 2
base:
  mixed_precision: fp32
grid:
  world_size: [1, 2]
  batch_per_device: [1, 4]
  sharding: [full_shard, ddp]
  activation_checkpointing: [false, true]
`

// TestSweepPredictThenCalibrate runs real gotrain training with --predict (each
// run keeps the sim's prediction beside its measurement), then calibrates on
// those runs: the file is written and loads, every run has a leave-one-out
// error, and a plan with the calibration says it is calibrated.
func TestSweepPredictThenCalibrate(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	spec := writeSpec(t, dir, gotrainCalSpec)
	res := fsdpbench(t, dir, "sweep", spec, "--results", out, "--predict", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "predicted vs measured")
	assert.Regexp(t, `mean \|error\| .*%`, res.stdout)

	runs, err := results.Load(filepath.Join(out, "cal"))
	require.NoError(t, err)
	require.Len(t, runs, 16)
	for _, r := range runs {
		p := r.Metrics.StoredPrediction()
		require.NotNil(t, p, r.Config.ID)
		assert.Empty(t, p.Error)
		assert.Positive(t, p.TokensPerSPerRank)
		assert.True(t, p.Host, "cpu predictions are of host memory")
		pred, meas, what, ok := results.MemoryPair(p, &r.Metrics)
		assert.True(t, ok)
		assert.Equal(t, results.SamplePeakAllocated, what, "gotrain accounts its allocations exactly")
		// Uncalibrated, the sim replays the trainer's allocations: the 5%.
		assert.InEpsilon(t, float64(meas), float64(pred), 0.05, r.Config.ID)
	}
	// The error columns read what --predict stored.
	res = fsdpbench(t, dir, "report", filepath.Join(out, "cal"), "--metric", "pred_err.tokens_per_s_per_rank,pred_err.peak_mem_bytes", "--format", "csv")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "pred_err.peak_mem_bytes")

	res = fsdpbench(t, dir, "calibrate", filepath.Join(out, "cal"), "--results", out)
	require.Equal(t, 0, res.code, res.stderr)
	calPath := filepath.Join(out, sim.CalibrationFile)
	cal, err := sim.LoadCalibration(calPath)
	require.NoError(t, err)
	k, ok := cal.Profiles["cpu/gotrain"]
	require.True(t, ok, "a profile per hardware and backend")
	assert.Equal(t, 16, k.Fit.Runs)
	assert.Equal(t, []string{"gotrain"}, k.Fit.Backends)
	require.Len(t, k.Fit.LeaveOneOut, 16)
	for _, row := range k.Fit.LeaveOneOut {
		require.NotNil(t, row.MemErr, row.Run)
		assert.NotNil(t, row.TputErr, row.Run)
		assert.NotNil(t, row.TputSpread, "two repeats: their spread is reported (%s)", row.Run)
		assert.Less(t, math.Abs(*row.MemErr), 0.05, "memory leave-one-out within the issue's 5%% (%s)", row.Run)
	}
	assert.Contains(t, res.stdout, "repeat spread")
	assert.Contains(t, k.Fit.Fitted, sim.ConstEfficiency)
	assert.Contains(t, k.Fit.Fitted, "mem_factors.activations")
	// Half the runs checkpoint: the recompute's share is the runs' to tell,
	// and the range they span is kept and printed (issue 26).
	assert.Contains(t, k.Fit.Fitted, sim.ConstRecompute)
	require.NotNil(t, k.Fit.Range)
	assert.Equal(t, 32, k.Fit.Range.MaxSeqLen)
	assert.Contains(t, res.stdout, "fitted range: ")
	assert.Contains(t, res.stdout, sim.ConstRecompute)
	assert.Contains(t, strings.Join(k.Fit.Kept, "\n"), "efficiency_size_exponent: every run has the same model size")
	assert.Contains(t, res.stdout, "leave-one-out")
	assert.Regexp(t, regexp.MustCompile(`mean \|error\|\s*│\s*│\s*[0-9.]+%\s*│\s*[0-9.]+%`), res.stdout)
	assert.Contains(t, res.stderr, "--calibration "+calPath)

	// A calibrated plan says so; a calibrated sim sweep says so in metrics.json.
	res = fsdpbench(t, dir, "plan", spec, "--calibration", calPath)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "calibrated by "+calPath)
	res = fsdpbench(t, dir, "sweep", spec, "--results", out, "--progress", "none",
		"--set", "backend=sim", "--set", "name=cal-sim", "--set", "backend_options.calibration="+calPath)
	require.Equal(t, 0, res.code, res.stderr)
	simRuns, err := results.Load(filepath.Join(out, "cal-sim"))
	require.NoError(t, err)
	for _, r := range simRuns {
		require.Contains(t, r.Metrics.Extra, "calibration", r.Config.ID)
		assert.Contains(t, fmt.Sprint(r.Metrics.Extra["notes"]), "calibrated from "+calPath+": constants for cpu/gotrain fitted to 16 measured runs")
	}

	// compare of the calibrated sim sweep against the measured one: pred err.
	res = fsdpbench(t, dir, "compare", filepath.Join(out, "cal"), filepath.Join(out, "cal-sim"), "--metric", "tokens_per_s_per_rank,peak_mem_allocated_bytes")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "pred err")
	assert.Contains(t, res.stdout, "mean |pred err|")
}

func TestCalibrateRefusesWhatItCannotUse(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	spec := writeSpec(t, dir, strings.Replace(gotrainCalSpec, "backend: gotrain", "backend: sim", 1))
	res := fsdpbench(t, dir, "sweep", spec, "--results", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	res = fsdpbench(t, dir, "calibrate", filepath.Join(out, "cal"), "--results", out)
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "predicted, not measured")
	assert.Contains(t, res.stderr, "give results of a real backend")
	_, err := os.Stat(filepath.Join(out, sim.CalibrationFile))
	assert.True(t, os.IsNotExist(err), "nothing written")

	res = fsdpbench(t, dir, "calibrate", filepath.Join(dir, "nowhere"))
	assert.Equal(t, 2, res.code)
	res = fsdpbench(t, dir, "plan", spec, "--calibration", filepath.Join(dir, "nowhere.json"))
	assert.Equal(t, 2, res.code)
	assert.Contains(t, res.stderr, "fsdpbench calibrate")
}

// TestCalibrateTorchrunCPU fits the torchrun backend's real CPU runs (DDP over
// gloo), whose only memory figure is the RSS: the runtime's own memory is
// fitted beside the training state.
func TestCalibrateTorchrunCPU(t *testing.T) {
	needTorch(t)
	out := t.TempDir()
	res := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/torchrun-ddp-cpu.yaml", "--results", out, "--predict", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "peak_rss_bytes", "torch on CPU measures RSS; the table compares it")
	res = fsdpbench(t, repoRoot, "calibrate", filepath.Join(out, "torchrun-ddp-cpu"), "--out", filepath.Join(out, "cal.json"))
	require.Equal(t, 0, res.code, res.stderr)
	cal, err := sim.LoadCalibration(filepath.Join(out, "cal.json"))
	require.NoError(t, err)
	k := cal.Profiles["cpu/torchrun"]
	assert.Contains(t, k.Fit.Fitted, sim.ConstOverhead)
	require.NotNil(t, k.OverheadBytes)
	assert.Greater(t, *k.OverheadBytes, int64(50<<20), "python and torch hold tens of MiB")
	for _, row := range k.Fit.LeaveOneOut {
		assert.NotNil(t, row.MemErr, row.Run)
	}
}

func TestRecommendMeasuresTheTopOnCPU(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	res := fsdpbench(t, dir, "recommend", "--model", "tiny", "--hardware", "cpu", "--gpus-per-node", "2", "--global-batch", "4",
		"--seq-len", "32", "--precision", "fp32", "--top", "3", "--measure", "2", "--backend", "gotrain", "--steps", "3",
		"--results", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "why the others lost")
	assert.Contains(t, res.stdout, "refused", "gotrain and the sim refuse offload on cpu")
	assert.Contains(t, res.stdout, "predicted vs measured")
	assert.Contains(t, res.stdout, "fsdpbench calibrate "+filepath.Join(out, "recommend-tiny"))
	runs, err := results.Load(filepath.Join(out, "recommend-tiny"))
	require.NoError(t, err)
	require.Len(t, runs, 2)
	for _, r := range runs {
		assert.Equal(t, results.StatusOK, r.Metrics.Status, r.Metrics.Error)
		assert.Equal(t, "gotrain", r.Config.Backend)
		assert.Equal(t, 4, r.Config.GlobalBatch)
		require.NotNil(t, r.Metrics.StoredPrediction(), r.Config.ID)
	}
	// The offered command works on what was measured.
	res = fsdpbench(t, dir, "calibrate", filepath.Join(out, "recommend-tiny"), "--results", out)
	require.Equal(t, 0, res.code, res.stderr)
	// ... and the next recommend uses the calibration it wrote.
	res = fsdpbench(t, dir, "recommend", "--model", "tiny", "--hardware", "cpu", "--gpus-per-node", "2", "--global-batch", "4",
		"--seq-len", "32", "--precision", "fp32", "--results", out)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "calibrated by "+filepath.Join(out, sim.CalibrationFile))
}

func TestRecommendUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no model", []string{"--hardware", "h100-sxm", "--global-batch", "8"}, "give --model"},
		{"batch", []string{"--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "12"}, "give a multiple of the 8 GPUs"},
		{"model", []string{"--model", "llama9", "--hardware", "h100-sxm", "--global-batch", "8"}, "--model"},
		{"hardware", []string{"--model", "llama3-8b", "--hardware", "h101", "--global-batch", "8"}, "--hardware"},
		{"budget", []string{"--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "8", "--budget-gib", "-1"}, "--budget-gib"},
		{"option", []string{"--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "8", "--option", "inter_node_bus_bw_gbps=0"}, "backend_options.inter_node_bus_bw_gbps"},
		{"precision", []string{"--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "8", "--precision", "fp8"}, "--precision \"fp8\""},
		{"measure", []string{"--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "8", "--measure", "1000"}, "--measure 1000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := fsdpbench(t, dir, append([]string{"recommend", "--results", dir}, c.args...)...)
			assert.Equal(t, 2, res.code)
			assert.Contains(t, res.stderr, c.msg)
		})
	}
}

// TestRecommendMeasuresThroughSlurm measures the top configuration as a Slurm
// job: the sweep engine's launcher, chosen by --launcher.
func TestRecommendMeasuresThroughSlurm(t *testing.T) {
	needSlurm(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	res := fsdpbench(t, dir, "recommend", "--model", "tiny", "--hardware", "cpu", "--gpus-per-node", "2", "--global-batch", "2",
		"--seq-len", "32", "--precision", "fp32", "--top", "1", "--measure", "1", "--backend", "gotrain", "--steps", "2",
		"--launcher", "slurm", "--set", "launcher_options.poll_interval=200ms", "--set", "seed=15",
		"--name", "rec-slurm", "--results", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "predicted vs measured")
	runs, err := results.Load(filepath.Join(out, "rec-slurm"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, "slurm", runs[0].Config.Launcher)
	assert.Equal(t, results.StatusOK, runs[0].Metrics.Status, runs[0].Metrics.Error)
	assert.NotNil(t, runs[0].Metrics.StoredPrediction())
}
