package sim

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func ckptConfig(ws, gpn int, kind string, opts map[string]any) sweeps.RunConfig {
	rc := sweeps.RunConfig{Backend: Name, Hardware: "h100-sxm", Model: "llama-1b", SeqLen: 512, Steps: 20, WarmupSteps: 3,
		Nodes: ws / gpn, GPUsPerNode: gpn, WorldSize: ws, BatchPerDevice: 1, GradAccum: 1, GlobalBatch: ws,
		Sharding: sweeps.FullShard, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16, WrapPolicy: "transformer",
		Checkpoint: kind, CheckpointEvery: 10, ResumeCheck: true, BackendOptions: opts}
	rc.AssignID()
	return rc
}

// TestCheckpointBytesRankDigits: a sharded checkpoint's total counts every
// rank's header, whose rank grows a digit at 10, 100, ...; the shortcut equals
// adding up each rank's file. (TestCheckpointResumeIsExact in gotrain checks
// the bytes against a real run's files.)
func TestCheckpointBytesRankDigits(t *testing.T) {
	shape, err := shapes.Lookup("llama-1b")
	require.NoError(t, err)
	for _, ws := range []int{1, 8, 16, 104, 1024} {
		rc := ckptConfig(ws, 8, sweeps.CheckpointSharded, nil)
		if ws < 8 {
			rc = ckptConfig(ws, ws, sweeps.CheckpointSharded, nil)
		}
		total, largest, err := CheckpointBytes(rc, shape)
		require.NoError(t, err)
		rank0, err := shardFileBytes(23, shardLens(shape, ws), 0)
		require.NoError(t, err)
		meta := largest - rank0
		sum := meta
		for r := range ws {
			n, err := shardFileBytes(23, shardLens(shape, ws), r)
			require.NoError(t, err)
			sum += n
		}
		assert.Equal(t, sum, total, "ws %d", ws)
		assert.Greater(t, meta, int64(100), "meta.json is on rank 0")
	}
}

func shardLens(s shapes.Shape, group int) []int {
	var out []int
	for _, size := range append(append([]int64{int64(s.Vocab) * int64(s.Hidden)}, repeat(s.BlockParams(), s.Layers)...),
		s.Params()-int64(s.Vocab)*int64(s.Hidden)-int64(s.Layers)*s.BlockParams()) {
		out = append(out, int((size+int64(group)-1)/int64(group)))
	}
	return out
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestCheckpointTime: a sharded save moves each node's share at
// storage_bw_gbps; a full one gathers to rank 0 and writes everything there, so
// it is slower and grows with the model, not the shard.
func TestCheckpointTime(t *testing.T) {
	b := New()
	run := func(rc sweeps.RunConfig) (save, load float64, bytes, largest int64) {
		res, err := b.Run(context.Background(), rc, backends.RunEnv{}, nil)
		require.NoError(t, err)
		require.Equal(t, "ok", string(res.Status), res.Error)
		assert.Nil(t, res.ResumeExact, "exact resume is a measurement, not a prediction")
		return *res.CheckpointSaveS, *res.CheckpointLoadS, *res.CheckpointBytes, *res.CheckpointBytesPerRank
	}
	save, load, _, largest := run(ckptConfig(16, 8, sweeps.CheckpointSharded, map[string]any{"storage_bw_gbps": 2}))
	assert.InEpsilon(t, 8*float64(largest)/2e9, save, 1e-12, "8 ranks of a node share 2 GB/s")
	assert.Equal(t, save, load)
	fullSave, fullLoad, total, fullLargest := run(ckptConfig(16, 8, sweeps.CheckpointFull, map[string]any{"storage_bw_gbps": 2}))
	assert.Equal(t, total, fullLargest, "rank 0 writes it all")
	assert.Greater(t, fullSave, float64(total)/2e9, "the gather comes on top of the write")
	assert.Greater(t, fullSave, save)
	assert.InEpsilon(t, fullSave, fullLoad, 1e-12)
	defSave, _, _, _ := run(ckptConfig(16, 8, sweeps.CheckpointSharded, nil))
	assert.InEpsilon(t, save*2/DefaultStorageBWGBps, defSave, 1e-12, "default storage_bw_gbps")
}

func TestStorageBWBounds(t *testing.T) {
	for _, v := range []any{0, -1, 1e6, "fast"} {
		_, err := ParseOptions(map[string]any{"storage_bw_gbps": v})
		assert.ErrorContains(t, err, "storage_bw_gbps", "%v", v)
	}
	assert.Error(t, New().Validate(context.Background(), func() sweeps.RunConfig {
		rc := ckptConfig(8, 8, "zip", nil)
		return rc
	}()))
}
