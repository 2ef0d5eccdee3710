package cpu

import (
	"runtime"
	"runtime/debug"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
)

// BLAS choices for Options.BLAS.
const (
	// BLASAuto runs float32 GEMMs on OpenBLAS when the library loads, else on gonum.
	BLASAuto = ""
	// BLASGonum always runs gonum's pure-Go BLAS (the before-figures, and a
	// check that a result does not depend on the library).
	BLASGonum = "gonum"
)

// BLASInfo says which BLAS a device's GEMMs run on.
type BLASInfo struct {
	// Name is "OpenBLAS" or "gonum".
	Name string `json:"name"`
	// Version is the library's ("0.3.21"), or gonum's module version.
	Version string `json:"version,omitempty"`
	// Config is openblas_get_config() (build options and the core the kernels
	// were chosen for); empty for gonum.
	Config string `json:"config,omitempty"`
	// Path is the library dlopen loaded; empty for gonum.
	Path string `json:"path,omitempty"`
	// Threads is how many threads one GEMM may use: openblas_get_num_threads()
	// for OpenBLAS, GOMAXPROCS for gonum (its Sgemm splits over goroutines).
	Threads int `json:"threads"`
}

// BLASReporter is implemented by the cpu device.
type BLASReporter interface {
	// BLAS says which BLAS the device's GEMMs run on, with its threads now.
	BLAS() BLASInfo
}

// gemmFunc is BLAS's row-major GEMM with leading dimensions, so that attention
// can multiply one head's rows out of [seq, heads, headDim] in place.
type gemmFunc[T float] func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int)

// pickGEMM returns the GEMM of a device over T and what it runs on: OpenBLAS's
// sgemm for float32 unless o says gonum or the library does not load; gonum
// always for float64, the reference, so the gradient checks never depend on
// the library they check.
func pickGEMM[T float](o Options) (gemmFunc[T], *openblas.Library) {
	var zero T
	if _, f32 := any(zero).(float32); f32 && o.BLAS != BLASGonum {
		if lib, err := openblas.Load(); err == nil {
			return guarded(any(gemmFunc[float32](openblas.Sgemm)).(gemmFunc[T])), lib
		}
	}
	return guarded(gonumGEMM[T]), nil
}

// guarded handles the empty products BLAS libraries reject (they want leading
// dimensions ≥ 1 and OpenBLAS reads &a[0]): m or n zero is a no-op, k zero
// scales C by beta.
func guarded[T float](g gemmFunc[T]) gemmFunc[T] {
	return func(transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
		if m == 0 || n == 0 {
			return
		}
		if k == 0 {
			for i := range m {
				scale(c[i*ldc:i*ldc+n], beta)
			}
			return
		}
		g(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
	}
}

// gonumGEMM is the GEMM through gonum's pure-Go BLAS.
func gonumGEMM[T float](transA, transB bool, m, n, k int, alpha T, a []T, lda int, b []T, ldb int, beta T, c []T, ldc int) {
	tA, tB := blas.NoTrans, blas.NoTrans
	if transA {
		tA = blas.Trans
	}
	if transB {
		tB = blas.Trans
	}
	switch cc := any(c).(type) {
	case []float32:
		blas32.Implementation().Sgemm(tA, tB, m, n, k, float32(alpha), any(a).([]float32), lda,
			any(b).([]float32), ldb, float32(beta), cc, ldc)
	case []float64:
		blas64.Implementation().Dgemm(tA, tB, m, n, k, float64(alpha), any(a).([]float64), lda,
			any(b).([]float64), ldb, float64(beta), cc, ldc)
	}
}

// serialBLAS runs f, an op that splits its GEMMs over goroutines itself
// (attention, by heads), with OpenBLAS on one thread: threads inside threads
// would put twice as many runnable threads as cores on the machine.
func (d *dev[T]) serialBLAS(f func()) {
	if d.lib == nil || runtime.GOMAXPROCS(0) == 1 {
		f()
		return
	}
	d.lib.Serial(f)
}

func (d *dev[T]) BLAS() BLASInfo {
	if d.lib != nil {
		return BLASInfo{Name: "OpenBLAS", Version: d.lib.Version(), Config: d.lib.Config, Path: d.lib.Path, Threads: d.lib.Threads()}
	}
	return BLASInfo{Name: "gonum", Version: gonumVersion(), Threads: runtime.GOMAXPROCS(0)}
}

// gonumVersion is the version of gonum the binary was built with ("" in tests
// without module information).
func gonumVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range bi.Deps {
		if m.Path == "gonum.org/v1/gonum" {
			return m.Version
		}
	}
	return ""
}
