package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeRuns stores runs as `fsdpbench sweep` would, under dir.
func writeRuns(t *testing.T, dir string, runs map[*sweeps.RunConfig]results.Metrics) string {
	t.Helper()
	sd, err := results.OpenSweep(dir)
	require.NoError(t, err)
	for rc, m := range runs {
		require.NoError(t, sd.WriteRunArgs(*rc))
		require.NoError(t, sd.WriteMetrics(rc.ID, m))
	}
	return dir
}

// userScriptRun is gateRun's point run by a user's script under launcher:
// python, as stored before issue 37: under the Go trainer's ID.
func userScriptRun(edit func(*results.Result)) (sweeps.RunConfig, results.Metrics) {
	rc, _ := gateRun(1, sweeps.DDP, nil)
	rc.Sweep, rc.Backend = "nanogpt-cpu", "torchrun"
	rc.BackendOptions = map[string]any{"launcher": "python", "script": "nanoGPT/train.py"}
	rc.ID, _ = rc.OldWorkloadID()
	_, m := gateRun(1, sweeps.DDP, edit)
	return rc, m
}

// TestCompareSaysWorkloadsDiffer is issue 37 §2 through the command line:
// `fsdpbench compare` of a nanoGPT results directory (stored before IDs hashed
// the script) against the Go trainer's paired the runs and printed +409.82%
// with no word that the scripts differ; it now marks the change ≠ and names
// the backend, launcher and script of each side.
func TestCompareSaysWorkloadsDiffer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	nano, nm := userScriptRun(func(r *results.Result) { r.MeasuredWallS *= 5.1 })
	gotrain, gm := gateRun(1, sweeps.DDP, nil)
	require.Equal(t, gotrain.ID, nano.ID, "one ID, as stored before")
	base := writeRuns(t, filepath.Join(dir, "nanogpt-cpu"), map[*sweeps.RunConfig]results.Metrics{&nano: nm})
	cur := writeRuns(t, filepath.Join(dir, "calibrate-cpu"), map[*sweeps.RunConfig]results.Metrics{&gotrain: gm})
	r := cli(t, "compare", base, cur, "--metric", "tokens_per_s_per_rank")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "% ¹ ≠")
	assert.Contains(t, r.stdout, `≠ `+gotrain.ID+`: the paired runs differ in backend: "torchrun" vs "gotrain"; backend_options.launcher: "python" vs none; backend_options.script: "nanoGPT/train.py" vs none`)
}

// TestGateSaysRunIDsChanged: a gate whose baseline holds a user script's run
// under its pre-issue-37 ID, against the same run measured now under its new
// ID, says the ID changed and passes on what it could compare, instead of
// failing the run as missing.
func TestGateSaysRunIDsChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, om := userScriptRun(nil)
	now := old
	now.InputHashes = map[string]string{"backend_options.script": "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"}
	now.AssignID()
	nm := om
	nm.RunID = now.ID
	other, otherM := gateRun(2, sweeps.FullShard, nil)
	base := writeRuns(t, filepath.Join(dir, "base"), map[*sweeps.RunConfig]results.Metrics{&old: om, &other: otherM})
	cur := writeRuns(t, filepath.Join(dir, "cur"), map[*sweeps.RunConfig]results.Metrics{&now: nm, &other: otherM})
	r := cli(t, "gate", "--baseline", base, "--current", cur, "--rule", "tokens_per_s_per_rank:-5%")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "Run IDs changed in "+sweeps.WorkloadIDChange+" for runs with a user script, command or model file:\n- "+old.ID+" → "+now.ID)
	assert.NotContains(t, r.stdout, "missing")
	assert.NotContains(t, r.stdout, "Unmatched runs")
}
