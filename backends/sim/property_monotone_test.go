package sim

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// The sim must be monotone where physics says so (issue 37): more shards
// never raise a rank's model-state memory, activation checkpointing never
// raises activation memory, and a larger micro-batch never lowers the peak.
// Each property draws a configuration over every axis the model reads
// (model, hardware, nodes and GPUs, sharding, precision, offload, sequence
// length, micro-batch, grad_accum, prefetch, wrapping, the backend whose
// trainer is predicted and the sim's own options) and changes one thing;
// rapid shrinks a failure to the smallest configuration that breaks it and
// prints it. rapid's default 100 draws a property (-rapid.checks) keep the
// four within a few seconds under the race detector.

// simModels are the presets the properties draw: from tiny (two layers,
// where checkpointing's saved inputs weigh most against a block) to 8B.
var simModels = []string{"tiny", "gpt2-124m", "llama-1b", "llama3-8b", "mistral-7b"}

// simHardware are the profiles drawn: GPUs of three memory sizes and the cpu
// host, whose ranks share its RAM.
var simHardware = []string{"h100-sxm", "a100-40g", "a100-80g", "h200", "cpu"}

// drawConfig draws a run configuration the sim predicts, with the sim
// options it is predicted under (nil for gotrain and torchrun, which carry
// their trainer's assumptions).
func drawConfig(t *rapid.T) (sweeps.RunConfig, map[string]any) {
	hw := rapid.SampledFrom(simHardware).Draw(t, "hardware")
	gpu := hw != "cpu"
	rc := sweeps.RunConfig{
		Backend:  rapid.SampledFrom([]string{Name, "gotrain", "torchrun"}).Draw(t, "backend"),
		Hardware: hw,
		Model:    rapid.SampledFrom(simModels).Draw(t, "model"),
		SeqLen:   rapid.SampledFrom([]int{16, 128, 512, 2048, 8192}).Draw(t, "seq_len"),
		Steps:    3,
		Sharding: rapid.SampledFrom([]string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.HybridShard,
			sweeps.NoShard, sweeps.DDP}).Draw(t, "sharding"),
		BackwardPrefetch: rapid.SampledFrom([]string{sweeps.BackwardPre, sweeps.BackwardPost, sweeps.PrefetchNone}).Draw(t, "backward_prefetch"),
		ForwardPrefetch:  rapid.Bool().Draw(t, "forward_prefetch"),
		MixedPrecision:   rapid.SampledFrom([]string{sweeps.BF16, sweeps.FP16, sweeps.FP32}).Draw(t, "mixed_precision"),
		WrapPolicy:       rapid.SampledFrom([]string{WrapTransformer, "size:1000000"}).Draw(t, "wrap_policy"),
		BatchPerDevice:   rapid.IntRange(1, 16).Draw(t, "batch_per_device"),
		GradAccum:        rapid.IntRange(1, 4).Draw(t, "grad_accum"),

		ActivationCheckpointing: rapid.Bool().Draw(t, "activation_checkpointing"),
	}
	if gpu {
		rc.Nodes = rapid.IntRange(1, 4).Draw(t, "nodes")
		rc.GPUsPerNode = rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(t, "gpus_per_node")
		// CPU offload needs a sharded strategy (the sim refuses it otherwise).
		if rc.Sharding != sweeps.DDP && rc.Sharding != sweeps.NoShard {
			rc.CPUOffload = rapid.Bool().Draw(t, "cpu_offload")
		}
	} else {
		rc.Nodes, rc.GPUsPerNode = 1, rapid.IntRange(1, 4).Draw(t, "ranks")
	}
	if rc.Sharding == sweeps.HybridShard && rc.Nodes < 2 {
		rc.Sharding = sweeps.FullShard // hybrid_shard replicates across nodes
	}
	rc.WorldSize = rc.Nodes * rc.GPUsPerNode
	rc.GlobalBatch = rc.WorldSize * rc.BatchPerDevice * rc.GradAccum
	var opts map[string]any
	if rc.Backend == Name {
		opts = map[string]any{
			"loss":          rapid.SampledFrom([]string{LossUpcast, LossFused, LossChunked}).Draw(t, "loss"),
			"attention":     rapid.SampledFrom([]string{AttentionAuto, AttentionSDPA, AttentionFlash, AttentionMath, AttentionEager}).Draw(t, "attention"),
			"checkpointing": rapid.SampledFrom([]string{CheckpointFull, CheckpointSelective}).Draw(t, "checkpointing"),
			"grad_sync":     rapid.SampledFrom([]string{GradSyncEveryMicroStep, GradSyncNoSync}).Draw(t, "grad_sync"),
			"fsdp_version":  rapid.SampledFrom([]int{1, 2}).Draw(t, "fsdp_version"),
		}
	}
	return rc, opts
}

// predictOrSkip predicts rc; a configuration the sim refuses (a model too
// large for its host's RAM to describe, say) is no counterexample.
func predictOrSkip(t *rapid.T, rc sweeps.RunConfig, opts map[string]any) Prediction {
	p, err := PredictWith(rc, opts)
	if err != nil {
		t.Skipf("the sim refuses the configuration: %v", err)
	}
	return p
}

// persistentOnDevice is the model state a rank keeps on its device for the
// whole step: its parameters and optimizer state at the peak. The gradients
// at the peak are left out: the breakdown is what is live at the peak's
// moment, and the Go trainer's allocation replay (gotrain.go) counts there
// the unsharded gradient of the unit in flight, which the schedule decides,
// not the shards (full_shard's peak falls where one unit's gradient more is
// live than shard_grad_op's, at a far lower peak). Gradients are in
// ModelStateBytes, which the property checks too.
func persistentOnDevice(p Prediction) int64 {
	return p.Breakdown[MemParams] + p.Breakdown[MemOptimizer]
}

// describeConfig names a configuration in a failure's message.
func describeConfig(rc sweeps.RunConfig, opts map[string]any) string {
	return fmt.Sprintf("%s on %d×%d %s, backend %s %v, bs %d ga %d seq %d, %s, ac %v, offload %v",
		rc.Model, rc.Nodes, rc.GPUsPerNode, rc.Hardware, rc.Backend, opts, rc.BatchPerDevice, rc.GradAccum, rc.SeqLen,
		rc.MixedPrecision, rc.ActivationCheckpointing, rc.CPUOffload)
}

// TestPropertyMoreShardsNeverRaiseModelState: doubling the GPUs a sharded
// strategy shards over (more GPUs per node, or, for full_shard and
// shard_grad_op, more nodes), or moving to a strategy that shards more
// (ddp or no_shard → shard_grad_op → full_shard; hybrid_shard → full_shard),
// never raises a rank's model state (parameters, gradients and optimizer
// state wherever they live: ZeRO's figure), nor its parameters and optimizer
// state on the device.
func TestPropertyMoreShardsNeverRaiseModelState(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc, opts := drawConfig(t)
		base := predictOrSkip(t, rc, opts)
		var more []sweeps.RunConfig
		// FSDP1 runs full_shard and shard_grad_op at world size 1 as no_shard,
		// and the sim does so for every PyTorch run, so from one rank to two
		// the strategy changes, not only the shards: shard_grad_op then keeps
		// every gathered parameter on the device from forward to backward,
		// where no_shard with cpu_offload holds none of them (the sim counts no
		// unit brought over to compute). The Go trainer does not switch, so
		// its world size 1 stays in.
		switched := rc.WorldSize == 1 && rc.Backend != TrainerGotrain
		// More GPUs per node: every sharded strategy shards over them.
		if !switched && (rc.Hardware == "cpu" || rc.GPUsPerNode < 8) {
			m := rc
			m.GPUsPerNode *= 2
			more = append(more, m)
		}
		// More nodes: hybrid_shard shards within a node, so only the others.
		if rc.Hardware != "cpu" && rc.Sharding != sweeps.HybridShard && !switched {
			m := rc
			m.Nodes *= 2
			more = append(more, m)
		}
		// A strategy that shards more, at the same GPUs. The fp32 training copy
		// of DDP (no mixed-precision parameters) against no_shard's is no
		// question of shards, so each steps to a sharded strategy.
		for _, next := range map[string][]string{
			sweeps.DDP:         {sweeps.ShardGradOp, sweeps.FullShard},
			sweeps.NoShard:     {sweeps.ShardGradOp, sweeps.FullShard},
			sweeps.ShardGradOp: {sweeps.FullShard},
			sweeps.HybridShard: {sweeps.FullShard},
		}[rc.Sharding] {
			m := rc
			m.Sharding = next
			more = append(more, m)
		}
		for _, m := range more {
			m.WorldSize = m.Nodes * m.GPUsPerNode
			m.GlobalBatch = m.WorldSize * m.BatchPerDevice * m.GradAccum
			if m.Sharding != rc.Sharding && rc.Sharding == sweeps.DDP && rc.MixedPrecision != sweeps.FP32 {
				// Not a question of shards: DDP under autocast trains fp32
				// parameters with fp32 gradients and Adam's two moments (4 + 4
				// + 8 bytes a parameter), a mixed-precision FSDP a 2-byte
				// training copy beside an fp32 master (2 + 2 + 12), so at one
				// or two ranks FSDP holds more, by its precision. At fp32 both
				// keep 16 bytes and the comparison stands.
				continue
			}
			p := predictOrSkip(t, m, opts)
			if got, was := persistentOnDevice(p), persistentOnDevice(base); got > was {
				t.Fatalf("%s on %d×%d → %s on %d×%d raised the parameters and optimizer state on the device: %d > %d bytes\n%s",
					rc.Sharding, rc.Nodes, rc.GPUsPerNode, m.Sharding, m.Nodes, m.GPUsPerNode, got, was, describeConfig(rc, opts))
			}
			if p.ModelStateBytes > base.ModelStateBytes {
				t.Fatalf("%s on %d×%d → %s on %d×%d raised the model state: %d > %d bytes\n%s",
					rc.Sharding, rc.Nodes, rc.GPUsPerNode, m.Sharding, m.Nodes, m.GPUsPerNode, p.ModelStateBytes, base.ModelStateBytes, describeConfig(rc, opts))
			}
		}
	})
}

// TestPropertyCheckpointingNeverRaisesActivations: turning activation
// checkpointing on never raises the activation memory, nor the peak.
func TestPropertyCheckpointingNeverRaisesActivations(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc, opts := drawConfig(t)
		rc.ActivationCheckpointing = false
		off := predictOrSkip(t, rc, opts)
		on := rc
		on.ActivationCheckpointing = true
		p := predictOrSkip(t, on, opts)
		if p.Breakdown[MemActivations] > off.Breakdown[MemActivations] {
			t.Fatalf("checkpointing raised the activations: %d > %d bytes\n%s",
				p.Breakdown[MemActivations], off.Breakdown[MemActivations], describeConfig(rc, opts))
		}
		if p.PeakMemAllocatedBytes > off.PeakMemAllocatedBytes {
			t.Fatalf("checkpointing raised the peak: %d > %d bytes\n%s",
				p.PeakMemAllocatedBytes, off.PeakMemAllocatedBytes, describeConfig(rc, opts))
		}
	})
}

// TestPropertyLargerMicroBatchNeverLowersThePeak: a larger batch_per_device
// (the rest unchanged; the global batch follows) never lowers the peak, nor
// the activations.
func TestPropertyLargerMicroBatchNeverLowersThePeak(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc, opts := drawConfig(t)
		small := predictOrSkip(t, rc, opts)
		big := rc
		big.BatchPerDevice += rapid.IntRange(1, 16).Draw(t, "more")
		big.GlobalBatch = big.WorldSize * big.BatchPerDevice * big.GradAccum
		p := predictOrSkip(t, big, opts)
		for _, c := range []struct {
			name       string
			got, small int64
		}{
			{"peak allocated", p.PeakMemAllocatedBytes, small.PeakMemAllocatedBytes},
			{"peak on the device", p.PeakDeviceMemBytes, small.PeakDeviceMemBytes},
			{"activations", p.Breakdown[MemActivations], small.Breakdown[MemActivations]},
		} {
			if c.got < c.small {
				t.Fatalf("batch_per_device %d → %d lowered the %s: %d < %d bytes\n%s",
					rc.BatchPerDevice, big.BatchPerDevice, c.name, c.got, c.small, describeConfig(rc, opts))
			}
		}
	})
}

// TestPropertyAdviceNamesOnlyChanges (issue 37 item 9): an infeasible
// verdict advised "turn on activation_checkpointing" to a run that had it
// on. Over drawn configurations that do not fit, no advice names a setting
// already at its advised value, and the verdict's words do not either.
func TestPropertyAdviceNamesOnlyChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc, opts := drawConfig(t)
		p := predictOrSkip(t, rc, opts)
		for _, gpu := range []bool{true, false} {
			for _, a := range memoryAdvice(rc, gpu) {
				already := false
				switch a.setting {
				case "sharding":
					already = rc.Sharding == a.value || (rc.Sharding == sweeps.HybridShard && rc.Nodes <= 1)
				case "activation_checkpointing":
					already = rc.ActivationCheckpointing
				case "cpu_offload":
					already = rc.CPUOffload || !gpu
				case "batch_per_device":
					already = rc.BatchPerDevice <= 1
				case "gpus_per_node":
					already = rc.GPUsPerNode <= 1 || gpu
				case "world_size":
					already = !gpu
				case "seq_len":
				default:
					t.Fatalf("advice of an unknown setting %q", a.setting)
				}
				if already {
					t.Fatalf("advice %q (%s=%s) names what the run has already\n%s", a.text, a.setting, a.value, describeConfig(rc, opts))
				}
			}
		}
		if p.Feasible {
			return
		}
		advice, _, _ := strings.Cut(p.Reason, "; the verdict rests on")
		for _, c := range []struct {
			has  bool
			word string
		}{
			{rc.ActivationCheckpointing, "activation_checkpointing"},
			{rc.CPUOffload, "cpu_offload"},
			{rc.Sharding == sweeps.FullShard, "full_shard"},
			{rc.BatchPerDevice == 1, "lower batch_per_device"},
			{rc.GPUsPerNode == 1, "fewer ranks"},
		} {
			if c.has && strings.Contains(advice, c.word) {
				t.Fatalf("the verdict advises %q, which the run has already: %s\n%s", c.word, p.Reason, describeConfig(rc, opts))
			}
		}
	})
}
