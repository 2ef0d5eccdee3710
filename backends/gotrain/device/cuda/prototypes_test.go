package cuda

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cudaInclude is the directory with NVIDIA's cuda.h and cublas_v2.h: $CUDA_HOME/include,
// /usr/local/cuda/include, or Debian's /usr/include (nvidia-cuda-toolkit). The
// tests fail, never skip, without them: CI installs the toolkit (.ci/deps).
func cudaInclude(t *testing.T) string {
	t.Helper()
	var dirs []string
	if h := os.Getenv("CUDA_HOME"); h != "" {
		dirs = append(dirs, filepath.Join(h, "include"))
	}
	dirs = append(dirs, "/usr/local/cuda/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "cublas_v2.h")); err == nil {
			return d
		}
	}
	t.Fatalf("no cuda.h/cublas_v2.h in %v: install the CUDA toolkit (Debian: nvidia-cuda-toolkit from non-free) or set CUDA_HOME", dirs)
	return ""
}

// compileC runs gcc -fsyntax-only on src and returns its output and error.
func compileC(t *testing.T, inc, src string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "check.c")
	require.NoError(t, os.WriteFile(f, []byte(src), 0o644))
	cwd, err := os.Getwd()
	require.NoError(t, err)
	out, err := exec.Command("gcc", "-fsyntax-only", "-Wall", "-Werror", "-I", inc, "-I", cwd, f).CombinedOutput()
	return string(out), err
}

const withRealHeaders = "#include <cuda.h>\n#include <cublas_v2.h>\n#define FSDP_REAL_CUDA_HEADERS\n"

// TestPrototypesMatchNVIDIAHeaders compiles cudaapi.h's hand-written declarations
// after NVIDIA's: C accepts a redeclaration only when the types agree, so a wrong
// parameter or return type fails with "conflicting types". A planted wrong
// prototype shows the check bites.
func TestPrototypesMatchNVIDIAHeaders(t *testing.T) {
	inc := cudaInclude(t)
	out, err := compileC(t, inc, withRealHeaders+"#include \"cudaapi.h\"\n")
	require.NoError(t, err, "cudaapi.h disagrees with NVIDIA's headers:\n%s", out)

	for _, wrong := range []string{
		"CUresult cuMemAlloc_v2(CUdeviceptr *dptr, unsigned int bytesize);", // the legacy 32-bit size
		"cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float *, const float *, int, const float *, int, float, float *, int);",
	} {
		out, err := compileC(t, inc, withRealHeaders+"#include \"cudaapi.h\"\n"+wrong+"\n")
		require.Error(t, err, "a wrong prototype must not compile: %s", wrong)
		assert.Contains(t, out, "conflicting types", wrong)
	}
}

// TestSymbolsAreTheVersionedEntryPoints checks that no name the shim looks up is a
// macro in NVIDIA's headers: cuda.h maps cuMemAlloc to cuMemAlloc_v2, and dlsym of
// the unversioned name would bind the legacy 32-bit function.
func TestSymbolsAreTheVersionedEntryPoints(t *testing.T) {
	inc := cudaInclude(t)
	names := symbolNames(t)
	require.Greater(t, len(names), 30)
	var src strings.Builder
	src.WriteString("#include <cuda.h>\n#include <cublas_v2.h>\n")
	for _, n := range names {
		fmt.Fprintf(&src, "#ifdef %s\n#error %s is a macro in the NVIDIA headers, look up what it expands to\n#endif\n", n, n)
	}
	out, err := compileC(t, inc, src.String())
	require.NoError(t, err, out)
	for _, legacy := range []string{"cuMemAlloc", "cuMemcpyHtoDAsync", "cublasSgemm", "cublasCreate"} {
		out, err := compileC(t, inc, "#include <cuda.h>\n#include <cublas_v2.h>\n#ifdef "+legacy+"\n#error macro\n#endif\n")
		require.Error(t, err, "%s is expected to be a macro (the check above would then catch it): %s", legacy, out)
	}
}

// symbolNames lists the names in cudaapi.h's symbol tables.
func symbolNames(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile("cudaapi.h")
	require.NoError(t, err)
	var names []string
	for _, m := range regexp.MustCompile(`X\((\w+)\)`).FindAllStringSubmatch(string(src), -1) {
		if m[1] != "name" {
			names = append(names, m[1])
		}
	}
	return names
}

// TestErrorNamesMatchCudaH checks the error-name tables against the enums in
// cuda.h and cublas_api.h.
func TestErrorNamesMatchCudaH(t *testing.T) {
	inc := cudaInclude(t)
	enum := func(file string) map[string]int {
		b, err := os.ReadFile(filepath.Join(inc, file))
		require.NoError(t, err)
		out := map[string]int{}
		for _, m := range regexp.MustCompile(`(?m)^\s*((?:CUDA_|CUBLAS_STATUS_)\w+)\s*=\s*(\d+)`).FindAllStringSubmatch(string(b), -1) {
			v, err := strconv.Atoi(m[2])
			require.NoError(t, err)
			out[m[1]] = v
		}
		return out
	}
	for _, tc := range []struct {
		file  string
		table map[int]string
	}{{"cuda.h", cuResultNames}, {"cublas_api.h", cublasStatusNames}} {
		want := enum(tc.file)
		for code, name := range tc.table {
			v, ok := want[name]
			if assert.True(t, ok, "%s is not in %s", name, tc.file) {
				assert.Equal(t, v, code, "%s in %s", name, tc.file)
			}
		}
	}
}

// TestShimEnumsMatchNVIDIAHeaders checks the cuBLAS enum values shim.c writes by
// hand (transpose flags, math mode, data and compute types, the GEMM algorithm)
// against NVIDIA's headers with C static assertions: a bf16 GEMM with a wrong
// CUDA_R_16BF would hand cuBLAS the wrong storage type.
func TestShimEnumsMatchNVIDIAHeaders(t *testing.T) {
	inc := cudaInclude(t)
	src, err := os.ReadFile("shim.c")
	require.NoError(t, err)
	block := regexp.MustCompile(`(?s)// cuBLAS enums[^\n]*\nenum \{(.*?)\};`).FindSubmatch(src)
	require.NotNil(t, block, "shim.c's cuBLAS enum block")
	nvidia := map[string]string{
		"OP_N": "CUBLAS_OP_N", "OP_T": "CUBLAS_OP_T", "DEFAULT_MATH": "CUBLAS_DEFAULT_MATH",
		"R_32F": "CUDA_R_32F", "R_16BF": "CUDA_R_16BF", "COMPUTE_32F": "CUBLAS_COMPUTE_32F",
		"COMPUTE_32F_FAST_16BF": "CUBLAS_COMPUTE_32F_FAST_16BF", "GEMM_DEFAULT": "CUBLAS_GEMM_DEFAULT",
	}
	check := withRealHeaders
	seen := 0
	for _, m := range regexp.MustCompile(`(\w+) = (-?\d+)`).FindAllStringSubmatch(string(block[1]), -1) {
		name, ok := nvidia[m[1]]
		require.True(t, ok, "shim.c's enum %s has no NVIDIA name in this test: add it", m[1])
		check += fmt.Sprintf("_Static_assert(%s == %s, \"shim.c: %s = %s, NVIDIA's %s differs\");\n", name, m[2], m[1], m[2], name)
		seen++
	}
	assert.Equal(t, len(nvidia), seen, "every enum of shim.c is checked")
	out, err := compileC(t, inc, check)
	require.NoError(t, err, "shim.c's enums disagree with NVIDIA's headers:\n%s", out)
	out, err = compileC(t, inc, withRealHeaders+"_Static_assert(CUDA_R_16BF == 2, \"planted\");\n")
	require.Error(t, err, "a planted wrong value fails: %s", out)
}
