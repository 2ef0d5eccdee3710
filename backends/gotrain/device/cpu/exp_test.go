package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExpf compares expf with math.Exp over the range softmax and sigmoid use,
// on a dense grid, and at the edges.
func TestExpf(t *testing.T) {
	worst, at := 0.0, float32(0)
	for i := -2_000_000; i <= 2_000_000; i++ {
		x := float32(i) * 4.4e-5 // [−88, 88]
		want := math.Exp(float64(x))
		if want < 0x1p-126 || want > math.MaxFloat32 {
			continue
		}
		if rel := math.Abs(float64(expf(x))-want) / want; rel > worst {
			worst, at = rel, x
		}
	}
	assert.Less(t, worst, 2.5e-7, "worst relative error %.3g at x=%v (2 ulp of float32 is 2.4e-7)", worst, at)

	for _, tc := range []struct {
		x, want float32
	}{
		{0, 1}, {float32(math.Copysign(0, -1)), 1}, {1, float32(math.E)},
		{89, float32(math.Inf(1))}, {float32(math.Inf(1)), float32(math.Inf(1))},
		{-88, 0}, {float32(math.Inf(-1)), 0}, {-1e30, 0},
	} {
		assert.Equal(t, tc.want, expf(tc.x), "expf(%v)", tc.x)
	}
	assert.True(t, math.IsNaN(float64(expf(float32(math.NaN())))), "NaN stays NaN")
}

// TestExpShiftSum: the float32 and float64 paths agree, dst may alias src.
func TestExpShiftSum(t *testing.T) {
	src64 := []float64{-3, 0.5, 2, -40, 1e-3}
	src32 := make([]float32, len(src64))
	for i, v := range src64 {
		src32[i] = float32(v)
	}
	d64 := append([]float64(nil), src64...)
	s64 := expShiftSum(d64, d64, 2)
	s32 := expShiftSum(src32, src32, 2) // in place
	assert.InEpsilon(t, s64, s32, 1e-6)
	assert.InEpsilon(t, s64, sumExpShift(src64, 2), 1e-15)
	for i := range d64 {
		assert.InEpsilon(t, math.Exp(src64[i]-2), d64[i], 1e-15)
		assert.InEpsilon(t, d64[i], float64(src32[i]), 3e-7)
	}
}

// TestExpAffine: the loop that writes expf out agrees with expf bit for bit,
// over the range, the edges and NaN, for both signs of a.
func TestExpAffine(t *testing.T) {
	src := []float32{0, 1, -1, 88, 89, -87, -88, -1e30, 1e30, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	for i := -200_000; i <= 200_000; i++ {
		src = append(src, float32(i)*4.4e-4)
	}
	for _, tc := range []struct{ a, b float32 }{{1, 0}, {1, -3.5}, {-1, 0}} {
		dst := make([]float32, len(src))
		expAffine(dst, src, tc.a, tc.b)
		for i, x := range src {
			want := expf(tc.a*x + tc.b)
			if math.Float32bits(dst[i]) != math.Float32bits(want) {
				t.Fatalf("a=%v b=%v x=%v: expAffine %v, expf %v", tc.a, tc.b, x, dst[i], want)
			}
		}
	}
}

// TestMaxOf: the four running maxima find the maximum wherever it is, with
// tails of every length, and ignore NaNs as the single compare did.
func TestMaxOf(t *testing.T) {
	for n := 1; n <= 9; n++ {
		for at := range n {
			x := make([]float32, n)
			for i := range x {
				x[i] = float32(-i)
			}
			x[at] = 5
			assert.Equal(t, float32(5), maxOf(x), "n=%d at=%d", n, at)
		}
	}
	assert.Equal(t, float32(2), maxOf([]float32{float32(math.NaN()), 2, 1, float32(math.NaN()), 0}))
	assert.True(t, math.IsInf(float64(maxOf([]float32{})), -1))
}
