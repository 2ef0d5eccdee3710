package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWorldSizeAloneSplitsIntoNodes: world_size 64 alone on h100-sxm is 8 nodes of
// 8 GPUs (the profile's node), said on stderr, not one 64-GPU NVLink node; a world
// size that is no whole number of nodes is refused; a node of more GPUs than the
// profile holds, given explicitly, is predicted infeasible.
func TestWorldSizeAloneSplitsIntoNodes(t *testing.T) {
	t.Parallel()
	const head = `name: nodes
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
`
	t.Run("split", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		spec := writeSpec(t, dir, head+"grid:\n  world_size: [8, 64]\n")
		res := fsdpbench(t, dir, "plan", spec)
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stderr, "note: world_size 64 on h100-sxm: 8 nodes × 8 GPUs")
		assert.Regexp(t, `ws64-n8-bs1-\S+\s*│\s*64\s*│\s*8\s*│`, res.stdout)
		assert.Regexp(t, `ws8-bs1-\S+\s*│\s*8\s*│\s*1\s*│`, res.stdout)
		assert.Contains(t, res.stdout, "2 feasible, 0 infeasible")

		res = fsdpbench(t, dir, "sweep", spec)
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stderr, "note: world_size 64 on h100-sxm: 8 nodes × 8 GPUs")
	})
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		spec := writeSpec(t, dir, head+"grid:\n  world_size: [12]\n")
		res := fsdpbench(t, dir, "plan", spec)
		assert.Equal(t, 2, res.code, res.stderr)
		assert.Contains(t, res.stderr, "world_size 12 is more than one h100-sxm node (8 GPUs)")
		assert.Contains(t, res.stderr, "8 or 16")
	})
	t.Run("node larger than the profile's", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		spec := writeSpec(t, dir, head+"base:\n  nodes: 1\n  gpus_per_node: 64\n")
		res := fsdpbench(t, dir, "plan", spec)
		require.Equal(t, 0, res.code, res.stderr)
		assert.Contains(t, res.stdout, "infeasible: gpus_per_node 64 is more than one h100-sxm node holds (8)")
	})
}

// TestSkippedInfeasibleSaysRerun: a run recorded infeasible is skipped when the
// sweep runs again, and the sweep says that --rerun runs it again (the spec or
// machine may have changed); so does --dry-run.
func TestSkippedInfeasibleSaysRerun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: wall
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 4096
base:
  world_size: 8
grid:
  batch_per_device: [1, 64]
`)
	res := fsdpbench(t, dir, "sweep", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "1 infeasible")
	assert.NotContains(t, res.stderr, "--rerun")

	res = fsdpbench(t, dir, "sweep", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "skipped 1 run that an earlier sweep recorded as 1 infeasible; if the spec or the machine changed since, run them again with --rerun")

	res = fsdpbench(t, dir, "sweep", "--dry-run", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "skip (done: infeasible; --rerun if the spec or machine changed)")
	assert.Contains(t, res.stdout, "skip (done: ok)")
}

// TestSpecPathsFromAnotherDirectory is issue 25's case: planning an example spec
// from another directory opens its model relative to the spec file, and names
// the same runs as from the repository's root.
func TestSpecPathsFromAnotherDirectory(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	spec := filepath.Join(root, "sweeps", "examples", "cpu-engines-h256.yaml")
	away := fsdpbench(t, t.TempDir(), "plan", spec)
	require.Equal(t, 0, away.code, away.stderr)
	assert.NotContains(t, away.stderr, "warning")
	home := fsdpbench(t, repoRoot, "plan", "sweeps/examples/cpu-engines-h256.yaml")
	require.Equal(t, 0, home.code, home.stderr)
	ids := regexp.MustCompile(`ws\d+-bs\d+-\S+-[0-9a-f]{16}`)
	require.Len(t, ids.FindAllString(away.stdout, -1), 2)
	assert.Equal(t, ids.FindAllString(home.stdout, -1), ids.FindAllString(away.stdout, -1))
}

// TestRecommendSaysTiesAndTheInterNodeAssumption is issue 25's ask: picks
// within the model's resolution are ties, won by the one with headroom (issue
// 25 saw shard_grad_op at 59.5 of 60 GiB win by 0.2%), and the output says so;
// on several nodes it says which inter-node bandwidth it assumed.
func TestRecommendSaysTiesAndTheInterNodeAssumption(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// Mistral 7B at seq 8192 within 50 GiB has ties on both sides of the
	// headroom line (issue 25's Llama 3 8B case has none since the sim times
	// FSDP2's copies: see sim's TestRecommendTiesPreferHeadroomAndSimplicity).
	args := []string{"recommend", "--model", "mistral-7b", "--hardware", "h100-sxm", "--gpus-per-node", "8",
		"--global-batch", "64", "--seq-len", "8192", "--budget-gib", "50", "--calibration", "none"}
	res := fsdpbench(t, dir, append(args, "--nodes", "1")...)
	require.Equal(t, 0, res.code, res.stderr)
	first := regexp.MustCompile(`│\s*1 │ ([^│]+?)\s*│\s*([\d.]+) │`).FindStringSubmatch(res.stdout)
	require.NotNil(t, first, res.stdout)
	peak, err := strconv.ParseFloat(first[2], 64)
	require.NoError(t, err)
	assert.LessOrEqual(t, peak, 0.9*50, "#1 (%s) leaves headroom", first[1])
	assert.Regexp(t, `#1–#\d+ are ties: within 1% of each other's tokens/s`, res.stdout)
	assert.NotContains(t, res.stdout, "inter-node")

	res = fsdpbench(t, dir, append(args, "--nodes", "2")...)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "predicted assuming inter-node: 25 GB/s bus bandwidth, the h100-sxm profile's default")
}
