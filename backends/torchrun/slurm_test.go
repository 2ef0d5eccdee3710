package torchrun

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func slurmRun(nodes int, hardware string) sweeps.RunConfig {
	rc := sweeps.RunConfig{Backend: Name, Launcher: "slurm", Hardware: hardware, Model: "tiny", SeqLen: 16, Steps: 2,
		WarmupSteps: 1, Nodes: nodes, GPUsPerNode: 2, WorldSize: 2 * nodes, BatchPerDevice: 1, GradAccum: 1,
		GlobalBatch: 2 * nodes, Sharding: sweeps.DDP, MixedPrecision: sweeps.FP32}
	rc.AssignID()
	return rc
}

var slurmPlace = backends.Placement{MasterAddr: "$MASTER_ADDR", NodeRank: "$SLURM_NODEID", JobID: "$SLURM_JOB_ID"}

// TestPrepareJobIsOneTorchrunPerNode: one task per node; several nodes meet at
// the first node's host on rdzv_port, one node on the job's own port; GPUs are asked
// for unless the run is on the CPU.
func TestPrepareJobIsOneTorchrunPerNode(t *testing.T) {
	needTorch(t)
	b := New()
	place := slurmPlace
	place.Nodes = 2
	rc := slurmRun(2, "h100-sxm")
	rc.BackendOptions = map[string]any{"rdzv_port": 29600}
	job, err := b.PrepareJob(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, place, false)
	require.NoError(t, err)
	spec := job.Spec()
	assert.Equal(t, 1, spec.TasksPerNode)
	assert.Equal(t, 2, spec.GPUsPerNode)
	assert.Subset(t, spec.Argv, []string{"--nnodes", "2", "--node_rank", "$SLURM_NODEID", "--rdzv_endpoint", "$MASTER_ADDR:29600", "--rdzv_id", "$SLURM_JOB_ID"})
	assert.Equal(t, "output", filepath.Base(spec.Dir))

	place.Nodes = 1
	job, err = b.PrepareJob(context.Background(), slurmRun(1, "cpu"), backends.RunEnv{RunDir: t.TempDir()}, place, false)
	require.NoError(t, err)
	assert.NotContains(t, job.Spec().Argv, "--standalone", "torch 1.x's standalone port is the same for every job on the node")
	assert.Subset(t, job.Spec().Argv, []string{"--nnodes", "1", "--rdzv_endpoint", "localhost:$MASTER_PORT", "--rdzv_id", "$SLURM_JOB_ID"})
	assert.Zero(t, job.Spec().GPUsPerNode)
}

// TestAttachKeepsTheRunningJobsFiles: re-attaching clears nothing the running
// job has written, and its output still becomes the result.
func TestAttachKeepsTheRunningJobsFiles(t *testing.T) {
	needTorch(t)
	b := New()
	dir := t.TempDir()
	rc := slurmRun(1, "cpu")
	place := slurmPlace
	place.Nodes = 1
	_, err := b.PrepareJob(context.Background(), rc, backends.RunEnv{RunDir: dir}, place, false)
	require.NoError(t, err)
	kept := filepath.Join(dir, "output", "checkpoint.pt")
	require.NoError(t, os.WriteFile(kept, []byte("x"), 0o644))

	job, err := b.PrepareJob(context.Background(), rc, backends.RunEnv{RunDir: dir}, place, true)
	require.NoError(t, err)
	assert.FileExists(t, kept)
	job.Line("stderr", 0, "[0]:fsdpbench: infeasible: not on this machine")
	res := job.Finish(assert.AnError, nil)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Equal(t, "not on this machine", res.Error)
}

// TestPrepareJobOtherLaunchers: under Slurm, launcher python is the one
// process of a one-rank job, and launcher command gets the job's node rank and
// rendezvous in its placeholders; both get Python's output unbuffered.
func TestPrepareJobOtherLaunchers(t *testing.T) {
	needTorch(t)
	b := New()
	place := slurmPlace
	place.Nodes = 2
	tests := []struct {
		name  string
		nodes int
		opts  map[string]any
		argv  []string
	}{
		{"python", 1, map[string]any{"launcher": LauncherPython, "script": nanoGPTLike, "args": []any{"--device=cpu"}},
			[]string{DefaultPython, mustAbs(t, nanoGPTLike), "--device=cpu"}},
		{"command", 2, map[string]any{"launcher": LauncherCommand, "rdzv_port": 29601,
			"command": []any{"torchrun", "--node_rank", "{node_rank}", "--rdzv_endpoint", "{rdzv_endpoint}", "{script}"}},
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := slurmRun(tt.nodes, "cpu")
			if tt.name == "python" {
				rc.GPUsPerNode, rc.WorldSize, rc.GlobalBatch = 1, 1, 1
			}
			rc.BackendOptions = tt.opts
			require.NoError(t, b.Validate(context.Background(), rc))
			runDir := t.TempDir()
			job, err := b.PrepareJob(context.Background(), rc, backends.RunEnv{RunDir: runDir}, place, false)
			require.NoError(t, err)
			want := tt.argv
			if want == nil {
				want = []string{"torchrun", "--node_rank", "$SLURM_NODEID", "--rdzv_endpoint", "$MASTER_ADDR:29601",
					filepath.Join(runDir, "fsdpbench_train.py")}
			}
			assert.Equal(t, want, job.Spec().Argv)
			assert.Contains(t, job.Spec().Env, "PYTHONUNBUFFERED=1")
		})
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	require.NoError(t, err)
	return abs
}
