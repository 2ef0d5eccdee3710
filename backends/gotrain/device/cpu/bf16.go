package cpu

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// bf16 on the reference device. A bf16 buffer is charged 2 bytes an element, as
// the cuda device stores it, so the accounting of both devices agrees byte for
// byte; in host memory it stays a []T (the process's RSS does not halve). It holds
// values that are exactly bfloat16: every op computes in T as it does for float32
// buffers and then rounds each bf16 buffer it wrote to nearest even
// (device.RoundBF16), which is what a kernel that loads bf16, computes in fp32 and
// stores bf16 keeps. EmbeddingBackward, whose kernel adds a repeated token's rows
// into memory one after the other, rounds after each token.

var _ device.MixedPrecision = (*dev[float32])(nil)

// DType is the buffer's storage type.
func (b *buffer[T]) DType() device.DType { return b.a.dt }

// AllocDType returns a zeroed buffer of n elements of type t, charged t.Size()
// bytes each.
func (d *dev[T]) AllocDType(n int, t device.DType, cat device.Category) (device.Buffer, error) {
	if t != device.F32 && t != device.BF16 {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: unknown dtype", d.name, n, t)
	}
	if n < 0 {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: negative length", d.name, n, cat)
	}
	bytes := int64(n) * d.elemBytes
	if t == device.BF16 {
		bytes = int64(n) * t.Size()
	}
	if err := d.tr.Reserve(bytes, cat); err != nil {
		return nil, fmt.Errorf("%s: %w", d.name, err)
	}
	return &buffer[T]{d: d, data: d.pool.take(n, d.elemBytes), a: &allocation{bytes: bytes, cat: cat, dt: t}}, nil
}

// AllocDTypeOn is AllocDType over memory the caller owns, len(mem) elements: fsdp
// puts the gathered parameters of ranks on one node in one physical buffer of the
// shared-memory communicator's arena (comm.SharedGatherer), and under zero-copy
// gathers each rank's parameter shard in its piece of that buffer. The buffer is charged
// exactly as AllocDType's, so the accounting is per rank and does not depend on
// where the memory lives (the sharing is physical only); it is not zeroed (a peer
// may read the memory until the caller's all-gather says otherwise), and Free does
// not keep it: the caller gives it back to its owner after Free. Only a float32
// device can, as the memory is float32.
func (d *dev[T]) AllocDTypeOn(mem []float32, t device.DType, cat device.Category) (device.Buffer, error) {
	data, ok := any(mem).([]T)
	if !ok {
		return nil, fmt.Errorf("%s: allocate over float32 memory: the device stores %T", d.name, *new(T))
	}
	if t != device.F32 && t != device.BF16 {
		return nil, fmt.Errorf("%s: allocate %d elements of %v: unknown dtype", d.name, len(mem), t)
	}
	bytes := int64(len(mem)) * t.Size()
	if err := d.tr.Reserve(bytes, cat); err != nil {
		return nil, fmt.Errorf("%s: %w", d.name, err)
	}
	return &buffer[T]{d: d, data: data, a: &allocation{bytes: bytes, cat: cat, dt: t, external: true}}, nil
}

// Cast writes src into dst, rounding to bf16 when dst is bf16.
func (d *dev[T]) Cast(dst, src device.Buffer) {
	in := d.buf("Cast", src).data
	copy(d.get("Cast", dst, len(in)), in)
	d.round(dst)
}

// round rounds the bf16 buffers among bs to bf16 in place, after an op wrote them.
func (d *dev[T]) round(bs ...device.Buffer) {
	for _, b := range bs {
		x, ok := b.(*buffer[T])
		if !ok || x.a.dt != device.BF16 { // a foreign buffer: the op's own check panics

			continue
		}
		for i, v := range x.data {
			x.data[i] = T(device.RoundBF16(float32(v)))
		}
	}
}

// dtypes checks an op's dtypes (device.CheckDTypes) and returns the tensors'.
func (d *dev[T]) dtypes(op string, stats []device.Buffer, tensors ...device.Buffer) device.DType {
	return device.CheckDTypes(d.name, op, stats, tensors...)
}

// embeddingBackwardBF16 is embeddingBackward into a bf16 table: each token's row
// is added and rounded before the next, as the kernel's read-add-store per token.
func embeddingBackwardBF16[T float](dtable, dout []T, tokens []int32, dim int) {
	for i, t := range tokens {
		row := dtable[int(t)*dim : (int(t)+1)*dim]
		add(row, dout[i*dim:(i+1)*dim], 1)
		for j, v := range row {
			row[j] = T(device.RoundBF16(float32(v)))
		}
	}
}
