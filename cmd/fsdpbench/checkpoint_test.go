package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestCheckpointSweep runs the checkpoint example through the CLI on gotrain
// (real workers: sharded and full at 1, 2 and 4 ranks, each resumed in a fresh
// trainer) and on the sim: every run resumes bit-identically, the sim's bytes
// equal the bytes gotrain wrote, the table shows the checkpoint figures, and a
// gate rule holds resume_exact.
func TestCheckpointSweep(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec, err := filepath.Abs(filepath.Join("..", "..", "sweeps", "examples", "checkpoint-gotrain-cpu.yaml"))
	require.NoError(t, err)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "none")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	for _, h := range []string{"checkpoint", "ckpt save (s)", "ckpt load (s)", "ckpt (MiB)", "resume exact"} {
		assert.Contains(t, res.stdout, h, "the table shows the checkpoint phase")
	}
	res = fsdpbench(t, dir, "sweep", spec, "--set", "backend=sim", "--set", "name=sim", "--results", "out", "--progress", "none")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)

	measured, err := results.Load(filepath.Join(dir, "out", "checkpoint-gotrain-cpu"))
	require.NoError(t, err)
	predicted, err := results.Load(filepath.Join(dir, "out", "sim"))
	require.NoError(t, err)
	require.Len(t, measured, 6)
	byID := map[string]results.Metrics{}
	for _, r := range predicted {
		byID[r.Config.ID] = r.Metrics
	}
	for _, r := range measured {
		m := r.Metrics
		require.Equal(t, results.StatusOK, m.Status, m.Error)
		require.NotNil(t, m.ResumeExact, r.Config.ID)
		assert.True(t, *m.ResumeExact, "%s resumes bit for bit", r.Config.ID)
		require.NotNil(t, m.CheckpointSaveS)
		require.NotNil(t, m.CheckpointLoadS)
		p, ok := byID[r.Config.ID]
		require.True(t, ok, "the sim ran %s", r.Config.ID)
		assert.Equal(t, *m.CheckpointBytes, *p.CheckpointBytes, "%s: sim's checkpoint_bytes", r.Config.ID)
		assert.Equal(t, *m.CheckpointBytesPerRank, *p.CheckpointBytesPerRank, "%s: sim's checkpoint_bytes_per_rank", r.Config.ID)
	}

	// A second night of the same sweep: the gate holds exact resume and the
	// checkpoint's size.
	res = fsdpbench(t, dir, "sweep", spec, "--results", "night2", "--progress", "none")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	res = fsdpbench(t, dir, "gate", "--baseline", filepath.Join("out", "checkpoint-gotrain-cpu"),
		"--current", filepath.Join("night2", "checkpoint-gotrain-cpu"), "--rule", "resume_exact>=1", "--rule", "checkpoint_bytes:+0%")
	assert.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout, "resume_exact")
}
