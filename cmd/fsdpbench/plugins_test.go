package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// pluginEnv builds the exec example and the broken-plugin fixture (as "crash" and
// "hang") into a plugin directory, and returns the environment that points
// fsdpbench at it, with the lock file and HOME inside dir.
func pluginEnv(t *testing.T, dir string) []string {
	t.Helper()
	plugDir := filepath.Join(dir, "plugins")
	for pkg, out := range map[string]string{"examples/exec": "fsdpbench-backend-exec", "testdata/fixture": "fixture"} {
		build := exec.Command("go", "build", "-o", filepath.Join(plugDir, out), "../../plugins/"+pkg)
		b, err := build.CombinedOutput()
		require.NoError(t, err, "building %s: %s", pkg, b)
	}
	for _, mode := range []string{"crash", "hang"} {
		require.NoError(t, os.Link(filepath.Join(plugDir, "fixture"), filepath.Join(plugDir, "fsdpbench-backend-"+mode)))
	}
	require.NoError(t, os.Remove(filepath.Join(plugDir, "fixture")))
	return []string{"FSDPBENCH_PLUGIN_PATH=" + plugDir, "FSDPBENCH_PLUGIN_LOCK=" + filepath.Join(dir, "plugins.lock"), "HOME=" + dir}
}

// fsdpbenchEnv runs the binary in dir with env added.
func fsdpbenchEnv(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := command(dir, args...)
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()}
}

func TestSweepThroughThePluginsOnThePluginPath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := pluginEnv(t, dir)
	trainer, err := filepath.Abs("../../plugins/testdata/fake-trainer.sh")
	require.NoError(t, err)

	res := fsdpbenchEnv(t, dir, env, "backends")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `exec\s*│\s*no\s*│.*not pinned: there is no lock file`, res.stdout)

	res = fsdpbenchEnv(t, dir, env, "plugins", "lock")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "pinned 3 plugin(s)")
	res = fsdpbenchEnv(t, dir, env, "backends")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `exec\s*│\s*yes\s*│\s*no\s*│\s*runs backend_options.command.*│.*plugins/fsdpbench-backend-exec`, res.stdout)
	assert.Regexp(t, `sim\s*│\s*yes\s*│.*│\s*builtin`, res.stdout)

	spec := writeSpec(t, dir, `name: viaexec
backend: exec
hardware: cpu
model: tiny
seq_len: 32
steps: 3
warmup_steps: 0
timeout: 1m
grid:
  world_size: [1, 2]
  sharding: [full_shard, ddp]
backend_options:
  command: ["`+trainer+`", "{world_size}", "{steps}"]
`)
	res = fsdpbenchEnv(t, dir, env, "sweep", spec, "--results", "out", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stderr, "4 runs: 4 ok")
	runs, err := filepath.Glob(filepath.Join(dir, "out", "viaexec", "runs", "ws2-*-ddp-*"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	var m results.Metrics
	b, err := os.ReadFile(filepath.Join(runs[0], results.MetricsFile))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, results.StatusOK, m.Status)
	assert.Equal(t, 2, m.WorldSize)
	require.NotNil(t, m.TokensPerS)
	assert.InDelta(t, 2*1000/0.05, *m.TokensPerS, 1e-6, "the fake trainer's ranks report 1000 tokens each in 0.05 s")
	stdout, err := os.ReadFile(filepath.Join(runs[0], results.StdoutFile))
	require.NoError(t, err)
	assert.Contains(t, string(stdout), `FSDPBENCH {"step": 3`)
	for r := range 2 {
		assert.FileExists(t, filepath.Join(runs[0], "ranks", "rank-"+strconv.Itoa(r)+".json"))
	}
}

func TestABrokenPluginFailsItsRunAndTheSweepGoesOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := pluginEnv(t, dir)
	res := fsdpbenchEnv(t, dir, env, "plugins", "lock")
	require.Equal(t, 0, res.code, res.stderr)
	for _, tc := range []struct{ backend, status, reason string }{
		{"crash", "failed", "plugin crash (" + filepath.Join(dir, "plugins", "fsdpbench-backend-crash") + ") died during run (exit status 2); its stderr ends with: panic: fixture: crashing in the middle of the run"},
		{"hang", "timeout", "timed out after 2s"},
	} {
		spec := writeSpec(t, dir, `name: broken-`+tc.backend+`
backend: `+tc.backend+`
hardware: h100-sxm
model: tiny
seq_len: 64
steps: 3
timeout: 2s
grid:
  world_size: [1, 2, 4]
`)
		res := fsdpbenchEnv(t, dir, env, "sweep", spec, "--results", "out", "--progress", "plain")
		require.Equal(t, 1, res.code, res.stderr)
		assert.Contains(t, res.stderr, "3 runs: 2 ok, 1 "+tc.status)
		runs, err := filepath.Glob(filepath.Join(dir, "out", "broken-"+tc.backend, "runs", "ws2-*"))
		require.NoError(t, err)
		require.Len(t, runs, 1)
		var m results.Metrics
		b, err := os.ReadFile(filepath.Join(runs[0], results.MetricsFile))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &m))
		assert.Equal(t, results.Status(tc.status), m.Status)
		assert.True(t, strings.HasPrefix(m.Error, tc.reason), "error %q, want it to start with %q", m.Error, tc.reason)
		stderr, err := os.ReadFile(filepath.Join(runs[0], results.StderrFile))
		require.NoError(t, err)
		if tc.backend == "crash" {
			assert.Contains(t, string(stderr), "[ERROR] plugin.crash", "the plugin's panic reaches the run's log through hclog")
		}
	}
}

// TestAPluginThatMayNotRunIsASpecError: a plugin plugins.lock does not pin, or
// whose binary changed since, would refuse every run alike: the sweep exits 2
// before anything runs (it used to exit 1), saying what to do.
func TestAPluginThatMayNotRunIsASpecError(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := pluginEnv(t, dir)
	spec := writeSpec(t, dir, `name: viaexec
backend: exec
hardware: cpu
model: tiny
seq_len: 32
steps: 3
grid:
  world_size: [1, 2]
backend_options:
  command: ["true"]
`)
	res := fsdpbenchEnv(t, dir, env, "sweep", spec, "--results", "out", "--progress", "none")
	assert.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, "may not run: not pinned: there is no lock file")
	assert.Contains(t, res.stderr, "fsdpbench plugins lock")

	res = fsdpbenchEnv(t, dir, env, "plugins", "lock")
	require.Equal(t, 0, res.code, res.stderr)
	plug := filepath.Join(dir, "plugins", "fsdpbench-backend-exec")
	data, err := os.ReadFile(plug)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(plug, append(data, 0), 0o755))
	for _, cmd := range [][]string{{"sweep", spec, "--results", "out"}, {"plan", spec}} {
		res = fsdpbenchEnv(t, dir, env, cmd...)
		assert.Equal(t, ExitUsage, res.code, "%v: %s", cmd, res.stderr)
		assert.Contains(t, res.stderr, "refused: its sha256 is", cmd)
	}
	// A misspelt option of a plugin's is the spec's mistake too.
	require.NoError(t, os.WriteFile(plug, data, 0o755))
	res = fsdpbenchEnv(t, dir, env, "sweep", spec, "--results", "out", "--set", "backend_options.comand=x")
	assert.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, `unknown backend_options key "comand"`)
	assert.NoDirExists(t, filepath.Join(dir, "out"))
}
