package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCPUMemoryReadsInMiB runs the CPU example (the Go trainer, a few MiB per
// rank) and reads its memory everywhere a user would, as the spec's own
// comment suggests: the sweep's progress lines and table, the pivot report,
// a gate and plan show MiB, never 0.00 GiB, and the default table has a
// memory column although a CPU has no allocator reserve.
func TestCPUMemoryReadsInMiB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec, err := filepath.Abs(filepath.Join("..", "..", "sweeps", "examples", "cpu-strategies.yaml"))
	require.NoError(t, err)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "plain", "--wide")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	out := res.stdout + res.stderr
	assert.Regexp(t, `ok .* peak_allocated=[0-9.]+ MiB`, out, "the progress line")
	assert.Contains(t, res.stdout, "peak allocated (MiB)", "the default table shows the memory measured")
	assert.NotContains(t, out, "0.00 ")

	sweepDir := filepath.Join("out", "cpu-strategies")
	res = fsdpbench(t, dir, "report", sweepDir, "--rows", "world_size", "--cols", "sharding", "--metric", "peak_mem_allocated_bytes")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `^peak allocated \(MiB\)\n`, res.stdout)
	assert.NotContains(t, res.stdout, "0.00")

	base := filepath.Join(dir, "base")
	require.NoError(t, os.CopyFS(base, os.DirFS(filepath.Join(dir, sweepDir))))
	res = fsdpbench(t, dir, "gate", "--baseline", base, "--current", sweepDir, "--rule", "peak_mem_allocated_bytes:+3%")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Regexp(t, `[0-9.]+ MiB +│ +[0-9.]+ MiB +│ pass`, res.stdout)
	assert.NotContains(t, res.stdout, "0.00 GiB")

	res = fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "peak reserved MiB")
	assert.NotContains(t, res.stdout, " 0.0 ")
}
