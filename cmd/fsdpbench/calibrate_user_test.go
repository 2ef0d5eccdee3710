package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
)

// TestCalibrateUserProfileRoundTrips (issue 37 item 6): calibrate on runs whose
// hardware is a profile file wrote the key "my-gpu/torchrun", and plan
// --calibration refused its own output ("no hardware profile ... write it again
// with fsdpbench calibrate"). Past runs on a user-defined profile are ingested,
// calibrated and planned with: the key is the profile's name alone (no backend
// ran the ingested runs), the constants name the file, and the plan is
// calibrated by the fit. A key of no backend (h100-sxm/bogusbackend) is
// refused, naming the file and the key.
func TestCalibrateUserProfileRoundTrips(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	example, err := os.ReadFile("../../examples/hardware/my-gpu.yaml")
	require.NoError(t, err)
	hw := filepath.Join(dir, "my-gpu.yaml")
	require.NoError(t, os.WriteFile(hw, example, 0o644))
	const name = "my-a100-40g" // the example's name: key

	// Past runs of Llama 3 8B at two world sizes and two batches: a Trainer's
	// run_args.json beside the seed script's metrics.json (whole-run
	// throughput, hence --whole-run below).
	for i, ws := range []int{8, 16} {
		for j, bs := range []int{1, 2} {
			run := filepath.Join(dir, "past", fmt.Sprintf("run-%d-%d", ws, bs))
			writeJSONFile(t, run, "run_args.json", map[string]any{
				"model_name_or_path": "llama3-8b", "per_device_train_batch_size": bs, "max_seq_length": 1024,
				"fsdp": "full_shard auto_wrap", "bf16": true})
			writeJSONFile(t, run, "metrics.json", map[string]any{
				"world_size": ws, "wall_time_s": 10.0 + float64(i),
				"approx_tokens_per_s_per_rank": 900.0 * float64(bs) / float64(1+i) * (1 + 0.05*float64(j)),
			})
		}
	}
	out := filepath.Join(dir, "results")
	r := cli(t, "ingest", filepath.Join(dir, "past"), "--name", "past", "--results", out, "--set", "hardware="+hw, "--set", "gpus_per_node=8")
	require.Equal(t, 0, r.code, r.stderr)
	calPath := filepath.Join(dir, "cal.json")
	r = cli(t, "calibrate", filepath.Join(out, "past"), "--whole-run", "-o", calPath)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, name+": fitted to 4 runs ingested")
	assert.Contains(t, r.stdout, "user-defined profile: "+hw)
	cal, err := sim.LoadCalibration(calPath)
	require.NoError(t, err, "calibrate's output reads back")
	require.Len(t, cal.Profiles, 1)
	k, ok := cal.Profiles[name]
	require.True(t, ok, "ingested runs are keyed by their hardware alone, not under a backend that never ran them")
	assert.Equal(t, hw, k.ProfileFile)
	assert.Equal(t, 4, k.Fit.Ingested)
	assert.Empty(t, k.Fit.Backends)

	spec := writeSpec(t, dir, `name: mine
backend: sim
hardware: ./my-gpu.yaml
model: llama3-8b
seq_len: 1024
grid:
  world_size: [8, 16]
  batch_per_device: [1, 2]
`)
	plain := cli(t, "plan", spec)
	require.Equal(t, 0, plain.code, plain.stderr)
	r = cli(t, "plan", spec, "--calibration", calPath)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "calibrated by "+calPath)
	assert.Contains(t, r.stdout, "constants for "+name+" fitted to 4 measured runs")
	assert.NotEqual(t, plain.stdout, r.stdout, "the fit changed the figures")
	// recommend on the profile file takes it too.
	r = cli(t, "recommend", "--model", "llama3-8b", "--hardware", hw, "--global-batch", "64", "--seq-len", "1024", "--top", "2", "--calibration", calPath)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "calibrated by "+calPath)

	// A key whose backend half is no backend is refused, with the file and key.
	b, err := os.ReadFile(calPath)
	require.NoError(t, err)
	bogus := filepath.Join(dir, "bogus.json")
	require.NoError(t, os.WriteFile(bogus, []byte(strings.Replace(string(b), `"`+name+`"`, `"h100-sxm/bogusbackend"`, 1)), 0o644))
	r = cli(t, "plan", filepath.Join(repoRoot, "sweeps", "examples", "quickstart.yaml"), "--calibration", bogus)
	assert.Equal(t, ExitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, bogus)
	assert.Contains(t, r.stderr, `key "h100-sxm/bogusbackend": "bogusbackend" is no backend`)
}
