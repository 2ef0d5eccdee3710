// Package kernels holds the cuda device's GPU kernels: one .cu file per op family,
// compiled by `go generate` into one fatbin (sm_80 and sm_90 cubins plus compute_80
// PTX) that is committed and embedded (Fatbin), and the launch ABI of every kernel
// (this file), which the device's launch wrappers are written against and which a
// test checks against the PTX.
//
// Every kernel computes what backends/gotrain/device/cpu/ops.go computes; the tests
// run the same .cu source on the CPU (runtime/cpu_runtime.h, a fiber per CUDA
// thread, inside a fake libcuda, see README.md) against the cpu device.
//
// Conventions of the ABI:
//   - Parameters are pointers (device addresses, 8 bytes), int32, int64 or float32,
//     nothing else: a Go int passed where the kernel reads .u32 works only by luck.
//   - Buffers are float32 unless a parameter says otherwise (tokens and targets are
//     int32, bf16 is uint16 bits). Each op kernel has a bf16 twin (the name with
//     "_bf16", BF16Of): the same parameters, every tensor bf16 and the row
//     statistics (rstd, lse, losses) float32; it loads bf16, computes in float32
//     and stores bf16 rounded to nearest even.
//   - Every kernel is launched with exactly Block threads in x (y = z = 1); it is
//     compiled with __launch_bounds__(Block), so a larger block fails to launch.
//   - Element counts of flat buffers are int64; row counts and widths are int32
//     (all offsets are computed in 64 bits inside the kernels).
//   - Grid-stride kernels are correct for any grid ≥ 1; GridStride gives the grid
//     the device should use. A grid with a zero dimension (no rows, seq 0) is not a
//     launch (CUDA_ERROR_INVALID_VALUE): the device skips the op instead.
//   - Kernels that add into gradients (backward ops) read-modify-write; none uses
//     atomics, so every result is deterministic run to run.
package kernels

// Kind is the type of one kernel parameter as the PTX .entry declares it.
type Kind uint8

// Parameter kinds: the only four the kernels take.
const (
	Ptr Kind = iota + 1 // a device address (.u64)
	I32                 // int32 (.u32)
	I64                 // int64 (.u64)
	F32                 // float32 (.f32)
)

// String is the kind's name as the Go launch wrappers say it.
func (k Kind) String() string {
	switch k {
	case Ptr:
		return "ptr"
	case I32:
		return "int32"
	case I64:
		return "int64"
	case F32:
		return "float32"
	}
	return "kind?"
}

// Size is the parameter's size in bytes in the launch's parameter buffer.
func (k Kind) Size() int {
	if k == I32 || k == F32 {
		return 4
	}
	return 8
}

// Param is one kernel parameter: its name in the .cu source and its kind.
type Param struct {
	Name string
	Kind Kind
}

// Kernel is one kernel's launch ABI.
type Kernel struct {
	// Name is the extern "C" symbol (cuModuleGetFunction's name).
	Name string
	// Params are the parameters in order.
	Params []Param
	// Block is the number of threads per block (blockDim.x; y and z are 1).
	Block int
	// Shared is the dynamic shared memory in bytes for a head dimension; nil when
	// the kernel uses static shared memory only (pass 0).
	Shared func(headDim int) int
}

// Block sizes and tiles the kernels are compiled for.
const (
	// ElemBlock is the block of element-wise, row and reduction kernels.
	ElemBlock = 256
	// GridStrideMaxBlocks caps the grid of grid-stride kernels: enough blocks to
	// fill an H100 (132 SMs × 8 blocks of 256) several times over.
	GridStrideMaxBlocks = 4096
	// SumMaxPartials is the most blocks fsdp_sum_partials may be launched with,
	// and so the size of the partials buffer (fsdp_sum_finish's block reduces
	// up to this many in one pass).
	SumMaxPartials = 1024
	// MaxHeadDim is the largest head dimension the attention kernels accept (each
	// thread holds headDim/4 accumulators in registers).
	MaxHeadDim = 128
	// AttnFwdTile is the query and key tile of fsdp_attn_fwd (block = 4 × tile).
	AttnFwdTile = 32
	// AttnBwdTile is the query and key tile of the backward kernels (block = 4 × tile).
	AttnBwdTile = 16
	// AttnTCRows is the query rows a block of the tensor-core attention kernels
	// (attention_tc.cu) takes: 4 warps of 16.
	AttnTCRows = 64
	// AttnTCBlock is the tensor-core attention kernels' block (4 warps).
	AttnTCBlock = 128
	// AttnTCMinBlocks is how many blocks of each tensor-core attention kernel the
	// design keeps resident on an SM (its __launch_bounds__ minimum; registers and
	// shared memory are sized for it), so one block's tile loads and softmax overlap
	// another's tensor-core work.
	AttnTCMinBlocks = 2
)

// GridStride is the grid for a grid-stride kernel over n elements.
func GridStride(n int64) int {
	g := (n + ElemBlock - 1) / ElemBlock
	return int(max(1, min(g, GridStrideMaxBlocks)))
}

// SumGrid is the grid of fsdp_sum_partials over n elements, and the number of
// partials it writes.
func SumGrid(n int64) int {
	g := (n + ElemBlock - 1) / ElemBlock
	return int(max(1, min(g, SumMaxPartials)))
}

// CeilDiv is ⌈a/b⌉ for grids over tiles.
func CeilDiv(a, b int) int { return (a + b - 1) / b }

// BF16Of is k's bf16 twin: named k.Name + "_bf16", the same parameters (its
// tensor pointers point at bf16), block and shared memory.
func BF16Of(k Kernel) Kernel {
	k.Name += "_bf16"
	return k
}

func p(name string) Param   { return Param{name, Ptr} }
func i32(name string) Param { return Param{name, I32} }
func i64(name string) Param { return Param{name, I64} }
func f32(name string) Param { return Param{name, F32} }

// ---- element-wise (elementwise.cu) ----

// Zero sets x[0:n] to 0. Grid GridStride(n).
var Zero = Kernel{"fsdp_zero", []Param{p("x"), i64("n")}, ElemBlock, nil}

// Copy copies src[0:n] to dst[0:n]; the ranges must not overlap (the device copies
// overlapping views through cuMemcpyDtoD or a bounce buffer). Grid GridStride(n).
var Copy = Kernel{"fsdp_copy", []Param{p("dst"), p("src"), i64("n")}, ElemBlock, nil}

// Add computes dst[i] += alpha·src[i] for i < n, rounding the product and the sum
// separately (no FMA contraction), as the cpu device does. Grid GridStride(n).
var Add = Kernel{"fsdp_add", []Param{p("dst"), p("src"), f32("alpha"), i64("n")}, ElemBlock, nil}

// Scale computes x[i] *= alpha for i < n. Grid GridStride(n).
var Scale = Kernel{"fsdp_scale", []Param{p("x"), f32("alpha"), i64("n")}, ElemBlock, nil}

// ZeroBF16 sets a bf16 x[0:n] to 0 (views need not be 4-byte aligned, which
// cuMemsetD32 wants). Grid GridStride(n).
var ZeroBF16 = BF16Of(Zero)

// AddBF16 is Add on bf16 dst and src, rounded once per element.
var AddBF16 = BF16Of(Add)

// AddF32BF16 computes an fp32 dst[i] += alpha·src[i] of a bf16 src: the fp32
// accumulation of bf16 gradients. Grid GridStride(n).
var AddF32BF16 = Kernel{"fsdp_add_f32_bf16", []Param{p("dst"), p("src"), f32("alpha"), i64("n")}, ElemBlock, nil}

// ScaleBF16 is Scale on bf16.
var ScaleBF16 = BF16Of(Scale)

// CastF32ToBF16 writes dst[i] = bf16(src[i]) for i < n (round to nearest even; NaN
// stays a quiet NaN), dst holding uint16 bits. Grid GridStride(n).
var CastF32ToBF16 = Kernel{"fsdp_cast_f32_bf16", []Param{p("dst"), p("src"), i64("n")}, ElemBlock, nil}

// CastBF16ToF32 writes dst[i] = float32(src[i]) for i < n (exact), src holding
// uint16 bits. Grid GridStride(n).
var CastBF16ToF32 = Kernel{"fsdp_cast_bf16_f32", []Param{p("dst"), p("src"), i64("n")}, ElemBlock, nil}

// ---- reductions (reduce.cu) ----

// SumPartials writes partials[blockIdx.x] = Σ x (squares = 0) or Σ x² (squares =
// 1) over the block's grid-stride share of x[0:n], accumulated in float32 per
// thread and reduced in a fixed tree, so the result depends only on the grid.
// Grid SumGrid(n) (≤ SumMaxPartials); partials holds one float per block. The
// device finishes on the host in float64 or with SumFinish.
var SumPartials = Kernel{"fsdp_sum_partials", []Param{p("partials"), p("x"), i64("n"), i32("squares")}, ElemBlock, nil}

// SumPartialsBF16 is SumPartials over bf16 x (partials float32).
var SumPartialsBF16 = BF16Of(SumPartials)

// SumFinish writes out[0] = Σ partials[0:count] in float32, count ≤
// SumMaxPartials. Grid 1.
var SumFinish = Kernel{"fsdp_sum_finish", []Param{p("out"), p("partials"), i32("count")}, ElemBlock, nil}

// ---- token embedding (embedding.cu) ----

// EmbeddingForward gathers out[i,:] = table[tokens[i],:] for i < ntok (tokens int32,
// checked against the vocabulary by the host). Grid ntok (one block per token).
var EmbeddingForward = Kernel{"fsdp_embedding_fwd",
	[]Param{p("out"), p("table"), p("tokens"), i32("ntok"), i32("dim")}, ElemBlock, nil}

// EmbeddingBackward scatters dtable[tokens[i],:] += dout[i,:] deterministically and
// without atomics or a sort: each thread owns one column and walks the tokens in
// order, so repeated tokens add in token order and the result equals the cpu
// device's bit for bit. Grid CeilDiv(dim, ElemBlock).
var EmbeddingBackward = Kernel{"fsdp_embedding_bwd",
	[]Param{p("dtable"), p("dout"), p("tokens"), i32("ntok"), i32("dim")}, ElemBlock, nil}

// ---- RMSNorm (rmsnorm.cu) ----

// RMSNormForward computes per row r < rows: rstd[r] = 1/sqrt(mean(x_r²) + eps) and
// out_r = weight ⊙ (x_r·rstd[r]). Grid rows (one block per row).
var RMSNormForward = Kernel{"fsdp_rmsnorm_fwd",
	[]Param{p("out"), p("rstd"), p("x"), p("weight"), i32("rows"), i32("dim"), f32("eps")}, ElemBlock, nil}

// RMSNormBackwardDx adds into dx per row: r·w⊙dy − (r³/dim)·x·Σ(w⊙dy⊙x).
// Grid rows (one block per row).
var RMSNormBackwardDx = Kernel{"fsdp_rmsnorm_bwd_dx",
	[]Param{p("dx"), p("dout"), p("x"), p("weight"), p("rstd"), i32("rows"), i32("dim")}, ElemBlock, nil}

// RMSNormBackwardDw adds into dweight[j] Σ_rows dout[r,j]·(x[r,j]·rstd[r]), one
// thread per column walking the rows in order (deterministic, the cpu device's
// order). Grid CeilDiv(dim, ElemBlock).
var RMSNormBackwardDw = Kernel{"fsdp_rmsnorm_bwd_dw",
	[]Param{p("dweight"), p("dout"), p("x"), p("rstd"), i32("rows"), i32("dim")}, ElemBlock, nil}

// ResidualRMSNorm is the residual connection and RMSNormForward in one launch:
// per row r < rows, x_r += resid_r (stored, rounded to x's dtype), then rstd[r] =
// 1/sqrt(mean(x_r²) + eps) and out_r = weight ⊙ (x_r·rstd[r]) from the stored
// sum: the cpu device's Add(x, resid, 1) then RMSNormForward(out, rstd, x,
// weight). Grid rows (one block per row).
var ResidualRMSNorm = Kernel{"fsdp_residual_rmsnorm_fwd",
	[]Param{p("out"), p("rstd"), p("x"), p("resid"), p("weight"), i32("rows"), i32("dim"), f32("eps")}, ElemBlock, nil}

// ---- rotary position embedding (rope.cu) ----

// RoPE rotates x ([rows = batch·seq, heads, headDim]) in place: pair (i, i+half) of
// token row r by sign·angle(r mod seq, i), with cos and sin tables [seq, headDim/2]
// computed on the host in float64 and rounded once (as the cpu device's ropeTable).
// sign = 1 is RoPEForward, −1 RoPEBackward. Grid GridStride(rows·heads·headDim/2).
var RoPE = Kernel{"fsdp_rope",
	[]Param{p("x"), p("cos"), p("sin"), i32("rows"), i32("seq"), i32("heads"), i32("headDim"), f32("sign")}, ElemBlock, nil}

// RoPEQK is RoPE of q ([rows, qHeads, headDim]) and of k ([rows, kvHeads,
// headDim]) in one launch, the same rotation pair for pair. Grid
// GridStride(rows·(qHeads+kvHeads)·headDim/2).
var RoPEQK = Kernel{"fsdp_rope_qk",
	[]Param{p("q"), p("k"), p("cos"), p("sin"), i32("rows"), i32("seq"), i32("qHeads"), i32("kvHeads"), i32("headDim"),
		f32("sign")}, ElemBlock, nil}

// ---- SwiGLU (swiglu.cu) ----

// SwiGLUForward computes out[i] = silu(gate[i])·up[i] for i < n. Grid GridStride(n).
var SwiGLUForward = Kernel{"fsdp_swiglu_fwd", []Param{p("out"), p("gate"), p("up"), i64("n")}, ElemBlock, nil}

// SwiGLUBackward adds into dgate and dup for i < n. Grid GridStride(n).
var SwiGLUBackward = Kernel{"fsdp_swiglu_bwd",
	[]Param{p("dgate"), p("dup"), p("dout"), p("gate"), p("up"), i64("n")}, ElemBlock, nil}

// SwiGLUPackedForward computes out[r, j] = silu(gu[r, j])·gu[r, inter+j] for r <
// rows, j < inter: SwiGLUForward over the fused gate|up GEMM's output ([rows,
// 2·inter], gate then up per row). Grid GridStride(rows·inter).
var SwiGLUPackedForward = Kernel{"fsdp_swiglu_packed_fwd",
	[]Param{p("out"), p("gu"), i32("rows"), i32("inter")}, ElemBlock, nil}

// SwiGLUPackedBackward adds SwiGLUBackward's dgate and dup into dgu, laid out as
// gu. Grid GridStride(rows·inter).
var SwiGLUPackedBackward = Kernel{"fsdp_swiglu_packed_bwd",
	[]Param{p("dgu"), p("dout"), p("gu"), i32("rows"), i32("inter")}, ElemBlock, nil}

// ---- cross-entropy (crossentropy.cu) ----

// CrossEntropyForward writes losses[r] = logsumexp(logits_r) − logits_r[targets[r]]
// for r < rows (targets int32). Grid rows (one block per row).
var CrossEntropyForward = Kernel{"fsdp_xent_fwd",
	[]Param{p("losses"), p("logits"), p("targets"), i32("rows"), i32("vocab")}, ElemBlock, nil}

// CrossEntropyBackward writes dlogits_r = scale·(softmax(logits_r) − onehot(t_r));
// dlogits may equal logits (every element of a row is read before any is written).
// Grid rows (one block per row).
var CrossEntropyBackward = Kernel{"fsdp_xent_bwd",
	[]Param{p("dlogits"), p("logits"), p("targets"), i32("rows"), i32("vocab"), f32("scale")}, ElemBlock, nil}

// CrossEntropyFused is CrossEntropyForward and CrossEntropyBackward in one
// launch: losses and dlogits of each row from two reads of it (an online
// logsumexp, then the write pass) instead of five; dlogits may equal logits.
// Grid rows (one block per row).
var CrossEntropyFused = Kernel{"fsdp_xent_fused",
	[]Param{p("losses"), p("dlogits"), p("logits"), p("targets"), i32("rows"), i32("vocab"), f32("scale")}, ElemBlock, nil}

// ---- AdamW (adamw.cu) ----

// AdamW updates p, m and v in place from g for i < n, operation for operation as
// the cpu device (torch.optim.AdamW): p *= decay; m += omb1·(g − m); v = v·beta2 +
// omb2·g²; p −= stepSize·m/(sqrt(v)/bc2Sqrt + eps). The host computes the scalars
// in float64 and rounds them: decay = 1 − lr·wd, omb1 = 1 − β1, omb2 = 1 − β2,
// stepSize = lr/(1 − β1^t), bc2Sqrt = sqrt(1 − β2^t). Grid GridStride(n).
var AdamW = Kernel{"fsdp_adamw",
	[]Param{p("p"), p("g"), p("m"), p("v"), i64("n"), f32("decay"), f32("omb1"), f32("beta2"),
		f32("omb2"), f32("stepSize"), f32("bc2Sqrt"), f32("eps")}, ElemBlock, nil}

// ---- causal grouped-query attention (attention.cu) ----

var attnShape = []Param{i32("batch"), i32("seq"), i32("heads"), i32("kvHeads"), i32("headDim"), f32("scale")}

// AttnFwdShared is fsdp_attn_fwd's dynamic shared memory: a query tile and a key
// (then value) tile of [32][headDim+1] and the scores [32][33].
func AttnFwdShared(headDim int) int {
	return 4 * (2*AttnFwdTile*(headDim+1) + AttnFwdTile*(AttnFwdTile+1))
}

// AttnBwdShared is the backward kernels' dynamic shared memory: q, dout, k and v
// tiles of [16][headDim+1], the probabilities and their gradients [16][17], and
// per-row D and lse.
func AttnBwdShared(headDim int) int {
	return 4 * (4*AttnBwdTile*(headDim+1) + 2*AttnBwdTile*(AttnBwdTile+1) + 2*AttnBwdTile)
}

// AttentionForward writes out = softmax(q·kᵀ·scale, causal)·v and lse (the row
// log-sum-exp of the scaled scores, [batch, heads, seq]) flash-style: keys in tiles
// of 32 with an online softmax, the probabilities never stored. q, out are [batch,
// seq, heads, headDim], k, v [batch, seq, kvHeads, headDim]; query head h reads kv
// head h/(heads/kvHeads); headDim ≤ MaxHeadDim; scale = float32(1/sqrt(headDim)).
// Grid (CeilDiv(seq, AttnFwdTile), heads, batch), shared AttnFwdShared(headDim).
var AttentionForward = Kernel{"fsdp_attn_fwd",
	append([]Param{p("out"), p("lse"), p("q"), p("k"), p("v")}, attnShape...), 4 * AttnFwdTile, AttnFwdShared}

// AttentionBackwardDq adds into dq: per query tile it recomputes P = exp(q·kᵀ·scale
// − lse) for the key tiles up to the diagonal, dP = dout·vᵀ, D = rowsum(dout⊙out),
// and dq += P⊙(dP − D)·k·scale. Grid (CeilDiv(seq, AttnBwdTile), heads, batch),
// shared AttnBwdShared(headDim).
var AttentionBackwardDq = Kernel{"fsdp_attn_bwd_dq",
	append([]Param{p("dq"), p("dout"), p("q"), p("k"), p("v"), p("out"), p("lse")}, attnShape...),
	4 * AttnBwdTile, AttnBwdShared}

// AttentionBackwardDkDv adds into dk and dv: per key tile of one kv head it walks
// the query heads of its group and the query tiles from the diagonal on, with dv +=
// Pᵀ·dout and dk += (P⊙(dP − D))ᵀ·q·scale held in registers, so each element of dk
// and dv has one writer (no atomics). Grid (CeilDiv(seq, AttnBwdTile), kvHeads,
// batch), shared AttnBwdShared(headDim).
var AttentionBackwardDkDv = Kernel{"fsdp_attn_bwd_dkdv",
	append([]Param{p("dk"), p("dv"), p("dout"), p("q"), p("k"), p("v"), p("out"), p("lse")}, attnShape...),
	4 * AttnBwdTile, AttnBwdShared}

// AttnTCKeyTile is the key tile of the tensor-core forward for a head dim: 64 for
// 64, 32 for 128, so that two K and two V tiles take 32 KiB (under the 47 KiB an
// sm_90 block gets without opt-in) and two blocks fit an SM.
func AttnTCKeyTile(headDim int) int {
	if headDim == 128 {
		return 32
	}
	return 64
}

// AttnTCShared is the tensor-core forward's dynamic shared memory for a head dim:
// double-buffered bf16 key and value tiles [2][2][AttnTCKeyTile][headDim] (the
// query tile borrows the second buffer before the loop).
func AttnTCShared(headDim int) int {
	return 2 * 4 * AttnTCKeyTile(headDim) * headDim
}

// AttentionForwardTC64 is AttentionForwardBF16 on tensor cores (attention_tc.cu,
// FlashAttention-2's forward: mma.sync m16n8k16 bf16 with fp32 accumulators,
// ldmatrix, cp.async double buffering) for head dim 64 only; P is rounded to bf16
// before P·V, as FlashAttention does. Same parameters; grid (CeilDiv(seq,
// AttnTCRows), heads, batch), shared AttnTCShared(64).
var AttentionForwardTC64 = Kernel{"fsdp_attn_fwd_tc64_bf16",
	append([]Param{p("out"), p("lse"), p("q"), p("k"), p("v")}, attnShape...), AttnTCBlock,
	func(int) int { return AttnTCShared(64) }}

// AttentionForwardTC128 is AttentionForwardTC64 for head dim 128.
var AttentionForwardTC128 = Kernel{"fsdp_attn_fwd_tc128_bf16",
	append([]Param{p("out"), p("lse"), p("q"), p("k"), p("v")}, attnShape...), AttnTCBlock,
	func(int) int { return AttnTCShared(128) }}

// AttentionForwardTC is the tensor-core forward for headDim, or nil when there is
// none (head dims other than 64 and 128 take AttentionForwardBF16).
func AttentionForwardTC(headDim int) *Kernel {
	switch headDim {
	case 64:
		return &AttentionForwardTC64
	case 128:
		return &AttentionForwardTC128
	}
	return nil
}

// AttnTCBwdKeys is the key block of the tensor-core dk/dv kernel for a head dim
// (16 a warp): 64 for 64, 48 for 128, so that K and V [AttnTCBwdKeys][headDim] and
// double-buffered Q and dO tiles [2][2][AttnTCBwdQRows][headDim] fit without opt-in.
func AttnTCBwdKeys(headDim int) int {
	if headDim == 128 {
		return 48
	}
	return 64
}

// AttnTCBwdQRows is the query tile of the tensor-core dk/dv kernel.
const AttnTCBwdQRows = 16

// AttnTCBwdKVShared is the tensor-core dk/dv kernel's dynamic shared memory: K and
// V, two Q and dO tiles in bf16, and per query row its lse and the headDim/8
// partial sums of D = rowsum(dout⊙out) in float.
func AttnTCBwdKVShared(headDim int) int {
	return 2*2*AttnTCBwdKeys(headDim)*headDim + 2*4*AttnTCBwdQRows*headDim + 4*AttnTCBwdQRows*(1+headDim/8)
}

var (
	tcDqParams   = append([]Param{p("dq"), p("dout"), p("q"), p("k"), p("v"), p("out"), p("lse")}, attnShape...)
	tcDkDvParams = append([]Param{p("dk"), p("dv"), p("dout"), p("q"), p("k"), p("v"), p("out"), p("lse")}, attnShape...)
)

// AttentionBackwardDqTC64 is AttentionBackwardDqBF16 on tensor cores for head dim
// 64 (FlashAttention-2's dq: P recomputed from lse, D = rowsum(dout⊙out) per row,
// dS and P rounded to bf16 for the products). Grid (CeilDiv(seq, AttnTCRows),
// heads, batch), shared AttnTCShared(64).
var AttentionBackwardDqTC64 = Kernel{"fsdp_attn_bwd_dq_tc64_bf16", tcDqParams, AttnTCBlock,
	func(int) int { return AttnTCShared(64) }}

// AttentionBackwardDqTC128 is AttentionBackwardDqTC64 for head dim 128.
var AttentionBackwardDqTC128 = Kernel{"fsdp_attn_bwd_dq_tc128_bf16", tcDqParams, AttnTCBlock,
	func(int) int { return AttnTCShared(128) }}

// AttentionBackwardDkDvTC64 is AttentionBackwardDkDvBF16 on tensor cores for head
// dim 64: a block of AttnTCBwdKeys(64)/16 warps per key block of one kv head walks
// the group's query heads and tiles from the diagonal. Grid (CeilDiv(seq,
// AttnTCBwdKeys(64)), kvHeads, batch), shared AttnTCBwdKVShared(64).
var AttentionBackwardDkDvTC64 = Kernel{"fsdp_attn_bwd_dkdv_tc64_bf16", tcDkDvParams, 2 * AttnTCBwdKeys(64),
	func(int) int { return AttnTCBwdKVShared(64) }}

// AttentionBackwardDkDvTC128 is AttentionBackwardDkDvTC64 for head dim 128.
var AttentionBackwardDkDvTC128 = Kernel{"fsdp_attn_bwd_dkdv_tc128_bf16", tcDkDvParams, 2 * AttnTCBwdKeys(128),
	func(int) int { return AttnTCBwdKVShared(128) }}

// AttentionBackwardTC is the tensor-core backward (dq, dk/dv kernels) for headDim,
// or nils when there is none.
func AttentionBackwardTC(headDim int) (dq, dkdv *Kernel) {
	switch headDim {
	case 64:
		return &AttentionBackwardDqTC64, &AttentionBackwardDkDvTC64
	case 128:
		return &AttentionBackwardDqTC128, &AttentionBackwardDkDvTC128
	}
	return nil, nil
}

// The bf16 twins of the op kernels (BF16Of).
var (
	EmbeddingForwardBF16      = BF16Of(EmbeddingForward)
	EmbeddingBackwardBF16     = BF16Of(EmbeddingBackward)
	RMSNormForwardBF16        = BF16Of(RMSNormForward)
	RMSNormBackwardDxBF16     = BF16Of(RMSNormBackwardDx)
	RMSNormBackwardDwBF16     = BF16Of(RMSNormBackwardDw)
	ResidualRMSNormBF16       = BF16Of(ResidualRMSNorm)
	RoPEBF16                  = BF16Of(RoPE)
	RoPEQKBF16                = BF16Of(RoPEQK)
	SwiGLUPackedForwardBF16   = BF16Of(SwiGLUPackedForward)
	SwiGLUPackedBackwardBF16  = BF16Of(SwiGLUPackedBackward)
	SwiGLUForwardBF16         = BF16Of(SwiGLUForward)
	SwiGLUBackwardBF16        = BF16Of(SwiGLUBackward)
	CrossEntropyForwardBF16   = BF16Of(CrossEntropyForward)
	CrossEntropyBackwardBF16  = BF16Of(CrossEntropyBackward)
	CrossEntropyFusedBF16     = BF16Of(CrossEntropyFused)
	AttentionForwardBF16      = BF16Of(AttentionForward)
	AttentionBackwardDqBF16   = BF16Of(AttentionBackwardDq)
	AttentionBackwardDkDvBF16 = BF16Of(AttentionBackwardDkDv)
)

// All is every kernel in the fatbin, in the order of the .cu files.
var All = []*Kernel{
	&Zero, &ZeroBF16, &Copy, &Add, &AddF32BF16, &AddBF16, &Scale, &ScaleBF16, &CastF32ToBF16, &CastBF16ToF32,
	&SumPartials, &SumPartialsBF16, &SumFinish,
	&EmbeddingForward, &EmbeddingForwardBF16, &EmbeddingBackward, &EmbeddingBackwardBF16,
	&RMSNormForward, &RMSNormForwardBF16, &RMSNormBackwardDx, &RMSNormBackwardDxBF16,
	&RMSNormBackwardDw, &RMSNormBackwardDwBF16, &ResidualRMSNorm, &ResidualRMSNormBF16,
	&RoPE, &RoPEBF16, &RoPEQK, &RoPEQKBF16,
	&SwiGLUForward, &SwiGLUForwardBF16, &SwiGLUBackward, &SwiGLUBackwardBF16,
	&SwiGLUPackedForward, &SwiGLUPackedForwardBF16, &SwiGLUPackedBackward, &SwiGLUPackedBackwardBF16,
	&CrossEntropyForward, &CrossEntropyForwardBF16, &CrossEntropyBackward, &CrossEntropyBackwardBF16,
	&CrossEntropyFused, &CrossEntropyFusedBF16,
	&AdamW,
	&AttentionForward, &AttentionForwardBF16, &AttentionBackwardDq, &AttentionBackwardDqBF16,
	&AttentionBackwardDkDv, &AttentionBackwardDkDvBF16,
	&AttentionForwardTC64, &AttentionForwardTC128, &AttentionBackwardDqTC64, &AttentionBackwardDqTC128,
	&AttentionBackwardDkDvTC64, &AttentionBackwardDkDvTC128,
}

// TensorCore are the kernels built on mma.sync (attention_tc.cu): the static test
// requires tensor-core instructions in their SASS and AttnTCMinBlocks blocks per SM.
var TensorCore = []*Kernel{&AttentionForwardTC64, &AttentionForwardTC128, &AttentionBackwardDqTC64,
	&AttentionBackwardDqTC128, &AttentionBackwardDkDvTC64, &AttentionBackwardDkDvTC128}

// Lookup returns the kernel named name, or nil.
func Lookup(name string) *Kernel {
	for _, k := range All {
		if k.Name == name {
			return k
		}
	}
	return nil
}
