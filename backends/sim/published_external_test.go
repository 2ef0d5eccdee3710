package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// externalRow is a published FSDP throughput row from a source other than
// llm-foundry, which the sim and its defaults were never tuned to: the run as
// its source states it, and tokens/s/GPU.
type externalRow struct {
	name   string // source/model/GPUs, unique
	source string // short citation, logged with the row
	hw     string
	// model is a built-in model name, or, empty, a Llama-shaped config.json
	// written from the fields below.
	model                                    string
	hidden, layers, heads, kvHeads, ffn, voc int
	nodes, gpusPerNode, seq, mb, ga          int
	sharding                                 string
	// checkpointing is "" (off), CheckpointFull or CheckpointSelective.
	checkpointing string
	opts          []any // backend_options as the source's stack states them
	// interNote is the inter-node assumption the prediction must print: what
	// the source states.
	interNote        string
	tokensPerSPerGPU float64
	// why, non-empty, says why the row is predicted and logged but not held to
	// the thresholds (a run the sim's options cannot state exactly).
	why string
}

func (r externalRow) gpus() int { return r.nodes * r.gpusPerNode }

// networkUnstated says the source does not state the network between its
// nodes, so that the prediction rests on the profile's default guess.
func (r externalRow) networkUnstated() bool { return r.nodes > 1 && r.interNote == a100DefaultNote }

// group is the row's group, named as the llm-foundry tests name theirs; rows
// whose source does not state the network between nodes, or whose run the
// sim's options cannot state, apart.
func (r externalRow) group() string {
	g := r.hw + " one node"
	if r.gpus() > 8 {
		g = r.hw + " multi-node"
	}
	switch {
	case r.why != "":
		g += " (not stateable, not asserted)"
	case r.networkUnstated():
		g += " (network not stated)"
	}
	return g
}

// fmsStack is fms-fsdp's stack (main_training.py and fms_fsdp/ at
// foundation-model-stack/fms-fsdp commit 4ffb9bdfa30e957e339ccfbb617a589fd07c495e):
// FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel, LLaMABlock wrapping,
// bfSixteen mixed precision), torch.nn.CrossEntropyLoss on the model's logits
// (no fused loss: the sim's default upcast, which counts fp32 logits where
// fms-fsdp's are bf16, so over-counts the loss's memory a little), attention
// through SDPA (flash v2, as the README and the blog say). inter is the stated
// inter-node link in GB/s: the blog's "400Gbps inter-node interconnect" (A100)
// and "800Gbps" (H100), read as per node (the text does not say; per GPU the
// A100 rows move by 4-5 points, 7B not at all), as 400/8 and 800/8 GB/s of
// bus bandwidth. No
// fabric profile fits (ib-rail-8x200g is 1600 Gb/s a node; tcp 3 GB/s), and
// with one link's worth per node a ring's busbw is at most the node's line
// rate: the stated figure, an upper bound nccl-tests would measure somewhat
// under.
func fmsStack(inter int) []any {
	return []any{"fsdp_version", 1, "loss", LossUpcast, "attention", AttentionSDPA, "inter_node_bus_bw_gbps", inter}
}

// fmsNote is the inter-node note a prediction under fmsStack(inter) prints.
func fmsNote(inter int) string {
	return fmt.Sprintf("inter-node: %d GB/s bus bandwidth (inter_node_bus_bw_gbps)", inter)
}

// externalRows are the held-out rows. Sources, each number read from the text:
//
//   - IBM fms-fsdp, README.md "Training throughput benchmarks" at commit
//     4ffb9bdfa30e957e339ccfbb617a589fd07c495e (2024-03-21; the eager table,
//     before ed74fd5 replaced it with torch.compile numbers), and the same table
//     as "Table 1" of the PyTorch blog "Maximizing training throughput using
//     PyTorch FSDP" (pytorch.org/blog/maximizing-training, 2024-03-13; source
//     pytorch/pytorch.github.io _posts/2024-03-13-maximizing-training.md,
//     commit 2ad10059d3021d0f902f1204db98e5c930532be8): Llama 2 7B/13B/34B/70B,
//     batch size 2 per GPU, on "128 A100 80G GPUs with 400Gbps" and "96 H100
//     GPUs with 800 Gbps" (H100 80GB in the MFU table). Sequence 4096 and no
//     gradient accumulation: fms_fsdp/config/training.py (seq_length 4096) and
//     the train loop (one backward per optimizer step). Model shapes:
//     fms_fsdp/utils/config_utils.py get_model_config over fms's LLaMAConfig
//     (foundation-model-stack/foundation-model-stack fms/models/llama.py: vocab
//     32000, untied head, FFN rounded up to multiple_of 256). Sharding: the
//     table's HSDP (HYBRID_SHARD: sharded in a node, replicated across nodes)
//     for 7B and FSDP (FULL_SHARD) for the rest. Throughput: the train loop
//     prints "overall token per gpu per sec" (tokens since the loop began over
//     the time since, the first steps' warm-up averaged in); the README does
//     not say which print or step the table took.
//   - torchtitan, benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan
//     commit b5bcd76c66d0acb1a08b176d9639425bc55e0b2a), Table 3: Llama 3.1 8B
//     on 128 H100 (16 hosts), local batch 2, selective (op) activation
//     checkpointing, FSDP (FSDP2, eager): 5,605 TPS/GPU; seq_len 8192 from
//     train_configs/llama3_8b.toml at the torchtitan commit it names (9dec370);
//     hosts "inter-connected with backend RDMA network with 400 Gb/s per GPU"
//     (the ib-rail-8x400g fabric). Its Table 1 (8 GPUs) is kept by
//     torchtitanRows already; Table 3 is not. Its H100s have 96 GB of HBM2e at a
//     500 W limit, the profile's 80 GB at 700 W.
var externalRows = []externalRow{
	{name: "fms-fsdp/a100-80g/llama2-7b/hsdp/128gpus", source: "fms-fsdp README@4ffb9bd", hw: "a100-80g",
		hidden: 4096, layers: 32, heads: 32, kvHeads: 32, ffn: 11008, voc: 32000,
		nodes: 16, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.HybridShard,
		opts: fmsStack(50), interNote: fmsNote(50), tokensPerSPerGPU: 3700},
	{name: "fms-fsdp/a100-80g/llama2-13b/fsdp/128gpus", source: "fms-fsdp README@4ffb9bd", hw: "a100-80g",
		hidden: 5120, layers: 40, heads: 40, kvHeads: 40, ffn: 13824, voc: 32000,
		nodes: 16, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(50), interNote: fmsNote(50), tokensPerSPerGPU: 1800,
		why: "fms-fsdp's selective AC checkpoints every n-th block whole (fms_fsdp/policies/ac_handler.py); n is not stated (HFU/MFU 0.59/0.51 says every 2nd) and the sim has no every-n-th-block policy: predicted with every block checkpointed, a lower bound"},
	{name: "fms-fsdp/a100-80g/llama2-34b/fsdp/128gpus", source: "fms-fsdp README@4ffb9bd", hw: "a100-80g",
		hidden: 8192, layers: 48, heads: 64, kvHeads: 8, ffn: 22016, voc: 32000,
		nodes: 16, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(50), interNote: fmsNote(50), tokensPerSPerGPU: 700},
	{name: "fms-fsdp/a100-80g/llama2-70b/fsdp/128gpus", source: "fms-fsdp README@4ffb9bd", hw: "a100-80g",
		hidden: 8192, layers: 80, heads: 64, kvHeads: 8, ffn: 28672, voc: 32000,
		nodes: 16, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(50), interNote: fmsNote(50), tokensPerSPerGPU: 370},
	{name: "fms-fsdp/h100-sxm/llama2-7b/hsdp/96gpus", source: "fms-fsdp README@4ffb9bd", hw: "h100-sxm",
		hidden: 4096, layers: 32, heads: 32, kvHeads: 32, ffn: 11008, voc: 32000,
		nodes: 12, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.HybridShard,
		opts: fmsStack(100), interNote: fmsNote(100), tokensPerSPerGPU: 7500},
	{name: "fms-fsdp/h100-sxm/llama2-13b/fsdp/96gpus", source: "fms-fsdp README@4ffb9bd", hw: "h100-sxm",
		hidden: 5120, layers: 40, heads: 40, kvHeads: 40, ffn: 13824, voc: 32000,
		nodes: 12, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(100), interNote: fmsNote(100), tokensPerSPerGPU: 3800,
		why: "fms-fsdp's every-n-th-block selective AC, n not stated (HFU/MFU 0.40/0.35): predicted with every block checkpointed, a lower bound"},
	{name: "fms-fsdp/h100-sxm/llama2-34b/fsdp/96gpus", source: "fms-fsdp README@4ffb9bd", hw: "h100-sxm",
		hidden: 8192, layers: 48, heads: 64, kvHeads: 8, ffn: 22016, voc: 32000,
		nodes: 12, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(100), interNote: fmsNote(100), tokensPerSPerGPU: 1550},
	{name: "fms-fsdp/h100-sxm/llama2-70b/fsdp/96gpus", source: "fms-fsdp README@4ffb9bd", hw: "h100-sxm",
		hidden: 8192, layers: 80, heads: 64, kvHeads: 8, ffn: 28672, voc: 32000,
		nodes: 12, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: fmsStack(100), interNote: fmsNote(100), tokensPerSPerGPU: 800},
	{name: "torchtitan/h100-sxm/llama3.1-8b/fsdp2/128gpus", source: "torchtitan benchmarks/llama3_h100_202412_torchtitan.md Table 3", hw: "h100-sxm",
		model: "llama3-8b", nodes: 16, gpusPerNode: 8, seq: 8192, mb: 2, ga: 1, sharding: sweeps.FullShard,
		checkpointing: CheckpointSelective,
		// torchtitan's defaults (as torchtitanRows states them): FSDP2, F.cross_entropy
		// on fp32 logits, SDPA flash attention.
		opts:      []any{"checkpointing", CheckpointSelective, "fsdp_version", 2, "inter_node_fabric", "ib-rail-8x400g"},
		interNote: "inter-node: the ib-rail-8x400g fabric's busbw curves", tokensPerSPerGPU: 5605,
		why: "Grand Teton H100s: 96 GB HBM2e at 2.4 TB/s, 500 W, whose peak the page says is \"between SXM and NVL, and we don't know its exact value\": not the h100-sxm profile (a profile file would need that peak)"},
	// torchtitan on 64 A100 80GB (8 nodes), FSDP2 1D, eager: every row of
	// docs/performance.md's two tables (pytorch/torchtitan commit
	// 157a12c562288b3bccb077003a97f18a4ca657aa, 2024-04-24; the Llama 2 table first
	// appeared in 395a526, 2024-04-18). WPS is per GPU (train.py: the rank's
	// tokens over the interval, divided by the model-parallel size, 1 here; the
	// MFU column checks it: Llama 3 70B's 331 at 51.7% of 312 TFLOP/s is
	// 6N + 12·L·H·Q·T per token at T = 8192). Sequence: 4096 for Llama 2, 8192
	// for Llama 3, as the text says. Shapes: torchtitan/models/llama/__init__.py
	// (Llama 2 13B FFN 13824, Llama 2 and 3 70B 28672 with 8 KV heads; vocab
	// 32000 for Llama 2, 128256 for Llama 3). Its stack is the sim's defaults:
	// FSDP2, F.cross_entropy on logits upcast (model.py: output(h).float()),
	// SDPA attention; "selective op" is the sim's selective, "selective layer"
	// is every 2nd layer checkpointed whole (config_manager.py:
	// selective_ac_option default "2"), which the sim cannot state. The page
	// says nothing of the network between the nodes: predicted with the
	// profile's default, which the prediction names as a guess.
	{name: "torchtitan/a100-80g/llama3-8b/sac-op/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 3", hw: "a100-80g",
		model: "llama3-8b", nodes: 8, gpusPerNode: 8, seq: 8192, mb: 1, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointSelective,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 2973},
	{name: "torchtitan/a100-80g/llama3-8b/sac-layer/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 3", hw: "a100-80g",
		model: "llama3-8b", nodes: 8, gpusPerNode: 8, seq: 8192, mb: 1, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 2904,
		why: "selective layer (every 2nd layer checkpointed whole) has no sim policy: predicted with every layer checkpointed, a lower bound"},
	{name: "torchtitan/a100-80g/llama3-70b/full/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 3", hw: "a100-80g",
		hidden: 8192, layers: 80, heads: 64, kvHeads: 8, ffn: 28672, voc: 128256,
		nodes: 8, gpusPerNode: 8, seq: 8192, mb: 1, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 331},
	{name: "torchtitan/a100-80g/llama2-13b/noac/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 2", hw: "a100-80g",
		hidden: 5120, layers: 40, heads: 40, kvHeads: 40, ffn: 13824, voc: 32000,
		nodes: 8, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 2162},
	{name: "torchtitan/a100-80g/llama2-13b/sac-layer/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 2", hw: "a100-80g",
		hidden: 5120, layers: 40, heads: 40, kvHeads: 40, ffn: 13824, voc: 32000,
		nodes: 8, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 1914,
		why: "selective layer (every 2nd layer checkpointed whole) has no sim policy: predicted with every layer checkpointed, a lower bound"},
	{name: "torchtitan/a100-80g/llama2-13b/sac-op/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 2", hw: "a100-80g",
		hidden: 5120, layers: 40, heads: 40, kvHeads: 40, ffn: 13824, voc: 32000,
		nodes: 8, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointSelective,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 1904},
	{name: "torchtitan/a100-80g/llama2-70b/sac-op/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 2", hw: "a100-80g",
		hidden: 8192, layers: 80, heads: 64, kvHeads: 8, ffn: 28672, voc: 32000,
		nodes: 8, gpusPerNode: 8, seq: 4096, mb: 1, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointSelective,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 355},
	{name: "torchtitan/a100-80g/llama2-70b/full/64gpus", source: "torchtitan docs/performance.md@157a12c Llama 2", hw: "a100-80g",
		hidden: 8192, layers: 80, heads: 64, kvHeads: 8, ffn: 28672, voc: 32000,
		nodes: 8, gpusPerNode: 8, seq: 4096, mb: 2, ga: 1, sharding: sweeps.FullShard, checkpointing: CheckpointFull,
		opts: titanStack(), interNote: a100DefaultNote, tokensPerSPerGPU: 353},
}

// titanStack is torchtitan's stack (spring 2024) as backend options: FSDP2
// and SDPA; the loss is the default's upcast.
func titanStack() []any { return []any{"fsdp_version", 2, "attention", AttentionSDPA} }

// a100DefaultNote starts the inter-node note of an a100-80g prediction that
// nothing states the network for: it must say the figure is the profile's
// default.
const a100DefaultNote = "inter-node: 25 GB/s bus bandwidth, the a100-80g profile's default"

// run is r as a user states it: its model (a config.json written under dir for
// a Llama shape), cluster, batch, sharding, checkpointing and stack.
func (r externalRow) run(t *testing.T, dir string) sweeps.RunConfig {
	t.Helper()
	model := r.model
	if model == "" {
		model = filepath.Join(dir, strings.ReplaceAll(r.name, "/", "_")+".json")
		b, err := json.Marshal(map[string]any{"model_type": "llama", "hidden_size": r.hidden, "num_hidden_layers": r.layers,
			"num_attention_heads": r.heads, "num_key_value_heads": r.kvHeads, "intermediate_size": r.ffn,
			"vocab_size": r.voc, "max_position_embeddings": r.seq, "tie_word_embeddings": false})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(model, b, 0o644))
	}
	rc := cfg(model, r.gpus(), r.sharding)
	rc.Hardware = r.hw
	rc.Nodes, rc.GPUsPerNode = r.nodes, r.gpusPerNode
	rc.SeqLen, rc.BatchPerDevice, rc.GradAccum = r.seq, r.mb, r.ga
	rc.ActivationCheckpointing = r.checkpointing != ""
	rc.GlobalBatch = 0
	rc = withOpts(rc, r.opts...)
	if r.checkpointing != "" {
		rc.BackendOptions["checkpointing"] = r.checkpointing
	}
	return rc
}

// externalMisses are the rows of the kinds that the model misses by
// more than the 30%, as first predicted: logged as misses and held to
// not getting worse (externalMissBound).
//   - torchtitan Llama 2 70B, selective op AC, local batch 1, on 64 A100 80GB
//     (-30.8% when first predicted, -31.7% since FSDP2's copy-out and copy-in
//     are timed): its source states no network, and at the profile's default
//     (25 GB/s, one 200 Gb/s NIC's line rate) this row, with the least compute
//     per gathered byte of the table (batch 1, selective AC's lesser
//     recompute), is the most network-bound: its collectives alone take longer
//     at 25 GB/s than its measured step (asserted), so the default cannot be
//     its network. At 50 GB/s it is -11%, on the ib-rail-8x200g fabric -3%.
var externalMisses = map[string]bool{"torchtitan/a100-80g/llama2-70b/sac-op/64gpus": true}

// externalMissBound is what a row in externalMisses may not exceed.
const externalMissBound = 0.40

// TestPublishedExternalRows predicts every external row as its source states
// the run, uncalibrated: each must fit (it trained), and a multi-node row's
// prediction must print the inter-node link the source states (or, where it
// states none, that the figure is the profile's default); per group, over the
// rows the sim's options can state exactly, the mean throughput error stays
// within 15% and no row beyond 30% (issue 26's done-when), but the
// externalMisses, logged as misses. (The a100-80g rows whose network is not
// stated, torchtitan's, were first a group miss: 17% under on average at the
// default 25 GB/s; they are within 15% since the A100's attention rate rises
// with the sequence. At 50 GB/s they are 9% under, on ib-rail-8x200g 4%: the
// default is a guess the prediction names as one.)
func TestPublishedExternalRows(t *testing.T) {
	dir := t.TempDir()
	groups := map[string]*errTally{}
	var misses []string
	for _, r := range externalRows {
		g := r.group()
		if groups[g] == nil {
			groups[g] = &errTally{}
		}
		t.Run(r.name, func(t *testing.T) {
			p := mustPredict(t, r.run(t, dir))
			perGPU := p.TokensPerS / float64(r.gpus())
			e := perGPU/r.tokensPerSPerGPU - 1
			groups[g].add(e)
			t.Logf("%s: %.2fB params; peak %.1f GiB of %.1f; %.0f tokens/s/GPU vs %.0f published (%+.1f%%)", r.source,
				float64(p.Shape.Params())/1e9, gibs(p.PeakDeviceMemBytes), gibs(p.DeviceMemBytes), perGPU, r.tokensPerSPerGPU, 100*e)
			assert.True(t, p.Feasible, "it trained: %s", p.Reason)
			if r.nodes > 1 {
				assert.True(t, slices.ContainsFunc(p.Notes, func(n string) bool { return strings.HasPrefix(n, r.interNote) }),
					"the inter-node assumption is the source's (%q): %v", r.interNote, p.Notes)
			}
			switch {
			case r.why != "":
				t.Logf("not asserted: %s", r.why)
			case externalMisses[r.name]:
				misses = append(misses, fmt.Sprintf("%s %+.1f%%", r.name, 100*e))
				assert.Less(t, abs(e), externalMissBound, "a known miss, not to get worse")
				measuredStep := float64(r.mb*r.ga*r.seq) / r.tokensPerSPerGPU
				assert.Greater(t, p.CommS, measuredStep, "the assumed network cannot carry the measured step")
			default:
				assert.Less(t, abs(e), 0.30, "no row off by more than 30 percent")
			}
		})
	}
	for _, n := range slices.Sorted(maps.Keys(groups)) {
		g := groups[n]
		t.Logf("%-50s %2d rows: mean |error| %4.1f%%, worst %4.1f%%", n, g.n, 100*g.mean(), 100*g.worst)
		if !strings.Contains(n, "not asserted") {
			assert.Less(t, g.mean(), 0.15, n)
		}
	}
	t.Logf("rows beyond the issue's 30%% (misses, not asserted to 30%%): %v", misses)
}
