package kernels_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels/fakecuda"
)

// checksFatbin compiles testdata/checks.cu with nvcc (so the runner's test kernels
// are CUDA too) into a fatbin the drivers of these tests load.
func checksFatbin(t *testing.T) string {
	t.Helper()
	needFake(t)
	fake(t)
	out := filepath.Join(t.TempDir(), "checks.fatbin")
	msg, err := exec.Command("nvcc", "-fatbin", "-arch=sm_80", "-Werror", "all-warnings", "-I", ".",
		"-o", out, "testdata/checks.cu").CombinedOutput()
	require.NoError(t, err, "nvcc: %s", msg)
	return out
}

func check(name string, shared int) *kernels.Kernel {
	return &kernels.Kernel{Name: name, Params: []kernels.Param{{Name: "x", Kind: kernels.Ptr}}, Block: 64,
		Shared: func(int) int { return shared }}
}

// TestRunnerAbortsOnDivergence: a thread that returns before a barrier, barriers
// on different lines, and a partial shuffle mask each abort the launch with a
// message naming the kernel, the block and the thread.
func TestRunnerAbortsOnDivergence(t *testing.T) {
	fb := checksFatbin(t)
	for _, c := range []struct{ kernel, want string }{
		{"check_early_return", "kernel check_early_return block (0,0,0) thread (5,0,0): barrier divergence: this thread is returned"},
		{"check_divergent_barrier", "kernel check_divergent_barrier block (0,0,0) thread (32,0,0): barrier divergence"},
		{"check_partial_mask", "with mask 0xffff: partial masks are not modelled"},
	} {
		for _, o := range orders {
			t.Run(c.kernel+"/"+o.name, func(t *testing.T) {
				d := startDriver(t, built.Driver, fb, o.reverse, nil)
				r := d.launch(t, check(c.kernel, 0), grid1(1), 0, [][]byte{make([]byte, 4*64)}, buf(0))
				require.Equal(t, statusDead, r.status)
				require.Contains(t, d.stderr.String(), c.want)
			})
		}
	}
}

// TestReverseOrderExposesMissingBarrier: a read of another thread's shared write
// without a barrier passes in the forward order and fails in reverse.
func TestReverseOrderExposesMissingBarrier(t *testing.T) {
	fb := checksFatbin(t)
	want := make([]float32, 64)
	for i := 1; i < 64; i++ {
		want[i] = float32(i)
	}
	k := check("check_missing_barrier", 256)
	d := startDriver(t, built.Driver, fb, false, nil)
	defer d.close()
	got := d.run(t, k, grid1(3), 256, [][]byte{make([]byte, 4*64)}, buf(0))
	requireClose(t, "forward", want, bf32(got[0]), 0, 0)
	r := startDriver(t, built.Driver, fb, true, nil)
	defer r.close()
	got = r.run(t, k, grid1(3), 256, [][]byte{make([]byte, 4*64)}, buf(0))
	require.NotEqual(t, f32b(want), got[0], "the reverse order must expose the missing barrier")
}

// TestShuffles: the runner's shuffles follow CUDA's semantics (out-of-range lanes
// keep their own value).
func TestShuffles(t *testing.T) {
	fb := checksFatbin(t)
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := startDriver(t, built.Driver, fb, o.reverse, nil)
			defer d.close()
			got := bf32(d.run(t, check("check_shuffles", 0), grid1(2), 0, [][]byte{make([]byte, 4*4*64)}, buf(0))[0])
			for i := range 64 {
				lane, base := i%32, i-i%32
				down, up := i+1, i-3
				if lane == 31 {
					down = i
				}
				if lane < 3 {
					up = i
				}
				sum := float32(0)
				for l := range 32 {
					sum += float32(base + l)
				}
				require.Equal(t, []float32{sum, float32(down), float32(up), float32(base + 7)}, got[4*i:4*i+4], "thread %d", i)
			}
		})
	}
}

// TestFaults: the fake's injected faults reach the caller as the driver reports
// them: cuInit's error, out of memory past FAKECUDA_MEM_LIMIT, and a failed launch
// that is sticky (the launch's sync returns 719, CUDA_ERROR_LAUNCH_FAILED).
func TestFaults(t *testing.T) {
	needFake(t)
	fake(t)
	t.Run("init", func(t *testing.T) {
		cmd := exec.Command(built.Driver, fatbin)
		cmd.Env = append(os.Environ(), "FAKECUDA_INIT_ERROR=100")
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "cuInit(0): error 100")
	})
	t.Run("out of memory", func(t *testing.T) {
		d := startDriver(t, built.Driver, fatbin, false, []string{"FAKECUDA_MEM_LIMIT=4096"})
		small := d.run(t, &kernels.Scale, grid1(1), 0, [][]byte{f32b([]float32{2})}, buf(0), float32(3), int64(1))
		require.Equal(t, []float32{6}, bf32(small[0]))
		r := d.launch(t, &kernels.Scale, grid1(1), 0, [][]byte{make([]byte, 8192)}, buf(0), float32(3), int64(2048))
		require.Equal(t, statusDead, r.status)
		require.Contains(t, d.stderr.String(), "cuMemAlloc")
		require.Contains(t, d.stderr.String(), "error 2") // CUDA_ERROR_OUT_OF_MEMORY
	})
	t.Run("launch failure", func(t *testing.T) {
		d := startDriver(t, built.Driver, fatbin, false, []string{"FAKECUDA_FAIL_LAUNCH=fsdp_scale:2"})
		d.run(t, &kernels.Scale, grid1(1), 0, [][]byte{f32b([]float32{2})}, buf(0), float32(3), int64(1))
		r := d.launch(t, &kernels.Scale, grid1(1), 0, [][]byte{f32b([]float32{2})}, buf(0), float32(3), int64(1))
		require.Equal(t, uint32(719), r.status)
	})
	for _, block := range []int{512, 128} {
		t.Run(name("block %d for %d", block, kernels.Scale.Block), func(t *testing.T) {
			d := startDriver(t, built.Driver, fatbin, false, nil)
			k := kernels.Scale
			k.Block = block
			r := d.launch(t, &k, grid1(1), 0, [][]byte{f32b([]float32{2})}, buf(0), float32(3), int64(1))
			require.Equal(t, uint32(1), r.status) // CUDA_ERROR_INVALID_VALUE
			require.Contains(t, d.stderr.String(), "compiled for 256 threads")
		})
	}
}

// TestASanCatchesOverrun runs only in the AddressSanitizer pass (make
// kernels-asan): a kernel reading past its dynamic shared memory must be reported.
func TestASanCatchesOverrun(t *testing.T) {
	if os.Getenv("FAKECUDA_TEST_ASAN") != "1" {
		t.Skip("the AddressSanitizer pass is make kernels-asan (FAKECUDA_TEST_ASAN=1)")
	}
	fb := checksFatbin(t)
	d := startDriver(t, built.Driver, fb, false, nil)
	r := d.launch(t, check("check_shared_overrun", 256), grid1(1), 256, [][]byte{make([]byte, 4*64)}, buf(0))
	require.Equal(t, statusDead, r.status)
	require.Contains(t, d.stderr.String(), "AddressSanitizer: heap-buffer-overflow")
}

// TestFakeDriverAPI builds testdata/api_check.cc against the fake and runs it: each
// driver call the cuda device uses, with its error cases (bounds, handles, out of
// memory, launch limits, a sticky illegal address).
func TestFakeDriverAPI(t *testing.T) {
	needFake(t)
	b := fake(t)
	inc, err := fakecuda.CUDAInclude()
	require.NoError(t, err)
	exe := filepath.Join(t.TempDir(), "api_check")
	args := []string{"-std=c++17", "-Wall", "-Werror", "-I", inc, "testdata/api_check.cc", "-o", exe,
		"-L", b.Dir, "-l:libcuda.so.1", "-Wl,-rpath," + b.Dir}
	if os.Getenv("FAKECUDA_TEST_ASAN") == "1" { // the fake carries ASan: so must its program
		args = append(args, "-fsanitize=address")
	}
	out, err := exec.Command("g++", args...).CombinedOutput()
	require.NoError(t, err, "g++: %s", out)
	cmd := exec.Command(exe, fatbin)
	cmd.Env = append(os.Environ(), "FAKECUDA_MEM_LIMIT=1048576")
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok")
}
