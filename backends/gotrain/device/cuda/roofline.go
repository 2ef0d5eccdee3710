package cuda

import (
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
)

// The roofline of the cuda device's ops (issue 24, item 5): each op's FLOPs and
// bytes moved, computed from its shapes here and only here, and the time they
// would take at a GPU's peaks. The bytes are the op's compulsory traffic (every
// input read once, every output written once; a read-modify-write output both),
// so the expected time is a lower bound: an op measured well above it is where a
// kernel loses time (extra passes over memory, low occupancy, launch overhead).

// OpCost is one op call's work.
type OpCost struct {
	// Op is the device.Device method ("MatMul", "AttentionForward").
	Op string
	// Shape says the call's sizes and dtype ("bf16 m=2048 n=8192 k=2048"): calls
	// with the same Op and Shape cost the same and are aggregated.
	Shape string
	// FLOPs are floating-point operations (a fused multiply-add is 2).
	FLOPs float64
	// Bytes are the compulsory bytes read and written in device memory.
	Bytes float64
	// TensorCore says the FLOPs run at the tensor-core (bf16) peak: bf16 GEMMs and
	// the tensor-core attention. Every other op is timed at the FP32 peak.
	TensorCore bool
}

// Roofline is a GPU's peaks.
type Roofline struct {
	// Name is the hardware profile ("h100-sxm").
	Name string
	// TensorFLOPS is the dense bf16 tensor-core peak, FP32FLOPS the non-tensor-core
	// FP32 peak (fp32 GEMMs run cublasSgemm without TF32), MemBW the memory
	// bandwidth, all per second.
	TensorFLOPS, FP32FLOPS, MemBW float64
}

// H100 is the H100 SXM's roofline from the hardware profile: 989.5 TFLOP/s bf16
// dense, 67 TFLOP/s FP32, 3.35 TB/s.
func H100() Roofline {
	p, err := hardware.Lookup("h100-sxm")
	if err != nil {
		panic(err) // a built-in profile: missing is a programming error
	}
	return Roofline{Name: p.Name, TensorFLOPS: p.PeakFLOPS["bf16"], FP32FLOPS: p.PeakFLOPS["fp32"], MemBW: p.MemBWBytesPerS}
}

// Expected is the seconds c takes at r's peaks, the larger of its compute and
// memory times, and whether memory bounds it. (Seconds, not a Duration: a small
// op's bound is well under a nanosecond.)
func (r Roofline) Expected(c OpCost) (seconds float64, memoryBound bool) {
	peak := r.FP32FLOPS
	if c.TensorCore {
		peak = r.TensorFLOPS
	}
	compute, memory := c.FLOPs/peak, c.Bytes/r.MemBW
	return math.Max(compute, memory), memory >= compute
}

func elemSize(t device.DType) float64 {
	if t == device.BF16 {
		return 2
	}
	return 4
}

// ewCost is an elementwise op over n elements of dtype t: flops per element,
// tensors read and written per element.
func ewCost(op string, t device.DType, n int, flops, tensors float64) OpCost {
	return OpCost{Op: op, Shape: fmt.Sprintf("%v n=%d", t, n), FLOPs: flops * float64(n), Bytes: tensors * elemSize(t) * float64(n)}
}

// CostMatMul is C = alpha·op(A)·op(B) + beta·C, C m×n: 2mnk FLOPs; A, B and C
// read once (C only when beta ≠ 0), C written. tensorCore is a bf16 GEMM.
func CostMatMul(t device.DType, tensorCore bool, m, n, k int, beta float32) OpCost {
	e := elemSize(t)
	cReads := 0.0
	if beta != 0 {
		cReads = 1
	}
	fm, fn, fk := float64(m), float64(n), float64(k)
	return OpCost{Op: "MatMul", Shape: fmt.Sprintf("%v m=%d n=%d k=%d beta=%g", t, m, n, k, beta),
		FLOPs: 2 * fm * fn * fk, Bytes: e * (fm*fk + fk*fn + (1+cReads)*fm*fn), TensorCore: tensorCore}
}

// causalPairs is the (query, key) pairs of a causal seq × seq attention.
func causalPairs(seq int) float64 { return float64(seq) * float64(seq+1) / 2 }

// CostAttentionForward is causal attention: QKᵀ and PV, 2·2·headDim FLOPs per
// (query, key) pair and head (the softmax's exp and scaling not counted,
// FlashAttention's convention); q, k, v read, out written, lse (fp32) written.
// tensorCore is the bf16 tensor-core kernel.
func CostAttentionForward(t device.DType, tensorCore bool, s device.AttnShape) OpCost {
	e := elemSize(t)
	return OpCost{Op: "AttentionForward", Shape: attnShape(t, s),
		FLOPs:      4 * float64(s.HeadDim) * causalPairs(s.Seq) * float64(s.Batch*s.Heads),
		Bytes:      e*float64(2*s.QLen()+2*s.KVLen()) + 4*float64(s.LSELen()),
		TensorCore: tensorCore}
}

// CostAttentionBackward is 2.5× the forward's FLOPs (QKᵀ recomputed, dV, dP, dQ,
// dK: five products for the forward's two); q, k, v, out, dout and lse read,
// dq, dk, dv added into (read and written).
func CostAttentionBackward(t device.DType, tensorCore bool, s device.AttnShape) OpCost {
	e := elemSize(t)
	return OpCost{Op: "AttentionBackward", Shape: attnShape(t, s),
		FLOPs:      10 * float64(s.HeadDim) * causalPairs(s.Seq) * float64(s.Batch*s.Heads),
		Bytes:      e*float64(3*s.QLen()+2*s.KVLen()+2*s.QLen()+4*s.KVLen()) + 4*float64(s.LSELen()),
		TensorCore: tensorCore}
}

func attnShape(t device.DType, s device.AttnShape) string {
	return fmt.Sprintf("%v b=%d seq=%d heads=%d/%d hd=%d", t, s.Batch, s.Seq, s.Heads, s.KVHeads, s.HeadDim)
}

// CostRMSNormForward: per element x², the sum, ·rstd and ·weight (4 FLOPs); x
// read, out written, the weight read once, rstd (fp32) written.
func CostRMSNormForward(t device.DType, rows, dim int) OpCost {
	n := float64(rows) * float64(dim)
	return OpCost{Op: "RMSNormForward", Shape: fmt.Sprintf("%v rows=%d dim=%d", t, rows, dim),
		FLOPs: 4 * n, Bytes: elemSize(t)*(2*n+float64(dim)) + 4*float64(rows)}
}

// CostRMSNormBackward: dx = rstd·(g − x·rstd²·Σ(g·x)/dim) with g = dout·weight
// (7 FLOPs an element) and dweight += Σ dout·x·rstd (3); dout, x, weight, rstd
// read, dx written, dweight read and written.
func CostRMSNormBackward(t device.DType, rows, dim int) OpCost {
	n := float64(rows) * float64(dim)
	return OpCost{Op: "RMSNormBackward", Shape: fmt.Sprintf("%v rows=%d dim=%d", t, rows, dim),
		FLOPs: 10 * n, Bytes: elemSize(t)*(3*n+3*float64(dim)) + 4*float64(rows)}
}

// CostRoPE is a rotation of x in place (op RoPEForward or RoPEBackward): a pair
// takes 4 products and 2 sums (3 FLOPs an element); x read and written, the
// fp32 cos and sin tables read.
func CostRoPE(op string, t device.DType, s device.RoPEShape) OpCost {
	n := float64(s.Len())
	return OpCost{Op: op, Shape: fmt.Sprintf("%v b=%d seq=%d heads=%d hd=%d", t, s.Batch, s.Seq, s.Heads, s.HeadDim),
		FLOPs: 3 * n, Bytes: 2*elemSize(t)*n + 4*float64(s.Seq*s.HeadDim)}
}

// CostRoPEQK is CostRoPE of q and k in one launch (op RoPEQKForward or
// RoPEQKBackward): q (sq) and k (kvHeads heads of sq's geometry) read and
// written, the tables read once instead of twice.
func CostRoPEQK(op string, t device.DType, sq device.RoPEShape, kvHeads int) OpCost {
	n := float64(sq.Batch*sq.Seq*(sq.Heads+kvHeads)) * float64(sq.HeadDim)
	return OpCost{Op: op, Shape: fmt.Sprintf("%v b=%d seq=%d heads=%d/%d hd=%d", t, sq.Batch, sq.Seq, sq.Heads, kvHeads, sq.HeadDim),
		FLOPs: 3 * n, Bytes: 2*elemSize(t)*n + 4*float64(sq.Seq*sq.HeadDim)}
}

// CostResidualRMSNorm is the residual add and RMSNormForward in one pass (1 + 4
// FLOPs an element): x and resid read, x and out written, the weight read, rstd
// written. Unfused, the Copy of the stream (2 passes) and the norm's read of x
// cost 3 passes more than the add the GEMM's beta = 1 did.
func CostResidualRMSNorm(t device.DType, rows, dim int) OpCost {
	n := float64(rows) * float64(dim)
	return OpCost{Op: "ResidualRMSNorm", Shape: fmt.Sprintf("%v rows=%d dim=%d", t, rows, dim),
		FLOPs: 5 * n, Bytes: elemSize(t)*(4*n+float64(dim)) + 4*float64(rows)}
}

// CostSwiGLUPackedForward is CostSwiGLUForward over the packed gate|up ([rows,
// 2·inter]): the same FLOPs and bytes.
func CostSwiGLUPackedForward(t device.DType, rows, inter int) OpCost {
	c := ewCost("SwiGLUPackedForward", t, rows*inter, 5, 3)
	c.Shape = fmt.Sprintf("%v rows=%d inter=%d", t, rows, inter)
	return c
}

// CostSwiGLUPackedBackward is CostSwiGLUBackward into the packed dgu.
func CostSwiGLUPackedBackward(t device.DType, rows, inter int) OpCost {
	c := ewCost("SwiGLUPackedBackward", t, rows*inter, 12, 7)
	c.Shape = fmt.Sprintf("%v rows=%d inter=%d", t, rows, inter)
	return c
}

// CostCrossEntropyForward: per logit the max, a subtraction, exp and a sum (4
// FLOPs); the logits read once, the fp32 losses written.
func CostCrossEntropyForward(t device.DType, rows, vocab int) OpCost {
	n := float64(rows) * float64(vocab)
	return OpCost{Op: "CrossEntropyForward", Shape: fmt.Sprintf("%v rows=%d vocab=%d", t, rows, vocab),
		FLOPs: 4 * n, Bytes: elemSize(t)*n + 4*2*float64(rows)}
}

// CostCrossEntropyBackward: per logit the logsumexp's 4 FLOPs again and
// scale·exp(z − lse) (3); logits read, dlogits written.
func CostCrossEntropyBackward(t device.DType, rows, vocab int) OpCost {
	n := float64(rows) * float64(vocab)
	return OpCost{Op: "CrossEntropyBackward", Shape: fmt.Sprintf("%v rows=%d vocab=%d", t, rows, vocab),
		FLOPs: 7 * n, Bytes: 2*elemSize(t)*n + 4*float64(rows)}
}

// CostCrossEntropyFused is both in one pass: the online logsumexp (4 FLOPs a
// logit) and the write (3); logits read once, dlogits written, the losses and
// targets.
func CostCrossEntropyFused(t device.DType, rows, vocab int) OpCost {
	n := float64(rows) * float64(vocab)
	return OpCost{Op: "CrossEntropyFused", Shape: fmt.Sprintf("%v rows=%d vocab=%d", t, rows, vocab),
		FLOPs: 7 * n, Bytes: 2*elemSize(t)*n + 4*2*float64(rows)}
}

// CostEmbeddingForward gathers len(tokens) rows: no FLOPs, the rows read and
// written, the int32 tokens read.
func CostEmbeddingForward(t device.DType, tokens, dim int) OpCost {
	n := float64(tokens) * float64(dim)
	return OpCost{Op: "EmbeddingForward", Shape: fmt.Sprintf("%v tokens=%d dim=%d", t, tokens, dim),
		Bytes: 2*elemSize(t)*n + 4*float64(tokens)}
}

// CostEmbeddingBackward adds each token's dout row into its table row: one FLOP
// an element; dout read, the table rows read and written.
func CostEmbeddingBackward(t device.DType, tokens, dim int) OpCost {
	n := float64(tokens) * float64(dim)
	return OpCost{Op: "EmbeddingBackward", Shape: fmt.Sprintf("%v tokens=%d dim=%d", t, tokens, dim),
		FLOPs: n, Bytes: 3*elemSize(t)*n + 4*float64(tokens)}
}

// CostSwiGLUForward: silu(g)·u = g/(1+exp(−g))·u, 5 FLOPs an element (exp
// counted as one); gate and up read, out written.
func CostSwiGLUForward(t device.DType, n int) OpCost { return ewCost("SwiGLUForward", t, n, 5, 3) }

// CostSwiGLUBackward: the sigmoid again, dsilu and the two products added into
// dgate and dup (12 FLOPs an element); dout, gate, up read, dgate and dup read
// and written.
func CostSwiGLUBackward(t device.DType, n int) OpCost {
	return ewCost("SwiGLUBackward", t, n, 12, 7)
}

// CostAdamW is torch's AdamW on fp32 params, grads, m, v: decay, two moments,
// the bias-corrected step (13 FLOPs an element, sqrt and division one each);
// params, grads, m, v read, params, m, v written.
func CostAdamW(n int) OpCost { return ewCost("AdamW", device.F32, n, 13, 7) }

// CostAdd is dst += alpha·src (2 FLOPs; src and dst read, dst written); src's
// dtype may differ from dst's (fp32 += bf16).
func CostAdd(dst, src device.DType, n int) OpCost {
	return OpCost{Op: "Add", Shape: fmt.Sprintf("%v+=%v n=%d", dst, src, n), FLOPs: 2 * float64(n),
		Bytes: (2*elemSize(dst) + elemSize(src)) * float64(n)}
}

// CostScale is x *= alpha in place.
func CostScale(t device.DType, n int) OpCost { return ewCost("Scale", t, n, 1, 2) }

// CostSum is Σx (op Sum, 1 FLOP an element) or Σx² (SumSquares, 2): x read once.
func CostSum(op string, t device.DType, n int) OpCost {
	f := 1.0
	if op == "SumSquares" {
		f = 2
	}
	return ewCost(op, t, n, f, 1)
}

// CostCast converts n elements from src's dtype to dst's.
func CostCast(dst, src device.DType, n int) OpCost {
	return OpCost{Op: "Cast", Shape: fmt.Sprintf("%v<-%v n=%d", dst, src, n), Bytes: (elemSize(dst) + elemSize(src)) * float64(n)}
}

// CostCopy copies n elements; CostZero writes n.
func CostCopy(t device.DType, n int) OpCost { return ewCost("Copy", t, n, 0, 2) }

// CostZero writes n zeros.
func CostZero(t device.DType, n int) OpCost { return ewCost("Zero", t, n, 0, 1) }

// LaunchIssue is what issuing one launch (kernel, cuBLAS call, memset or device
// copy) costs the host: cuLaunchKernel through the driver API takes ~2–4 µs of
// CPU time with its argument packing, and a GPU back to back finishes a tiny
// kernel in ~2–3 µs; 4 µs is the pessimistic end, so a step under it is
// certainly not launch-bound.
const LaunchIssue = 4 * time.Microsecond

// LaunchBudget sets a step's launches against its GPU time: the question of issue
// 24's item 4, whether a step is launch-bound and would gain from being captured
// as a CUDA graph (one launch for the step, the driver's per-launch work done at
// instantiation). Launches are issued asynchronously, so the host's issue time
// hides under the GPU's work as long as it is shorter; the step is launch-bound
// only when Launches × LaunchIssue reaches the GPU time, and a graph can save at
// most the excess.
type LaunchBudget struct {
	// Launches is the step's count (Device.Launches over a step).
	Launches int64
	// GPU is the step's time on the GPU: predicted (Σ expected over its ops, the
	// roofline's lower bound) or measured (Σ CUDA-event times over its ops).
	GPU time.Duration
}

// Issue is the host time the launches take at LaunchIssue each.
func (b LaunchBudget) Issue() time.Duration { return time.Duration(b.Launches) * LaunchIssue }

// LaunchBound says whether issuing the launches takes at least the GPU time.
func (b LaunchBudget) LaunchBound() bool { return b.Issue() >= b.GPU }

// String is the budget as the roofline output prints it.
func (b LaunchBudget) String() string {
	verdict := "not launch-bound: the GPU's work hides the launches, so a CUDA graph would not shorten the step"
	if b.LaunchBound() {
		verdict = "LAUNCH-BOUND: capture the step as a CUDA graph"
	}
	return fmt.Sprintf("%d launches × %v = %.2f ms of issue against %.2f ms on the GPU (%.0f%%): %s",
		b.Launches, LaunchIssue, float64(b.Issue())/1e6, float64(b.GPU)/1e6, 100*float64(b.Issue())/float64(max(b.GPU, 1)), verdict)
}

// ExpectedTotal is Σ expected time over times' calls at r's peaks.
func ExpectedTotal(r Roofline, times []OpTime) time.Duration {
	s := 0.0
	for _, o := range times {
		e, _ := r.Expected(o.OpCost)
		s += e * float64(o.Calls)
	}
	return time.Duration(s * 1e9)
}

// OpTime is the calls of one op and shape: their cost and measured time.
type OpTime struct {
	OpCost
	// Calls is how many were timed, Measured their summed GPU time (CUDA events
	// around each call on the compute stream).
	Calls    int
	Measured time.Duration
}

// WriteRoofline prints times (one row per op and shape) against r: FLOPs,
// bytes, arithmetic intensity, expected and measured time per call and their
// ratio, then the top 10 rows by total measured time (expected time when none
// was measured: a prediction) with their share of the total. It is the table
// of issue 24's item 5.
func WriteRoofline(w io.Writer, r Roofline, times []OpTime) error {
	rows := append([]OpTime(nil), times...)
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Op != rows[j].Op {
			return rows[i].Op < rows[j].Op
		}
		return rows[i].Shape < rows[j].Shape
	})
	var total time.Duration
	expTotal := 0.0
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "op\tshape\tcalls\tGFLOP\tMB\tFLOP/B\tbound\texpected µs\tmeasured µs\tmeasured/expected\t\n")
	for _, o := range rows {
		exp, mem := r.Expected(o.OpCost)
		bound := "compute"
		if mem {
			bound = "memory"
		}
		per := perCall(o)
		total += o.Measured
		expTotal += exp * float64(o.Calls)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.3f\t%.3f\t%.1f\t%s\t%.3f\t%.3f\t%s\t\n", o.Op, o.Shape, o.Calls, o.FLOPs/1e9, o.Bytes/1e6,
			intensity(o.OpCost), bound, exp*1e6, float64(per)/1e3, ratio(per, exp))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "# %s roofline: %.1f TFLOP/s tensor, %.1f TFLOP/s fp32, %.2f TB/s; expected %.3f ms, measured %.3f ms in all\n",
		r.Name, r.TensorFLOPS/1e12, r.FP32FLOPS/1e12, r.MemBW/1e12, expTotal*1e3, float64(total)/1e6)
	// The top 10 by measured time; a prediction (nothing measured) by expected.
	by := "measured"
	key := func(o OpTime) float64 { return float64(o.Measured) }
	if total == 0 {
		by = "expected"
		key = func(o OpTime) float64 { e, _ := r.Expected(o.OpCost); return e * float64(o.Calls) }
	}
	sort.SliceStable(rows, func(i, j int) bool { return key(rows[i]) > key(rows[j]) })
	fmt.Fprintf(w, "# top 10 by %s time\n", by)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "rank\top\tshape\tcalls\tmeasured µs\tshare\texpected µs\t\n")
	for i, o := range rows[:min(10, len(rows))] {
		exp, _ := r.Expected(o.OpCost)
		share := 0.0
		switch {
		case total > 0:
			share = float64(o.Measured) / float64(total)
		case expTotal > 0:
			share = exp * float64(o.Calls) / expTotal
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.3f\t%.1f%%\t%.3f\t\n", i+1, o.Op, o.Shape, o.Calls, float64(o.Measured)/1e3, 100*share,
			exp*float64(o.Calls)*1e6)
	}
	return tw.Flush()
}

func perCall(o OpTime) time.Duration {
	if o.Calls == 0 {
		return 0
	}
	return o.Measured / time.Duration(o.Calls)
}

func intensity(c OpCost) float64 {
	if c.Bytes == 0 {
		return 0
	}
	return c.FLOPs / c.Bytes
}

func ratio(measured time.Duration, expected float64) string {
	if expected <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", measured.Seconds()/expected)
}
