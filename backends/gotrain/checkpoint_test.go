package gotrain

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// ckptRun is tinyRun with checkpointing: 4 measured steps, a save after every 2,
// and the resume check from the first.
func ckptRun(ws int, kind string) sweeps.RunConfig {
	return ckptRunOf(ws, 1, sweeps.FullShard, kind)
}

func ckptRunOf(ws, nodes int, sharding, kind string) sweeps.RunConfig {
	rc := tinyRun(ws, nodes, sharding)
	rc.Steps, rc.WarmupSteps = 4, 1
	rc.Checkpoint, rc.CheckpointEvery, rc.ResumeCheck = kind, 2, true
	rc.AssignID()
	return rc
}

// TestCheckpointResumeIsExact runs real workers: each run saves twice, reloads
// the first checkpoint into a fresh trainer, trains the two steps after it and
// finds their losses bit-identical; the bytes reported are the files on disk.
func TestCheckpointResumeIsExact(t *testing.T) {
	b := New()
	type point struct {
		ws, nodes      int
		sharding, kind string
	}
	var points []point
	for _, ws := range []int{1, 2, 4} {
		for _, kind := range []string{sweeps.CheckpointSharded, sweeps.CheckpointFull} {
			points = append(points, point{ws, 1, sweeps.FullShard, kind})
		}
	}
	points = append(points, point{4, 2, sweeps.HybridShard, sweeps.CheckpointSharded}, point{2, 1, sweeps.DDP, sweeps.CheckpointSharded},
		point{2, 1, sweeps.ShardGradOp, sweeps.CheckpointFull})
	for _, p := range points {
		ws, kind := p.ws, p.kind
		{
			t.Run(fmt.Sprintf("ws%d-n%d-%s-%s", ws, p.nodes, p.sharding, kind), func(t *testing.T) {
				rc := ckptRunOf(ws, p.nodes, p.sharding, kind)
				require.NoError(t, b.Validate(context.Background(), rc))
				dir := t.TempDir()
				var stderr syncBuffer
				res, err := b.Run(context.Background(), rc, backends.RunEnv{RunDir: dir, Stderr: &stderr}, nil)
				require.NoError(t, err)
				require.Equal(t, results.StatusOK, res.Status, "error: %s\nstderr:\n%s", res.Error, stderr.String())
				require.NoError(t, backends.CheckResult(rc, res))

				t.Logf("save %.4fs load %.4fs bytes %d (largest rank %d) exact %v", *res.CheckpointSaveS, *res.CheckpointLoadS,
					*res.CheckpointBytes, *res.CheckpointBytesPerRank, *res.ResumeExact)
				require.NotNil(t, res.ResumeExact)
				assert.True(t, *res.ResumeExact, "resumed losses equal the uninterrupted ones bit for bit")
				assert.Positive(t, *res.CheckpointSaveS)
				assert.Positive(t, *res.CheckpointLoadS)

				// The first save (the resume source) and the last stay; their files
				// are what the run reported, byte for byte.
				last := filepath.Join(dir, contract.CheckpointDir, "step-4")
				var onDisk int64
				entries, err := os.ReadDir(last)
				require.NoError(t, err)
				for _, e := range entries {
					info, err := e.Info()
					require.NoError(t, err)
					onDisk += info.Size()
				}
				assert.Equal(t, onDisk, *res.CheckpointBytes)
				assert.DirExists(t, filepath.Join(dir, contract.CheckpointDir, "step-2"))
				require.Len(t, res.PerRank, ws)
				if kind == sweeps.CheckpointFull {
					assert.Equal(t, onDisk, *res.PerRank[0].CheckpointBytes, "rank 0 writes the whole full checkpoint")
					for _, pr := range res.PerRank[1:] {
						assert.Zero(t, *pr.CheckpointBytes)
					}
				} else {
					assert.Len(t, entries, ws+1, "a shard per rank and meta.json")
				}

				// The sim predicts the same files to the byte.
				shape, err := shapes.Lookup(rc.Model)
				require.NoError(t, err)
				total, largest, err := sim.CheckpointBytes(rc, shape)
				require.NoError(t, err)
				assert.Equal(t, *res.CheckpointBytes, total, "sim's checkpoint_bytes")
				assert.Equal(t, *res.CheckpointBytesPerRank, largest, "sim's checkpoint_bytes_per_rank")

				m := results.Normalize(rc, []results.Result{res})
				require.NoError(t, results.CheckMetrics(&rc, &m))
				assert.Equal(t, res.CheckpointBytes, m.CheckpointBytes)
			})
		}
	}
}

// TestCheckpointValidate: a config from outside a spec with bad checkpoint
// settings is refused before any process starts.
func TestCheckpointValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*sweeps.RunConfig)
		want string
	}{
		{"unknown kind", func(rc *sweeps.RunConfig) { rc.Checkpoint = "fsdp" }, `unknown checkpoint "fsdp" (allowed: none, sharded, full)`},
		{"every past steps", func(rc *sweeps.RunConfig) { rc.CheckpointEvery = 9 }, "checkpoint_every 9 must be from 1 to 3"},
		{"resume without checkpoint", func(rc *sweeps.RunConfig) { rc.Checkpoint = sweeps.CheckpointNone }, "resume_check needs checkpoint"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rc := ckptRun(1, sweeps.CheckpointSharded)
			tt.edit(&rc)
			assert.ErrorContains(t, New().Validate(context.Background(), rc), tt.want)
		})
	}
}
