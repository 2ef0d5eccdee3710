package sim

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// heldOutRow is a published llm-foundry row no other test keeps, with its
// sharding strategy (the large-scale table's 1b and 3b rows ran SHARD_GRAD_OP).
type heldOutRow struct {
	foundryRow
	sharding string
}

// llmFoundryHeldOutRows are every bf16 row of MosaicML llm-foundry's published
// MPT training benchmarks (scripts/train/benchmarking/README.md at commit
// 8c8dd48f, tables "H100 80GB BF16 (Large Scale, >= 128 GPUs)", "H100 80GB
// BF16", "A100 80GB with 1600 Gbps node-node interconnect (RoCE)" and "A100
// 40GB with 1600 Gbps node-node interconnect (RoCE)") that llmFoundryRows and
// llmFoundryA100Rows do not keep: the rows the sim and its defaults were never
// tuned to (issue 26's held-out rows).
var llmFoundryHeldOutRows = []heldOutRow{
	{foundryRow{"h100-sxm", "70b", 2048, 512, 8, 1, true, 1007, 8192, 80, 64, 64862437376}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "70b", 2048, 256, 8, 1, true, 1035, 8192, 80, 64, 64862437376}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "70b", 2048, 128, 8, 1, true, 1058, 8192, 80, 64, 64862437376}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 512, 8, 1, true, 2115, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 256, 8, 1, true, 2148, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 128, 8, 1, true, 2199, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 2048, 512, 16, 1, true, 4952, 5120, 40, 40, 12853954560}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 2048, 256, 16, 1, true, 4989, 5120, 40, 40, 12853954560}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 2048, 128, 16, 1, true, 5080, 5120, 40, 40, 12853954560}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "7b", 2048, 512, 6, 1, false, 9670, 4096, 32, 32, 6658859008}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "7b", 2048, 256, 6, 1, false, 10119, 4096, 32, 32, 6658859008}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "7b", 2048, 128, 6, 1, false, 10475, 4096, 32, 32, 6658859008}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 2048, 512, 8, 1, false, 21664, 2560, 32, 20, 2651837440}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "3b", 2048, 256, 8, 1, false, 22772, 2560, 32, 20, 2651837440}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "3b", 2048, 128, 8, 1, false, 23422, 2560, 32, 20, 2651837440}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "1b", 2048, 512, 12, 1, false, 39837, 2048, 24, 16, 1315950592}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "1b", 2048, 256, 12, 1, false, 42555, 2048, 24, 16, 1315950592}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "1b", 2048, 128, 12, 1, false, 44123, 2048, 24, 16, 1315950592}, sweeps.ShardGradOp},
	{foundryRow{"h100-sxm", "70b", 2048, 64, 8, 4, true, 1039, 8192, 80, 64, 64862437376}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "70b", 2048, 32, 2, 16, true, 882, 8192, 80, 64, 64862437376}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 8192, 8, 1, 21, true, 1384, 7168, 48, 56, 30019254272}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 4096, 8, 1, 21, true, 1802, 7168, 48, 56, 29989894144}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 32, 14, 3, true, 2308, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 16, 10, 3, true, 2263, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 2048, 8, 3, 21, true, 2002, 7168, 48, 56, 29975214080}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "30b", 1024, 8, 6, 21, true, 2084, 7168, 48, 56, 29967874048}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 32768, 8, 1, 3, true, 1976, 5120, 40, 40, 13011240960}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 16384, 8, 3, 3, true, 2985, 5120, 40, 40, 12927354880}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 2048, 32, 2, 1, false, 4811, 5120, 40, 40, 12853954560}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "13b", 2048, 16, 2, 1, false, 4767, 5120, 40, 40, 12853954560}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "7b", 65536, 8, 1, 2, true, 1956, 4096, 32, 32, 6918905856}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "7b", 32768, 8, 2, 2, true, 3318, 4096, 32, 32, 6784688128}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 65536, 8, 1, 2, true, 3262, 2560, 32, 20, 2814366720}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 32768, 8, 3, 6, true, 5873, 2560, 32, 20, 2730480640}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 16384, 8, 1, 6, false, 11152, 2560, 32, 20, 2688537600}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 2048, 64, 6, 3, false, 22525, 2560, 32, 20, 2651837440}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 2048, 32, 6, 3, false, 23021, 2560, 32, 20, 2651837440}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 2048, 16, 10, 3, false, 24142, 2560, 32, 20, 2651837440}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "3b", 512, 8, 40, 6, false, 27965, 2560, 32, 20, 2647905280}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 65536, 8, 1, 2, true, 5506, 2048, 24, 16, 1445974016}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 32768, 8, 1, 4, false, 12025, 2048, 24, 16, 1378865152}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 16384, 8, 2, 4, false, 19649, 2048, 24, 16, 1345310720}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 2048, 64, 20, 1, false, 44402, 2048, 24, 16, 1315950592}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 2048, 32, 20, 1, false, 45130, 2048, 24, 16, 1315950592}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 2048, 16, 20, 1, false, 46037, 2048, 24, 16, 1315950592}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "1b", 512, 8, 56, 4, false, 52275, 2048, 24, 16, 1312804864}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "760m", 32768, 8, 1, 2, false, 16291, 1536, 24, 12, 807656448}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "760m", 16384, 8, 3, 2, false, 27815, 1536, 24, 12, 782490624}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "760m", 2048, 32, 24, 1, false, 67971, 1536, 24, 12, 760470528}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "760m", 2048, 16, 24, 1, false, 68551, 1536, 24, 12, 760470528}, sweeps.FullShard},
	{foundryRow{"h100-sxm", "760m", 512, 8, 96, 2, false, 83749, 1536, 24, 12, 758111232}, sweeps.FullShard},
	{foundryRow{"a100-80g", "30b", 512, 8, 12, 21, true, 967, 7168, 48, 56, 29964204032}, sweeps.FullShard},
	{foundryRow{"a100-80g", "13b", 32768, 8, 1, 3, true, 1016, 5120, 40, 40, 13011240960}, sweeps.FullShard},
	{foundryRow{"a100-80g", "13b", 16384, 8, 3, 3, true, 1431, 5120, 40, 40, 12927354880}, sweeps.FullShard},
	{foundryRow{"a100-80g", "7b", 65536, 8, 1, 2, true, 1013, 4096, 32, 32, 6918905856}, sweeps.FullShard},
	{foundryRow{"a100-80g", "7b", 32768, 8, 2, 2, true, 1672, 4096, 32, 32, 6784688128}, sweeps.FullShard},
	{foundryRow{"a100-80g", "7b", 16384, 8, 4, 2, true, 2453, 4096, 32, 32, 6717579264}, sweeps.FullShard},
	{foundryRow{"a100-80g", "3b", 65536, 8, 1, 2, true, 1767, 2560, 32, 20, 2814366720}, sweeps.FullShard},
	{foundryRow{"a100-80g", "3b", 32768, 8, 3, 6, true, 3029, 2560, 32, 20, 2730480640}, sweeps.FullShard},
	{foundryRow{"a100-80g", "3b", 16384, 8, 1, 6, false, 5529, 2560, 32, 20, 2688537600}, sweeps.FullShard},
	{foundryRow{"a100-80g", "3b", 512, 8, 40, 6, false, 12127, 2560, 32, 20, 2647905280}, sweeps.FullShard},
	{foundryRow{"a100-80g", "1b", 65536, 8, 1, 2, true, 3044, 2048, 24, 16, 1445974016}, sweeps.FullShard},
	{foundryRow{"a100-80g", "1b", 32768, 8, 1, 4, false, 6275, 2048, 24, 16, 1378865152}, sweeps.FullShard},
	{foundryRow{"a100-80g", "1b", 16384, 8, 2, 4, false, 9956, 2048, 24, 16, 1345310720}, sweeps.FullShard},
	{foundryRow{"a100-80g", "1b", 512, 8, 56, 4, false, 23148, 2048, 24, 16, 1312804864}, sweeps.FullShard},
	{foundryRow{"a100-80g", "760m", 65536, 8, 1, 2, true, 4143, 1536, 24, 12, 857988096}, sweeps.FullShard},
	{foundryRow{"a100-80g", "760m", 32768, 8, 1, 2, false, 8802, 1536, 24, 12, 807656448}, sweeps.FullShard},
	{foundryRow{"a100-80g", "760m", 16384, 8, 3, 2, false, 14274, 1536, 24, 12, 782490624}, sweeps.FullShard},
	{foundryRow{"a100-80g", "760m", 512, 8, 96, 2, false, 29446, 1536, 24, 12, 758111232}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 65536, 8, 1, 2, false, 7524, 1024, 24, 16, 420997120}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 32768, 8, 2, 2, false, 13652, 1024, 24, 16, 387442688}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 16384, 8, 4, 2, false, 23559, 1024, 24, 16, 370665472}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 8192, 8, 8, 2, false, 36569, 1024, 24, 16, 362276864}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 4096, 8, 16, 2, false, 49555, 1024, 24, 16, 358082560}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 2048, 8, 32, 2, false, 58782, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 1024, 8, 64, 2, false, 64813, 1024, 24, 16, 354936832}, sweeps.FullShard},
	{foundryRow{"a100-80g", "350m", 512, 8, 128, 2, false, 69330, 1024, 24, 16, 354412544}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 65536, 8, 1, 2, false, 20368, 768, 12, 12, 174070272}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 32768, 8, 2, 2, false, 36407, 768, 12, 12, 148904448}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 16384, 8, 4, 2, false, 60040, 768, 12, 12, 136321536}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 8192, 8, 8, 2, false, 90392, 768, 12, 12, 130030080}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 4096, 8, 16, 2, false, 118396, 768, 12, 12, 126884352}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 2048, 8, 40, 2, false, 142830, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 2048, 8, 32, 2, false, 141737, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 1024, 8, 64, 2, false, 156468, 768, 12, 12, 124525056}, sweeps.FullShard},
	{foundryRow{"a100-80g", "125m", 512, 8, 128, 2, false, 165681, 768, 12, 12, 124131840}, sweeps.FullShard},
	{foundryRow{"a100-40g", "13b", 512, 8, 16, 16, true, 1763, 5120, 40, 40, 12846090240}, sweeps.FullShard},
	{foundryRow{"a100-40g", "7b", 16384, 8, 1, 4, true, 2249, 4096, 32, 32, 6717579264}, sweeps.FullShard},
	{foundryRow{"a100-40g", "7b", 512, 8, 48, 4, true, 3895, 4096, 32, 32, 6652567552}, sweeps.FullShard},
	{foundryRow{"a100-40g", "3b", 32768, 8, 1, 4, true, 2955, 2560, 32, 20, 2730480640}, sweeps.FullShard},
	{foundryRow{"a100-40g", "3b", 16384, 8, 2, 8, true, 4465, 2560, 32, 20, 2688537600}, sweeps.FullShard},
	{foundryRow{"a100-40g", "3b", 512, 8, 20, 8, false, 11324, 2560, 32, 20, 2647905280}, sweeps.FullShard},
	{foundryRow{"a100-40g", "1b", 32768, 8, 1, 4, true, 5095, 2048, 24, 16, 1378865152}, sweeps.FullShard},
	{foundryRow{"a100-40g", "1b", 16384, 8, 1, 8, false, 9715, 2048, 24, 16, 1345310720}, sweeps.FullShard},
	{foundryRow{"a100-40g", "1b", 512, 8, 32, 8, false, 21782, 2048, 24, 16, 1312804864}, sweeps.FullShard},
	{foundryRow{"a100-40g", "760m", 32768, 8, 1, 4, true, 7183, 1536, 24, 12, 807656448}, sweeps.FullShard},
	{foundryRow{"a100-40g", "760m", 16384, 8, 1, 4, false, 13914, 1536, 24, 12, 782490624}, sweeps.FullShard},
	{foundryRow{"a100-40g", "760m", 512, 8, 48, 4, false, 34938, 1536, 24, 12, 758111232}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 32768, 8, 1, 4, false, 13416, 1024, 24, 16, 387442688}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 16384, 8, 2, 4, false, 22896, 1024, 24, 16, 370665472}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 8192, 8, 4, 4, false, 34933, 1024, 24, 16, 362276864}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 4096, 8, 8, 4, false, 46833, 1024, 24, 16, 358082560}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 2048, 128, 18, 1, false, 51934, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 2048, 64, 18, 1, false, 52689, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 2048, 32, 18, 1, false, 53811, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 2048, 16, 18, 1, false, 55413, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 2048, 8, 16, 4, false, 55995, 1024, 24, 16, 355985408}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 1024, 8, 32, 4, false, 62523, 1024, 24, 16, 354936832}, sweeps.FullShard},
	{foundryRow{"a100-40g", "350m", 512, 8, 64, 4, false, 66284, 1024, 24, 16, 354412544}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 32768, 8, 1, 4, false, 32651, 768, 12, 12, 148904448}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 16384, 8, 2, 3, false, 55484, 768, 12, 12, 136321536}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 8192, 8, 5, 3, false, 86858, 768, 12, 12, 130030080}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 4096, 8, 13, 3, false, 115162, 768, 12, 12, 126884352}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 2048, 128, 26, 1, false, 123936, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 2048, 64, 26, 1, false, 125234, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 2048, 32, 26, 1, false, 127122, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 2048, 16, 26, 1, false, 130535, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 2048, 8, 26, 3, false, 136334, 768, 12, 12, 125311488}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 1024, 8, 52, 3, false, 148289, 768, 12, 12, 124525056}, sweeps.FullShard},
	{foundryRow{"a100-40g", "125m", 512, 8, 104, 3, false, 156735, 768, 12, 12, 124131840}, sweeps.FullShard},
}

func (r heldOutRow) run(t *testing.T, dir string) sweeps.RunConfig {
	t.Helper()
	rc := foundryRun(t, dir, r.foundryRow, true)
	rc.Sharding = r.sharding
	return rc
}

// inKind says the row is of the kinds issue 26 judged the sim on: MPT 760M to
// 70B at seq 512 to 8192. The others (125M and 350M, seq 16K to 64K) are
// predicted and logged, and must fit, but their errors are not the issue's
// targets (see TestPublishedHeldOutRows).
func (r heldOutRow) inKind() bool { return r.numParams >= 7e8 && r.seq >= 512 && r.seq <= 8192 }

// errTally sums a group's throughput errors.
type errTally struct {
	n          int
	sum, worst float64
}

func (g *errTally) add(e float64) {
	g.n++
	g.sum += abs(e)
	g.worst = max(g.worst, abs(e))
}

func (g *errTally) mean() float64 { return g.sum / float64(max(g.n, 1)) }

// foundryOutlier says the published table contradicts itself on the row, so
// that no model of the row's settings can predict it; the hold-out fits without
// these rows, and the calibration tests log their worst row without them:
//   - A100 40GB 1B on 32 GPUs: 15,555 tokens/s/GPU between 19,085 on 16 and
//     19,001 on 64 at the same micro-batch (MFU 0.45 among 0.55s). Known before
//     any held-out row was predicted; the tuned tests name it too.
//   - A100 40GB 13B on one node (seq 1024 to 8192, grad_accum 16, the README's
//     four): llm-foundry's raw torch2.csv reruns two of them with the same
//     settings 17% faster (seq 2048, micro-batch 4: 1,948 tokens/s/GPU against
//     the README's 1,668; seq 1024, micro-batch 8: 2,019 against 1,727), and the
//     README's own 13B rows on 16 to 128 GPUs (1,972 to 1,998) agree with the
//     reruns, not with these: the four come from a slower setup than the rest of
//     the table. Found while diagnosing the a100-40g hold-out, where a fit to
//     them reads their slowness as efficiency falling with model size and
//     carries it to every multi-node row (calibrated 5.7% against 4.0%
//     uncalibrated; 3.5% without them). The reruns themselves are not outliers.
func foundryOutlier(r foundryRow) bool {
	switch {
	case r.hw == "a100-40g" && r.model == "1b" && r.seq == 2048 && r.gpus == 32:
		return true
	case r.hw == "a100-40g" && r.model == "13b" && r.gpus == 8 && r.ga == 16 && r.ac:
		return slices.Contains(llmFoundryA100Rows, r)
	}
	return false
}

// TestPublishedHeldOutRows predicts every held-out llm-foundry row as a user
// states it (llm-foundry's stack: FSDP1, fused loss, flash attention, the
// row's fabric), uncalibrated: each must fit (it trained); in each group of
// the kinds, over all its rows, the mean throughput error stays within
// 15% and no row beyond 30% (issue 26's done-when). Rows outside those kinds
// are logged with their groups' figures. (A100 80GB 760M at seq 512 was first
// +34%, a miss, MFU 0.45 where the same model at seq 2048 reports 0.57; it is
// +16% since attention's rate falls at short sequences, attentionHalfSeq.)
func TestPublishedHeldOutRows(t *testing.T) {
	dir := t.TempDir()
	groups := map[string]*errTally{}
	for _, r := range llmFoundryHeldOutRows {
		g := r.group()
		switch {
		case r.numParams < 7e8:
			g += " (125M-350M, not asserted)"
		case r.seq > 8192:
			g += " (seq 16K-64K, not asserted)"
		}
		if groups[g] == nil {
			groups[g] = &errTally{}
		}
		name := fmt.Sprintf("%s/mpt-%s/seq%d/gpus%d/mb%d/ga%d", r.hw, r.model, r.seq, r.gpus, r.mb, r.ga)
		t.Run(name, func(t *testing.T) {
			p := mustPredict(t, r.run(t, dir))
			e := p.TokensPerS/float64(r.gpus)/r.tokensPerSPerGPU - 1
			groups[g].add(e)
			t.Logf("peak %.1f GiB of %.1f; %.0f tokens/s/GPU vs %.0f published (%+.0f%%)", gibs(p.PeakDeviceMemBytes),
				gibs(p.DeviceMemBytes), p.TokensPerS/float64(r.gpus), r.tokensPerSPerGPU, 100*e)
			assert.True(t, p.Feasible, "it trained: %s", p.Reason)
			if r.inKind() {
				assert.Less(t, abs(e), 0.30, "no row off by more than 30 percent")
			}
		})
	}
	for _, n := range slices.Sorted(maps.Keys(groups)) {
		g := groups[n]
		t.Logf("%-44s %3d rows: mean |error| %4.1f%%, worst %4.1f%%", n, g.n, 100*g.mean(), 100*g.worst)
		if !strings.Contains(n, "not asserted") {
			assert.Less(t, g.mean(), 0.15, n)
		}
	}
}

// foundryMeasurements are rows as measured runs of the sim backend stated
// with llm-foundry's stack (their backend_options are what the fit predicts
// them under).
func foundryMeasurements(t *testing.T, dir string, rows []heldOutRow) []Measurement {
	t.Helper()
	var ms []Measurement
	for _, r := range rows {
		ms = append(ms, Measurement{Run: fmt.Sprintf("%s/mpt-%s/seq%d/gpus%d/mb%d/ga%d", r.hw, r.model, r.seq, r.gpus, r.mb, r.ga),
			Config: r.run(t, dir), TokensPerS: r.tokensPerSPerGPU * float64(r.gpus)})
	}
	return ms
}

// keptFoundryRows are the rows the other published tests keep, as held-out
// rows' type (all FULL_SHARD).
func keptFoundryRows() []heldOutRow {
	var out []heldOutRow
	for _, r := range allFoundryRows() {
		out = append(out, heldOutRow{r, sweeps.FullShard})
	}
	return out
}

// holdOut fits on the fit rows, predicts the held rows calibrated and
// uncalibrated, and returns both errors' tallies; each calibrated prediction
// of a held row outside the fitted range must say it extrapolates.
func holdOut(t *testing.T, fit, held []heldOutRow) (cal, uncal, calKept errTally, k Constants) {
	t.Helper()
	dir := t.TempDir()
	c, err := Fit(foundryMeasurements(t, dir, fit))
	require.NoError(t, err)
	require.Len(t, c.Profiles, 1)
	for _, k = range c.Profiles {
	}
	for _, r := range held {
		rc := r.run(t, dir)
		pc, err := PredictCalibrated(rc, nil, c)
		require.NoError(t, err)
		pu := mustPredict(t, rc)
		ec := pc.TokensPerS/float64(r.gpus)/r.tokensPerSPerGPU - 1
		eu := pu.TokensPerS/float64(r.gpus)/r.tokensPerSPerGPU - 1
		cal.add(ec)
		uncal.add(eu)
		if !foundryOutlier(r.foundryRow) {
			calKept.add(ec)
		}
		t.Logf("%s/mpt-%s/seq%d/gpus%d: calibrated %+.1f%%, uncalibrated %+.1f%%", r.hw, r.model, r.seq, r.gpus, 100*ec, 100*eu)
		assert.True(t, pc.Feasible, pc.Reason)
		if k.Fit.Range.outside(pc.Shape.Params(), rc.Nodes, rc.SeqLen) != "" {
			assert.True(t, slices.ContainsFunc(pc.Notes, func(n string) bool { return strings.HasPrefix(n, ExtrapolatesNote) }),
				"a prediction outside the fitted range says so: %v", pc.Notes)
		}
	}
	return cal, uncal, calKept, k
}

// TestPublishedHoldOutOneNodeToMultiNode calibrates h100-sxm on the 18
// single-node llm-foundry H100 rows and predicts every multi-node H100 row
// (16 to 512 GPUs, none of them seen by the fit): calibrated must be no worse
// than uncalibrated (issue 26: it was 22% against 14%, +50% worst), and within
// the 15%. Likewise a100-40g: fitted on its single-node rows but
// those the table contradicts (foundryOutlier), applied to its multi-node ones.
func TestPublishedHoldOutOneNodeToMultiNode(t *testing.T) {
	all := append(keptFoundryRows(), llmFoundryHeldOutRows...)
	for _, hw := range []string{"h100-sxm", "a100-40g"} {
		t.Run(hw, func(t *testing.T) {
			var fit, held []heldOutRow
			for _, r := range all {
				switch {
				case r.hw != hw || !r.inKind():
				case r.gpus <= 8 && !foundryOutlier(r.foundryRow) && slices.ContainsFunc(keptFoundryRows(), func(k heldOutRow) bool { return k == r }):
					fit = append(fit, r)
				case r.gpus > 8:
					held = append(held, r)
				}
			}
			cal, uncal, kept, k := holdOut(t, fit, held)
			t.Logf("fitted on %d one-node rows (efficiency %.3g, size exponent %.3g, recompute share %s); %d multi-node rows: calibrated mean |error| %.1f%% (worst %.1f%%), uncalibrated %.1f%% (worst %.1f%%)",
				len(fit), k.Efficiency, k.EfficiencySizeExponent, ptrStr(k.RecomputeShare), len(held), 100*cal.mean(), 100*cal.worst, 100*uncal.mean(), 100*uncal.worst)
			assert.LessOrEqual(t, cal.mean(), uncal.mean(), "calibrated on one node, no worse than uncalibrated across nodes")
			assert.Less(t, cal.mean(), 0.15)
			// Not asserted: the worst row. A100 40GB 70B on 64 GPUs (MFU 0.36
			// where 128 GPUs reach 0.49 at twice the micro-batch) is +36%
			// calibrated, +29% uncalibrated: each micro-step gathers all 70B's
			// weights for half the compute, and the sim hides more of that
			// than the run did (TestPublishedFoundryRowsByGroup names it).
			t.Logf("worst calibrated row without the table's outliers: %.1f%%", 100*kept.worst)
		})
	}
}

func ptrStr(p *float64) string {
	if p == nil {
		return "kept at 1"
	}
	return fmt.Sprintf("%.3g", *p)
}

// TestPublishedA100LeaveOneOut calibrates each A100 profile on its
// single-node llm-foundry rows (llmFoundryA100Rows, stated with llm-foundry's
// stack) and predicts each row from the others (beyond MaxFolds rows, from the
// rows outside its fold): the error to expect on a run of a calibrated A100
// node the fit has not seen, within the 15% on average (a100-80g 5.5%,
// a100-40g 3.6%).
func TestPublishedA100LeaveOneOut(t *testing.T) {
	for _, hw := range []string{"a100-80g", "a100-40g"} {
		t.Run(hw, func(t *testing.T) {
			var rows []heldOutRow
			for _, r := range keptFoundryRows() {
				if r.hw == hw && r.gpus <= 8 {
					rows = append(rows, r)
				}
			}
			cal, err := Fit(foundryMeasurements(t, t.TempDir(), rows))
			require.NoError(t, err)
			k := cal.Profiles[hw]
			require.Len(t, k.Fit.LeaveOneOut, len(rows))
			var all, kept errTally
			for i, row := range k.Fit.LeaveOneOut {
				require.NotNil(t, row.TputErr, row.Run)
				all.add(*row.TputErr)
				t.Logf("%-40s leave-one-out %+.1f%%", row.Run, 100**row.TputErr)
				if !foundryOutlier(rows[i].foundryRow) {
					kept.add(*row.TputErr)
				}
			}
			t.Logf("%d rows (efficiency %.3g, size exponent %.3g, recompute share %s): leave-one-out mean |error| %.1f%%, worst %.1f%%",
				len(rows), k.Efficiency, k.EfficiencySizeExponent, ptrStr(k.RecomputeShare), 100*all.mean(), 100*all.worst)
			assert.Less(t, all.mean(), 0.15)
			// Not asserted: the worst row. A100 80GB 30B at seq 8192 (MFU 0.39
			// where the same model reaches 0.51-0.56 at seq 512 to 4096, and 13B
			// at seq 8192 0.56; predicted at 96% of the device) is +36% from
			// constants fitted to the other rows, +15% uncalibrated: the fit
			// follows the other 30B rows, the row does not.
			t.Logf("worst without the table's outliers: %.1f%%", 100*kept.worst)
		})
	}
}
