package fsdp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// bf16LossTol bounds the relative difference between a bf16 run's losses and the
// fp32 run's over 20 steps of tiny: bf16 keeps 8 bits of the gathered weights,
// the activations and the unsharded gradients (a relative rounding of 2⁻⁹), while
// the master weights and AdamW stay fp32, so the runs drift apart slowly; measured
// about 1e-3 here.
const bf16LossTol = 1e-2

// TestBF16TracksFP32 trains 20 steps of every strategy in bf16 and in fp32: the
// losses agree within bf16LossTol, and the memory per category is the fp32 run's
// transformed by the policy's formula:
//   - params: the fp32 shards stay; the gathered units halve (2 bytes an element),
//   - optimizer: unchanged (fp32 m and v),
//   - grads: the fp32 shards and fp32 reduction buffers stay, and one unit's bf16
//     gradient comes on top (sharded strategies hold it with the unit's fp32
//     buffer: 6 bytes an element where fp32 held 4; with grad_accum every unit's
//     fp32 buffer is held, as no_sync does),
//   - activations: half, but for the fp32 row statistics (rstd, lse, losses),
//   - all-gather bytes halve (bf16 on the wire), reduce-scatter and all-reduce
//     bytes stay (fp32 reduction).
func TestBF16TracksFP32(t *testing.T) {
	for _, tc := range []struct {
		ws       int
		sharding string
		accum    int
		ckpt     bool
	}{
		{1, sweeps.FullShard, 1, false},
		{2, sweeps.FullShard, 1, false},
		{2, sweeps.FullShard, 2, true},
		{2, sweeps.ShardGradOp, 1, false},
		{4, sweeps.HybridShard, 1, false},
		{2, sweeps.NoShard, 1, false},
		{2, sweeps.DDP, 2, false},
	} {
		name := tc.sharding
		t.Run(name, func(t *testing.T) {
			cfg := baseConfig(t)
			cfg.Sharding, cfg.GradAccum, cfg.ActivationCheckpointing = tc.sharding, tc.accum, tc.ckpt
			cfg.BatchPerDevice = globalBatch / tc.ws / tc.accum
			cfg.GPUsPerNode = 2
			cfg.BackwardPrefetch = sweeps.BackwardPre
			fp32 := train(t, tc.ws, cfg, 20)
			cfg.MixedPrecision = sweeps.BF16
			bf16 := train(t, tc.ws, cfg, 20)
			requireRelClose(t, fp32.losses[0], bf16.losses[0], bf16LossTol, "bf16 against fp32")
			for r := 1; r < tc.ws; r++ {
				assert.Equal(t, bf16.losses[0], bf16.losses[r], "every rank reports the same loss")
			}

			shardSize := tc.ws
			switch tc.sharding {
			case sweeps.NoShard, sweeps.DDP:
				shardSize = 1
			case sweeps.HybridShard:
				shardSize = cfg.GPUsPerNode
			}
			units, err := Layout(cfg.Shape, shardSize)
			require.NoError(t, err)
			var shard, maxPadded, maxPair int64
			for i, u := range units {
				shard += int64(u.ShardLen)
				maxPadded = max(maxPadded, int64(u.Padded))
				if i > 0 { // backward_pre: unit i−1 is gathered while unit i is held
					maxPair = max(maxPair, int64(u.Padded+units[i-1].Padded))
				}
			}
			sharded := shardSize > 1 || tc.sharding == sweeps.FullShard || tc.sharding == sweeps.ShardGradOp
			for r := range tc.ws {
				f, b := fp32.reports[r].Memory.Peak, bf16.reports[r].Memory.Peak
				t.Logf("rank %d peak bytes fp32 → bf16: params %d → %d, grads %d → %d, optimizer %d → %d, activations %d → %d",
					r, f[device.Params], b[device.Params], f[device.Grads], b[device.Grads], f[device.Optimizer], b[device.Optimizer],
					f[device.Activations], b[device.Activations])
				assert.Equal(t, f[device.Optimizer], b[device.Optimizer], "optimizer state stays fp32")
				assert.Equal(t, 8*shard, b[device.Optimizer])
				gathered32 := f[device.Params] - 4*shard
				if shardSize == 1 {
					gathered32 = 4 * maxPair // fp32 computes on the shard itself; bf16 casts the units
					if tc.sharding == sweeps.NoShard || tc.sharding == sweeps.DDP {
						gathered32 = 4 * shard // every unit held from forward to backward
					}
				}
				assert.Equal(t, 4*shard+gathered32/2, b[device.Params], "params: fp32 shards + bf16 gathered units")
				if sharded && tc.accum == 1 {
					assert.Equal(t, 4*shard+4*maxPadded, f[device.Grads], "grads: fp32 shards + a unit's fp32 gradient")
				} else if !sharded {
					assert.Equal(t, 4*shard, f[device.Grads], "grads: fp32 gradients, added into in place")
				}
				extra := 2 * maxPadded
				if sharded && tc.accum > 1 {
					// The last micro-step starts its backward with every unit's fp32
					// buffer held and frees each after the unit's reduction: unit i's
					// bf16 gradient meets the buffers of units 0..i.
					var prefix, total int64
					for _, u := range units {
						total += int64(u.Padded)
					}
					extra = 0
					for _, u := range units {
						prefix += int64(u.Padded)
						extra = max(extra, 4*prefix+2*int64(u.Padded)-4*total)
					}
				}
				assert.Equal(t, f[device.Grads]+extra, b[device.Grads], "grads: fp32's + one unit's bf16 gradient")
				half := f[device.Activations] / 2
				assert.GreaterOrEqual(t, b[device.Activations], half, "activations: at least half")
				assert.LessOrEqual(t, b[device.Activations], half+statBytes(cfg), "activations: half but the fp32 statistics")

				fc, bc := fp32.reports[r].Comm, bf16.reports[r].Comm
				assert.Equal(t, fc.ReduceScatter.BytesSent, bc.ReduceScatter.BytesSent, "reduce-scatter in fp32")
				assert.Equal(t, fc.AllReduce.BytesSent, bc.AllReduce.BytesSent, "all-reduce in fp32")
				assert.Equal(t, fc.AllGather.Calls, bc.AllGather.Calls)
				// bf16 halves the all-gathers, ⌈shard/2⌉ float32 words a rank each.
				assert.LessOrEqual(t, bc.AllGather.BytesSent, fc.AllGather.BytesSent/2+4*int64(shardSize)*bc.AllGather.Calls)
				assert.GreaterOrEqual(t, bc.AllGather.BytesSent, fc.AllGather.BytesSent/2)
			}
		})
	}
}

// statBytes bounds what the fp32 row statistics add over half of the fp32 run's
// activations: 2 bytes an element (4 where bf16 would have been 2) of every
// statistic saved at once: two rstd and one lse a block, the head's rstd, the losses.
func statBytes(cfg Config) int64 {
	s := cfg.Shape
	rows := int64(cfg.BatchPerDevice * cfg.SeqLen)
	return 2 * (int64(s.Layers)*(2*rows+int64(s.Heads)*rows) + 2*rows)
}

// TestMixedPrecisionErrors: fp16 is refused with its reason, a device without
// bf16 storage is refused for bf16.
func TestMixedPrecisionErrors(t *testing.T) {
	cfg := baseConfig(t)
	cfg.MixedPrecision = sweeps.FP16
	_, err := cfg.withDefaults(1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "loss scaling")
	cfg.MixedPrecision = "int8"
	_, err = cfg.withDefaults(1)
	assert.ErrorContains(t, err, "not one of")
}
