package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestCalibratedAnswersSayTheyExtrapolate: a calibration fitted on one node at
// 1B-2B parameters and seq 512-1024 makes plan (for gpt2-124m, inside the
// sequences but below the sizes) and recommend (llama3-8b on two nodes at seq
// 2048) print that they extrapolate and where, and a plan inside the range
// print nothing of the kind (issue 26).
func TestCalibratedAnswersSayTheyExtrapolate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "cal.json")
	cal := &sim.Calibration{Profiles: map[string]sim.Constants{"h100-sxm": {Efficiency: 0.4,
		Fit: sim.FitReport{Runs: 6, Range: &sim.FitRange{MinParams: 1e9, MaxParams: 2e9, MinNodes: 1, MaxNodes: 1, MinSeqLen: 512, MaxSeqLen: 1024}}}}}
	require.NoError(t, cal.Write(path))
	spec := filepath.Join(repoRoot, "sweeps", "examples", "quickstart.yaml")

	r := cli(t, "plan", spec, "--calibration", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "predicted by a calibration extrapolates: 124M params (fitted 1B–2B)")

	r = cli(t, "recommend", "--model", "llama3-8b", "--hardware", "h100-sxm", "--nodes", "2", "--gpus-per-node", "8",
		"--global-batch", "64", "--seq-len", "2048", "--top", "2", "--calibration", path, "--results", dir, "--width", "400")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "#1 is predicted by a calibration extrapolates: 8.03B params (fitted 1B–2B), 2 nodes (fitted 1), seq_len 2048 (fitted 512–1024)")

	cal.Profiles["h100-sxm"].Fit.Range.MinParams = 1e8
	require.NoError(t, cal.Write(path))
	r = cli(t, "plan", spec, "--calibration", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "extrapolates")
}

// TestPredictedVsMeasuredSaysWhichPredictionsExtrapolate: `sweep --predict`
// stores each run's prediction; one made by a calibration outside its fitted
// range carries where, and the predicted-vs-measured table says so under it.
func TestPredictedVsMeasuredSaysWhichPredictionsExtrapolate(t *testing.T) {
	t.Parallel()
	cal := &sim.Calibration{Profiles: map[string]sim.Constants{"h100-sxm": {Efficiency: 0.4,
		Fit: sim.FitReport{Runs: 6, Range: &sim.FitRange{MinParams: 1e9, MaxParams: 2e9, MinNodes: 1, MaxNodes: 1, MinSeqLen: 512, MaxSeqLen: 1024}}}}}
	rc := sweeps.RunConfig{Backend: "torchrun", Hardware: "h100-sxm", Model: "llama3-8b", SeqLen: 1024, Nodes: 1, GPUsPerNode: 8, WorldSize: 8,
		BatchPerDevice: 1, GradAccum: 1, Steps: 3, Sharding: sweeps.FullShard}
	rc.AssignID()
	m := results.Metrics{Status: results.StatusOK, TokensPerSPerRank: results.F64(5000)}
	sim.Annotator(cal, nil)(rc, &m)
	var b strings.Builder
	require.NoError(t, writePredictedVsMeasured(&b, []results.Run{{Config: rc, Metrics: m}}))
	assert.Contains(t, b.String(), rc.ID+": predicted by a calibration that extrapolates: 8.03B params (fitted 1B–2B)")
}
