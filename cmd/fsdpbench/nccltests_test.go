package main

import (
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNCCLTestsFlag(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: fabric
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
grid:
  nodes: [2]
  gpus_per_node: [8]
  batch_per_device: [1]
`)
	fixture, err := filepath.Abs("../../backends/sim/testdata/nccl-tests/all_reduce_perf_2nodes.txt")
	require.NoError(t, err)
	stepTime := regexp.MustCompile(`│\s*79\.6\s*│\s*([0-9.]+)\s*│`)

	flat := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, flat.code, flat.stderr)
	curve := fsdpbench(t, dir, "plan", spec, "--nccl-tests", fixture)
	require.Equal(t, 0, curve.code, curve.stderr)
	a, b := stepTime.FindStringSubmatch(flat.stdout), stepTime.FindStringSubmatch(curve.stdout)
	require.Len(t, a, 2, flat.stdout)
	require.Len(t, b, 2, curve.stdout)
	assert.NotEqual(t, a[1], b[1], "the measured 380 GB/s curve replaces the profile's flat 25 GB/s")
	assert.Contains(t, curve.stdout, "predicted assuming: ")
	assert.Contains(t, curve.stdout, "fsdp_version 2")

	res := fsdpbench(t, dir, "plan", spec, "--nccl-tests", filepath.Join(dir, "missing.txt"))
	assert.Equal(t, ExitUsage, res.code)
	assert.Contains(t, res.stderr, "missing.txt")
	assert.Contains(t, res.stderr, "fsdpbench: --nccl-tests: ", "the flag is blamed, not the --set it becomes")
	assert.NotContains(t, res.stderr, "--set #")

	// Another backend's runs: plan predicts them with the curves (a torchrun
	// spec planned for a cluster); sweep refuses, as only the sim reads them.
	torchrun := writeSpec(t, t.TempDir(), `name: t
backend: torchrun
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
grid:
  nodes: [2]
  gpus_per_node: [8]
  batch_per_device: [1]
`)
	flat = fsdpbench(t, dir, "plan", torchrun)
	curve = fsdpbench(t, dir, "plan", torchrun, "--nccl-tests", fixture)
	a, b = stepTime.FindStringSubmatch(flat.stdout), stepTime.FindStringSubmatch(curve.stdout)
	require.Len(t, a, 2, flat.stdout+flat.stderr)
	require.Len(t, b, 2, curve.stdout+curve.stderr)
	assert.NotEqual(t, a[1], b[1])
	res = fsdpbench(t, dir, "sweep", torchrun, "--nccl-tests", fixture)
	assert.Equal(t, ExitUsage, res.code)
	assert.Contains(t, res.stderr, "--nccl-tests feeds the sim backend's predictions")
}
