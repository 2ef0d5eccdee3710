package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	. "github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// Every kernel against the cpu device's op on odd shapes, under both schedule
// orders. Tolerances, per op (|got − want| ≤ atol + rtol·|want|):
//   - bit for bit: zero, copy, add, scale, casts, embedding forward and backward,
//     RMSNorm dweight's order, RoPE (same tables, same operations), AdamW.
//   - sums: rtol 1e-5 (float partials in a tree against float64).
//   - RMSNorm, SwiGLU, cross-entropy: rtol 2e-5, atol 1e-6 (float vs float64
//     row reductions and exp).
//   - attention: rtol 1e-4, atol 2e-5 (online softmax in float, different
//     summation order than the cpu's GEMMs).

// ref is a cpu reference device.
type ref struct {
	t *testing.T
	d device.Device
}

func newRef(t *testing.T) ref { return ref{t, cpu.New(cpu.Options{})} }

// buf allocates a cpu buffer holding x.
func (r ref) buf(x []float32) device.Buffer {
	b, err := r.d.Alloc(len(x), device.Other)
	require.NoError(r.t, err)
	r.d.CopyFromHost(b, x)
	return b
}

// host reads a cpu buffer.
func (r ref) host(b device.Buffer) []float32 {
	x := make([]float32, b.Len())
	r.d.CopyToHost(x, b)
	return x
}

func randn(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

func tokens(rng *rand.Rand, n, vocab int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(rng.IntN(vocab))
	}
	return x
}

func grid1(n int) [3]int { return [3]int{n, 1, 1} }

func TestElementwise(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 7, 255, 256, 1000, 70001} {
				t.Run(name("n%d", n), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), 1))
					r := newRef(t)
					x, y := randn(rng, n, 1), randn(rng, n, 3)
					n64 := int64(n)
					// A grid smaller than n/256 exercises the grid-stride loop.
					g := grid1(max(1, GridStride(n64)/3))

					got := d.run(t, &Zero, g, 0, [][]byte{f32b(x)}, buf(0), n64)
					requireClose(t, "zero", make([]float32, n), bf32(got[0]), 0, 0)

					got = d.run(t, &Copy, g, 0, [][]byte{f32b(y), f32b(x)}, buf(0), buf(1), n64)
					requireClose(t, "copy", x, bf32(got[0]), 0, 0)

					dst := r.buf(y)
					r.d.Add(dst, r.buf(x), -0.37)
					got = d.run(t, &Add, g, 0, [][]byte{f32b(y), f32b(x)}, buf(0), buf(1), float32(-0.37), n64)
					requireClose(t, "add", r.host(dst), bf32(got[0]), 0, 0)

					// In place: dst += alpha·dst.
					dst = r.buf(y)
					r.d.Add(dst, dst, 2.5)
					got = d.run(t, &Add, g, 0, [][]byte{f32b(y)}, buf(0), buf(0), float32(2.5), n64)
					requireClose(t, "add in place", r.host(dst), bf32(got[0]), 0, 0)

					sx := r.buf(x)
					r.d.Scale(sx, 1.0/3)
					got = d.run(t, &Scale, g, 0, [][]byte{f32b(x)}, buf(0), float32(1.0/3), n64)
					requireClose(t, "scale", r.host(sx), bf32(got[0]), 0, 0)
				})
			}
		})
	}
}

// bf16 is the reference rounding: nearest even, NaN quiet.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestCasts(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.01171875, 3.4e38, -3.4e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-45, 65504, 1.0000001}
	rng := rand.New(rand.NewPCG(3, 4))
	x := append(special, randn(rng, 997, 100)...)
	n := int64(len(x))
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			got := d.run(t, &CastF32ToBF16, grid1(GridStride(n)), 0, [][]byte{make([]byte, 2*n), f32b(x)}, buf(0), buf(1), n)
			bits := got[0]
			for i, v := range x {
				g := uint16(bits[2*i]) | uint16(bits[2*i+1])<<8
				require.Equal(t, bf16(v), g, "element %d (%v)", i, v)
			}
			got = d.run(t, &CastBF16ToF32, grid1(GridStride(n)), 0, [][]byte{make([]byte, 4*n), bits}, buf(0), buf(1), n)
			back := bf32(got[0])
			for i := range x {
				g := uint16(bits[2*i]) | uint16(bits[2*i+1])<<8
				require.Equal(t, uint32(g)<<16, math.Float32bits(back[i]), "element %d", i)
			}
		})
	}
}

func TestSums(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 33, 256, 4097, 300001} {
				rng := rand.New(rand.NewPCG(uint64(n), 9))
				r := newRef(t)
				x := randn(rng, n, 1)
				xb := r.buf(x)
				for sq, want := range []float64{r.d.Sum(xb), r.d.SumSquares(xb)} {
					parts := SumGrid(int64(n))
					got := d.run(t, &SumPartials, grid1(parts), 0, [][]byte{make([]byte, 4*parts), f32b(x)},
						buf(0), buf(1), int64(n), int32(sq))
					partials := bf32(got[0])
					host := 0.0
					for _, p := range partials {
						host += float64(p)
					}
					require.InDelta(t, want, host, 1e-5*math.Max(1, math.Abs(want)), "n=%d squares=%d partials on the host", n, sq)
					got = d.run(t, &SumFinish, grid1(1), 0, [][]byte{make([]byte, 4), got[0]}, buf(0), buf(1), int32(parts))
					require.InDelta(t, want, float64(bf32(got[0])[0]), 1e-5*math.Max(1, math.Abs(want)), "n=%d squares=%d finished", n, sq)
				}
			}
		})
	}
}
