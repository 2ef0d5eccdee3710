package fsdp

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// sharedRun is what trainShared saw on every rank.
type sharedRun struct {
	losses [][]float64
	memory []device.Stats
	shared []int // all-gathers into shared buffers, by rank
}

// trainShared runs cfg for n steps on ws ranks over opts' transport.
func trainShared(t *testing.T, ws int, cfg Config, n int, opts comm.Options) sharedRun {
	t.Helper()
	world := newWorldWith(t, ws, opts)
	out := sharedRun{losses: make([][]float64, ws), memory: make([]device.Stats, ws), shared: make([]int, ws)}
	errs := eachRank(ws, func(r int) error {
		ctx := context.Background()
		tr, err := New(ctx, cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		for range n {
			rep, err := tr.Step(ctx)
			if err != nil {
				return err
			}
			out.losses[r] = append(out.losses[r], rep.Loss)
		}
		out.memory[r], out.shared[r] = tr.Report().Memory, tr.sharedGathers
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

// TestSharedGatheredParameters trains over shared memory, where the ranks gather
// each unit's parameters into one shared buffer, and over the TCP ring: losses are
// bitwise equal, every rank's memory accounting (current and peak, by category)
// is the same, fp32 and bf16, with prefetch (two gathered units alive at once), and
// with an arena too small for some units (those fall back to private buffers and
// the copying all-gather, on every rank alike).
func TestSharedGatheredParameters(t *testing.T) {
	for _, tc := range []struct {
		ws       int
		sharding string
		mp       string
		arena    int64
		shared   string // "all", "some", "none"
	}{
		{2, sweeps.FullShard, sweeps.FP32, 0, "all"},
		{2, sweeps.FullShard, sweeps.BF16, 0, "all"},
		{4, sweeps.FullShard, sweeps.FP32, 0, "all"},
		{2, sweeps.ShardGradOp, sweeps.FP32, 0, "all"},
		{4, sweeps.HybridShard, sweeps.BF16, 0, "all"},
		{2, sweeps.FullShard, sweeps.FP32, 64 << 10, "some"},
		{2, sweeps.FullShard, sweeps.FP32, -1, "none"},
	} {
		t.Run(fmt.Sprintf("ws%d-%s-%s-arena%d", tc.ws, tc.sharding, tc.mp, tc.arena), func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Sharding, cfg.MixedPrecision, cfg.GPUsPerNode = tc.sharding, tc.mp, 2
			cfg.BatchPerDevice = globalBatch / tc.ws
			cfg.BackwardPrefetch, cfg.ForwardPrefetch = sweeps.BackwardPre, true
			const n = 4
			tcp := trainShared(t, tc.ws, cfg, n, comm.Options{Transport: comm.TransportTCP})
			shm := trainShared(t, tc.ws, cfg, n, comm.Options{Transport: comm.TransportShm, ShmArenaBytes: tc.arena})
			gathersPerStep := 0
			for r := range tc.ws {
				assert.Equal(t, tcp.losses[r], shm.losses[r], "rank %d: shared buffers give the TCP ring's losses bitwise", r)
				assert.Equal(t, tcp.memory[r], shm.memory[r], "rank %d: the accounting does not see the sharing", r)
				assert.Zero(t, tcp.shared[r], "rank %d: the TCP ring shares nothing", r)
				assert.Equal(t, shm.shared[0], shm.shared[r], "rank %d gathers as rank 0 does", r)
				gathersPerStep = shm.shared[r] / n
			}
			switch tc.shared {
			case "all":
				// Every unit at least once a step (forward), more with reshard_after_forward.
				assert.GreaterOrEqual(t, gathersPerStep, len(mustLayout(t, cfg, tc.ws)), "every unit's gathers are shared")
			case "some":
				assert.Positive(t, shm.shared[0], "the small units fit")
				assert.Less(t, gathersPerStep, len(mustLayout(t, cfg, tc.ws)), "the large units fall back")
			case "none":
				assert.Zero(t, shm.shared[0], "no arena: every gather copies")
			}
		})
	}
}

func mustLayout(t *testing.T, cfg Config, ws int) []UnitLayout {
	t.Helper()
	shard := ws
	if cfg.Sharding == sweeps.HybridShard {
		shard = cfg.GPUsPerNode
	}
	l, err := Layout(cfg.Shape, shard)
	require.NoError(t, err)
	return l
}
