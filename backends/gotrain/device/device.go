// Package device is the compute interface of the Go trainer: opaque buffers with
// exact byte accounting, and every operation the model and FSDP need, each with a
// forward and a backward (the llm.c pattern). The cpu subpackage is the reference
// implementation; a cuda device (cgo shim over libcuda/libcublas/libnccl) implements
// the same interface, so model/ and fsdp/ never change with the device.
//
// Conventions every implementation follows:
//
//   - Buffers hold float32 elements (the cpu reference device can also run in
//     float64, see cpu.Options); lengths and offsets count elements, never bytes.
//     Devices that implement MixedPrecision (dtype.go) also store bf16 buffers,
//     for the bf16 policy: ops compute in fp32 and round what they store.
//   - Matrices are row-major and contiguous. Activations are [rows, width] with
//     rows = batch × seq, token-major: row b·seq + t is token t of sample b.
//   - Attention tensors are [batch, seq, heads, headDim] (q, attention output) and
//     [batch, seq, kvHeads, headDim] (k, v), which is what a [rows, heads·headDim]
//     projection output already is; no transposes between the projections and
//     attention.
//   - Backward ops add into every gradient they write (dx += ..., dweight += ...),
//     so the residual stream and gradient accumulation need no extra buffers;
//     callers zero fresh gradient buffers. Two documented exceptions write in place:
//     RoPEBackward (a rotation) and CrossEntropyBackward (dlogits may alias logits,
//     as fused classifiers do, so the logits are never stored twice).
//   - Ops do not return errors. Wrong lengths or foreign buffers are programming
//     errors and panic with the op's name; the model validates user-given shapes
//     before any op runs. Device failures (a CUDA launch error) are sticky and
//     reported by the next Sync.
//   - Streams: every op runs in issue order on the device's one stream. On cpu an op
//     has finished when it returns, and Sync only reports errors. A cuda device runs
//     ops asynchronously on its default stream and Sync waits for them; overlap of
//     communication with compute (FSDP prefetch) then comes from an optional
//     interface added with cuda (streams and events), type-asserted by fsdp, so code
//     written against Device stays correct without it. Buffers may be used from
//     several goroutines at once as long as no two touch the same elements (a
//     collective filling one unit while an op reads another).
package device

import (
	"errors"
	"fmt"
)

// Device allocates buffers and runs the trainer's operations on them.
type Device interface {
	// Name says what the device is ("cpu", "cpu-float64", "cuda:0").
	Name() string

	// Alloc returns a zeroed buffer of n elements charged to category cat. Over the
	// device's byte limit it returns an error wrapping ErrOutOfMemory.
	Alloc(n int, cat Category) (Buffer, error)
	// Free releases a buffer returned by Alloc; views (Slice) are not freed on their own.
	Free(b Buffer)
	// Memory reports the bytes held now and at peak, per category and in total.
	Memory() Stats
	// ResetPeak sets every peak to the current figure, to measure a phase on its own.
	ResetPeak()
	// Sync waits until every op issued has finished and reports a device failure.
	Sync() error

	// CopyFromHost copies len(src) elements into dst (len(src) == dst.Len()).
	CopyFromHost(dst Buffer, src []float32)
	// CopyToHost copies src into dst (len(dst) == src.Len()), waiting for pending ops.
	CopyToHost(dst []float32, src Buffer)
	// Copy copies src into dst (same length, same device); overlapping views are allowed.
	Copy(dst, src Buffer)
	// Zero sets every element of b to 0.
	Zero(b Buffer)
	// Add computes dst += alpha·src.
	Add(dst, src Buffer, alpha float32)
	// Scale computes x *= alpha.
	Scale(x Buffer, alpha float32)
	// Sum returns Σ x, accumulated in float64 (the loss from per-token losses).
	Sum(x Buffer) float64
	// SumSquares returns Σ x², accumulated in float64 (global-norm gradient clipping).
	SumSquares(x Buffer) float64

	// MatMul computes C = alpha·op(A)·op(B) + beta·C, where C is m×n, op(A) is m×k
	// (A is k×m when transA), op(B) is k×n (B is n×k when transB). beta = 0 ignores
	// C's previous contents; beta = 1 accumulates (weight gradients).
	MatMul(c, a, b Buffer, transA, transB bool, m, n, k int, alpha, beta float32)

	// EmbeddingForward gathers rows: out[i,:] = table[tokens[i],:] (out is
	// [len(tokens), dim]).
	EmbeddingForward(out, table Buffer, tokens []int32, dim int)
	// EmbeddingBackward scatters: dtable[tokens[i],:] += dout[i,:].
	EmbeddingBackward(dtable, dout Buffer, tokens []int32, dim int)

	// RMSNormForward computes out = x / sqrt(mean(x²) + eps) ⊙ weight per row of x
	// ([rows, dim]) and saves the reciprocal root (rstd, [rows]) for backward.
	RMSNormForward(out, rstd, x, weight Buffer, rows, dim int, eps float32)
	// RMSNormBackward adds into dx and dweight from dout, x, weight and the saved rstd.
	RMSNormBackward(dx, dweight, dout, x, weight, rstd Buffer, rows, dim int)

	// RoPEForward rotates x ([batch, seq, heads, headDim]) in place by its position,
	// pairing element i with i + headDim/2 (Hugging Face's rotate_half convention).
	RoPEForward(x Buffer, s RoPEShape)
	// RoPEBackward applies the inverse rotation to the gradient dx in place.
	RoPEBackward(dx Buffer, s RoPEShape)

	// AttentionForward computes causal softmax(q·kᵀ/sqrt(headDim))·v per head, with
	// query head h reading kv head h/(heads/kvHeads) (grouped-query attention as
	// Hugging Face's repeat_kv). It writes out ([batch, seq, heads, headDim]) and
	// the row log-sum-exp of the scaled scores (lse, [batch, heads, seq]), all that
	// backward needs besides q, k, v and out: the probabilities are recomputed, as
	// fused (flash) attention does, and never stored.
	AttentionForward(out, lse, q, k, v Buffer, s AttnShape)
	// AttentionBackward adds into dq, dk and dv.
	AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse Buffer, s AttnShape)

	// SwiGLUForward computes out = silu(gate) ⊙ up, silu(g) = g·sigmoid(g).
	SwiGLUForward(out, gate, up Buffer)
	// SwiGLUBackward adds into dgate and dup.
	SwiGLUBackward(dgate, dup, dout, gate, up Buffer)

	// CrossEntropyForward writes each row's loss, logsumexp(logits_i) −
	// logits_i[targets_i], into losses ([len(targets)]); logits are [len(targets), vocab].
	CrossEntropyForward(losses, logits Buffer, targets []int32, vocab int)
	// CrossEntropyBackward writes dlogits = scale·(softmax(logits) − onehot(targets));
	// dlogits may be logits itself. scale = 1/tokens gives the gradient of the mean.
	CrossEntropyBackward(dlogits, logits Buffer, targets []int32, vocab int, scale float32)

	// AdamW updates params, m and v in place from grads, exactly as
	// torch.optim.AdamW (decoupled weight decay, bias-corrected moments).
	AdamW(params, grads, m, v Buffer, c AdamWConfig)
}

// Buffer is an opaque span of device memory, owned by one Device. Implementations
// are pointers, so buffers compare by identity and can be map keys.
type Buffer interface {
	// Len is the length in elements.
	Len() int
	// Category is the accounting category of the allocation the buffer belongs to.
	Category() Category
	// Device is the device that owns the memory.
	Device() Device
	// Slice returns a view of n elements from off that shares the memory and is not
	// accounted on its own (a tensor inside a flat parameter). It panics when the
	// range is outside the buffer.
	Slice(off, n int) Buffer
}

// HostBuffer is implemented by buffers that live in host memory (cpu), so host
// code such as TCP collectives can read and write them without a copy.
type HostBuffer interface {
	Buffer
	// Host returns the buffer's elements; writes go to the buffer. It returns nil
	// when the storage is not float32 (the cpu device in float64 mode).
	Host() []float32
}

// RoPEShape is the geometry of one RoPEForward/RoPEBackward call.
type RoPEShape struct {
	Batch, Seq, Heads, HeadDim int
	// Theta is the frequency base: position t rotates pair i by t·Theta^(−2i/HeadDim).
	Theta float64
}

// Len is the number of elements a buffer of this shape holds.
func (s RoPEShape) Len() int { return s.Batch * s.Seq * s.Heads * s.HeadDim }

// AttnShape is the geometry of one attention call.
type AttnShape struct {
	Batch, Seq, Heads, KVHeads, HeadDim int
}

// QLen is the number of elements of q, out and dout.
func (s AttnShape) QLen() int { return s.Batch * s.Seq * s.Heads * s.HeadDim }

// KVLen is the number of elements of k and of v.
func (s AttnShape) KVLen() int { return s.Batch * s.Seq * s.KVHeads * s.HeadDim }

// LSELen is the number of elements of the saved log-sum-exp.
func (s AttnShape) LSELen() int { return s.Batch * s.Heads * s.Seq }

// AdamWConfig is one AdamW step's hyperparameters (torch.optim.AdamW's names).
type AdamWConfig struct {
	LR, Beta1, Beta2, Eps, WeightDecay float64
	// Step is the 1-based count of updates, this one included (bias correction).
	Step int
}

// Category says what an allocation is for, so peak memory can be split the way
// the FSDP papers do.
type Category int

// Accounting categories.
const (
	Params      Category = iota // model parameters (sharded or gathered)
	Grads                       // parameter gradients
	Optimizer                   // optimizer state (AdamW m and v)
	Activations                 // activations saved for backward, and their gradients
	Comm                        // communication buffers
	Other                       // anything else
	NumCategories
)

var categoryNames = [NumCategories]string{"params", "grads", "optimizer", "activations", "comm", "other"}

// String returns the category's lower-case name ("params", "grads", ...).
func (c Category) String() string {
	if c < 0 || c >= NumCategories {
		return fmt.Sprintf("category(%d)", int(c))
	}
	return categoryNames[c]
}

// Valid reports whether c is one of the defined categories.
func (c Category) Valid() bool { return c >= 0 && c < NumCategories }

// ErrOutOfMemory is wrapped by the error of an allocation over the device's limit.
var ErrOutOfMemory = errors.New("out of device memory")
