package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// breakdownSpec is a sim sweep over prefetch at 2 and 4 ranks across two nodes,
// where communication shows.
const breakdownSpec = `name: bd
backend: sim
hardware: h100-sxm
model: llama-1b
seq_len: 1024
steps: 3
warmup_steps: 1
base:
  nodes: 2
  sharding: full_shard
grid:
  world_size: [2, 4]
  backward_prefetch: [none, backward_pre]
`

// measuredLike stores, under dir, a measured run for each of runs (same config
// and ID), whose step breakdown has exposed communication exposedOf(run) of a
// 0.1 s compute + 0.01 s other step, over 6 repeats.
func measuredLike(t *testing.T, dir string, runs []results.Run, exposedOf func(*results.Run) float64) string {
	t.Helper()
	sd, err := results.OpenSweep(dir)
	require.NoError(t, err)
	for i := range runs {
		rc := runs[i].Config
		rc.Backend, rc.Repeats = "gotrain", 6
		e := exposedOf(&runs[i])
		var reps []results.Result
		for k := 0; k < rc.Repeats; k++ {
			ek := e * (1 + 0.001*float64(k-2)) // the lower median (k = 2) is e
			step := 0.11 + ek
			res := results.Result{Status: results.StatusOK, WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
				TokensPerStep: rc.TokensPerStep(), MeasuredWallS: step * float64(rc.Steps)}
			for s := 0; s < rc.Steps; s++ {
				res.Steps = append(res.Steps, results.Step{Step: s + 1, StepTimeS: step, Tokens: rc.TokensPerStep()})
			}
			res.StepBreakdown = &results.StepBreakdown{StepS: step, ComputeS: 0.1, CollectiveS: ek + 0.05, ExposedCommS: ek,
				OtherS: 0.01, Source: "gotrain"}
			reps = append(reps, res)
		}
		require.NoError(t, sd.WriteRunArgs(rc))
		require.NoError(t, sd.WriteMetrics(rc.ID, results.Normalize(rc, reps)))
	}
	return dir
}

// TestStepBreakdownCommands: the sim's runs carry a predicted breakdown that
// leaves the default table as it was; measured breakdowns add "exposed comm
// (%)" to it, compare them with the sim's, gate on exposed_comm_s, export
// them, and plot the breakdown chart.
func TestStepBreakdownCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	spec := writeSpec(t, dir, breakdownSpec)
	res := fsdpbench(t, dir, "sweep", spec, "--results", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.NotContains(t, res.stdout, "exposed comm", "a predicted breakdown adds no column to the sweep's table")
	simDir := filepath.Join(out, "bd")
	simRuns, err := results.Load(simDir)
	require.NoError(t, err)
	require.Len(t, simRuns, 4)
	for _, r := range simRuns {
		b := r.Metrics.StepBreakdown
		require.NotNil(t, b, r.Config.ID)
		assert.Equal(t, "sim", b.Source)
		f, msg := b.Check()
		assert.Empty(t, f, msg)
		assert.InDelta(t, r.Metrics.StepTimeS.Median, b.StepS, 1e-12)
	}
	res = fsdpbench(t, dir, "report", simDir, "--metric", "exposed_comm_share,overlap")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "exposed comm (%)", "asked for by name, the predicted figure shows")

	// Measured: exposed communication half the sim's, doubled without prefetch.
	meas := measuredLike(t, filepath.Join(dir, "meas"), simRuns, func(r *results.Run) float64 {
		return r.Metrics.StepBreakdown.ExposedCommS / 2
	})
	res = fsdpbench(t, dir, "report", meas)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "exposed comm (%)")

	res = fsdpbench(t, dir, "compare", meas, simDir)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "exposed comm (s)")
	assert.Contains(t, res.stdout, "+100.00%", "the sim predicted twice the measured exposed communication")

	// A rise of 20% in exposed communication fails exposed_comm_s:+10%.
	worse := measuredLike(t, filepath.Join(dir, "worse"), simRuns, func(r *results.Run) float64 {
		return r.Metrics.StepBreakdown.ExposedCommS / 2 * 1.2
	})
	res = fsdpbench(t, dir, "gate", "--baseline", meas, "--current", worse, "--rule", "exposed_comm_s:+10%")
	assert.Equal(t, ExitFailed, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout, "exposed_comm_s")
	same := measuredLike(t, filepath.Join(dir, "same"), simRuns, func(r *results.Run) float64 {
		return r.Metrics.StepBreakdown.ExposedCommS / 2 * 1.02
	})
	res = fsdpbench(t, dir, "gate", "--baseline", meas, "--current", same, "--rule", "exposed_comm_s:+10%")
	assert.Equal(t, ExitOK, res.code, "%s\n%s", res.stdout, res.stderr)

	res = fsdpbench(t, dir, "export", meas, "--format", "csv")
	require.Equal(t, 0, res.code, res.stderr)
	rows, err := csv.NewReader(strings.NewReader(res.stdout)).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 5)
	assert.Contains(t, rows[0], "step_breakdown.exposed_comm_s")
	assert.Contains(t, rows[0], "step_breakdown.compute_s")

	plots := filepath.Join(dir, "plots")
	res = fsdpbench(t, dir, "plot", meas, "--out", plots)
	require.Equal(t, 0, res.code, res.stderr)
	for _, ext := range []string{".png", ".svg"} {
		assert.FileExists(t, filepath.Join(plots, "breakdown"+ext))
	}
	svg, err := os.ReadFile(filepath.Join(plots, "breakdown.svg"))
	require.NoError(t, err)
	for _, s := range []string{"exposed communication", "world_size 4, prefetch none"} {
		assert.Contains(t, string(svg), s)
	}
}

// sweep --predict's predicted-vs-measured table adds the predicted and measured
// exposed communication when a run measured its breakdown, and only then.
func TestPredictedVsMeasuredExposedComm(t *testing.T) {
	tps := 5000.0
	pb := results.StepBreakdown{StepS: 0.1, ComputeS: 0.07, CollectiveS: 0.04, ExposedCommS: 0.025, OtherS: 0.005, Source: "sim"}
	r := results.Run{Config: sweeps.RunConfig{ID: "ws8-bs2-full_shard-ac0-pre-0123456789abcdef"},
		Metrics: results.Metrics{Status: results.StatusOK, TokensPerSPerRank: &tps, PeakMemReservedBytes: results.I64(70 << 30),
			Extra: map[string]any{results.ExtraPrediction: results.Prediction{TokensPerSPerRank: 5200, PeakMemReservedBytes: 72 << 30,
				Feasible: true, StepBreakdown: &pb}}}}
	var before bytes.Buffer
	require.NoError(t, writePredictedVsMeasured(&before, []results.Run{r}))
	assert.NotContains(t, before.String(), "exposed", "nothing measured: the table as it was")

	r.Metrics.StepBreakdown = &results.StepBreakdown{StepS: 0.125, ComputeS: 0.08, CollectiveS: 0.05, ExposedCommS: 0.025, OtherS: 0.02}
	var after bytes.Buffer
	require.NoError(t, writePredictedVsMeasured(&after, []results.Run{r}))
	assert.Contains(t, after.String(), "pred exposed comm")
	assert.Regexp(t, `│ 25\.0% +│ 20\.0% +│`, after.String())
}
