//go:build cgo

package openblas

import (
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
)

// requireOpenBLAS makes the tests fail instead of skip when the library is
// missing (CI installs libopenblas0-pthread through .ci/deps).
const requireOpenBLAS = "FSDPBENCH_REQUIRE_OPENBLAS"

func needLib(t testing.TB) *Library {
	t.Helper()
	l, err := Load()
	if err == nil {
		return l
	}
	msg := "OpenBLAS does not load (" + err.Error() + "); install it with `apt-get install libopenblas0-pthread`"
	if os.Getenv(requireOpenBLAS) == "1" {
		t.Fatal(msg + " (" + requireOpenBLAS + "=1 makes this a failure)")
	}
	t.Skip(msg + " (set " + requireOpenBLAS + "=1 to fail instead)")
	return nil
}

func TestInfo(t *testing.T) {
	l := needLib(t)
	assert.Regexp(t, `^OpenBLAS \d+\.\d+\.\d+`, l.Config)
	assert.Regexp(t, `^\d+\.\d+\.\d+$`, l.Version())
	assert.NotEmpty(t, l.Path)
	for _, n := range []int{1, 2} {
		require.NoError(t, l.SetThreads(n))
		assert.Equal(t, n, l.Threads(), "openblas_get_num_threads reads what openblas_set_num_threads set")
	}
	for _, bad := range []int{0, -1, MaxThreads + 1} {
		assert.ErrorContains(t, l.SetThreads(bad), "give 1 to")
	}
}

// TestGEMMMatchesGonum multiplies random matrices, every transpose and with
// leading dimensions wider than the rows, on OpenBLAS and on gonum, in float32
// and float64, at 1 and 2 threads.
func TestGEMMMatchesGonum(t *testing.T) {
	l := needLib(t)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, threads := range []int{1, 2} {
		require.NoError(t, l.SetThreads(threads))
		for _, sz := range [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 128, 64}, {200, 130, 90}} {
			m, n, k := sz[0], sz[1], sz[2]
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					ar, ac, br, bc := m, k, k, n
					if tA {
						ar, ac = k, m
					}
					if tB {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+3, bc+1, n+2
					a64, b64, c64 := randoms(rng, ar*lda), randoms(rng, br*ldb), randoms(rng, m*ldc)
					want := append([]float64(nil), c64...)
					blas64.Implementation().Dgemm(trans(tA), trans(tB), m, n, k, 0.5, a64, lda, b64, ldb, 0.25, want, ldc)
					got := append([]float64(nil), c64...)
					Dgemm(tA, tB, m, n, k, 0.5, a64, lda, b64, ldb, 0.25, got, ldc)
					assert.InDeltaSlice(t, want, got, 1e-12, "dgemm %v %v %v", sz, tA, tB)

					a32, b32, c32 := to32(a64), to32(b64), to32(c64)
					want32 := append([]float32(nil), c32...)
					blas32.Implementation().Sgemm(trans(tA), trans(tB), m, n, k, 0.5, a32, lda, b32, ldb, 0.25, want32, ldc)
					got32 := append([]float32(nil), c32...)
					Sgemm(tA, tB, m, n, k, 0.5, a32, lda, b32, ldb, 0.25, got32, ldc)
					assert.InDeltaSlice(t, to64(want32), to64(got32), 1e-4, "sgemm %v %v %v", sz, tA, tB)
				}
			}
		}
	}
}

// TestThreadsDoNotChangeResults: a product is bit for bit the same on 1 and 2
// threads, so a rank's loss never depends on the threads it was given, nor on
// Serial.
func TestThreadsDoNotChangeResults(t *testing.T) {
	l := needLib(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, sz := range [][3]int{{64, 128, 64}, {512, 704, 256}, {704, 256, 512}} {
		m, n, k := sz[0], sz[1], sz[2]
		a, b := to32(randoms(rng, m*k)), to32(randoms(rng, k*n))
		var outs [2][]float32
		for i, th := range []int{1, 2} {
			require.NoError(t, l.SetThreads(th))
			outs[i] = make([]float32, m*n)
			Sgemm(false, true, m, n, k, 1, a, k, b, k, 0, outs[i], n)
		}
		assert.Equal(t, outs[0], outs[1], "%v", sz)
	}
}

// TestSerial: the thread count is 1 inside Serial, nested or overlapping, and
// what was set before (or set meanwhile) after the last one returns.
func TestSerial(t *testing.T) {
	l := needLib(t)
	require.NoError(t, l.SetThreads(2))
	l.Serial(func() {
		assert.Equal(t, 1, libThreads(), "one thread inside")
		assert.Equal(t, 2, l.Threads(), "Threads says what will be restored")
		l.Serial(func() { assert.Equal(t, 1, libThreads()) })
		assert.Equal(t, 1, libThreads(), "still one until the outer Serial returns")
		require.NoError(t, l.SetThreads(3))
		assert.Equal(t, 1, libThreads())
	})
	assert.Equal(t, 3, libThreads(), "the count set inside takes effect after")
	require.NoError(t, l.SetThreads(2))
}

// TestShortOperandsPanic: C cannot see a Go slice's length, so Sgemm checks it.
func TestShortOperandsPanic(t *testing.T) {
	needLib(t)
	a, b, c := make([]float32, 6), make([]float32, 6), make([]float32, 4)
	assert.NotPanics(t, func() { Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c, 2) })
	for name, f := range map[string]func(){
		"short A":   func() { Sgemm(false, false, 2, 2, 3, 1, a[:5], 3, b, 2, 0, c, 2) },
		"short C":   func() { Sgemm(false, false, 2, 2, 3, 1, a, 3, b, 2, 0, c[:3], 2) },
		"narrow ld": func() { Sgemm(false, false, 2, 2, 3, 1, a, 2, b, 2, 0, c, 2) },
		"k zero":    func() { Sgemm(false, false, 2, 2, 0, 1, a, 1, b, 2, 0, c, 2) },
	} {
		assert.Panics(t, f, name)
		assert.Contains(t, panicOf(f), "openblas: Sgemm", name)
	}
}

func panicOf(f func()) (msg string) {
	defer func() { msg, _ = recover().(string) }()
	f()
	return ""
}

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

func randoms(rng *rand.Rand, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = rng.NormFloat64()
	}
	return out
}

func to32(x []float64) []float32 {
	out := make([]float32, len(x))
	for i, v := range x {
		out[i] = float32(v)
	}
	return out
}

func to64(x []float32) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = float64(v)
	}
	return out
}
