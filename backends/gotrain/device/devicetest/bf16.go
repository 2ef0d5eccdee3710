package devicetest

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// Tolerances of the bf16 suite. Every op computes in fp32 (the reference in
// float64) and rounds its bf16 outputs once, so the device under test and the
// reference differ where their arithmetic puts a value on the two sides of a
// rounding boundary: one bf16 ulp (2⁻⁷ relative) at a value, two where a backward
// reads its own forward's rounded output (attention's out, a second pass adding
// into a rounded gradient). Relative to max(1, max |reference|), as AssertClose.
const (
	// TolBF16: every op with bf16 tensors, forward and backward.
	TolBF16 = 2.0 / 128
	// TolBF16Stat: fp32 row statistics (rstd, lse, losses) computed from the same
	// bf16 inputs: fp32 arithmetic only.
	TolBF16Stat = 1e-4
)

// bf16Device is a device whose Alloc returns bf16 buffers, so that every OpCase
// runs with bf16 tensors; AllocF32 reaches the fp32 row statistics through it.
type bf16Device struct {
	device.MixedPrecision
}

// Alloc allocates bf16.
func (d bf16Device) Alloc(n int, cat device.Category) (device.Buffer, error) {
	return d.AllocDType(n, device.BF16, cat)
}

// BF16 returns d with Alloc allocating bf16 buffers (AllocF32 still gives fp32).
func BF16(t *testing.T, d device.Device) device.Device {
	t.Helper()
	mp, ok := d.(device.MixedPrecision)
	require.True(t, ok, "%s does not implement device.MixedPrecision", d.Name())
	return bf16Device{mp}
}

// AllocF32 allocates n fp32 elements of category Other on d, also when d is BF16's.
func AllocF32(t *testing.T, d device.Device, n int) device.Buffer {
	t.Helper()
	if b, ok := d.(bf16Device); ok {
		d = b.MixedPrecision
	}
	return Alloc(t, d, n)
}

// RunBF16 is the bf16 suite: every OpCase with bf16 tensors (fp32 statistics) on
// the device under test against reference (the cpu device in float64, storing
// bf16), the casts and the fp32-accumulating Add bit for bit, bf16 storage
// (every element a bf16 value, 2 bytes accounted), and the dtype rules.
func RunBF16(t *testing.T, newDevice Factory, reference func() device.Device) {
	t.Run("ops", func(t *testing.T) { testOpsBF16(t, BF16(t, newDevice(t, 0)), BF16(t, reference())) })
	t.Run("casts and fp32 accumulation", func(t *testing.T) { testCasts(t, newDevice(t, 0)) })
	t.Run("accounting", func(t *testing.T) { testAccountingBF16(t, newDevice(t, 0)) })
	t.Run("dtype rules", func(t *testing.T) { testDTypeRules(t, newDevice(t, 0)) })
}

// statOutput names the OpCases whose forward output is an fp32 statistic.
func statOutput(c OpCase) bool { return len(c.Name) > 13 && c.Name[:13] == "cross-entropy" }

// testOpsBF16 runs every OpCase on dut and ref, both storing bf16, with inputs
// rounded to bf16 (both devices see the same values).
func testOpsBF16(t *testing.T, dut, ref device.Device) {
	for _, c := range OpCases() {
		t.Run(c.Name, func(t *testing.T) {
			inputs := map[string][]float64{}
			for name, v := range c.Inputs {
				inputs[name] = roundedBF16(v)
			}
			rng := rand.New(rand.NewPCG(7, uint64(len(c.Name))))
			inRef, inDut := Upload(t, ref, inputs), Upload(t, dut, inputs)
			o, _ := c.Run(t, ref, inRef, nil, 0)
			dout := roundedBF16(Randoms(rng, o.Len(), 1))
			if c.Dout != nil {
				dout = c.Dout(o.Len())
			}
			wantOut, wantGrads := c.read(t, ref, inRef, dout, 1)
			gotOut, gotGrads := c.read(t, dut, inDut, dout, 1)
			sync(t, dut)
			tolFwd := TolBF16
			if statOutput(c) {
				tolFwd = TolBF16Stat
			} else {
				assertBF16Values(t, gotOut, "forward output")
			}
			AssertClose(t, wantOut, gotOut, tolFwd, "forward")
			require.Equal(t, SortedKeys(wantGrads), SortedKeys(gotGrads))
			for _, name := range SortedKeys(wantGrads) {
				assertBF16Values(t, gotGrads[name], "d"+name)
				AssertClose(t, wantGrads[name], gotGrads[name], TolBF16, "d"+name)
			}
			if !c.Overwrites {
				_, twice := c.read(t, dut, inDut, dout, 2)
				sync(t, dut)
				for _, name := range SortedKeys(gotGrads) {
					g2 := make([]float64, len(gotGrads[name]))
					for i, g := range gotGrads[name] {
						g2[i] = 2 * g
					}
					AssertClose(t, g2, twice[name], TolBF16, "backward adds into d"+name)
				}
			}
		})
	}
}

// roundedBF16 rounds every value to bf16.
func roundedBF16(v []float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(device.RoundBF16(float32(x)))
	}
	return out
}

// assertBF16Values checks that every value is a bf16 value: what a buffer that
// stores bf16 can hold.
func assertBF16Values(t *testing.T, v []float64, what string) {
	t.Helper()
	for i, x := range v {
		if f := float32(x); f != device.RoundBF16(f) && !math.IsNaN(x) {
			assert.Failf(t, "not bf16", "%s[%d] = %g is not a bf16 value: the buffer does not store bf16", what, i, x)
			return
		}
	}
}

// testCasts checks Cast both ways, Add of a bf16 source into fp32, and Copy, Zero
// and Sum on bf16, all bit for bit against Go's float32 arithmetic.
func testCasts(t *testing.T, d device.Device) {
	mp := d.(device.MixedPrecision)
	rng := rand.New(rand.NewPCG(11, 12))
	n := 1031 // not a multiple of any block
	src := make([]float32, n)
	for i := range src {
		src[i] = float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(40)-20)))
	}
	// Ties (even and odd mantissa), the largest finite, overflow to inf, the
	// smallest subnormal, signed zero, infinities and a NaN.
	copy(src, []float32{
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x3f80ffff),
		math.MaxFloat32, math.Float32frombits(0x7f7fffff), math.Float32frombits(1), float32(math.Copysign(0, -1)),
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	})
	f32 := Alloc(t, d, n)
	d.CopyFromHost(f32, src)
	b16, err := mp.AllocDType(n, device.BF16, device.Other)
	require.NoError(t, err)
	assert.Equal(t, device.BF16, device.DTypeOf(b16))
	assert.Equal(t, device.BF16, device.DTypeOf(b16.Slice(3, 5)), "views keep the dtype")
	mp.Cast(b16, f32)
	got := make([]float32, n)
	d.CopyToHost(got, b16)
	sync(t, d)
	for i, x := range src {
		want := device.RoundBF16(x)
		if math.IsNaN(float64(x)) {
			assert.True(t, math.IsNaN(float64(got[i])), "cast of NaN at %d", i)
			continue
		}
		if !assert.Equal(t, math.Float32bits(want), math.Float32bits(got[i]), "cast to bf16 of %g (%#x) at %d", x, math.Float32bits(x), i) {
			return
		}
	}
	back := Alloc(t, d, n)
	mp.Cast(back, b16)
	wide := make([]float32, n)
	d.CopyToHost(wide, back)
	for i := range got {
		if !math.IsNaN(float64(got[i])) {
			require.Equal(t, math.Float32bits(got[i]), math.Float32bits(wide[i]), "cast to fp32 is exact at %d", i)
		}
	}

	// fp32 += alpha·bf16, the gradient accumulation of the bf16 policy.
	acc := make([]float32, n)
	for i := range acc {
		acc[i] = float32(rng.NormFloat64())
	}
	small := make([]float32, n)
	for i := range small {
		small[i] = device.RoundBF16(float32(rng.NormFloat64()))
	}
	dst, s16 := Alloc(t, d, n), alloc16(t, mp, n)
	d.CopyFromHost(dst, acc)
	d.CopyFromHost(s16, small)
	d.Add(dst, s16, 0.5)
	sum := make([]float32, n)
	d.CopyToHost(sum, dst)
	for i := range acc {
		want := acc[i] + float32(0.5)*small[i]
		require.Equal(t, want, sum[i], "fp32 += 0.5·bf16 at %d", i)
	}

	// Copy, Zero and Sum on bf16 buffers.
	c16 := alloc16(t, mp, n)
	d.Copy(c16, s16)
	d.CopyToHost(got, c16)
	assert.Equal(t, small, got, "copy of bf16")
	var want float64
	for _, x := range small {
		want += float64(x)
	}
	assert.InEpsilon(t, want, d.Sum(c16), TolSum, "sum of bf16")
	d.Zero(c16.Slice(1, n-2))
	d.CopyToHost(got, c16)
	assert.Equal(t, small[0], got[0])
	assert.Equal(t, small[n-1], got[n-1])
	for i := 1; i < n-1; i++ {
		require.Zero(t, got[i], "zero of a bf16 view at %d", i)
	}
	sync(t, d)
}

func alloc16(t *testing.T, mp device.MixedPrecision, n int) device.Buffer {
	t.Helper()
	b, err := mp.AllocDType(n, device.BF16, device.Other)
	require.NoError(t, err)
	return b
}

// testAccountingBF16: a bf16 buffer is charged 2 bytes an element, its views
// nothing, and the limit counts bf16 bytes.
func testAccountingBF16(t *testing.T, d device.Device) {
	mp := d.(device.MixedPrecision)
	before := d.Memory()
	a, err := mp.AllocDType(1001, device.BF16, device.Params)
	require.NoError(t, err)
	b, err := mp.AllocDType(7, device.F32, device.Activations)
	require.NoError(t, err)
	_ = a.Slice(1, 500)
	m := d.Memory()
	assert.Equal(t, before.Current[device.Params]+2002, m.Current[device.Params])
	assert.Equal(t, before.Current[device.Activations]+28, m.Current[device.Activations])
	d.Free(a)
	d.Free(b)
	assert.Equal(t, before.Total, d.Memory().Total)
	sync(t, d)
}

// testDTypeRules: ops refuse mixed dtypes where the kernels have none, and AdamW
// refuses bf16 (the master weights and optimizer state are fp32).
func testDTypeRules(t *testing.T, d device.Device) {
	mp := d.(device.MixedPrecision)
	f, h := Alloc(t, d, 6), alloc16(t, mp, 6)
	assert.Panics(t, func() { d.MatMul(h, h, f, false, false, 2, 3, 2, 1, 0) }, "MatMul of bf16 and fp32")
	assert.Panics(t, func() { d.Copy(h, f) }, "Copy across dtypes (Cast converts)")
	assert.Panics(t, func() { d.Add(h, f, 1) }, "Add of fp32 into bf16")
	assert.Panics(t, func() { d.SwiGLUForward(h, f, h) }, "SwiGLU across dtypes")
	assert.Panics(t, func() { d.RMSNormForward(h, alloc16(t, mp, 2), h, alloc16(t, mp, 3), 2, 3, 1e-5) }, "a bf16 rstd")
	assert.Panics(t, func() { d.AdamW(h, h, h, h, device.AdamWConfig{LR: 1, Step: 1}) }, "AdamW on bf16")
	assert.NotPanics(t, func() { d.Add(f, h, 1) }, "fp32 += bf16")
	sync(t, d)
}
