package comm

import (
	"context"
	"fmt"
	"math"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// bf16 on host communicators. The cpu device keeps a bf16 buffer's values in
// float32 slots that hold exact bfloat16 values, so the upper half of each
// float32 is the whole value: the all-gather of bf16 buffers sends those halves,
// two to a float32 wire element, and moves (and counts) 2 bytes an element, as
// NCCL's ncclBfloat16 all-gather does. The conversion is lossless. Reductions of
// bf16 are refused: the trainer reduces in fp32 (reduce_dtype), and a ring that
// summed in bf16 would round every partial sum.

// allGatherBF16 all-gathers src into dst (host views of bf16 buffers) through a
// packed float32 array of ⌈n/2⌉ elements a rank.
func allGatherBF16(ctx context.Context, c Communicator, dst, src []float32) error {
	n, size := len(src), c.Size()
	if len(dst) != n*size {
		return fmt.Errorf("comm: all_gather: dst has %d elements, want len(src)×size = %d×%d = %d", len(dst), n, size, n*size)
	}
	words := (n + 1) / 2
	send, recv := make([]float32, words), make([]float32, words*size)
	packBF16(send, src)
	if err := c.AllGather(ctx, recv, send); err != nil {
		return err
	}
	for r := range size {
		unpackBF16(dst[r*n:(r+1)*n], recv[r*words:(r+1)*words])
	}
	return nil
}

// packBF16 puts the bf16 halves of src, pairwise, into the bits of dst.
func packBF16(dst, src []float32) {
	for i := range dst {
		lo := math.Float32bits(src[2*i]) >> 16
		var hi uint32
		if 2*i+1 < len(src) {
			hi = math.Float32bits(src[2*i+1]) & 0xffff0000
		}
		dst[i] = math.Float32frombits(hi | lo)
	}
}

// unpackBF16 is packBF16's inverse.
func unpackBF16(dst, src []float32) {
	for i := range dst {
		w := math.Float32bits(src[i/2])
		if i%2 == 0 {
			dst[i] = device.FromBF16Bits(uint16(w))
		} else {
			dst[i] = device.FromBF16Bits(uint16(w >> 16))
		}
	}
}

// refuseBF16 is the error of a reduction on bf16 buffers.
func refuseBF16(kind Kind, bs ...device.Buffer) error {
	for _, b := range bs {
		if device.DTypeOf(b) != device.F32 {
			return fmt.Errorf("comm: %s of a %v buffer: reductions run in float32 (reduce_dtype); cast the gradient first", kind, device.DTypeOf(b))
		}
	}
	return nil
}
