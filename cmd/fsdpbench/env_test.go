package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		var m struct {
			Env struct {
				Given map[string]string `json:"given_env"`
			} `json:"env"`
		}
		data, err := os.ReadFile(filepath.Join(sweepDir, results.RunsDir, r["id"], results.MetricsFile))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &m))
		assert.Equal(t, map[string]string{"NCCL_ALGO": "Ring", "ENVAXES_PROBE": probe}, m.Env.Given, "metrics.json: the env given")
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

// TestEnvSpecMistakesExitWithUsage: a bad variable name, a variable the
// harness owns, a value over the bound, and a value of a backend option axis
// the backend rejects are spec errors at file:line:col, before anything runs.
func TestEnvSpecMistakesExitWithUsage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	head := "name: envbad\nbackend: gotrain\nhardware: cpu\nmodel: tiny\nseq_len: 16\nsteps: 1\n"
	for _, tc := range []struct{ body, want string }{
		{"env: {nccl_algo: Ring}\n", "spec.yaml:7:7: environment variable name \"nccl_algo\" must be upper-case letters"},
		{"grid: {env.MASTER_PORT: [\"1\", \"2\"]}\n", "spec.yaml:7:8: MASTER_PORT belongs to the harness and cannot be set by a spec"},
		{"env: {NCCL_IB_HCA: " + strings.Repeat("x", 5000) + "}\n", "spec.yaml:7:20: env NCCL_IB_HCA: the value is 5000 bytes, more than 4096"},
		{"grid:\n  backend_options.transport: [shm, rdma]\n", "spec.yaml:8:36: gotrain: backend_options.transport: must be one of [auto shm tcp], got rdma (run "},
	} {
		spec := writeSpec(t, dir, head+tc.body)
		res := fsdpbench(t, dir, "sweep", spec, "--results", "out")
		assert.Equal(t, ExitUsage, res.code, "%s: %s", tc.body, res.stderr)
		assert.Contains(t, res.stderr, tc.want)
	}
	assert.NoDirExists(t, filepath.Join(dir, "out"), "nothing may run or be written")
}

// TestEnvSetDoublesRunsAndResumeRerunsOnlyTheChanged: --set env.X=a,b doubles
// a sweep's runs; after one value changes, running the sweep again runs only
// the runs of the new value and keeps the others; a sweep without env keeps
// the IDs it had.
func TestEnvSetDoublesRunsAndResumeRerunsOnlyTheChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: envres
backend: sim
hardware: h100-sxm
model: tiny
seq_len: 64
steps: 3
grid:
  world_size: [1, 2]
`)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	plainRuns := finished(t, filepath.Join(dir, "plain", "envres"))
	require.Len(t, plainRuns, 2)
	for id := range plainRuns {
		// IDs computed before env existed (commit a50c99a) for this spec.
		assert.Contains(t, []string{"ws1-bs1-full_shard-ac0-pre-540a6d2825c19dda", "ws2-bs1-full_shard-ac0-pre-399d6cb744d03031"}, id)
	}

	out := filepath.Join(dir, "out")
	sweepDir := filepath.Join(out, "envres")
	res = fsdpbench(t, dir, "sweep", spec, "--results", out, "--set", "env.NCCL_ALGO=Ring,Tree")
	require.Equal(t, 0, res.code, res.stderr)
	first := finished(t, sweepDir)
	require.Len(t, first, 4, "two env values double the two runs")
	_, rows := csvRows(t, sweepDir)
	algos := map[string]int{}
	for _, r := range rows {
		algos[r["env.NCCL_ALGO"]]++
	}
	assert.Equal(t, map[string]int{"Ring": 2, "Tree": 2}, algos)

	time.Sleep(20 * time.Millisecond)
	res = fsdpbench(t, dir, "sweep", spec, "--results", out, "--set", "env.NCCL_ALGO=Ring,CollnetDirect")
	require.Equal(t, 0, res.code, res.stderr)
	second := finished(t, sweepDir)
	_, rows = csvRows(t, sweepDir)
	reran := 0
	for _, r := range rows {
		id := r["id"]
		switch r["env.NCCL_ALGO"] {
		case "Ring":
			assert.Equal(t, first[id], second[id], "%s: unchanged, kept", id)
		case "CollnetDirect":
			_, before := first[id]
			assert.False(t, before, "%s: a new run", id)
			reran++
		}
	}
	assert.Equal(t, 2, reran, "only the changed value's runs ran")
}
