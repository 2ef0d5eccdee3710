//go:build cgo

package openblas

// #include <stdlib.h>
//
// // CBLAS's enums (cblas.h): the values are fixed by the CBLAS standard.
// enum { FB_ROW_MAJOR = 101, FB_NO_TRANS = 111, FB_TRANS = 112 };
//
// typedef void (*fb_sgemm_t)(int, int, int, int, int, int, float, const float *, int,
//                            const float *, int, float, float *, int);
// typedef void (*fb_dgemm_t)(int, int, int, int, int, int, double, const double *, int,
//                            const double *, int, double, double *, int);
// typedef void (*fb_set_threads_t)(int);
// typedef int (*fb_get_threads_t)(void);
// typedef char *(*fb_get_config_t)(void);
//
// // The pointer table, filled once from dlsym before any call.
// static fb_sgemm_t fb_sgemm_p;
// static fb_dgemm_t fb_dgemm_p;
// static fb_set_threads_t fb_set_threads_p;
// static fb_get_threads_t fb_get_threads_p;
// static fb_get_config_t fb_get_config_p;
//
// static void fb_bind(void *sgemm, void *dgemm, void *set, void *get, void *config) {
//   fb_sgemm_p = (fb_sgemm_t)sgemm;
//   fb_dgemm_p = (fb_dgemm_t)dgemm;
//   fb_set_threads_p = (fb_set_threads_t)set;
//   fb_get_threads_p = (fb_get_threads_t)get;
//   fb_get_config_p = (fb_get_config_t)config;
// }
// static void fb_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
//                      const float *b, int ldb, float beta, float *c, int ldc) {
//   fb_sgemm_p(FB_ROW_MAJOR, ta ? FB_TRANS : FB_NO_TRANS, tb ? FB_TRANS : FB_NO_TRANS, m, n, k,
//              alpha, a, lda, b, ldb, beta, c, ldc);
// }
// static void fb_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
//                      const double *b, int ldb, double beta, double *c, int ldc) {
//   fb_dgemm_p(FB_ROW_MAJOR, ta ? FB_TRANS : FB_NO_TRANS, tb ? FB_TRANS : FB_NO_TRANS, m, n, k,
//              alpha, a, lda, b, ldb, beta, c, ldc);
// }
// static void fb_set_threads(int n) { fb_set_threads_p(n); }
// static int fb_get_threads(void) { return fb_get_threads_p(); }
// static const char *fb_get_config(void) { return fb_get_config_p(); }
import "C"

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
)

// threadTimeout is OPENBLAS_THREAD_TIMEOUT's value unless the user set one: a
// thread pool's worker waits 2^4 cycles for the next GEMM, not OpenBLAS's
// default 2^28 (~0.1 s), before it sleeps. Spinning workers yield the CPU, but
// take a share of it from the goroutines of the element-wise ops that run
// between GEMMs; waking a sleeping worker costs microseconds per GEMM.
const threadTimeout = "4"

var load = sync.OnceValues(func() (*Library, error) {
	// Read once, when the library initializes: it must be in the environment
	// before dlopen (os.Setenv reaches C's environment in a cgo binary).
	if _, set := os.LookupEnv("OPENBLAS_THREAD_TIMEOUT"); !set {
		_ = os.Setenv("OPENBLAS_THREAD_TIMEOUT", threadTimeout)
	}
	if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); !set {
		if core := coreType(); core != "" {
			_ = os.Setenv("OPENBLAS_CORETYPE", core)
		}
	}
	l, err := dynload.Open(dynload.OpenBLAS)
	if err != nil {
		return nil, err
	}
	names := []string{"cblas_sgemm", "cblas_dgemm", "openblas_set_num_threads", "openblas_get_num_threads", "openblas_get_config"}
	ptrs := make([]unsafe.Pointer, len(names))
	for i, n := range names {
		if ptrs[i], err = l.Symbol(n); err != nil {
			// The library stays loaded: dlclose of a BLAS that started threads is unsafe.
			return nil, fmt.Errorf("%s is not a usable OpenBLAS (%w); point %s at libopenblas.so.0", l.Path, err, dynload.OpenBLAS.EnvVar)
		}
	}
	C.fb_bind(ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4])
	return &Library{Path: l.Path, Config: strings.TrimSpace(C.GoString(C.fb_get_config())), threads: int(C.fb_get_threads())}, nil
})

// coreType is the OpenBLAS kernel set to use where the library's own choice
// would make results depend on the thread count: on a CPU with AVX-512 F, BW,
// DQ and VL, "SkylakeX". Debian's OpenBLAS 0.3.21 takes an AMD Zen 4 for a
// Haswell, and its Haswell (and Zen) SGEMM kernels round the same product
// differently on 1 and 2 threads (the split moves columns between the main and
// the edge kernels), so a rank's loss would depend on how many threads it was
// given; its SkylakeX kernels, which such a CPU runs natively, do not (measured:
// TestThreadsDoNotChangeResults). Elsewhere the library's own choice stands
// (""), and OPENBLAS_CORETYPE set by the user always wins.
func coreType() string {
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512DQ && cpu.X86.HasAVX512VL {
		return "SkylakeX"
	}
	return ""
}

// DeterministicCoreType is a kernel set whose results do not depend on the
// thread count on this CPU: SkylakeX with AVX-512, else Sandybridge (AVX).
// Tests that compare products bitwise across thread counts, or across ranks
// sharing one process, set OPENBLAS_CORETYPE to it before the first Load,
// whatever the environment chose (a Haswell set there rounds differently on
// 1 and 2 threads, and on 2 threads differently when another goroutine holds
// the thread pool).
func DeterministicCoreType() string {
	if c := coreType(); c != "" {
		return c
	}
	return "Sandybridge"
}

// Load opens OpenBLAS through dynload's search (FSDPBENCH_LIBOPENBLAS, then
// libopenblas.so.0 through the loader), once per process; the error lists every
// place it looked.
func Load() (*Library, error) { return load() }

// Threads is how many threads a large GEMM uses: openblas_get_num_threads()
// outside Serial, the count Serial restores inside it.
func (l *Library) Threads() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.serial > 0 {
		return l.threads
	}
	return int(C.fb_get_threads())
}

// SetThreads sets OpenBLAS's thread count through openblas_set_num_threads,
// which overrides OPENBLAS_NUM_THREADS and OMP_NUM_THREADS read at load. Inside
// Serial it takes effect when the last Serial returns.
func (l *Library) SetThreads(n int) error {
	if n < 1 || n > MaxThreads {
		return fmt.Errorf("openblas: %d threads: give 1 to %d", n, MaxThreads)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.threads = n
	if l.serial == 0 {
		C.fb_set_threads(C.int(n))
	}
	return nil
}

// Serial runs f with OpenBLAS on one thread, for GEMMs that the caller runs
// from several goroutines at once (attention's heads): each then runs on its
// calling thread instead of queueing on the pool, and small products do not
// pay for a split that does not help them. Calls may nest and overlap (ranks
// of one process, in tests); the count set before the first returns with the
// last. The thread count never changes a result: OpenBLAS splits a GEMM's
// rows and columns among threads, never the sum over k.
func (l *Library) Serial(f func()) {
	l.mu.Lock()
	if l.serial == 0 {
		C.fb_set_threads(1)
	}
	l.serial++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.serial--; l.serial == 0 {
			C.fb_set_threads(C.int(l.threads))
		}
	}()
	f()
}

// Sgemm is row-major C = alpha·op(A)·op(B) + beta·C with leading dimensions,
// gonum's blas32 Sgemm contract, for m, n, k ≥ 1. It panics when a slice is
// shorter than the matrix it describes, which C could not tell.
func Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	check("Sgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	C.fb_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

// Dgemm is Sgemm in float64.
func Dgemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	check("Dgemm", transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	C.fb_dgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.double(alpha),
		(*C.double)(unsafe.Pointer(&a[0])), C.int(lda), (*C.double)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.double(beta), (*C.double)(unsafe.Pointer(&c[0])), C.int(ldc))
}

// check panics unless every operand of a row-major GEMM fits its slice.
func check(op string, transA, transB bool, m, n, k, la, lda, lb, ldb, lc, ldc int) {
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	for _, x := range []struct {
		name                 string
		rows, cols, ld, have int
	}{{"A", ar, ac, lda, la}, {"B", br, bc, ldb, lb}, {"C", m, n, ldc, lc}} {
		if x.rows < 1 || x.cols < 1 || x.ld < x.cols || (x.rows-1)*x.ld+x.cols > x.have {
			panic(fmt.Sprintf("openblas: %s: %s is %d×%d with leading dimension %d in %d elements", op, x.name, x.rows, x.cols, x.ld, x.have))
		}
	}
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// libThreads is openblas_get_num_threads() itself, whatever Serial does.
func libThreads() int { return int(C.fb_get_threads()) }
