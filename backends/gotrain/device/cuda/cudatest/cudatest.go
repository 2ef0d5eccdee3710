// Package cudatest builds the fake libraries the cuda device is tested over, so
// that any package's tests can run the cuda device, or processes that open it,
// without a GPU: the kernels package's fake libcuda, which runs the kernels on the
// CPU (kernels/fakecuda), and a fake libcublas that computes GEMMs on the host and
// checks each call's column-major arguments (testdata/fakecublas of package cuda,
// built with g++ from the source tree). Nothing here is linked into the product.
package cudatest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels/fakecuda"
)

// Fakes are built fake libraries.
type Fakes struct {
	// LibCUDA and LibCUBLAS are the libraries' paths.
	LibCUDA, LibCUBLAS string
}

// Env is the environment that binds a process's cuda device to the fakes.
func (f Fakes) Env() []string {
	return []string{"FSDPBENCH_LIBCUDA=" + f.LibCUDA, "FSDPBENCH_LIBCUBLAS=" + f.LibCUBLAS}
}

// Setenv binds this process's cuda device to the fakes (before its first use:
// the device binds its libraries once per process).
func (f Fakes) Setenv() {
	for _, kv := range [][2]string{{"FSDPBENCH_LIBCUDA", f.LibCUDA}, {"FSDPBENCH_LIBCUBLAS", f.LibCUBLAS}} {
		os.Setenv(kv[0], kv[1])
	}
}

// ASanEnv, set to 1, builds both fakes with AddressSanitizer: an out-of-bounds
// access of a kernel, a copy or a GEMM then aborts with a report. The process that
// loads them needs the sanitizer's runtime first (LD_PRELOAD of g++'s libasan.so;
// make cuda-asan does it).
const ASanEnv = "FSDPBENCH_FAKE_ASAN"

// Build compiles the fakes into dir with g++; a missing g++ is an error that says
// what to install.
func Build(dir string) (Fakes, error) {
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		return Fakes{}, fmt.Errorf("cudatest: cannot locate the package's source tree")
	}
	pkg := filepath.Dir(filepath.Dir(self)) // backends/gotrain/device/cuda
	asan := os.Getenv(ASanEnv) == "1"
	b, err := fakecuda.Build(filepath.Join(dir, "fakecuda"), fakecuda.Options{ASan: asan})
	if err != nil {
		return Fakes{}, fmt.Errorf("cudatest: the fake libcuda: %w", err)
	}
	f := Fakes{LibCUDA: b.Lib}
	if f.LibCUBLAS, err = buildFake(pkg, dir, "fakecublas", asan); err != nil {
		return Fakes{}, err
	}
	return f, nil
}

// buildFake compiles testdata/<name>/<name>.cc of the cuda package into dir.
func buildFake(pkg, dir, name string, asan bool) (string, error) {
	out := filepath.Join(dir, "lib"+name+".so")
	src := filepath.Join(pkg, "testdata", name, name+".cc")
	args := []string{"-std=c++17", "-O1", "-g", "-Wall", "-Werror", "-fPIC", "-shared", "-I", pkg, src, "-o", out}
	if asan {
		args = append([]string{"-fsanitize=address", "-fno-omit-frame-pointer"}, args...)
	}
	if b, err := exec.Command("g++", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the fake %s with g++ (install g++; the cuda tests need it): %v\n%s", name, err, b)
	}
	return out, nil
}
