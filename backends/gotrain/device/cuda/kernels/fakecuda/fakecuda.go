// Package fakecuda builds, for tests, a fake libcuda.so.1 that runs the cuda
// device's kernels on the CPU (src/libcuda.cc over the fiber runner src/runner.cc,
// with the kernel sources of package kernels compiled by g++), and the kernel test
// driver linked against it. Nothing here is linked into the product: tests call
// Build, then point the cuda device's loader at Built.Lib (or run Built.Driver).
// ../README.md lists the driver calls the fake implements and its environment
// variables.
package fakecuda

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

//go:embed src
var src embed.FS

// RequireEnv names the variable that turns a missing CUDA toolkit from a skipped
// test into a failed one (CI sets it; .ci/deps installs the toolkit).
const RequireEnv = "FSDPBENCH_REQUIRE_CUDA_TOOLKIT"

// ErrNoToolkit is wrapped by Build's error when g++ or the CUDA headers are missing.
var ErrNoToolkit = errors.New("CUDA toolkit not installed")

// Options select how the fake is built.
type Options struct {
	// ASan builds with AddressSanitizer (-fsanitize=address): an out-of-bounds
	// access of a kernel aborts with a report. Built.Driver then carries the
	// sanitizer runtime; a Go process loading Built.Lib needs LD_PRELOAD of libasan.
	ASan bool
	// Extra are more kernel sources (paths of .cu files) compiled into the fake's
	// registry, such as kernels that test the runner itself.
	Extra []string
}

// Built is what Build produced.
type Built struct {
	// Dir holds everything (the directory given to Build).
	Dir string
	// Lib is the fake driver library, named libcuda.so.1.
	Lib string
	// Driver is the kernel test driver, linked against Lib (see src/driver.cc).
	Driver string
}

// CUDAInclude returns the directory that holds the toolkit's cuda.h: $CUDA_HOME/include,
// /usr/local/cuda/include or /usr/include (Debian's nvidia-cuda-toolkit).
func CUDAInclude() (string, error) {
	var dirs []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cuda.h")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no cuda.h in %s: %w (install Debian non-free nvidia-cuda-toolkit, see .ci/deps)",
		strings.Join(dirs, ", "), ErrNoToolkit)
}

// NeedToolkit skips tb when the CUDA toolkit (nvcc, cuobjdump, cuda.h) or g++ is
// missing, or fails it when RequireEnv is 1.
func NeedToolkit(tb testing.TB) {
	tb.Helper()
	var missing []string
	for _, tool := range []string{"nvcc", "cuobjdump", "g++"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if _, err := CUDAInclude(); err != nil {
		missing = append(missing, "cuda.h")
	}
	if len(missing) == 0 {
		return
	}
	msg := fmt.Sprintf("CUDA toolkit incomplete (missing %s): install Debian non-free nvidia-cuda-toolkit (.ci/deps)",
		strings.Join(missing, ", "))
	if os.Getenv(RequireEnv) == "1" {
		tb.Fatalf("%s=1 but %s", RequireEnv, msg)
	}
	tb.Skip(msg)
}

// Build compiles the fake libcuda and the test driver into dir.
func Build(dir string, o Options) (*Built, error) {
	inc, err := CUDAInclude()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("g++"); err != nil {
		return nil, fmt.Errorf("g++ not found: %w (apt-get install g++)", ErrNoToolkit)
	}
	srcDir := filepath.Join(dir, "src")
	if err := writeTree(srcDir, src, "src"); err != nil {
		return nil, err
	}
	if err := writeTree(srcDir, kernels.Sources, "."); err != nil {
		return nil, err
	}
	flags := []string{"-std=c++17", "-fPIC", "-pthread", "-g", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-I", srcDir, "-I", inc}
	if o.ASan {
		flags = append(flags, "-O1", "-fsanitize=address", "-fno-omit-frame-pointer")
	} else {
		flags = append(flags, "-O2")
	}
	for _, x := range o.Extra {
		data, err := os.ReadFile(x)
		if err != nil {
			return nil, fmt.Errorf("fakecuda: extra kernel source: %w", err)
		}
		if err := os.WriteFile(filepath.Join(srcDir, filepath.Base(x)), data, 0o644); err != nil {
			return nil, err
		}
	}
	units, _ := filepath.Glob(filepath.Join(srcDir, "*.cu"))
	units = append(units, filepath.Join(srcDir, "runner.cc"), filepath.Join(srcDir, "libcuda.cc"))
	objs := make([]string, len(units))
	errs := make([]error, len(units))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.NumCPU()))
	for i, u := range units {
		objs[i] = filepath.Join(dir, filepath.Base(u)+".o")
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			args := append([]string{}, flags...)
			if strings.HasSuffix(u, ".cu") {
				args = append(args, "-x", "c++")
			}
			errs[i] = gxx(append(args, "-c", u, "-o", objs[i])...)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	b := &Built{Dir: dir, Lib: filepath.Join(dir, "libcuda.so.1"), Driver: filepath.Join(dir, "driver")}
	link := append(append([]string{}, flags...), "-shared", "-Wl,-soname,libcuda.so.1", "-o", b.Lib)
	if err := gxx(append(link, objs...)...); err != nil {
		return nil, err
	}
	drv := append(append([]string{}, flags...), filepath.Join(srcDir, "driver.cc"), "-o", b.Driver,
		"-L", dir, "-l:libcuda.so.1", "-Wl,-rpath,"+dir, "-ldl")
	if err := gxx(drv...); err != nil {
		return nil, err
	}
	return b, nil
}

func gxx(args ...string) error {
	cmd := exec.Command("g++", args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("g++ %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return nil
}

// writeTree copies the files under root of fsys flat into dir.
func writeTree(dir string, fsys fs.FS, root string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, filepath.Base(p)), data, 0o644)
	})
}
