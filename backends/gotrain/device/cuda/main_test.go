package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EnvTestLibraries picks the libraries the package's tests bind: unset or "fake"
// builds the fakes in testdata with g++ (a missing g++ fails the tests) and points
// FSDPBENCH_LIBCUDA / FSDPBENCH_LIBCUBLAS at them; "real" leaves the search to
// dynload, which is how scripts/gpu-check.sh runs the suite on a GPU.
const EnvTestLibraries = "FSDPBENCH_CUDA_TEST_LIBS"

// fakes are the paths of the built fake libraries (empty with real libraries).
var fakes struct {
	cuda, cublas, dir string
	// runsKernels is true when the fake libcuda executes kernels (the kernels package's).
	runsKernels bool
}

func TestMain(m *testing.M) {
	if os.Getenv(EnvTestLibraries) != "real" {
		dir, err := os.MkdirTemp("", "fsdpbench-cuda-fakes-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		fakes.dir = dir
		fakes.cuda, err = buildFake(dir, "fakecuda")
		if err == nil {
			fakes.cublas, err = buildFake(dir, "fakecublas")
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(2)
		}
		os.Setenv("FSDPBENCH_LIBCUDA", fakes.cuda)
		os.Setenv("FSDPBENCH_LIBCUBLAS", fakes.cublas)
	}
	code := m.Run()
	if fakes.dir != "" {
		os.RemoveAll(fakes.dir)
	}
	os.Exit(code)
}

// buildFake compiles testdata/<name>/<name>.cc into a shared library in dir.
func buildFake(dir, name string) (string, error) {
	out := filepath.Join(dir, "lib"+name+".so")
	src := filepath.Join("testdata", name, name+".cc")
	args := []string{"-std=c++17", "-O1", "-g", "-Wall", "-Werror", "-fPIC", "-shared", "-I.", src, "-o", out}
	if flags := os.Getenv("FSDPBENCH_FAKE_CXXFLAGS"); flags != "" { // e.g. -fsanitize=address
		args = append([]string{flags}, args...)
	}
	cmd := exec.Command("g++", args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the fake %s with g++ (install g++; the cuda tests need it): %v\n%s", name, err, b)
	}
	return out, nil
}
