package cuda

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// TestCostsByHand holds the cost functions to counts made by hand for small
// shapes (the reasoning in each comment).
func TestCostsByHand(t *testing.T) {
	as := device.AttnShape{Batch: 1, Seq: 3, Heads: 2, KVHeads: 1, HeadDim: 4}
	for _, c := range []struct {
		got          OpCost
		flops, bytes float64
	}{
		// 2·m·n·k = 2·2·3·4; A 2×4, B 4×3, C 2×3 read (beta 1) and written: 2 bytes × (8+12+6+6).
		{CostMatMul(device.BF16, true, 2, 3, 4, 1), 48, 64},
		// beta 0: C only written: 4 bytes × (8+12+6).
		{CostMatMul(device.F32, false, 2, 3, 4, 0), 48, 104},
		// causal pairs of 3 positions: 1+2+3 = 6; per pair and head QKᵀ 2·4 and PV 2·4: 2·6·16.
		// q, out 3·2·4 = 24 elements each, k, v 3·1·4 = 12: 72 × 4 bytes, lse 2·3 fp32.
		{CostAttentionForward(device.F32, false, as), 192, 288 + 24},
		// 2.5× the forward; q, out, dout read (72), k, v read (24), dq rmw (48), dk, dv rmw (48).
		{CostAttentionBackward(device.F32, false, as), 480, 192*4 + 24},
		// 4 per element of 2×3; x read, out written (12 bf16), weight 3 bf16, rstd 2 fp32.
		{CostRMSNormForward(device.BF16, 2, 3), 24, 2*15 + 8},
		// 10 per element; dout, x read, dx written (18 bf16); weight read, dweight rmw (9 bf16); rstd.
		{CostRMSNormBackward(device.BF16, 2, 3), 60, 2*27 + 8},
		// 4 per logit of 2×5; the logits read once (10 bf16); 2 fp32 losses written, 2 int32 targets read.
		{CostCrossEntropyForward(device.BF16, 2, 5), 40, 20 + 16},
		// 7 per logit; logits read, dlogits written (20 bf16); targets.
		{CostCrossEntropyBackward(device.BF16, 2, 5), 70, 40 + 8},
		// 7 per logit; logits read once, dlogits written (20 bf16); losses written, targets read.
		{CostCrossEntropyFused(device.BF16, 2, 5), 70, 40 + 16},
		// b·seq·heads·hd = 1·3·2·4 = 24 elements, 3 FLOPs each; read and written; cos, sin 3·2 fp32 each.
		{CostRoPE("RoPEForward", device.F32, device.RoPEShape{Batch: 1, Seq: 3, Heads: 2, HeadDim: 4, Theta: 10}), 72, 2*96 + 48},
		// 13 per element; p, g, m, v read, p, m, v written: 7 × 4 bytes × 10.
		{CostAdamW(10), 130, 280},
		// silu(g)·u: 5 per element; gate, up read, out written.
		{CostSwiGLUForward(device.BF16, 10), 50, 60},
		// fp32 += bf16: dst read and written (8 bytes), src read (2): 10 elements.
		{CostAdd(device.F32, device.BF16, 10), 20, 100},
		// 2 tokens of 3 columns gathered: 6 read, 6 written (fp32), 2 tokens.
		{CostEmbeddingForward(device.F32, 2, 3), 0, 48 + 8},
		{CostCast(device.BF16, device.F32, 10), 0, 60},
		{CostSum("SumSquares", device.F32, 10), 20, 40},
	} {
		assert.Equal(t, c.flops, c.got.FLOPs, "%s %s FLOPs", c.got.Op, c.got.Shape)
		assert.Equal(t, c.bytes, c.got.Bytes, "%s %s bytes", c.got.Op, c.got.Shape)
	}
}

// TestExpectedAtTheH100Peaks: an 8192³ bf16 GEMM is compute-bound at 989.5
// TFLOP/s (1.11 ms); the same in fp32 without tensor cores runs at 67; a
// 10⁹-element fp32 scale is memory-bound at 3.35 TB/s (8 GB: 2.39 ms).
func TestExpectedAtTheH100Peaks(t *testing.T) {
	r := H100()
	sec, mem := r.Expected(CostMatMul(device.BF16, true, 8192, 8192, 8192, 0))
	assert.False(t, mem)
	assert.InDelta(t, 2*8192.0*8192*8192/989.5e12, sec, 1e-12)
	sec, _ = r.Expected(CostMatMul(device.F32, false, 8192, 8192, 8192, 0))
	assert.InDelta(t, 2*8192.0*8192*8192/67e12, sec, 1e-12)
	sec, mem = r.Expected(CostScale(device.F32, 1e9))
	assert.True(t, mem)
	assert.InDelta(t, 8e9/3.35e12, sec, 1e-12)
}

// TestWriteRoofline: every row, the ratio of measured to expected, and the top
// 10 by measured time, largest first, of more than 10 rows.
func TestWriteRoofline(t *testing.T) {
	r := Roofline{Name: "unit", TensorFLOPS: 1e12, FP32FLOPS: 1e11, MemBW: 1e9}
	var times []OpTime
	for i := 1; i <= 12; i++ {
		c := CostScale(device.F32, i*1000) // i·8000 bytes: i·8 µs at 1 GB/s
		times = append(times, OpTime{OpCost: c, Calls: 2, Measured: time.Duration(i) * 32 * time.Microsecond})
	}
	var buf bytes.Buffer
	require.NoError(t, WriteRoofline(&buf, r, times))
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 1+12+2+1+10, out)
	// n=3000: 24,000 bytes a call, 24 µs at 1 GB/s; measured 96 µs over 2 calls.
	assert.Regexp(t, `^Scale +float32 n=3000 +2 +0\.000 +0\.024 +0\.1 +memory +24\.000 +48\.000 +2\.00$`, strings.TrimSpace(lines[6]), out)
	// Σ over i of 2 calls × 8i µs = 16·78 µs.
	assert.Contains(t, out, "expected 1.248 ms, measured 2.496 ms in all")
	assert.Regexp(t, `^1 +Scale +float32 n=12000 +2 +384\.000 +15\.4% +192\.000$`, strings.TrimSpace(lines[16]), out)
	assert.Regexp(t, `^10 +Scale +float32 n=3000 `, strings.TrimSpace(lines[25]), out)
}
