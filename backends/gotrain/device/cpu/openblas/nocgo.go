//go:build !cgo

package openblas

import "errors"

// errNoCgo is why Load fails in a build without cgo: loading a C library at run
// time needs it.
var errNoCgo = errors.New("OpenBLAS not loaded: fsdpbench was built without cgo (CGO_ENABLED=0), which loading libopenblas needs; rebuild with a C compiler and CGO_ENABLED=1 to use it")

// Load fails in a build without cgo; callers fall back to gonum as they do
// where the library is missing.
func Load() (*Library, error) { return nil, errNoCgo }

// Threads is 0: no Library exists without cgo.
func (*Library) Threads() int { return 0 }

// SetThreads fails: no Library exists without cgo.
func (*Library) SetThreads(int) error { return errNoCgo }

// Serial runs f: there is no OpenBLAS thread pool to hold back.
func (*Library) Serial(f func()) { f() }

// Sgemm panics: it is reached only through a Library, which Load never returns
// without cgo.
func Sgemm(bool, bool, int, int, int, float32, []float32, int, []float32, int, float32, []float32, int) {
	panic(errNoCgo)
}

// DeterministicCoreType has no library to choose for without cgo.
func DeterministicCoreType() string { return "" }
