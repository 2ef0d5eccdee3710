package gotrain

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func jobRun() sweeps.RunConfig {
	return sweeps.RunConfig{Backend: Name, Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 2, WarmupSteps: 1,
		Nodes: 2, GPUsPerNode: 2, WorldSize: 4, BatchPerDevice: 1, GradAccum: 1, GlobalBatch: 4,
		Sharding: sweeps.FullShard, MixedPrecision: sweeps.FP32}
}

// TestPrepareJobIsOneTaskPerRank: the job runs this executable's worker once per
// rank, with the run config it reads; re-attaching rewrites nothing.
func TestPrepareJobIsOneTaskPerRank(t *testing.T) {
	dir := t.TempDir()
	b := &Backend{executable: func() (string, error) { return "/shared/bin/fsdpbench", nil }}
	job, err := b.PrepareJob(context.Background(), jobRun(), backends.RunEnv{RunDir: dir}, backends.Placement{Nodes: 2}, false)
	require.NoError(t, err)
	spec := job.Spec()
	assert.Equal(t, 2, spec.TasksPerNode)
	assert.Zero(t, spec.GPUsPerNode, "the cpu trainer asks for no GPUs")
	assert.Equal(t, []string{"/shared/bin/fsdpbench", "worker"}, spec.Argv)
	cfg := filepath.Join(dir, configFile)
	assert.Equal(t, []string{EnvRunConfig + "=" + cfg}, spec.Env)
	assert.FileExists(t, cfg)

	require.NoError(t, os.Remove(cfg))
	_, err = b.PrepareJob(context.Background(), jobRun(), backends.RunEnv{RunDir: dir}, backends.Placement{Nodes: 2}, true)
	require.NoError(t, err)
	assert.NoFileExists(t, cfg, "re-attaching must not rewrite the running job's files")
}

// TestJobFinishReadsHowRanksEnded: srun's report of a task's exit code and the
// worker's own last line decide oom and which rank failed, as Run's pipes do.
func TestJobFinishReadsHowRanksEnded(t *testing.T) {
	tests := []struct {
		name    string
		lines   [][3]string // stream, task, line
		exitErr error
		status  results.Status
		errHas  string
	}{
		{name: "oom from srun's exit code", exitErr: errors.New("exit code 143"), status: results.StatusOOM, errHas: "rank 1 ran out of device memory",
			lines: [][3]string{{"stderr", "1", "fsdpbench worker: rank 1: alloc 4096 bytes"}, {"stderr", "-1", "srun: error: node1: task 1: Exited with exit code 3"}}},
		{name: "oom from the worker's line", exitErr: errors.New("exit code 143"), status: results.StatusOOM, errHas: "rank 2 ran out",
			lines: [][3]string{{"stderr", "2", "fsdpbench worker: rank 2: fsdp: " + errOOMText}}},
		{name: "first failing rank", exitErr: errors.New("exit code 1"), status: results.StatusFailed, errHas: "rank 3 exited with code 1",
			lines: [][3]string{{"stderr", "3", "fsdpbench worker: boom"}, {"stderr", "-1", "srun: error: node2: tasks 3: Exited with exit code 1"},
				{"stderr", "-1", "srun: error: node1: tasks 0-1: Exited with exit code 143"}}},
		{name: "failed without srun's report", exitErr: errors.New("exit code 1"), status: results.StatusFailed, errHas: "boom",
			lines: [][3]string{{"stderr", "2", "boom"}}},
		{name: "success without rank files", status: results.StatusFailed, errHas: "its report is missing"},
		{name: "diverged", exitErr: errors.New("exit code 5"), status: results.StatusDiverged, errHas: "diverged: the loss is NaN at measured step 2 of 3 (lr 10) (rank 1)",
			lines: [][3]string{{"stderr", "1", "fsdpbench worker: gotrain worker: rank 1: diverged: the loss is NaN at measured step 2 of 3 (lr 10)"},
				{"stderr", "-1", "srun: error: node1: tasks 0-1: Exited with exit code 5"}}},
		{name: "broken event", status: results.StatusFailed, errHas: "a worker printed a broken FSDPBENCH line: task 0: step_time_s is -1",
			lines: [][3]string{{"stdout", "0", `FSDPBENCH {"event":"step","rank":0,"step":1,"loss":2.5,"step_time_s":-1,"tokens":64}`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &Backend{executable: func() (string, error) { return "fsdpbench", nil }}
			job, err := b.PrepareJob(context.Background(), jobRun(), backends.RunEnv{RunDir: t.TempDir()}, backends.Placement{Nodes: 2}, false)
			require.NoError(t, err)
			for _, l := range tt.lines {
				task := map[string]int{"-1": -1, "0": 0, "1": 1, "2": 2, "3": 3}[l[1]]
				job.Line(l[0], task, l[2])
			}
			res := job.Finish(tt.exitErr, nil)
			assert.Equal(t, tt.status, res.Status)
			assert.Contains(t, res.Error, tt.errHas)
		})
	}
}

// TestJobLineReportsMeasuredSteps: rank 0's FSDPBENCH lines become step events;
// warm-up steps do not.
func TestJobLineReportsMeasuredSteps(t *testing.T) {
	b := &Backend{executable: func() (string, error) { return "fsdpbench", nil }}
	job, err := b.PrepareJob(context.Background(), jobRun(), backends.RunEnv{RunDir: t.TempDir()}, backends.Placement{Nodes: 2}, false)
	require.NoError(t, err)
	assert.Empty(t, job.Line("stdout", 0, `FSDPBENCH {"event":"step","rank":0,"step":1,"warmup":true,"loss":5.5}`))
	evs := job.Line("stdout", 0, `FSDPBENCH {"event":"step","rank":0,"step":2,"loss":5.4,"step_time_s":0.01,"tokens":64}`)
	require.Len(t, evs, 1)
	ev := evs[0]
	assert.Equal(t, backends.EventStep, ev.Kind)
	assert.Equal(t, 1, ev.Step)
	assert.InDelta(t, 5.4, *ev.Loss, 1e-12)
	assert.Empty(t, job.Line("stdout", 1, "not an event"))
}
