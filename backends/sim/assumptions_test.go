package sim

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// withOpts is rc with backend_options replaced.
func withOpts(rc sweeps.RunConfig, kv ...any) sweeps.RunConfig {
	rc.BackendOptions = map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		rc.BackendOptions[kv[i].(string)] = kv[i+1]
	}
	return rc
}

// TestAssumptionSwitchesMoveMemoryByTheirFormula flips one assumption at a time
// and checks that the prediction moves by exactly what that assumption's formula
// says, in the breakdown category it belongs to, and nowhere else.
func TestAssumptionSwitchesMoveMemoryByTheirFormula(t *testing.T) {
	base := cfg("llama3-8b", 8, sweeps.FullShard)
	base.SeqLen, base.BatchPerDevice, base.GradAccum = 4096, 2, 3
	shape := mustPredict(t, base).Shape
	P := shape.Params()
	s, b, h, L := int64(base.SeqLen), int64(base.BatchPerDevice), int64(shape.Hidden), int64(shape.Layers)
	a, V := int64(shape.Heads), int64(shape.Vocab)
	unit := shape.BlockParams()
	ac := base
	ac.ActivationCheckpointing = true
	saved, _ := selectiveSaved(shape)
	ddp := cfg("llama3-8b", 8, sweeps.DDP)

	tests := []struct {
		name     string
		from, to sweeps.RunConfig
		category string
		delta    int64
	}{
		{"no_sync keeps a full fp32 gradient", withOpts(base, "grad_sync", GradSyncEveryMicroStep),
			withOpts(base, "grad_sync", GradSyncNoSync), MemGrads, 4 * P},
		{"fused loss keeps only the bf16 logits", withOpts(base, "loss", LossUpcast),
			withOpts(base, "loss", LossFused), MemLogits, b * s * V * (2 - 12)},
		{"chunked loss keeps no logits", withOpts(base, "loss", LossUpcast),
			withOpts(base, "loss", LossChunked), MemLogits, -b * s * V * 12},
		{"math attention keeps the softmax output", withOpts(base, "attention", AttentionFlash),
			withOpts(base, "attention", AttentionMath), MemActivations, L * a * s * s * b * 2},
		{"eager attention: Korthikanti's 5·a·s²·b", withOpts(base, "attention", AttentionFlash),
			withOpts(base, "attention", AttentionEager), MemActivations, L * 5 * a * s * s * b},
		{"selective keeps every other matmul's output", withOpts(ac, "checkpointing", CheckpointFull),
			withOpts(ac, "checkpointing", CheckpointSelective), MemActivations, L * s * b * (saved - h) * 2},
		{"dropout adds Korthikanti's two masks", withOpts(base, "dropout", false),
			withOpts(base, "dropout", true), MemActivations, L * 2 * s * b * h},
		{"fsdp2 stages a unit's gather and reduce", withOpts(base, "fsdp_version", 1),
			withOpts(base, "fsdp_version", 2), MemBuffers, 2 * unit * 2},
		{"gradient_as_bucket_view drops DDP's bucket copy", withOpts(ddp, "ddp_gradient_as_bucket_view", false),
			withOpts(ddp, "ddp_gradient_as_bucket_view", true), MemBuffers, -4 * P},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, to := mustPredict(t, tt.from), mustPredict(t, tt.to)
			for k, v := range from.Breakdown {
				want := v
				if k == tt.category {
					want += tt.delta
				}
				assert.Equal(t, want, to.Breakdown[k], "%s", k)
			}
			assert.Equal(t, from.PeakMemAllocatedBytes+tt.delta, to.PeakMemAllocatedBytes)
		})
	}

	// The reserved factor scales reserved over allocated and nothing else.
	one, two := mustPredict(t, withOpts(base, "reserved_factor", 1)), mustPredict(t, withOpts(base, "reserved_factor", 1.5))
	assert.Equal(t, one.PeakMemAllocatedBytes, one.PeakMemReservedBytes)
	assert.Equal(t, ceilBytes(1.5*float64(one.PeakMemAllocatedBytes)), two.PeakMemReservedBytes)
}

func TestAssumptionSwitchesThatDoNothingHere(t *testing.T) {
	// no_sync costs nothing without accumulation, or for an unsharded strategy;
	// the FSDP version nothing for DDP.
	for _, rc := range []sweeps.RunConfig{cfg("llama-1b", 8, sweeps.FullShard), func() sweeps.RunConfig {
		rc := cfg("llama-1b", 8, sweeps.DDP)
		rc.GradAccum = 4
		return rc
	}()} {
		a := mustPredict(t, withOpts(rc, "grad_sync", GradSyncEveryMicroStep, "fsdp_version", 1))
		b := mustPredict(t, withOpts(rc, "grad_sync", GradSyncNoSync, "fsdp_version", 2))
		if rc.Sharding == sweeps.DDP {
			assert.Equal(t, a.PeakMemAllocatedBytes, b.PeakMemAllocatedBytes)
		} else {
			assert.Equal(t, a.Breakdown[MemGrads], b.Breakdown[MemGrads])
		}
	}
}

func TestSelectiveCheckpointingRecomputesTheUnsavedMatmuls(t *testing.T) {
	rc := cfg("llama3-8b", 8, sweeps.FullShard)
	rc.SeqLen, rc.BatchPerDevice = 8192, 2
	off := mustPredict(t, rc)
	rc.ActivationCheckpointing = true
	sel := mustPredict(t, withOpts(rc, "checkpointing", CheckpointSelective))
	full := mustPredict(t, withOpts(rc, "checkpointing", CheckpointFull))
	// k, o and up projections: 2·(h·kv + h·h + h·I) FLOPs per token per layer.
	s := off.Shape
	h, kv, in := float64(s.Hidden), float64(s.KVDim()), float64(s.Intermediate)
	rf := float64(s.Layers) * 2 * (h*kv + h*h + h*in) * float64(rc.SeqLen*rc.BatchPerDevice)
	peak := off.PeakFlopsPerS * off.Hardware.Efficiency
	// Each at the GPU's uncalibrated recompute share (gpuRecomputeShare).
	// The FLOPs' time, without the weights' traffic, which the recompute reads
	// again for the share of the forward's matmuls it runs (weightTraffic).
	assert.InEpsilon(t, flopsS(off)+gpuRecomputeShare*rf/peak, flopsS(sel), 1e-9)
	assert.InEpsilon(t, flopsS(off)*(1+gpuRecomputeShare/3), flopsS(full), 1e-9)
	forwardMatmuls := (off.ModelFlopsPerToken - attentionFlopsPerToken(s, rc.SeqLen)) / 3 * float64(rc.SeqLen*rc.BatchPerDevice)
	assert.InEpsilon(t, 1+rf/forwardMatmuls/3, sel.weightS/off.weightS, 1e-9, "selective reads again the weights of the matmuls it runs again")
	assert.InEpsilon(t, 4.0/3, full.weightS/off.weightS, 1e-9)
	assert.Less(t, full.Breakdown[MemActivations], sel.Breakdown[MemActivations])
	assert.Less(t, sel.Breakdown[MemActivations], off.Breakdown[MemActivations])
}

func TestEveryMicroStepReducesEveryMicroStep(t *testing.T) {
	rc := cfg("llama-1b", 16, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode, rc.GradAccum = 2, 8, 4
	every := mustPredict(t, withOpts(rc, "grad_sync", GradSyncEveryMicroStep))
	once := mustPredict(t, withOpts(rc, "grad_sync", GradSyncNoSync))
	P := every.Shape.Params()
	assert.Equal(t, 4*P*2, every.CommBytesPerStep.ReduceScatter)
	assert.Equal(t, P*2, once.CommBytesPerStep.ReduceScatter)
	tRS := ringTime(float64(P*2), 16, false, every.Hardware.InterNodeBusBWBytesPerS) + unitCalls(every)*ncclLatency(every, 16, 2)
	assert.InEpsilon(t, once.CommS+3*tRS, every.CommS, 1e-9)
}

func TestNotesNameTheAssumptions(t *testing.T) {
	rc := cfg("llama3-8b", 8, sweeps.FullShard)
	rc.GradAccum, rc.ActivationCheckpointing = 2, true
	p := mustPredict(t, rc)
	notes := fmt.Sprint(p.Notes)
	for _, want := range []string{"grad_sync every_micro_step", "loss upcast", "attention flash", "activation checkpointing full", "fsdp_version 2", "reserved = 1.10 × allocated"} {
		assert.Contains(t, notes, want)
	}
	assert.Equal(t, DefaultAssumptions().GradSync, p.Assumptions.GradSync)

	// The Result carries them into metrics.json.
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, p.Notes, res.Extra["notes"])
	assert.Equal(t, p.Assumptions, res.Extra["assumptions"])
}

// TestCheckpointingTrueMeansWholeBlocks: activation_checkpointing: true alone is
// whole-block checkpointing, as Hugging Face's gradient_checkpointing, PyTorch's
// apply_activation_checkpointing, llm-foundry and Lightning mean it (issue 26);
// torchtitan's selective policy stays an explicit option.
func TestCheckpointingTrueMeansWholeBlocks(t *testing.T) {
	rc := cfg("llama3-8b", 8, sweeps.FullShard)
	rc.SeqLen, rc.BatchPerDevice, rc.ActivationCheckpointing = 4096, 2, true
	def := mustPredict(t, rc)
	full := mustPredict(t, withOpts(rc, "checkpointing", CheckpointFull))
	sel := mustPredict(t, withOpts(rc, "checkpointing", CheckpointSelective))
	assert.Equal(t, CheckpointFull, def.Assumptions.Checkpointing)
	assert.Equal(t, full.Breakdown, def.Breakdown)
	assert.Equal(t, full.StepTimeS, def.StepTimeS)
	assert.Greater(t, sel.Breakdown[MemActivations], def.Breakdown[MemActivations], "selective keeps more than whole blocks")
	assert.Contains(t, fmt.Sprint(sel.Notes), "activation checkpointing selective")
	// The torchrun backend's script checkpoints whole blocks too.
	assert.Equal(t, CheckpointFull, BackendAssumptions("torchrun", rc).Checkpointing)
}

func TestBackendAssumptions(t *testing.T) {
	// gotrain: no_sync accumulation, fused loss, flash-like attention, flat units.
	rc := cfg("tiny", 2, sweeps.FullShard)
	rc.Hardware, rc.MixedPrecision, rc.GradAccum = "cpu", sweeps.FP32, 2
	rc.Backend = "gotrain"
	g := mustPredict(t, rc)
	assert.Equal(t, GradSyncNoSync, g.Assumptions.GradSync)
	assert.Equal(t, LossFused, g.Assumptions.Loss)
	assert.Equal(t, 1, g.Assumptions.FSDPVersion)
	assert.Contains(t, fmt.Sprint(g.Notes), "attention flash")
	assert.Equal(t, g.Shape.Params()*4+ModelStates(g.Shape.Params(), Stage3, 2, StateBytes(sweeps.FP32)).Grads,
		g.Breakdown[MemGrads], "no_sync's full fp32 gradients")
	assert.Equal(t, TrainerGotrain, g.Assumptions.Trainer)
	assert.True(t, g.Assumptions.GradientAsBucketView, "fsdp.Trainer reduces DDP's gradients in place")
	assert.Contains(t, fmt.Sprint(g.Notes), "trainer gotrain")
	// A shape the Go trainer cannot train (tied, GPT-2) is predicted by the formulas.
	rc.Model = "gpt2-124m"
	assert.NotContains(t, fmt.Sprint(mustPredict(t, rc).Notes), "trainer gotrain")
	rc.Model = "tiny"

	// torchrun's script: FSDP2 unless fsdp_api 1; no_sync under FSDP1 and DDP.
	rc.Backend = "torchrun"
	tr := mustPredict(t, rc)
	assert.Equal(t, GradSyncEveryMicroStep, tr.Assumptions.GradSync)
	assert.Contains(t, fmt.Sprint(tr.Notes), "attention math", "the script's softmax(q·kᵀ)·v on CPU")
	rc.BackendOptions = map[string]any{"fsdp_api": 1}
	assert.Equal(t, GradSyncNoSync, mustPredict(t, rc).Assumptions.GradSync)
}
