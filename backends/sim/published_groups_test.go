package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// foundryRow is one row of MosaicML llm-foundry's published MPT training
// benchmarks (scripts/train/benchmarking/README.md; the H100 rows at commit
// 061f2c7 as llmFoundryRows has them, the A100 rows from the tables "A100 80GB
// with 1600 Gbps node-node interconnect (RoCE)" and "A100 40GB with 1600 Gbps
// node-node interconnect (RoCE)" at commit 8c8dd48f): Composer's FSDP1
// FULL_SHARD, bf16, every row that really trained.
type foundryRow struct {
	hw                 string
	model              string
	seq, gpus, mb, ga  int
	ac                 bool
	tokensPerSPerGPU   float64
	hidden, layers, hd int
	numParams          int64
}

// llmFoundryA100Rows are the A100 rows of models from 760m to 70b at seq 1024
// to 8192 (the H100 table's range), on 8 to 128 GPUs.
var llmFoundryA100Rows = []foundryRow{
	{"a100-80g", "70b", 2048, 64, 8, 4, true, 410, 8192, 80, 64, 64862437376},
	{"a100-80g", "70b", 2048, 32, 2, 16, true, 373, 8192, 80, 64, 64862437376},
	{"a100-80g", "30b", 8192, 8, 1, 21, true, 574, 7168, 48, 56, 30019254272},
	{"a100-80g", "30b", 4096, 8, 1, 21, true, 814, 7168, 48, 56, 29989894144},
	{"a100-80g", "30b", 2048, 8, 3, 21, true, 916, 7168, 48, 56, 29975214080},
	{"a100-80g", "30b", 1024, 8, 6, 21, true, 946, 7168, 48, 56, 29967874048},
	{"a100-80g", "13b", 8192, 8, 5, 3, true, 1795, 5120, 40, 40, 12885411840},
	{"a100-80g", "13b", 4096, 8, 10, 3, true, 2060, 5120, 40, 40, 12864440320},
	{"a100-80g", "13b", 2048, 8, 2, 3, false, 2262, 5120, 40, 40, 12853954560},
	{"a100-80g", "13b", 1024, 8, 40, 3, true, 2330, 5120, 40, 40, 12848711680},
	{"a100-80g", "7b", 8192, 8, 8, 2, true, 3206, 4096, 32, 32, 6684024832},
	{"a100-80g", "7b", 4096, 8, 16, 2, true, 3684, 4096, 32, 32, 6667247616},
	{"a100-80g", "7b", 2048, 8, 6, 2, false, 4641, 4096, 32, 32, 6658859008},
	{"a100-80g", "7b", 1024, 8, 64, 2, true, 4357, 4096, 32, 32, 6654664704},
	{"a100-80g", "3b", 8192, 8, 3, 6, false, 7695, 2560, 32, 20, 2667566080},
	{"a100-80g", "3b", 4096, 8, 5, 6, false, 9457, 2560, 32, 20, 2657080320},
	{"a100-80g", "3b", 2048, 8, 10, 2, false, 10811, 2560, 32, 20, 2651837440},
	{"a100-80g", "3b", 1024, 8, 20, 6, false, 11580, 2560, 32, 20, 2649216000},
	{"a100-80g", "1b", 8192, 8, 3, 4, false, 13814, 2048, 24, 16, 1328533504},
	{"a100-80g", "1b", 4096, 8, 7, 4, false, 17807, 2048, 24, 16, 1320144896},
	{"a100-80g", "1b", 2048, 8, 14, 4, false, 20513, 2048, 24, 16, 1315950592},
	{"a100-80g", "1b", 1024, 8, 18, 4, false, 22112, 2048, 24, 16, 1313853440},
	{"a100-80g", "760m", 8192, 8, 6, 2, false, 20933, 1536, 24, 12, 769907712},
	{"a100-80g", "760m", 4096, 8, 12, 2, false, 27351, 1536, 24, 12, 763616256},
	{"a100-80g", "760m", 2048, 8, 24, 2, false, 32434, 1536, 24, 12, 760470528},
	{"a100-80g", "760m", 1024, 8, 48, 2, false, 29765, 1536, 24, 12, 758897664},
	{"a100-40g", "70b", 2048, 128, 4, 1, true, 376, 8192, 80, 64, 64862437376},
	{"a100-40g", "70b", 2048, 64, 2, 1, true, 276, 8192, 80, 64, 64862437376},
	{"a100-40g", "30b", 2048, 128, 6, 1, true, 865, 7168, 48, 56, 29975214080},
	{"a100-40g", "30b", 2048, 32, 4, 1, true, 857, 7168, 48, 56, 29975214080},
	{"a100-40g", "13b", 8192, 8, 1, 16, true, 1407, 5120, 40, 40, 12885411840},
	{"a100-40g", "13b", 4096, 8, 2, 16, true, 1603, 5120, 40, 40, 12864440320},
	{"a100-40g", "13b", 2048, 128, 16, 1, true, 1972, 5120, 40, 40, 12853954560},
	{"a100-40g", "13b", 2048, 64, 16, 1, true, 1976, 5120, 40, 40, 12853954560},
	{"a100-40g", "13b", 2048, 32, 14, 1, true, 1998, 5120, 40, 40, 12853954560},
	{"a100-40g", "13b", 2048, 16, 10, 1, true, 1993, 5120, 40, 40, 12853954560},
	{"a100-40g", "13b", 2048, 8, 4, 16, true, 1668, 5120, 40, 40, 12853954560},
	{"a100-40g", "13b", 1024, 8, 8, 16, true, 1727, 5120, 40, 40, 12848711680},
	{"a100-40g", "7b", 8192, 8, 3, 4, true, 2887, 4096, 32, 32, 6684024832},
	{"a100-40g", "7b", 4096, 8, 6, 4, true, 3366, 4096, 32, 32, 6667247616},
	{"a100-40g", "7b", 2048, 128, 18, 1, true, 3623, 4096, 32, 32, 6658859008},
	{"a100-40g", "7b", 2048, 64, 18, 1, true, 3665, 4096, 32, 32, 6658859008},
	{"a100-40g", "7b", 2048, 32, 18, 1, true, 3725, 4096, 32, 32, 6658859008},
	{"a100-40g", "7b", 2048, 16, 16, 1, true, 3645, 4096, 32, 32, 6658859008},
	{"a100-40g", "7b", 2048, 8, 12, 4, true, 3679, 4096, 32, 32, 6658859008},
	{"a100-40g", "7b", 1024, 8, 24, 4, true, 3854, 4096, 32, 32, 6654664704},
	{"a100-40g", "3b", 8192, 8, 1, 8, false, 7149, 2560, 32, 20, 2667566080},
	{"a100-40g", "3b", 4096, 8, 2, 8, false, 8777, 2560, 32, 20, 2657080320},
	{"a100-40g", "3b", 2048, 128, 6, 1, false, 9538, 2560, 32, 20, 2651837440},
	{"a100-40g", "3b", 2048, 64, 6, 1, false, 9736, 2560, 32, 20, 2651837440},
	{"a100-40g", "3b", 2048, 32, 6, 1, false, 9914, 2560, 32, 20, 2651837440},
	{"a100-40g", "3b", 2048, 16, 5, 1, false, 9750, 2560, 32, 20, 2651837440},
	{"a100-40g", "3b", 2048, 8, 5, 8, false, 10065, 2560, 32, 20, 2651837440},
	{"a100-40g", "3b", 1024, 8, 10, 8, false, 10731, 2560, 32, 20, 2649216000},
	{"a100-40g", "1b", 8192, 8, 2, 8, false, 13474, 2048, 24, 16, 1328533504},
	{"a100-40g", "1b", 4096, 8, 4, 8, false, 16856, 2048, 24, 16, 1320144896},
	{"a100-40g", "1b", 2048, 128, 10, 1, false, 18647, 2048, 24, 16, 1315950592},
	{"a100-40g", "1b", 2048, 64, 10, 1, false, 19001, 2048, 24, 16, 1315950592},
	{"a100-40g", "1b", 2048, 32, 10, 1, false, 15555, 2048, 24, 16, 1315950592},
	{"a100-40g", "1b", 2048, 16, 8, 1, false, 19085, 2048, 24, 16, 1315950592},
	{"a100-40g", "1b", 2048, 8, 8, 8, false, 19271, 2048, 24, 16, 1315950592},
	{"a100-40g", "1b", 1024, 8, 16, 8, false, 20959, 2048, 24, 16, 1313853440},
	{"a100-40g", "760m", 8192, 8, 3, 4, false, 20106, 1536, 24, 12, 769907712},
	{"a100-40g", "760m", 4096, 8, 6, 4, false, 25863, 1536, 24, 12, 763616256},
	{"a100-40g", "760m", 2048, 128, 12, 1, false, 28940, 1536, 24, 12, 760470528},
	{"a100-40g", "760m", 2048, 64, 12, 1, false, 29344, 1536, 24, 12, 760470528},
	{"a100-40g", "760m", 2048, 32, 12, 1, false, 29648, 1536, 24, 12, 760470528},
	{"a100-40g", "760m", 2048, 16, 12, 1, false, 29607, 1536, 24, 12, 760470528},
	{"a100-40g", "760m", 2048, 8, 12, 4, false, 30173, 1536, 24, 12, 760470528},
	{"a100-40g", "760m", 1024, 8, 24, 4, false, 33422, 1536, 24, 12, 758897664},
}

// allFoundryRows is every published llm-foundry row the tests keep: H100 and
// A100.
func allFoundryRows() []foundryRow {
	var out []foundryRow
	for _, r := range llmFoundryRows {
		out = append(out, foundryRow{"h100-sxm", r.model, r.seq, r.gpus, r.mb, r.ga, r.ac, r.tokensPerSPerGPU, r.hidden, r.layers, r.hd, r.numParams})
	}
	return append(out, llmFoundryA100Rows...)
}

// group is the row's group for the error figures: hardware, one node or several.
func (r foundryRow) group() string {
	if r.gpus > 8 {
		return r.hw + " multi-node"
	}
	return r.hw + " one node"
}

// foundryRun is r as a user states it: the model's config.json (written under
// dir), the row's cluster and batch, activation_checkpointing as the row says,
// and, with stack, llm-foundry's stack: FSDP1, its fused cross-entropy, flash
// attention, Composer's backward_post prefetch and the row's fabric between nodes
// (checkpointing is left to the default, which must be whole-block). Without
// stack the options are the CLI's defaults.
func foundryRun(t *testing.T, dir string, r foundryRow, stack bool) sweeps.RunConfig {
	t.Helper()
	path := filepath.Join(dir, fmt.Sprintf("mpt-%s-%d.json", r.model, r.seq))
	b, err := json.Marshal(map[string]any{"model_type": "gpt2", "n_embd": r.hidden, "n_layer": r.layers,
		"n_head": r.hd, "vocab_size": 50368, "n_positions": r.seq})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	rc := cfg(path, r.gpus, sweeps.FullShard)
	rc.Hardware = r.hw
	rc.Nodes, rc.GPUsPerNode = (r.gpus+7)/8, min(r.gpus, 8)
	rc.SeqLen, rc.BatchPerDevice, rc.GradAccum, rc.ActivationCheckpointing = r.seq, r.mb, r.ga, r.ac
	rc.GlobalBatch = 0
	if !stack {
		return rc
	}
	rc = withOpts(rc, "fsdp_version", 1, "loss", LossFused, "attention", AttentionFlash)
	// Composer defaults backward_prefetch to BACKWARD_POST
	// (composer/trainer/dist_strategy.py: fsdp_config.get('backward_prefetch',
	// 'BACKWARD_POST')), and llm-foundry's pretrain YAMLs do not set it.
	rc.BackwardPrefetch = sweeps.BackwardPost
	if r.gpus > 8 {
		// MosaicML's H100 clusters: 3.2 Tb/s per node (8 × 400G rails); its A100
		// tables say "1600 Gbps node-node interconnect (RoCE)": 8 × 200G.
		rc.BackendOptions["inter_node_fabric"] = "ib-rail-8x400g"
		if r.hw != "h100-sxm" {
			rc.BackendOptions["inter_node_fabric"] = "ib-rail-8x200g"
		}
	}
	return rc
}

// TestPublishedFoundryRowsByGroup predicts every kept llm-foundry row as a user
// states it, with llm-foundry's stack: each must fit (it trained), and each
// group's mean throughput error stays within 15% (issue 26), no row beyond 30%.
// It logs, per group, the mean |error| and how many rows the CLI's bare
// defaults (no options) would call infeasible.
func TestPublishedFoundryRowsByGroup(t *testing.T) {
	dir := t.TempDir()
	type tally struct {
		n, bareInfeasible int
		sum, worst        float64
	}
	groups := map[string]*tally{}
	for _, r := range allFoundryRows() {
		g := groups[r.group()]
		if g == nil {
			g = &tally{}
			groups[r.group()] = g
		}
		name := fmt.Sprintf("%s/mpt-%s/seq%d/gpus%d/mb%d/ga%d", r.hw, r.model, r.seq, r.gpus, r.mb, r.ga)
		t.Run(name, func(t *testing.T) {
			bare := mustPredict(t, foundryRun(t, dir, r, false))
			if !bare.Feasible {
				// The CLI's defaults (upcast loss, FSDP2) call it infeasible: the
				// verdict must name an assumption that turns it (issue 26).
				g.bareInfeasible++
				assert.Contains(t, bare.Reason, "the verdict rests on an assumption: infeasible with", "bare defaults")
			}
			p := mustPredict(t, foundryRun(t, dir, r, true))
			assert.InEpsilon(t, float64(r.numParams), float64(p.Shape.Params()), 1e-3, "MPT's parameter count")
			perGPU := p.TokensPerS / float64(r.gpus)
			e := perGPU/r.tokensPerSPerGPU - 1
			g.n++
			g.sum += abs(e)
			g.worst = max(g.worst, abs(e))
			t.Logf("peak %.1f GiB of %.1f (bare defaults %.1f); %.0f tokens/s/GPU vs %.0f published (%+.0f%%)", gibs(p.PeakDeviceMemBytes),
				gibs(p.DeviceMemBytes), gibs(bare.PeakDeviceMemBytes), perGPU, r.tokensPerSPerGPU, 100*e)
			assert.True(t, p.Feasible, "it trained: %s", p.Reason)
			if name == "a100-40g/mpt-1b/seq2048/gpus32/mb10/ga1" {
				// The table disagrees with itself here: 15,555 tokens/s/GPU on 32
				// GPUs between 19,085 on 16 and 19,001 on 64 at the same micro-batch
				// (MFU 0.45 among 0.55s). It counts in its group's mean only. (70B
				// on 64 GPUs at micro-batch 2, MFU 0.36 where 128 GPUs at
				// micro-batch 4 reach 0.49, was excused beside it at +31%; it is
				// +29% since the weights' traffic and FSDP's copies are timed.)
				return
			}
			assert.Less(t, abs(e), 0.30, "no row off by more than 30 percent")
		})
	}
	names := make([]string, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		g := groups[n]
		mean := g.sum / float64(g.n)
		t.Logf("%-22s %2d rows: mean |error| %4.1f%%, worst %4.1f%%; %d infeasible at the bare defaults", n, g.n, 100*mean, 100*g.worst, g.bareInfeasible)
		assert.Less(t, mean, 0.15, n)
	}
}
