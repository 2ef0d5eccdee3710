// Package openblas binds the few OpenBLAS functions the cpu device needs
// (cblas_sgemm, cblas_dgemm and the thread controls) at run time through
// dynload, so the product builds without BLAS headers or libraries and runs,
// on gonum's pure-Go BLAS, where OpenBLAS is not installed.
//
// The library is loaded once per process: its thread count is process-wide
// state, as OMP_NUM_THREADS is for torch.
//
// A build without cgo (CGO_ENABLED=0) cannot dlopen: there Load always fails
// (nocgo.go) and the cpu device runs on gonum, as where OpenBLAS is missing.
package openblas

import (
	"strings"
	"sync"
)

// EnvVar is the variable naming the library to load instead of searching
// (dynload.OpenBLAS.EnvVar, which a build without cgo does not have).
const EnvVar = "FSDPBENCH_LIBOPENBLAS"

// MaxThreads bounds SetThreads: past any host this trainer runs on, and below
// the MAX_THREADS Debian builds OpenBLAS with (64 and up).
const MaxThreads = 64

// Library is the loaded OpenBLAS.
type Library struct {
	// Path is what dlopen loaded (a soname or a file path).
	Path string
	// Config is openblas_get_config(): version, build options and the core the
	// kernels were chosen for ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64").
	Config string

	mu      sync.Mutex // guards the thread count: threads, serial
	threads int        // the count set, restored when the last Serial returns
	serial  int        // Serial calls running
}

// Version is the version in Config ("0.3.21"), "" when Config does not say.
func (l *Library) Version() string {
	f := strings.Fields(l.Config)
	if len(f) >= 2 && f[0] == "OpenBLAS" {
		return f[1]
	}
	return ""
}
