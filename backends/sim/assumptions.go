package sim

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// The assumptions that decide a prediction's memory, each a backend option. The
// defaults are what today's PyTorch FSDP2 does (torch.distributed.fsdp.fully_shard
// as torchtitan drives it), except checkpointing, whole-block as the word means
// in most trainers (CheckpointFull); another trainer is predicted by setting the options to
// what it does (BackendAssumptions holds the project's own trainers' settings).
const (
	// GradSyncEveryMicroStep: gradients are reduced after every micro-step's
	// backward and accumulate sharded. It is what PyTorch does unless the loop opts
	// out: FSDP2 reduce-scatters on every backward unless
	// set_requires_gradient_sync(False) is called, and torchtitan never calls it
	// (torchtitan/train.py runs each micro-batch's forward and backward plainly);
	// Composer's ddp_sync_context (composer/distributed/dist_strategy.py) yields
	// without no_sync for a model that is not a DistributedDataParallel, so
	// Composer's FSDP reduce-scatters every micro-step too.
	GradSyncEveryMicroStep = "every_micro_step"
	// GradSyncNoSync: micro-steps before the last run under no_sync, which "will
	// result in higher memory usage because FSDP will accumulate the full model
	// gradients (instead of gradient shards) until the eventual sync" (FSDP1 docs,
	// FullyShardedDataParallel.no_sync). Hugging Face accelerate's accumulate(), the
	// project's torchrun script under FSDP1 and DDP, and gotrain do this.
	GradSyncNoSync = "no_sync"

	// LossUpcast: F.cross_entropy on logits.float(), as torchtitan's
	// cross_entropy_loss (pred.flatten(0, 1).float()) and Hugging Face's
	// ForCausalLMLoss (logits.float()) do. At the start of backward three fp32
	// b·s·V tensors are live: log_softmax's output (saved for its backward),
	// nll_loss's gradient and log_softmax's gradient: 12 bytes per logit. The
	// compute-dtype logits are freed before backward (torchtitan: "del pred ...
	// to avoid peaking memory"); the fp32 copy lives only inside the forward call,
	// where 2 + 4 + 4 = 10 bytes per logit stays under the 12.
	LossUpcast = "upcast"
	// LossFused: a fused cross-entropy kernel that reads the compute-dtype logits
	// and writes their gradient in place (flash-attn's CrossEntropyLoss with
	// inplace_backward, llm-foundry's default fused_crossentropy; gotrain's
	// CrossEntropyBackward overwrites the logits): the logits alone.
	LossFused = "fused"
	// LossChunked: the head and the loss computed chunk by chunk (Liger's
	// FusedLinearCrossEntropy, Apple's cut cross-entropy): no whole-batch logits
	// are ever live; one chunk is neglected.
	LossChunked = "chunked"

	// AttentionFlash: fused attention (FlashAttention, memory-efficient SDPA)
	// keeps q, k, v, the output and a per-row logsumexp, no s×s matrix: PyTorch's
	// scaled_dot_product_attention picks it for bf16/fp16 on Ampere and newer.
	AttentionFlash = "flash"
	// AttentionMath: softmax(q·kᵀ)·v written out without dropout (SDPA's math
	// backend, a plain implementation): softmax keeps its output for backward and
	// the matmul with v keeps the same tensor, a·s²·b values per layer.
	AttentionMath = "math"
	// AttentionEager: attention with dropout on the probabilities, as Korthikanti
	// et al. 2022 count it (§4.1): softmax output 2·a·s²·b, dropout mask a·s²·b
	// and dropout output 2·a·s²·b bytes at 2-byte activations: 5·a·s²·b.
	AttentionEager = "eager"
	// AttentionAuto is flash on a GPU at bf16/fp16, eager otherwise (the sim's
	// behaviour before these options existed).
	AttentionAuto = "auto"
	// AttentionSDPA is torch.nn.functional.scaled_dot_product_attention as it
	// dispatches: a fused kernel on a GPU (flash for bf16/fp16, memory-efficient
	// for fp32), the math backend on CPU.
	AttentionSDPA = "sdpa"

	// CheckpointFull: every transformer layer is checkpointed whole (torch.utils.
	// checkpoint around the block, FSDP's apply_activation_checkpointing):
	// Korthikanti et al.'s 2·s·b·h per layer plus one layer live in recompute.
	// It is what activation_checkpointing: true means unless the checkpointing
	// option says otherwise, because it is what a boolean means to most users:
	// Hugging Face's gradient_checkpointing, PyTorch's
	// apply_activation_checkpointing, llm-foundry's activation_checkpointing and
	// Lightning's FSDPStrategy(activation_checkpointing_policy=...) all
	// checkpoint whole blocks (issue 26: with selective as the default, every
	// checkpointed llm-foundry row, trained on 80 GB, was predicted at 190–243 GiB).
	CheckpointFull = "full"
	// CheckpointSelective: torchtitan's selective policy
	// (activation_checkpoint.mode = "selective", selective_ac_option = "op"):
	// inside each layer the outputs of attention and of every other matmul are
	// saved (_save_list with "save every other mm"), the rest is recomputed.
	// Explicit only (checkpointing: selective), as torchtitan users set it.
	CheckpointSelective = "selective"

	// CommOverlapPrefetch: collectives run under compute as FSDP's prefetch
	// settings allow (backward_prefetch, forward_prefetch), the default.
	CommOverlapPrefetch = "prefetch"
	// CommOverlapNone: every collective adds to the step. llm-foundry's
	// Composer runs on torch 2.0 measure so: a micro-step's time is its tokens'
	// compute plus a fixed part equal to all its collectives, even where the
	// compute is ten times longer (TestCommOverlapNoneFitsFoundrySeries).
	CommOverlapNone = "none"
)

// Assumptions are the choices a prediction rests on that the run config does not
// say; Notes prints them.
type Assumptions struct {
	// GradSync is GradSyncEveryMicroStep or GradSyncNoSync.
	GradSync string `json:"grad_sync"`
	// Loss is LossUpcast, LossFused or LossChunked.
	Loss string `json:"loss"`
	// Attention is AttentionFlash, AttentionMath or AttentionEager (resolved).
	Attention string `json:"attention"`
	// Checkpointing is CheckpointFull or CheckpointSelective (used only when the
	// run turns activation_checkpointing on).
	Checkpointing string `json:"checkpointing"`
	// FSDPVersion is 1 (FullyShardedDataParallel: one flat parameter per unit,
	// gathered in place) or 2 (fully_shard: per-parameter DTensor shards, gathered
	// through a staging buffer and copied out, reduced through a copy-in buffer).
	FSDPVersion int `json:"fsdp_version"`
	// GradientAsBucketView is DDP's gradient_as_bucket_view.
	GradientAsBucketView bool `json:"ddp_gradient_as_bucket_view"`
	// ReservedFactor is max_memory_reserved over max_memory_allocated.
	ReservedFactor float64 `json:"reserved_factor"`
	// Dropout says the model trains with residual dropout, whose masks Korthikanti
	// et al. count (2 of their 34·s·b·h). Llama's modules have none (HF's
	// LlamaDecoderLayer, torchtitan's TransformerBlock), MPT's resid_pdrop is 0
	// by default: off.
	Dropout bool `json:"dropout"`
	// CommOverlap is CommOverlapPrefetch (empty means it) or CommOverlapNone.
	CommOverlap string `json:"comm_overlap,omitempty"`
	// Trainer is TrainerGotrain when the run is the Go trainer's, whose peak is
	// replayed allocation by allocation (gotrainPeak); empty for the formulas.
	Trainer string `json:"trainer,omitempty"`
}

// DefaultAssumptions are today's PyTorch FSDP2 defaults, with whole-block
// checkpointing (see the constants).
func DefaultAssumptions() Assumptions {
	return Assumptions{
		GradSync:      GradSyncEveryMicroStep,
		Loss:          LossUpcast,
		Attention:     AttentionAuto,
		Checkpointing: CheckpointFull,
		FSDPVersion:   2,
		// DDP's gradient_as_bucket_view defaults to False
		// (torch.nn.parallel.DistributedDataParallel).
		GradientAsBucketView: false,
		ReservedFactor:       reservedFactor,
	}
}

// BackendAssumptions are the assumptions that describe how a backend of this
// project trains, for predicting its runs (plan predicts every backend's runs, and
// harness.HostCapacity refuses CPU runs on the prediction). Other backends get
// DefaultAssumptions.
//
//   - gotrain (backends/gotrain/fsdp): accumulation under no_sync ("micro-steps
//     before the last add into full (unsharded) unit gradients"), one flat
//     parameter per unit gathered in place (FSDP1's layout), attention that keeps
//     the output and logsumexp only (model/pass.go: att, lse), the logits'
//     gradient written over the logits, whole-block checkpointing.
//   - torchrun (backends/torchrun/python/fsdpbench_train.py): FSDP2 (fully_shard,
//     which has no no_sync, so it reduces every micro-step) unless fsdp_api is 1;
//     DDP for ddp/no_shard with no_sync; F.cross_entropy(logits.float()); SDPA on
//     CUDA and softmax(q·kᵀ)·v on CPU (AttentionSDPA); torch.utils.checkpoint per
//     block.
func BackendAssumptions(backend string, rc sweeps.RunConfig) Assumptions {
	a := DefaultAssumptions()
	switch backend {
	case "gotrain":
		a.GradSync, a.Loss, a.Attention = GradSyncNoSync, LossFused, AttentionFlash
		a.Checkpointing, a.FSDPVersion = CheckpointFull, 1
		// fsdp.Trainer reduces DDP's gradients in place (the unit is the bucket):
		// no second copy, as gradient_as_bucket_view=True.
		a.GradientAsBucketView, a.Trainer = true, TrainerGotrain
	case "torchrun":
		a.Attention = AttentionSDPA
		if v, ok := rc.BackendOptions["fsdp_api"]; ok && fmt.Sprint(v) == "1" {
			a.FSDPVersion = 1
		}
		if a.FSDPVersion == 1 || rc.Sharding == sweeps.DDP || rc.Sharding == sweeps.NoShard {
			a.GradSync = GradSyncNoSync
		}
	}
	return a
}

// attention resolves AttentionAuto for the point.
func (a Assumptions) attention(p point) string {
	if a.Attention == AttentionSDPA {
		if p.hw.IsGPU {
			return AttentionFlash
		}
		return AttentionMath
	}
	if a.Attention != AttentionAuto && a.Attention != "" {
		return a.Attention
	}
	if p.hw.IsGPU && p.rc.MixedPrecision != sweeps.FP32 {
		return AttentionFlash
	}
	return AttentionEager
}

// notes lists the assumptions as Prediction.Notes lines, the ones that did not
// decide anything for this run left out.
func (a Assumptions) notes(p point, strategy string) []string {
	r := p.rc
	var out []string
	sharded := strategy == sweeps.FullShard || strategy == sweeps.HybridShard || strategy == sweeps.ShardGradOp
	if r.GradAccum > 1 {
		switch {
		case a.GradSync == GradSyncNoSync && sharded:
			out = append(out, "grad_sync no_sync: full unsharded fp32 gradients are kept across micro-steps, reduced once")
		case a.GradSync == GradSyncNoSync:
			out = append(out, "grad_sync no_sync: gradients are reduced once per step")
		default:
			out = append(out, "grad_sync every_micro_step: gradients are reduced after every micro-step (FSDP2's default)")
		}
	}
	switch a.Loss {
	case LossUpcast:
		out = append(out, "loss upcast: F.cross_entropy on fp32 logits, 12 bytes per logit live at backward's start")
	case LossFused:
		out = append(out, "loss fused: only the logits, their gradient written in place")
	case LossChunked:
		out = append(out, "loss chunked: no whole-batch logits")
	}
	switch a.attention(p) {
	case AttentionFlash:
		out = append(out, "attention flash: no s×s scores kept")
	case AttentionMath:
		out = append(out, "attention math: softmax output kept, a·s²·b values per layer")
	case AttentionEager:
		out = append(out, "attention eager: Korthikanti's 5·a·s²·b bytes per layer (scores with dropout)")
	}
	if a.Dropout {
		out = append(out, "dropout: residual dropout masks kept (Korthikanti's 34·s·b·h per layer)")
	} else {
		out = append(out, "no dropout: 32·s·b·h per layer (Korthikanti's 34 less the dropout masks)")
	}
	if r.ActivationCheckpointing {
		switch a.Checkpointing {
		case CheckpointSelective:
			out = append(out, "activation checkpointing selective: torchtitan's op policy, every other matmul and attention saved")
		default:
			out = append(out, "activation checkpointing full: every layer checkpointed whole")
		}
	}
	if sharded {
		out = append(out, fmt.Sprintf("fsdp_version %d", a.FSDPVersion))
	}
	if strategy == sweeps.DDP {
		out = append(out, fmt.Sprintf("ddp_gradient_as_bucket_view %v", a.GradientAsBucketView))
	}
	if p.hw.IsGPU {
		out = append(out, fmt.Sprintf("reserved = %.2f × allocated", a.ReservedFactor))
	}
	if a.CommOverlap == CommOverlapNone && r.WorldSize > 1 {
		out = append(out, "comm_overlap none: every collective adds to the step")
	}
	if gotrainApplies(p) {
		out = append(out, "trainer gotrain: peak memory replayed from the Go trainer's allocation schedule (exact on cpu)")
	}
	return out
}
