package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestGateInconclusiveExit: a gate whose checks could not tell exits 3 (issue 29),
// beside 0 pass, 1 fail and 2 usage; --inconclusive picks another policy and the
// report says which. The README's noisy nights are the input.
func TestGateInconclusiveExit(t *testing.T) {
	t.Parallel()
	night1, err := filepath.Abs(filepath.Join("..", "..", "examples", "gate-noisy", "night1"))
	require.NoError(t, err)
	night2 := filepath.Join(filepath.Dir(night1), "night2")
	gate := func(flags ...string) result {
		return cli(t, append([]string{"gate", "--baseline", night1, "--current", night2, "--rule", "tokens_per_s_per_rank:-5%"}, flags...)...)
	}

	r := gate()
	assert.Equal(t, ExitInconclusive, r.code, r.stderr)
	assert.Equal(t, 3, ExitInconclusive)
	assert.Contains(t, r.stdout, "gate INCONCLUSIVE: 2 of 2 checks could not tell")
	assert.Contains(t, r.stdout, "measured under different machine states: other processes used 3% of the CPU in the baseline, 46% now")
	assert.Contains(t, r.stdout, "too noisy to tell against the -5% limit")

	r = gate("--inconclusive=fail")
	assert.Equal(t, ExitFailed, r.code, r.stderr)
	assert.Contains(t, r.stdout, "2 inconclusive counted as failures (--inconclusive=fail)")
	assert.Contains(t, r.stdout, "inconclusive checks count as failures (--inconclusive=fail)")

	r = gate("--inconclusive=pass", "--format", "json")
	assert.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"inconclusive_policy": "pass"`)
	assert.Contains(t, r.stderr, "2 inconclusive counted as passing (--inconclusive=pass)")

	r = gate("--inconclusive=maybe")
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, `--inconclusive "maybe": use report, fail, pass`)

	// Missing data never passes, whatever the policy for noise.
	r = cli(t, "gate", "--baseline", night1, "--current", t.TempDir(), "--inconclusive=pass")
	assert.NotEqual(t, ExitOK, r.code, r.stdout)

	// A stored night that could not tell is no baseline, and says why.
	hist := filepath.Join(t.TempDir(), "history")
	r = gate("--history", hist, "--commit", "abc123")
	assert.Equal(t, ExitInconclusive, r.code, r.stderr)
	assert.Contains(t, r.stderr, "(inconclusive: the next night keeps the last passing baseline)")

	help := cli(t, "gate", "--help")
	require.Equal(t, ExitOK, help.code)
	assert.Contains(t, help.stdout, "Exit codes: 0 pass; 1 regression; 2 usage or data error; 3 inconclusive")
	assert.Contains(t, help.stdout, "--inconclusive string")
}

// TestSweepRecordsMachineState: every measured run's metrics.json says what the
// machine was doing (env.machine, read by the harness whatever the backend), and
// report --metric shows it; a prediction (sim) measured nothing a busy machine
// could disturb, so it has none.
func TestSweepRecordsMachineState(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the harness reads /proc")
	}
	t.Parallel()
	dir := t.TempDir()
	spec := filepath.Join(dir, "machine.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(`name: machine
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 3
warmup_steps: 1
repeats: 2
base: {batch_per_device: 1, mixed_precision: fp32, world_size: 2, sharding: full_shard}
`), 0o644))
	r := fsdpbench(t, dir, "sweep", spec, "--progress", "none")
	require.Equal(t, ExitOK, r.code, r.stderr)
	runs, err := results.LoadPath(filepath.Join(dir, "fsdpbench-results", "machine"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	m := runs[0].Metrics.Env.Machine
	require.NotNil(t, m, "a measured run records the machine state")
	assert.Equal(t, 2, m.Repeats)
	require.NotNil(t, m.OtherCPUShare)
	assert.True(t, *m.OtherCPUShare >= 0 && *m.OtherCPUShare <= 1, "%g", *m.OtherCPUShare)
	require.NotNil(t, m.Load1)
	assert.Positive(t, m.CPUs)

	r = fsdpbench(t, dir, "report", filepath.Join(dir, "fsdpbench-results", "machine"), "--metric", "env.machine.other_cpu_share,env.machine.load1", "--format", "csv")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "env.machine.other_cpu_share")
	assert.Contains(t, r.stdout, strconv.FormatFloat(*m.Load1, 'g', -1, 64))

	r = fsdpbench(t, dir, "sweep", filepath.Join(readmeRoot(t), "sweeps", "examples", "quickstart.yaml"), "--progress", "none")
	require.Equal(t, ExitOK, r.code, r.stderr)
	sim, err := results.LoadPath(filepath.Join(dir, "fsdpbench-results", "quickstart"))
	require.NoError(t, err)
	require.NotEmpty(t, sim)
	for _, run := range sim {
		assert.Nil(t, run.Metrics.Env.Machine, "%s: a prediction has no machine state", run.Config.ID)
	}
}

// readmeRoot is the repository's root.
func readmeRoot(t *testing.T) string {
	t.Helper()
	return filepath.Dir(readmePath(t))
}
