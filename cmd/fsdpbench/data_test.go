package main

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestGotrainRepeatDataTrains (issue 37 item 9): the Go trainer's built-in
// data is random tokens, so its loss stays near ln(vocab) and a user never
// sees training work. backend_options.data: repeat gives it a sequence it
// learns: through a real sweep (two ranks, worker processes) the last loss is
// below a tenth of ln(vocab) after 100 steps, while random data's stays near
// ln(vocab).
func TestGotrainRepeatDataTrains(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	out := filepath.Join(dir, "results")
	spec := writeSpec(t, dir, `name: learn
backend: gotrain
hardware: cpu
model: tiny
seq_len: 16
steps: 100
warmup_steps: 0
base:
  world_size: 2
  batch_per_device: 2
  sharding: full_shard
  mixed_precision: fp32
grid:
  backend_options.data: [random, repeat]
`)
	res := fsdpbench(t, dir, "sweep", spec, "--results", out, "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	runs, err := results.Load(filepath.Join(out, "learn"))
	require.NoError(t, err)
	require.Len(t, runs, 2)
	lnV := math.Log(256) // tiny's vocabulary
	for _, r := range runs {
		require.NotNil(t, r.Metrics.LossLast, r.Config.ID)
		last := *r.Metrics.LossLast
		switch r.Config.BackendOptions["data"] {
		case "repeat":
			assert.Less(t, last, lnV/10, "the repeated sequence is learned")
		case "random":
			assert.Greater(t, last, lnV-0.5, "random tokens are not")
		default:
			t.Fatalf("run %s: data %v", r.Config.ID, r.Config.BackendOptions["data"])
		}
	}
}
