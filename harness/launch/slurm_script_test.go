package launch

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain"
	"github.com/fsdpbench/fsdpbench/backends/torchrun"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// sharedRunDir stands for the temporary run directory in the golden scripts: on
// a cluster, results live on a file system every node mounts.
const sharedRunDir = "/shared/fsdpbench-results/two-nodes/runs/"

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./harness/launch -run Golden -update to create it")
	assert.Equal(t, string(want), got, "%s differs; after checking the change, go test ./harness/launch -run Golden -update", path)
}

// twoNodeRun is a run over two nodes as a spec would expand it.
func twoNodeRun(t *testing.T, backend, hardware, model, precision string, gpus int, opts map[string]any) sweeps.RunConfig {
	t.Helper()
	rc := sweeps.RunConfig{
		Sweep: "two-nodes", Backend: backend, Launcher: SlurmName, Hardware: hardware, Model: model,
		SeqLen: 2048, Steps: 20, WarmupSteps: 3, Repeats: 1, Timeout: sweeps.Duration(90 * time.Minute),
		Nodes: 2, GPUsPerNode: gpus, WorldSize: 2 * gpus, BatchPerDevice: 1, GradAccum: 1, GlobalBatch: 2 * gpus,
		Sharding: sweeps.HybridShard, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: precision,
		WrapPolicy: "transformer", BackendOptions: opts,
		LauncherOptions: map[string]any{
			"partition": "h100", "account": "ml-infra", "qos": "normal", "time": "2:00:00",
			"cpus_per_task": 32, "mem": "0", "constraint": "ib",
			"sbatch": []any{"--exclusive"},
			"setup":  []any{"module load cuda/12.4 nccl", "source $HOME/venvs/fsdp/bin/activate", "export NCCL_DEBUG=WARN"},
		},
	}
	rc.AssignID()
	return rc
}

// script renders rc's job script through backend's PrepareJob, with the
// temporary directory and this test's executable replaced by shared paths.
func script(t *testing.T, be backends.JobBackend, rc sweeps.RunConfig, replace map[string]string) string {
	t.Helper()
	runDir := filepath.Join(t.TempDir(), rc.ID)
	require.NoError(t, os.MkdirAll(runDir, 0o755))
	place := slurmPlacement
	place.Nodes = rc.Nodes
	job, err := be.PrepareJob(context.Background(), rc, backends.RunEnv{RunDir: runDir, Launcher: SlurmName}, place, false)
	require.NoError(t, err)
	opts, err := ParseSlurmOptions(rc.LauncherOptions)
	require.NoError(t, err)
	text := opts.Script(rc, be.Name(), job.Spec(), runDir)
	text = strings.ReplaceAll(text, runDir, sharedRunDir+rc.ID)
	for from, to := range replace {
		text = strings.ReplaceAll(text, from, to)
	}
	return text
}

// TestGoldenTwoNodeTorchrunScript: 2 nodes x 8 H100s of HSDP under torchrun,
// one torchrun per node meeting at the first node (c10d), as a hand-written
// script does.
func TestGoldenTwoNodeTorchrunScript(t *testing.T) {
	if err := exec.Command(torchrun.DefaultPython, "-c", "import torch").Run(); err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_TORCH") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_TORCH=1 but /usr/bin/python3 cannot import torch (%v): run .ci/deps", err)
		}
		t.Skipf("the torchrun backend probes /usr/bin/python3's torch (%v); apt install python3-torch", err)
	}
	rc := twoNodeRun(t, torchrun.Name, "h100-sxm", "mistral-7b", sweeps.BF16, 8,
		map[string]any{"fsdp_api": 2})
	golden(t, "torchrun-2nodes.sbatch", script(t, torchrun.New(), rc, nil))
}

// TestGoldenTwoNodeGotrainScript: 2 nodes x 2 ranks of the Go trainer, one srun
// task per rank finding its place from Slurm's variables.
func TestGoldenTwoNodeGotrainScript(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	rc := twoNodeRun(t, gotrain.Name, "cpu", "tiny", sweeps.FP32, 2, nil)
	rc.SeqLen = 128
	rc.AssignID()
	golden(t, "gotrain-2nodes.sbatch", script(t, gotrain.New(), rc, map[string]string{exe: "/shared/bin/fsdpbench"}))
}

func TestParseSlurmOptions(t *testing.T) {
	o, err := ParseSlurmOptions(map[string]any{"time": 90, "cpus_per_task": uint64(8), "gpu_request": "gpus_per_node",
		"sbatch": "--exclusive", "poll_interval": "500ms"})
	require.NoError(t, err)
	assert.Equal(t, "90", o.Time)
	assert.Equal(t, 8, o.CPUsPerTask)
	assert.Equal(t, GPURequestGPUsPerNode, o.GPURequest)
	assert.Equal(t, []string{"--exclusive"}, o.SBatch)
	assert.Equal(t, 500*time.Millisecond, o.PollInterval)

	for _, tt := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"partiton": "gpu"}, `launcher_options.partiton: the slurm launcher has no such option (did you mean "partition"?); known: account`},
		{map[string]any{"time": "90m"}, `"90m" is not a Slurm time limit`},
		{map[string]any{"time": 1e12}, "launcher_options.time: must be a whole number in [1, 527040]"},
		{map[string]any{"time": 0}, "launcher_options.time: must be a whole number in [1, 527040], got 0"},
		{map[string]any{"time": "0:00:00"}, `launcher_options.time: "0:00:00" is no time limit (Slurm reads 0 as unlimited)`},
		{map[string]any{"cpus_per_task": 0}, "launcher_options.cpus_per_task: must be a whole number in [1, 4096], got 0"},
		{map[string]any{"cpus_per_task": 2.5}, "launcher_options.cpus_per_task: must be a whole number"},
		{map[string]any{"gpu_request": "gpus"}, "use gres (--gres=gpu:N) or gpus_per_node"},
		{map[string]any{"setup": []any{"module load x", 3}}, "launcher_options.setup: item 1: want a string"},
		{map[string]any{"partition": "a\nb"}, "holds a line break"},
		{map[string]any{"poll_interval": "-1s"}, "launcher_options.poll_interval: must be between 100ms and 1h0m0s"},
		{map[string]any{"poll_interval": "0s"}, "must be between 100ms and 1h0m0s"},
		{map[string]any{"max_queue": "0s"}, "launcher_options.max_queue: must be between 1s and 720h0m0s"},
		{map[string]any{"max_queue": "1000h"}, "must be between 1s and 720h0m0s"},
	} {
		_, err := ParseSlurmOptions(tt.opts)
		assert.ErrorContains(t, err, tt.want, "%v", tt.opts)
		assert.True(t, backends.IsSpecError(err), "%v", err)
	}
}

// TestCheckOptions: launcher_options are Slurm's; a key Slurm does not take, or a
// bad value, is a spec error whatever the launcher (under the local launcher they
// used to be ignored, typos included).
func TestCheckOptions(t *testing.T) {
	for _, tt := range []struct {
		launcher string
		opts     map[string]any
		want     string
	}{
		{"", nil, ""},
		{LocalName, map[string]any{}, ""},
		{SlurmName, map[string]any{"partition": "gpu"}, ""},
		{LocalName, map[string]any{"partition": "gpu", "poll_interval": "200ms"}, ""},
		{"", map[string]any{"x": 1}, "launcher_options.x: the slurm launcher has no such option"},
		{LocalName, map[string]any{"partiton": "gpu"}, `launcher_options.partiton: the slurm launcher has no such option (did you mean "partition"?)`},
		{LocalName, map[string]any{"poll_interval": "soon"}, "launcher_options.poll_interval: must be a duration"},
		{SlurmName, map[string]any{"x": 1}, "launcher_options.x: the slurm launcher has no such option"},
		{"kubernetes", nil, `unknown launcher "kubernetes"`},
	} {
		err := CheckOptions(tt.launcher, tt.opts)
		if tt.want == "" {
			assert.NoError(t, err)
			continue
		}
		assert.ErrorContains(t, err, tt.want)
		assert.True(t, backends.IsSpecError(err), "%v", err)
	}
}

func TestTimeLimit(t *testing.T) {
	rc := sweeps.RunConfig{Timeout: sweeps.Duration(90 * time.Second)}
	assert.Equal(t, "0:02:00", SlurmOptions{}.timeLimit(rc), "rounded up to whole minutes")
	rc.Timeout = sweeps.Duration(25 * time.Hour)
	assert.Equal(t, "25:00:00", SlurmOptions{}.timeLimit(rc))
	assert.Equal(t, "1-00:00:00", SlurmOptions{Time: "1-00:00:00"}.timeLimit(rc), "the option wins")
	assert.Empty(t, SlurmOptions{}.timeLimit(sweeps.RunConfig{}), "no timeout, no limit: the partition's")
}

func TestShellWord(t *testing.T) {
	for in, want := range map[string]string{
		"--nnodes":                 "--nnodes",
		"/a/b.py":                  "/a/b.py",
		"$SLURM_NODEID":            `"$SLURM_NODEID"`,
		"$MASTER_ADDR:29500":       `"$MASTER_ADDR:29500"`,
		"it's":                     `'it'\''s'`,
		"a b":                      `'a b'`,
		"$HOME/x":                  `'$HOME/x'`,
		`$SLURM_JOB_ID "q" $OTHER`: `"$SLURM_JOB_ID \"q\" \$OTHER"`,
		"":                         `''`,
	} {
		assert.Equal(t, want, shellWord(in), in)
	}
}
