package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/results"
)

// envProbeSpec is a sweep whose runs differ in an env.NAME axis; every run
// also gets NCCL_ALGO from env:. A value with a space, a $ and a quote checks
// the quoting on the way (the Slurm job script above all).
func envProbeSpec(name, backend, launcher, opts string, ws, nodes int) string {
	return fmt.Sprintf(`name: %s
backend: %s
launcher: %s
launcher_options: {poll_interval: 200ms%s}
hardware: cpu
model: tiny
seq_len: 32
steps: 2
warmup_steps: 0
timeout: 3m
seed: 31
env: {NCCL_ALGO: Ring}
base: {sharding: ddp, mixed_precision: fp32, batch_per_device: 1, world_size: %d, nodes: %d}
grid:
  env.ENVAXES_PROBE: ["a b", "x$HOME'z"]
`, name, backend, launcher, opts, ws, nodes)
}

// checkRanksGotEnv reads every rank file of every run of the sweep and checks
// that each rank recorded, from inside its own process, the spec's values.
func checkRanksGotEnv(t *testing.T, sweepDir string, ws int) {
	t.Helper()
	_, rows := csvRows(t, sweepDir)
	require.Len(t, rows, 2)
	probes := map[string]bool{}
	for _, r := range rows {
		require.Equal(t, "ok", r["status"], r["id"])
		probe := r["env.ENVAXES_PROBE"]
		probes[probe] = true
		assert.Equal(t, "Ring", r["env.NCCL_ALGO"], r["id"])
		files, err := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, r["id"], results.RanksDir, "rank-*.json"))
		require.NoError(t, err)
		require.Len(t, files, ws, "%s: one rank file per rank", r["id"])
		for _, f := range files {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			var rf struct {
				SpecEnv map[string]string `json:"spec_env"`
			}
			require.NoError(t, json.Unmarshal(data, &rf), f)
			assert.Equal(t, map[string]string{"NCCL_ALGO": "Ring", "ENVAXES_PROBE": probe}, rf.SpecEnv, f)
		}
	}
	assert.Equal(t, map[string]bool{"a b": true, "x$HOME'z": true}, probes, "each run its own value")
}

// TestEnvReachesEveryRankLocally: gotrain's workers and torchrun's ranks each
// receive the spec's variables, locally.
func TestEnvReachesEveryRankLocally(t *testing.T) {
	for _, backend := range []string{"gotrain", "torchrun"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "torchrun" {
				needTorch(t)
			}
			dir := t.TempDir()
			name := "env-" + backend
			spec := writeSpec(t, dir, envProbeSpec(name, backend, "local", "", 2, 1))
			res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
			require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
			checkRanksGotEnv(t, filepath.Join(dir, "fsdpbench-results", name), 2)
		})
	}
}

// TestEnvReachesEveryRankThroughSlurm: the same through Slurm jobs across the
// two namespace nodes (exported into the job script, srun --export=ALL).
func TestEnvReachesEveryRankThroughSlurm(t *testing.T) {
	needCluster(t)
	for _, backend := range []string{"gotrain", "torchrun"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "torchrun" {
				needTorch(t)
			}
			dir := t.TempDir()
			cancelJobsUnder(t, dir)
			name := "env-slurm-" + backend
			spec := writeSpec(t, dir, envProbeSpec(name, backend, "slurm", ", partition: cluster", 2, 2))
			res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
			sweepDir := filepath.Join(dir, "fsdpbench-results", name)
			require.Equal(t, 0, res.code, "%s\n%s\n%s", res.stdout, res.stderr, runLogTails(sweepDir))
			checkRanksGotEnv(t, sweepDir, 2)
			for _, runDir := range slurmJobs(t, dir) {
				script, err := os.ReadFile(filepath.Join(runDir, launch.ScriptFile))
				if err == nil {
					assert.Contains(t, string(script), "srun --export=ALL")
					assert.True(t, strings.Contains(string(script), "export ENVAXES_PROBE='a b'") ||
						strings.Contains(string(script), `export ENVAXES_PROBE='x$HOME'\''z'`))
				}
			}
		})
	}
}
