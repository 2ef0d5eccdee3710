package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUserDefinedHardwareProfile (issue 26): hardware: ./my-gpu.yaml in a spec
// is a profile file relative to the spec's folder, predicted with its figures
// (its memory, its node size, its inter-node bandwidth, said as such); a bad
// figure is refused with the file's line and column; recommend takes a file too.
func TestUserDefinedHardwareProfile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	specs := filepath.Join(root, "specs")
	require.NoError(t, os.MkdirAll(specs, 0o755))
	example, err := os.ReadFile("../../examples/hardware/my-gpu.yaml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(specs, "my-gpu.yaml"), example, 0o644))
	spec := writeSpec(t, specs, `name: mygpu
backend: sim
hardware: ./my-gpu.yaml
model: llama3-8b
seq_len: 2048
grid:
  world_size: [16]
  batch_per_device: [1]
  activation_checkpointing: [true]
`)
	res := fsdpbench(t, root, "plan", spec) // from elsewhere than the spec's folder
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, regexp.MustCompile(`ws16-n2-\S+\s*│[^\n]*│\s*40\.0\s*│[^\n]*feasible`), res.stdout, "2 nodes of the file's 8, its 40 GiB")
	assert.Contains(t, res.stdout, "predicted assuming inter-node: 200 GB/s bus bandwidth, from the profile file "+filepath.Join(specs, "my-gpu.yaml"))

	bad := regexp.MustCompile(`(?m)^memory_gib: 40 `).ReplaceAll(example, []byte("memory_gib: 40960 "))
	require.NoError(t, os.WriteFile(filepath.Join(specs, "my-gpu.yaml"), bad, 0o644))
	res = fsdpbench(t, root, "plan", spec)
	assert.Equal(t, ExitUsage, res.code)
	assert.Regexp(t, `my-gpu\.yaml:\d+:13: memory_gib: 40960 is out of range \[0\.25, 16384\]`, res.stderr)

	res = fsdpbench(t, root, "recommend", "--model", "llama3-8b", "--hardware", mustAbs(t, "../../examples/hardware/my-gpu.yaml"),
		"--global-batch", "64", "--calibration", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `llama3-8b on 1 × 8 \S+my-gpu\.yaml, global batch 64`, res.stdout)
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	require.NoError(t, err)
	return a
}
