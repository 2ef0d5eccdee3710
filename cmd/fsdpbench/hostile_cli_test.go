package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A path flag given empty (an unset shell variable: --results "$OUT") is refused
// with exit 2, instead of silently meaning the default.
func TestEmptyPathFlagsAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"sweep", "spec.yaml", "--results", "", "--dry-run"},
		{"ingest", "x", "--results", " "},
		{"export", "x", "--format", "csv", "-o", ""},
		{"calibrate", "x", "--out", ""},
		{"plot", "x", "-o", ""},
	} {
		res := fsdpbench(t, dir, args...)
		assert.Equal(t, ExitUsage, res.code, "%v: %s", args, res.stderr)
		assert.Contains(t, res.stderr, "is empty: give a path", "%v", args)
	}
}

// A plan of more runs than planTableMax prints a summary — counts by axis value,
// the commonest reasons, the fastest run — instead of a row per run (a 2^20-point
// grid printed 520 MB and held 7.5 GB); --wide still prints every row.
func TestLargePlanIsSummarised(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: big
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
steps: 3
grid:
  world_size: [8]
  batch_per_device: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
  grad_accum: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
  sharding: [full_shard, shard_grad_op]
  activation_checkpointing: [true, false]
`)
	res := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "big: 640 runs, ")
	assert.Contains(t, res.stdout, "more than 500 runs: a summary; --wide prints one row per run")
	assert.Regexp(t, `│ batch_per_device\s+│ 16\s+│\s+40 │`, res.stdout)
	assert.Contains(t, res.stdout, "why runs do not fit")
	assert.Contains(t, res.stdout, "fastest feasible run: ws8-")
	assert.Less(t, strings.Count(res.stdout, "\n"), 200, "no row per run (640 runs)")

	wide := fsdpbench(t, dir, "plan", spec, "--wide")
	require.Equal(t, 0, wide.code, wide.stderr)
	assert.Greater(t, strings.Count(wide.stdout, "ws8-bs"), 640, "--wide has every run")
}
