package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// llmFoundryRows are MosaicML llm-foundry's published H100 80GB BF16 training
// benchmarks (scripts/train/benchmarking/README.md, commit 061f2c7, table "H100
// 80GB BF16"): MPT models under Composer's FSDP1 FULL_SHARD, every row with 8
// GPUs and seq 1K–8K from 760m to 13b, and the 13b row on 64 GPUs. Each trained on
// 80 GB GPUs, so each must be predicted feasible. MPT is GPT-2-shaped (LayerNorm,
// GELU 4h MLP, learned positions sized to the sequence, tied embeddings, vocab
// 50368); llm-foundry's defaults: fused cross-entropy (flash-attn's), flash
// attention, no dropout, whole-block checkpointing, and Composer's
// ddp_sync_context does not apply no_sync to FSDP.
var llmFoundryRows = []struct {
	model              string
	seq, gpus, mb, ga  int
	ac                 bool
	tokensPerSPerGPU   float64
	hidden, layers, hd int
	numParams          int64 // the table's NumParams: checks the shape
}{
	{"13b", 4096, 8, 10, 3, true, 4717, 5120, 40, 40, 12864440320}, {"13b", 2048, 8, 2, 1, false, 4792, 5120, 40, 40, 12853954560},
	{"13b", 1024, 8, 40, 3, true, 5502, 5120, 40, 40, 12848711680}, {"7b", 8192, 8, 8, 2, true, 6935, 4096, 32, 32, 6684024832},
	{"7b", 4096, 8, 16, 2, true, 8611, 4096, 32, 32, 6667247616}, {"7b", 2048, 8, 6, 1, false, 10643, 4096, 32, 32, 6658859008},
	{"7b", 1024, 8, 64, 2, true, 10203, 4096, 32, 32, 6654664704}, {"3b", 8192, 8, 3, 6, false, 16578, 2560, 32, 20, 2667566080},
	{"3b", 4096, 8, 5, 6, false, 20964, 2560, 32, 20, 2657080320}, {"3b", 1024, 8, 20, 6, false, 27046, 2560, 32, 20, 2649216000},
	{"1b", 8192, 8, 3, 4, false, 29157, 2048, 24, 16, 1328533504}, {"1b", 4096, 8, 7, 4, false, 38535, 2048, 24, 16, 1320144896},
	{"1b", 2048, 8, 14, 1, false, 45455, 2048, 24, 16, 1315950592}, {"1b", 1024, 8, 18, 4, false, 48910, 2048, 24, 16, 1313853440},
	{"760m", 8192, 8, 6, 2, false, 41825, 1536, 24, 12, 769907712}, {"760m", 4096, 8, 12, 2, false, 55459, 1536, 24, 12, 763616256},
	{"760m", 2048, 8, 24, 2, false, 63147, 1536, 24, 12, 760470528}, {"760m", 1024, 8, 48, 2, false, 78581, 1536, 24, 12, 758897664},
	{"13b", 2048, 64, 2, 1, false, 4800, 5120, 40, 40, 12853954560},
}

// llmFoundryRun is row i of llmFoundryRows as a run, its MPT config.json
// written under dir.
func llmFoundryRun(t *testing.T, dir string, i int) sweeps.RunConfig {
	t.Helper()
	r := llmFoundryRows[i]
	path := filepath.Join(dir, fmt.Sprintf("mpt-%s-%d.json", r.model, r.seq))
	b, err := json.Marshal(map[string]any{"model_type": "gpt2", "n_embd": r.hidden, "n_layer": r.layers,
		"n_head": r.hd, "vocab_size": 50368, "n_positions": r.seq})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	rc := cfg(path, r.gpus, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode = r.gpus/8, 8
	rc.SeqLen, rc.BatchPerDevice, rc.GradAccum, rc.ActivationCheckpointing = r.seq, r.mb, r.ga, r.ac
	rc = withOpts(rc, "fsdp_version", 1, "loss", LossFused, "attention", AttentionFlash, "checkpointing", CheckpointFull)
	if r.gpus > 8 {
		// MosaicML's H100 clusters: 3.2 Tb/s per node, as 8 × 400G rails.
		rc.BackendOptions["inter_node_fabric"] = "ib-rail-8x400g"
	}
	return rc
}

func TestPublishedLLMFoundryRowsFit(t *testing.T) {
	dir := t.TempDir()
	for i, r := range llmFoundryRows {
		name := fmt.Sprintf("mpt-%s/seq%d/gpus%d/mb%d/ga%d", r.model, r.seq, r.gpus, r.mb, r.ga)
		t.Run(name, func(t *testing.T) {
			p := mustPredict(t, llmFoundryRun(t, dir, i))
			assert.InEpsilon(t, float64(r.numParams), float64(p.Shape.Params()), 1e-3, "MPT's parameter count")
			perGPU := p.TokensPerS / float64(r.gpus)
			t.Logf("peak %.1f GiB of %.1f; %.0f tokens/s/GPU vs %.0f published (%+.0f%%)", gibs(p.PeakDeviceMemBytes),
				gibs(p.DeviceMemBytes), perGPU, r.tokensPerSPerGPU, 100*(perGPU/r.tokensPerSPerGPU-1))
			assert.True(t, p.Feasible, "it trained on 80 GB GPUs: %s", p.Reason)
		})
	}
}

// TestPublishedLLMFoundryLeaveOneOut calibrates the h100-sxm profile on the
// single-node llm-foundry rows and predicts each from the other 17: the
// throughput error to expect on a run of a calibrated cluster that the fit has
// not seen (issue 15 asks for 15%). The 64-GPU row stays out: it alone tells
// the inter-node bandwidth, so left out it has nothing to be predicted from.
func TestPublishedLLMFoundryLeaveOneOut(t *testing.T) {
	dir := t.TempDir()
	var ms []Measurement
	for i, r := range llmFoundryRows {
		if r.gpus > 8 {
			continue
		}
		ms = append(ms, Measurement{Run: fmt.Sprintf("mpt-%s/seq%d/mb%d/ga%d", r.model, r.seq, r.mb, r.ga),
			Config: llmFoundryRun(t, dir, i), TokensPerS: r.tokensPerSPerGPU * float64(r.gpus)})
	}
	cal, err := Fit(ms)
	require.NoError(t, err)
	k := cal.Profiles["h100-sxm"]
	t.Logf("efficiency %.3g, size exponent %.3g, step overhead %.3g s, collective latency %.3g s", k.Efficiency,
		k.EfficiencySizeExponent, k.StepOverheadS, k.CollectiveLatencyS)
	require.Len(t, k.Fit.LeaveOneOut, len(ms))
	var sum float64
	for _, row := range k.Fit.LeaveOneOut {
		require.NotNil(t, row.TputErr, row.Run)
		e := *row.TputErr
		t.Logf("%-26s leave-one-out %+.1f%%", row.Run, 100*e)
		sum += abs(e)
		assert.Less(t, abs(e), 0.25, row.Run)
	}
	mean := sum / float64(len(ms))
	t.Logf("mean |error| %.1f%%", 100*mean)
	assert.Less(t, mean, 0.15)
}

// torchtitanRows are torchtitan's published FSDP runs on 8 × H100 with 96 GB of
// HBM2e ("95.0396 GiB", 500 W), bf16 with fp32 reduce-scatter, eager:
//   - docs/performance.md, Table 1 (FACTS.md): Llama 3.1 8B, local batch 2, seq
//     8192, selective (op) AC, FSDP2: 5,762 tokens/s/GPU, 82.4 GiB (torchtitan
//     logs max_memory_reserved).
//   - pytorch/torchtitan PR #165 (March 2024, the FSDP1 → FSDP2 switch): Llama 2
//     7B (torchtitan's llama2 7B: vocab 32000, FFN 11008), local batch 8, seq
//     2048: peak active and peak reserved as % of 95.0396 GiB and WPS ranges,
//     for FSDP1 and FSDP2 with full AC and with selective AC.
//
// Their setup is the defaults' (reduce every micro-step, upcast loss, flash
// attention) with the checkpointing and FSDP version of the row.
var torchtitanRows = []struct {
	name                       string
	model                      string
	batch, seq                 int
	checkpointing              string
	fsdp                       int
	reservedGiB, activeGiB     float64 // activeGiB 0: not published
	tokensPerSLo, tokensPerSHi float64
	memTolerance               float64
}{
	{"llama3.1-8b/docs-table1", "llama3-8b", 2, 8192, CheckpointSelective, 2, 82.4, 0, 5762, 5762, 0.05},
	{"llama2-7b/pr165/fsdp2-ac", "", 8, 2048, CheckpointFull, 2, 0.3264 * 95.0396, 0.2392 * 95.0396, 6100, 6300, 0.05},
	{"llama2-7b/pr165/fsdp2-sac", "", 8, 2048, CheckpointSelective, 2, 0.6251 * 95.0396, 0.5213 * 95.0396, 6600, 6800, 0.05},
	// FSDP1's caching-allocator behaviour (record_stream) reserves more than the
	// model's factor says: within 10%.
	{"llama2-7b/pr165/fsdp1-ac", "", 8, 2048, CheckpointFull, 1, 0.3382 * 95.0396, 0.2481 * 95.0396, 6100, 6200, 0.10},
	{"llama2-7b/pr165/fsdp1-sac", "", 8, 2048, CheckpointSelective, 1, 0.6723 * 95.0396, 0.5298 * 95.0396, 6500, 6700, 0.10},
}

func TestPublishedTorchtitanRows(t *testing.T) {
	const deviceGiB = 95.0396
	llama2 := filepath.Join(t.TempDir(), "llama2-7b.json")
	require.NoError(t, os.WriteFile(llama2, []byte(`{"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
		"num_attention_heads": 32, "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
		"max_position_embeddings": 4096, "tie_word_embeddings": false}`), 0o644))
	for _, r := range torchtitanRows {
		t.Run(r.name, func(t *testing.T) {
			model := r.model
			if model == "" {
				model = llama2
			}
			rc := cfg(model, 8, sweeps.FullShard)
			rc.SeqLen, rc.BatchPerDevice, rc.ActivationCheckpointing = r.seq, r.batch, true
			rc = withOpts(rc, "checkpointing", r.checkpointing, "fsdp_version", r.fsdp)
			p := mustPredict(t, rc)
			reserved, allocated, perGPU := gibs(p.PeakMemReservedBytes), gibs(p.PeakMemAllocatedBytes), p.TokensPerS/8
			mid := (r.tokensPerSLo + r.tokensPerSHi) / 2
			t.Logf("reserved %.1f GiB vs %.1f published (%+.1f%%); allocated %.1f vs active %.1f; %.0f tokens/s/GPU vs %.0f (%+.0f%%)",
				reserved, r.reservedGiB, 100*(reserved/r.reservedGiB-1), allocated, r.activeGiB, perGPU, mid, 100*(perGPU/mid-1))
			assert.InEpsilon(t, r.reservedGiB, reserved, r.memTolerance)
			assert.Less(t, gibs(p.PeakDeviceMemBytes), deviceGiB, "it ran on 95 GiB")
			// Throughput rests on the h100-sxm profile (a 700 W SXM5, 3.35 TB/s)
			// until calibration; these ran on Grand Teton's H100s, 96 GB HBM2e
			// at 2.4 TB/s capped at 500 W, whose peak torchtitan's benchmark page
			// puts "between SXM and NVL" (NVL: 835 dense TFLOP/s, 16% below): the
			// sim predicts them 14–41% fast, within 45%.
			assert.InEpsilon(t, mid, perGPU, 0.45)
		})
	}
}
