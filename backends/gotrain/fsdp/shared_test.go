package fsdp

import (
	"context"
	"fmt"
	"testing"
	"time"

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
			cfg.copyGathers = true // the copying gathers into shared buffers; TestZeroCopyGathers has the others
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

// zeroCopyRun is what runZeroCopy saw, by rank.
type zeroCopyRun struct {
	losses, resumed [][]float64 // the steps after the save; the same steps after a load
	memory          []device.Stats
	params          [][][]float32 // by rank, unit: the shards after training
	inPlace, shared []int         // zero-copy gathers, copying gathers into shared buffers
}

// runZeroCopy trains cfg on ws ranks over opts: 2 steps, a checkpoint (sharded,
// or full when full is set), 2 more steps; then fresh trainers on the same world
// load the checkpoint and train the same 2 steps.
func runZeroCopy(t *testing.T, ws int, cfg Config, opts comm.Options, full bool) zeroCopyRun {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	world := newWorldWith(t, ws, opts)
	out := zeroCopyRun{losses: make([][]float64, ws), resumed: make([][]float64, ws), memory: make([]device.Stats, ws),
		params: make([][][]float32, ws), inPlace: make([]int, ws), shared: make([]int, ws)}
	steps := func(tr *Trainer, n int) ([]float64, error) {
		var ls []float64
		for range n {
			rep, err := tr.Step(ctx)
			if err != nil {
				return nil, err
			}
			ls = append(ls, rep.Loss)
		}
		return ls, nil
	}
	errs := eachRank(ws, func(r int) error {
		tr, err := New(ctx, cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		if _, err := steps(tr, 2); err != nil {
			return err
		}
		if full {
			err = tr.SaveFull(ctx, dir)
		} else {
			err = tr.SaveSharded(ctx, dir)
		}
		if err != nil {
			return err
		}
		if out.losses[r], err = steps(tr, 2); err != nil {
			return err
		}
		out.memory[r], out.inPlace[r], out.shared[r] = tr.Report().Memory, tr.inPlaceGathers, tr.sharedGathers
		for i := range tr.units {
			out.params[r] = append(out.params[r], tr.Params(i))
		}
		if err := tr.Close(); err != nil {
			return err
		}
		tr, err = New(ctx, cpu.New(cpu.Options{}), world[r], cfg)
		if err != nil {
			return err
		}
		defer tr.Close()
		if full {
			err = tr.LoadFull(ctx, dir)
		} else {
			err = tr.LoadSharded(ctx, dir)
		}
		if err != nil {
			return err
		}
		out.resumed[r], err = steps(tr, 2)
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return out
}

// TestZeroCopyGathers trains fp32 with zero-copy gathers (each unit resident in
// the node's shared arena, this rank's shard its piece, the all-gather a barrier),
// with the copying all-gathers into shared buffers, and over the TCP ring, at
// world sizes 2 to 4 under full_shard, shard_grad_op and hybrid_shard, with
// gradient accumulation, both prefetches and activation checkpointing: losses,
// the final shards and every rank's memory accounting are bitwise the same, a
// checkpoint saved and loaded continues with the same losses, and only the
// zero-copy run gathers in place. An arena too small for the units falls back to
// the copying gathers on every rank.
func TestZeroCopyGathers(t *testing.T) {
	for _, tc := range []struct {
		ws       int
		sharding string
		gpn      int
		accum    int
		ac, full bool
		arena    int64
		zero     bool // zero-copy expected
	}{
		{2, sweeps.FullShard, 0, 2, false, false, 0, true},
		{3, sweeps.FullShard, 0, 2, true, true, 0, true},
		{4, sweeps.FullShard, 0, 1, false, false, 0, true},
		{2, sweeps.ShardGradOp, 0, 2, true, false, 0, true},
		{3, sweeps.ShardGradOp, 0, 1, false, false, 0, true},
		{4, sweeps.ShardGradOp, 0, 2, false, true, 0, true},
		{4, sweeps.HybridShard, 2, 2, true, false, 0, true},
		{2, sweeps.FullShard, 0, 2, false, false, 64 << 10, false},
	} {
		t.Run(fmt.Sprintf("ws%d-%s-accum%d-ac%v-full%v-arena%d", tc.ws, tc.sharding, tc.accum, tc.ac, tc.full, tc.arena), func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Sharding, cfg.GPUsPerNode, cfg.GradAccum, cfg.ActivationCheckpointing = tc.sharding, tc.gpn, tc.accum, tc.ac
			cfg.BatchPerDevice = max(1, globalBatch/tc.ws)
			cfg.BackwardPrefetch, cfg.ForwardPrefetch = sweeps.BackwardPre, true
			copying := cfg
			copying.copyGathers = true
			tcp := runZeroCopy(t, tc.ws, cfg, comm.Options{Transport: comm.TransportTCP}, tc.full)
			cp := runZeroCopy(t, tc.ws, copying, comm.Options{Transport: comm.TransportShm, ShmArenaBytes: tc.arena}, tc.full)
			zc := runZeroCopy(t, tc.ws, cfg, comm.Options{Transport: comm.TransportShm, ShmArenaBytes: tc.arena}, tc.full)
			require.NotEqual(t, tcp.losses[0][0], tcp.losses[0][1], "the steps must differ for the test to mean anything")
			units := len(mustLayout(t, cfg, tc.ws))
			for r := range tc.ws {
				for name, run := range map[string]zeroCopyRun{"copying shared": cp, "zero-copy": zc} {
					assert.Equal(t, tcp.losses[r], run.losses[r], "rank %d: %s gives the TCP ring's losses bitwise", r, name)
					assert.Equal(t, tcp.params[r], run.params[r], "rank %d: %s gives the TCP ring's shards bitwise", r, name)
					assert.Equal(t, tcp.memory[r], run.memory[r], "rank %d: %s: the accounting does not see the sharing", r, name)
					assert.Equal(t, run.losses[r], run.resumed[r], "rank %d: %s: a loaded checkpoint continues alike", r, name)
				}
				assert.Zero(t, tcp.inPlace[r]+cp.inPlace[r], "rank %d: only the zero-copy run gathers in place", r)
				assert.Equal(t, zc.inPlace[0], zc.inPlace[r], "rank %d gathers as rank 0 does", r)
				if tc.zero {
					// Every unit at least once a micro-step (forward), on every rank.
					assert.GreaterOrEqual(t, zc.inPlace[r], 4*tc.accum*units, "rank %d: every gather is in place", r)
					assert.Zero(t, zc.shared[r], "rank %d: no copying gather", r)
					assert.Positive(t, cp.shared[r], "rank %d: the copying run gathers into shared buffers", r)
				} else {
					assert.Zero(t, zc.inPlace[r], "rank %d: the units do not fit: every rank copies", r)
					assert.Equal(t, cp.shared[r], zc.shared[r], "rank %d: the fallback is the copying path", r)
				}
			}
		})
	}
}

// TestZeroCopyOrdering slows one rank down where zero-copy gathers rely on order:
// before it writes its shards (optimizer, checkpoint load), so that a gather that
// did not wait for every piece would read its old values, and before each of its
// reads of a gathered unit, so that a peer whose optimizer did not wait for the
// slow rank's reads would change the unit under it. Losses and shards stay the
// TCP ring's bitwise.
func TestZeroCopyOrdering(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sharding string
		read     time.Duration
		write    time.Duration
	}{
		{"slow-writer-full_shard", sweeps.FullShard, 0, 20 * time.Millisecond},
		{"slow-reader-full_shard", sweeps.FullShard, time.Millisecond, 0},
		{"slow-writer-shard_grad_op", sweeps.ShardGradOp, 0, 20 * time.Millisecond},
		{"slow-reader-shard_grad_op", sweeps.ShardGradOp, time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ws, slow = 3, 1
			cfg := baseConfig(t)
			cfg.Sharding, cfg.GradAccum, cfg.BatchPerDevice = tc.sharding, 2, 1
			cfg.BackwardPrefetch, cfg.ForwardPrefetch = sweeps.BackwardPost, true
			tcp := runZeroCopy(t, ws, cfg, comm.Options{Transport: comm.TransportTCP}, false)
			testHooks.beforeRead = func(r, _ int) {
				if r == slow {
					time.Sleep(tc.read)
				}
			}
			testHooks.beforeWrite = func(r int, _ string) {
				if r == slow {
					time.Sleep(tc.write)
				}
			}
			defer func() { testHooks.beforeRead, testHooks.beforeWrite = nil, nil }()
			zc := runZeroCopy(t, ws, cfg, comm.Options{Transport: comm.TransportShm}, false)
			for r := range ws {
				require.Positive(t, zc.inPlace[r], "rank %d: the zero-copy path ran", r)
				assert.Equal(t, tcp.losses[r], zc.losses[r], "rank %d", r)
				assert.Equal(t, tcp.losses[r], zc.resumed[r], "rank %d: after the load", r)
				assert.Equal(t, tcp.params[r], zc.params[r], "rank %d", r)
			}
		})
	}
}
