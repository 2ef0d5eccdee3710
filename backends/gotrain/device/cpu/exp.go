package cpu

import "math"

// The exponentials of softmax, cross-entropy and SwiGLU were most of the step
// once the GEMMs ran on OpenBLAS: math.Exp in float64 costs ~8 ns an element.
// The float32 device uses expf below (Cephes' expf, the polynomial most C
// libraries and SLEEF-style vector libraries use for float32), ~1 ulp; the
// float64 device, the reference, keeps math.Exp.

// Cephes expf's constants: ln 2 split in two so that n·ln2 is exact in float32,
// and the minimax polynomial of e^r on [−ln2/2, ln2/2].
const (
	expLog2e = 1.44269504088896341
	expC1    = 0.693359375
	expC2    = -2.12194440e-4
	expP0    = 1.9875691500e-4
	expP1    = 1.3981999507e-3
	expP2    = 8.3334519073e-3
	expP3    = 4.1665795894e-2
	expP4    = 1.6666665459e-1
	expP5    = 5.0000001201e-1
	// expMax and expMin bound the arguments whose result is a normal float32;
	// past them e^x is +Inf or 0 (0 where the exact result is below 1.2e-38, which
	// no softmax sum or sigmoid here can tell from 0).
	expMax = 88.72283905206835
	expMin = -87.33654475055310
	// expRound rounds to an integer by addition: 1.5·2^23 leaves no fraction bits.
	expRound = 12582912
)

// expf is e^x in float32: x = n·ln2 + r with |r| ≤ ln2/2, e^r by a degree-7
// polynomial, 2^n put into the exponent bits. NaN stays NaN.
func expf(x float32) float32 {
	switch {
	case x > expMax:
		return float32(math.Inf(1))
	case x < expMin:
		return 0
	case x != x:
		return x
	}
	t := x*expLog2e + expRound
	n := int32(math.Float32bits(t)) - int32(math.Float32bits(expRound))
	fn := t - expRound
	r := x - fn*expC1 - fn*expC2
	z := r * r
	y := (((((expP0*r+expP1)*r+expP2)*r+expP3)*r+expP4)*r+expP5)*z + r + 1
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// expShiftSum sets dst[j] = e^(src[j] − shift) and returns Σ_j dst[j] in
// float64; dst may be src (each element is read before it is written).
func expShiftSum[T float](dst, src []T, shift T) float64 {
	s := 0.0
	dst = dst[:len(src)]
	if s32, ok := any(src).([]float32); ok {
		d32, sh := any(dst).([]float32), float32(shift)
		for j, v := range s32 {
			e := expf(v - sh)
			d32[j] = e
			s += float64(e)
		}
		return s
	}
	for j, v := range src {
		e := math.Exp(float64(v) - float64(shift))
		dst[j] = T(e)
		s += e
	}
	return s
}

// sumExpShift returns Σ_j e^(x[j] − shift) in float64, x unchanged.
func sumExpShift[T float](x []T, shift T) float64 {
	s := 0.0
	if x32, ok := any(x).([]float32); ok {
		sh := float32(shift)
		for _, v := range x32 {
			s += float64(expf(v - sh))
		}
		return s
	}
	for _, v := range x {
		s += math.Exp(float64(v) - float64(shift))
	}
	return s
}

// maxOf returns the largest element of x (−Inf for an empty x, and for one of
// NaNs only: a NaN then reaches the sum through exp, as with max).
func maxOf[T float](x []T) T {
	mx := T(math.Inf(-1))
	for _, v := range x {
		if v > mx { // not the builtin max: its NaN handling costs a branch per element
			mx = v
		}
	}
	return mx
}
