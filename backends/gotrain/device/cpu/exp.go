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
	// The polynomial by Estrin's scheme (as expAffine, which must agree bit for
	// bit): three independent pairs, then two steps, where Horner's is a chain
	// of ten dependent operations.
	a, b, c := expP0*r+expP1, expP2*r+expP3, expP4*r+expP5
	y := (c+z*(b+z*a))*z + r + 1
	return y * math.Float32frombits(uint32(n+127)<<23)
}

// expAffine sets dst[j] = expf(a·src[j] + b) for a = ±1: softmax's shifted
// exponentials (a = 1, b = −max) and sigmoid's e^−g (a = −1, b = 0), a·x + b
// rounding as x − max and −g do. It is expf's body written out in the loop:
// expf is past the inliner's budget, and a call per element cost about as much
// as the exponential itself. dst may be src.
func expAffine(dst, src []float32, a, b float32) {
	dst = dst[:len(src)]
	for j, v := range src {
		x := a*v + b
		var y float32
		if x >= expMin && x <= expMax { // one test for the common case; NaN fails it. expf, step by step:
			t := x*expLog2e + expRound
			n := int32(math.Float32bits(t)) - int32(math.Float32bits(expRound))
			fn := t - expRound
			r := x - fn*expC1 - fn*expC2
			z := r * r
			a, b, c := expP0*r+expP1, expP2*r+expP3, expP4*r+expP5
			p := (c+z*(b+z*a))*z + r + 1
			y = p * math.Float32frombits(uint32(n+127)<<23)
		} else {
			y = expf(x)
		}
		dst[j] = y
	}
}

// expChunk is the length of the stack buffers that hold a run of exponentials
// between expAffine and the loop that uses them: 2 KiB, in L1.
const expChunk = 512

// expShiftSum sets dst[j] = e^(src[j] − shift) and returns Σ_j dst[j] in
// float64; dst may be src (each element is read before it is written).
func expShiftSum[T float](dst, src []T, shift T) float64 {
	s := 0.0
	dst = dst[:len(src)]
	if s32, ok := any(src).([]float32); ok {
		d32 := any(dst).([]float32)
		expAffine(d32, s32, 1, -float32(shift))
		return sum(d32)
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
		var buf [expChunk]float32
		for lo := 0; lo < len(x32); lo += expChunk {
			c := x32[lo:min(lo+expChunk, len(x32))]
			e := buf[:len(c)]
			expAffine(e, c, 1, -float32(shift))
			s += sum(e)
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
	// Four running maxima, as one is a chain of dependent compares; max is exact,
	// so the result is the same.
	m0, m1, m2, m3 := T(math.Inf(-1)), T(math.Inf(-1)), T(math.Inf(-1)), T(math.Inf(-1))
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		if v[0] > m0 { // not the builtin max: its NaN handling costs a branch per element
			m0 = v[0]
		}
		if v[1] > m1 {
			m1 = v[1]
		}
		if v[2] > m2 {
			m2 = v[2]
		}
		if v[3] > m3 {
			m3 = v[3]
		}
	}
	for ; i < len(x); i++ {
		if x[i] > m0 {
			m0 = x[i]
		}
	}
	if m1 > m0 {
		m0 = m1
	}
	if m2 > m0 {
		m0 = m2
	}
	if m3 > m0 {
		m0 = m3
	}
	return m0
}
