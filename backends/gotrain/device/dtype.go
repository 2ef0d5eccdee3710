package device

import (
	"fmt"
	"math"
)

// DType is the storage type of a buffer's elements. Alloc returns F32 buffers, so
// code written before mixed precision is unchanged; devices that can store bf16
// implement MixedPrecision.
//
// The trainer's bf16 policy is FSDP2's MixedPrecisionPolicy(param_dtype=bfloat16,
// reduce_dtype=float32): fp32 sharded master parameters, gradient shards and AdamW
// state; bf16 gathered parameters, activations and unsharded gradients; fp32 row
// statistics (RMSNorm's rstd, attention's log-sum-exp, per-token losses). An op
// computes in fp32 whatever its buffers store: it widens bf16 inputs, computes as
// the fp32 op does and rounds each bf16 output to nearest even once, when it
// writes it.
type DType int

const (
	// F32 is IEEE binary32, 4 bytes an element.
	F32 DType = iota
	// BF16 is bfloat16 (binary32's upper half: 8 exponent bits, 7 mantissa bits),
	// 2 bytes an element.
	BF16
)

// String is the dtype's name as PyTorch spells it ("float32", "bfloat16").
func (t DType) String() string {
	switch t {
	case F32:
		return "float32"
	case BF16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", int(t))
}

// Size is the bytes an element of t takes on a device (and in the accounting).
func (t DType) Size() int64 {
	if t == BF16 {
		return 2
	}
	return 4
}

// Typed is implemented by buffers that may hold another dtype than F32.
type Typed interface {
	// DType is the storage type of the buffer's elements.
	DType() DType
}

// DTypeOf is b's storage type: F32 unless b says otherwise.
func DTypeOf(b Buffer) DType {
	if t, ok := b.(Typed); ok {
		return t.DType()
	}
	return F32
}

// MixedPrecision is implemented by devices that store bf16 buffers. Every op of
// Device accepts them where the trainer's policy puts bf16: all the tensors of one
// op call share one dtype, except the fp32 row statistics (rstd, lse, losses) and
// Add's fp32 destination, which may add a bf16 source (gradient accumulation in
// fp32). AdamW runs on fp32 only. Copy needs one dtype on both sides; Cast converts.
type MixedPrecision interface {
	Device
	// AllocDType is Alloc for elements of type t, charged t.Size() bytes each.
	AllocDType(n int, t DType, cat Category) (Buffer, error)
	// Cast writes src into dst converting the dtype (same length): to bf16 it
	// rounds to nearest even (a NaN stays a quiet NaN), to fp32 it is exact.
	Cast(dst, src Buffer)
}

// AllocDType allocates n elements of type t on d: d.Alloc for F32, and for BF16 the
// device's MixedPrecision, or an error saying the device stores fp32 only.
func AllocDType(d Device, n int, t DType, cat Category) (Buffer, error) {
	if t == F32 {
		return d.Alloc(n, cat)
	}
	mp, ok := d.(MixedPrecision)
	if !ok {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: the device stores float32 only (train with mixed_precision fp32)", d.Name(), n, t)
	}
	return mp.AllocDType(n, t, cat)
}

// CheckDTypes panics, naming op, unless every tensor has the dtype of the first
// and every stat is F32; it returns the tensors' dtype. Devices call it so that
// the cpu reference refuses exactly the combinations the cuda kernels lack.
func CheckDTypes(dev, op string, stats []Buffer, tensors ...Buffer) DType {
	t := DTypeOf(tensors[0])
	for i, b := range tensors[1:] {
		if u := DTypeOf(b); u != t {
			panic(fmt.Sprintf("%s: %s: tensor %d is %v, tensor 0 is %v: one op's tensors share a dtype (Cast first)", dev, op, i+1, u, t))
		}
	}
	for _, b := range stats {
		if u := DTypeOf(b); u != F32 {
			panic(fmt.Sprintf("%s: %s: row statistics are float32, got %v", dev, op, u))
		}
	}
	return t
}

// RoundBF16 is x rounded to the nearest bfloat16, ties to even, as a float32 (a
// NaN stays a quiet NaN with its sign): what a kernel storing bf16 keeps of x.
func RoundBF16(x float32) float32 {
	return math.Float32frombits(uint32(BF16Bits(x)) << 16)
}

// BF16Bits is the bfloat16 encoding of x rounded to nearest even (the kernels'
// f32_to_bf16).
func BF16Bits(x float32) uint16 {
	u := math.Float32bits(x)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// FromBF16Bits is the float32 value of a bfloat16 encoding (exact).
func FromBF16Bits(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }
