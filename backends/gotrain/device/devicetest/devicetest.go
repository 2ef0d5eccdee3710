// Package devicetest is the conformance suite every device.Device runs: the cpu
// reference device in its own tests, the cuda device over the fake libraries here
// and over a real GPU in `make gpu-check`. Each op of the device under test runs on
// the same inputs as on a reference device (the cpu device in float64) and must
// agree within the op's stated tolerance, on small and odd shapes (not multiples
// of any block or tile), with in-place aliasing where the interface allows it.
// Forwards are also checked against plain formulas written here independently of
// any device, and memory accounting against the reference byte for byte.
package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// Factory opens a fresh device under test whose tracker refuses to go over limit
// bytes (0: no limit); it closes the device when t ends, if it needs closing.
type Factory func(t *testing.T, limit int64) device.Device

// Tolerances, relative to max(1, max |reference|) of the compared output, per op
// family. They cover float32 arithmetic in another summation order than the
// reference's float64 (a GPU's trees and tiles; FMA contraction), not algorithmic
// differences: the cpu device in float32 stays within them by a wide margin.
const (
	// TolElementwise: one or two roundings per element (add, scale, swiglu, rope,
	// embedding, adamw).
	TolElementwise = 2e-6
	// TolRow: row reductions of at most a few thousand terms (rmsnorm, cross-entropy).
	TolRow = 2e-5
	// TolGEMM: dot products of up to a few hundred terms.
	TolGEMM = 2e-5
	// TolAttention: online softmax over key tiles and the backward's recomputed
	// probabilities.
	TolAttention = 1e-4
	// TolSum: Sum and SumSquares, float32 partials added in float64.
	TolSum = 1e-5
)

// Suite is what Run needs.
type Suite struct {
	// New opens a device under test.
	New Factory
	// Reference returns a fresh device the numbers are compared with: the cpu
	// device in float64.
	Reference func() device.Device
	// MemoryReference returns a fresh device whose accounting the device under test
	// must match byte for byte (the cpu device in float32); nil checks the device's
	// accounting on its own.
	MemoryReference func() device.Device
}

// Run runs the suite.
func Run(t *testing.T, s Suite) {
	newDevice, reference := s.New, s.Reference
	var memRef device.Device
	if s.MemoryReference != nil {
		memRef = s.MemoryReference()
	}
	t.Run("ops", func(t *testing.T) { testOps(t, newDevice(t, 0), reference()) })
	t.Run("forward formulas", func(t *testing.T) { testForwardFormulas(t, newDevice(t, 0)) })
	t.Run("attention is causal", func(t *testing.T) { testCausal(t, newDevice(t, 0)) })
	t.Run("matmul", func(t *testing.T) { testMatMul(t, newDevice(t, 0)) })
	t.Run("adamw", func(t *testing.T) { testAdamW(t, newDevice(t, 0)) })
	t.Run("elementwise and aliasing", func(t *testing.T) { testElementwise(t, newDevice(t, 0)) })
	t.Run("sums", func(t *testing.T) { testSums(t, newDevice(t, 0)) })
	t.Run("accounting", func(t *testing.T) { Accounting(t, newDevice(t, 0), memRef) })
	t.Run("out of memory", func(t *testing.T) { OutOfMemory(t, newDevice) })
	t.Run("foreign buffers", func(t *testing.T) { testForeign(t, newDevice(t, 0), reference()) })
}

// ---- helpers ----

// Alloc returns a buffer of n elements of category Other, failing t on error.
func Alloc(t *testing.T, d device.Device, n int) device.Buffer {
	t.Helper()
	b, err := d.Alloc(n, device.Other)
	require.NoError(t, err)
	return b
}

// Write returns a new buffer holding v rounded to float32.
func Write(t *testing.T, d device.Device, v []float64) device.Buffer {
	t.Helper()
	b := Alloc(t, d, len(v))
	h := make([]float32, len(v))
	for i, x := range v {
		h[i] = float32(x)
	}
	d.CopyFromHost(b, h)
	return b
}

// Read returns a buffer's elements as float64.
func Read(t *testing.T, d device.Device, b device.Buffer) []float64 {
	t.Helper()
	h := make([]float32, b.Len())
	d.CopyToHost(h, b)
	out := make([]float64, len(h))
	for i, x := range h {
		out[i] = float64(x)
	}
	return out
}

// Randoms returns n float32-representable normal values of standard deviation std.
func Randoms(rng *rand.Rand, n int, std float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(float32(rng.NormFloat64() * std))
	}
	return out
}

// Around returns n float32-representable values mean ± uniform spread.
func Around(rng *rand.Rand, n int, mean, spread float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(float32(mean + spread*(2*rng.Float64()-1)))
	}
	return out
}

// AssertClose checks |want − got| ≤ tol·max(1, max|want|) element-wise and reports
// the first element off and the largest error.
func AssertClose(t *testing.T, want, got []float64, tol float64, what string) bool {
	t.Helper()
	if !assert.Len(t, got, len(want), what) {
		return false
	}
	scale := 1.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	worst, at := 0.0, -1
	for i := range want {
		e := math.Abs(want[i] - got[i])
		if math.IsNaN(got[i]) {
			e = math.Inf(1)
		}
		if e > worst {
			worst, at = e, i
		}
	}
	if worst > tol*scale {
		return assert.Fail(t, fmt.Sprintf("%s: [%d] want %g, got %g: error %.3g > %.3g (tol %g × scale %g)",
			what, at, want[at], got[at], worst, tol*scale, tol, scale))
	}
	return true
}

// sync fails t if the device reports a failure.
func sync(t *testing.T, d device.Device) {
	t.Helper()
	require.NoError(t, d.Sync(), "%s failed", d.Name())
}
