//go:build cgo

package cuda

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// bf16 on the GPU: buffers of device.BF16 hold 2-byte bfloat16 encodings, views
// step 2 bytes an element, host copies convert on the host (rounding to nearest
// even on the way in, exactly on the way out), and each op runs the kernel twin
// of its tensors' dtype (device.CheckDTypes: the same rules as the cpu
// reference, which rounds its bf16 outputs where these kernels store them).

var _ device.MixedPrecision = (*Device)(nil)

// DType is the buffer's storage type.
func (b *buffer) DType() device.DType { return b.a.dt }

// toBF16 encodes src as bf16, rounding to nearest even.
func toBF16(src []float32) []uint16 {
	out := make([]uint16, len(src))
	for i, x := range src {
		out[i] = device.BF16Bits(x)
	}
	return out
}

// pick returns f32 or its bf16 twin b16 for the dtype the op's tensors share,
// panicking as the cpu device does on mixed dtypes or non-fp32 statistics.
func (d *Device) pick(op string, f32, b16 *kernels.Kernel, stats []device.Buffer, tensors ...device.Buffer) *kernels.Kernel {
	if device.CheckDTypes(d.name, op, stats, tensors...) == device.BF16 {
		if b16 == nil {
			panic(fmt.Sprintf("%s: %s: no bf16 kernel (the trainer runs it in fp32)", d.name, op))
		}
		return b16
	}
	return f32
}

// Cast converts src into dst with kernels.CastF32ToBF16 or CastBF16ToF32 (a Copy
// when both have one dtype).
func (d *Device) Cast(dst, src device.Buffer) {
	s := d.buf("Cast", src)
	t := d.get("Cast", dst, s.n)
	if s.a.dt == t.a.dt {
		d.Copy(dst, src)
		return
	}
	if s.n == 0 {
		return
	}
	k := &kernels.CastF32ToBF16
	if s.a.dt == device.BF16 {
		k = &kernels.CastBF16ToF32
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostCast(t.a.dt, s.a.dt, s.n) })()
	d.launch(k, grid{kernels.GridStride(int64(s.n)), 1, 1}, 0, ptrArg(t), ptrArg(s), i64Arg(s.n))
}
