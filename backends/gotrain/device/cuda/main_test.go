//go:build cgo

package cuda

import (
	"fmt"
	"os"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/cudatest"
)

// EnvTestLibraries picks the libraries the package's tests bind: unset or "fake"
// builds the fakes with g++ (cudatest; a missing g++ or toolkit fails the tests) and points
// FSDPBENCH_LIBCUDA / FSDPBENCH_LIBCUBLAS at them; "real" leaves the search to
// dynload, which is how .ci/gpu-check runs the suite on a GPU.
const EnvTestLibraries = "FSDPBENCH_CUDA_TEST_LIBS"

// fakes are the built fake libraries (zero with real libraries).
var fakes struct{ cuda, cublas string }

func TestMain(m *testing.M) {
	var dir string
	if os.Getenv(EnvTestLibraries) != "real" {
		var err error
		dir, err = os.MkdirTemp("", "fsdpbench-cuda-fakes-")
		if err == nil {
			var f cudatest.Fakes
			f, err = cudatest.Build(dir)
			fakes.cuda, fakes.cublas = f.LibCUDA, f.LibCUBLAS
			f.Setenv()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
