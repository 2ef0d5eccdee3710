//go:build cgo

package cuda

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envHelper makes the test binary run TestNoDeviceHelper's body: the process
// binds the libraries named in its environment, once, as a real program does.
const envHelper = "FSDPBENCH_CUDA_NODEVICE_HELPER"

// hasGPU reports whether this machine has an NVIDIA GPU: a GPU device node, or
// nvidia-smi listing one (a VM may name its nodes differently).
func hasGPU() bool {
	if nodes, _ := filepath.Glob("/dev/nvidia[0-9]*"); len(nodes) > 0 {
		return true
	}
	out, err := exec.Command("nvidia-smi", "-L").Output()
	return err == nil && strings.Contains(string(out), "GPU 0")
}

// stubLibcuda is the toolkit's stub libcuda.so, which answers 34 to every call.
func stubLibcuda(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/lib/x86_64-linux-gnu/stubs/libcuda.so", "/usr/local/cuda/lib64/stubs/libcuda.so"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no stub libcuda.so: install the CUDA toolkit (Debian: nvidia-cuda-toolkit from non-free)")
	return ""
}

// TestNoDevice runs the device against the real libraries of this machine in a
// process of its own per case (a process binds its libraries once): without a GPU
// the driver's cuInit answers CUDA_ERROR_NO_DEVICE and New must say so, wrap
// ErrNoDevice, not crash, and not leak file descriptors, threads or mappings over
// many attempts. On a GPU machine the real case must open the device instead.
func TestNoDevice(t *testing.T) {
	real := "no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE (100) from libcuda.so.1 (the driver is installed but sees no GPU)"
	if hasGPU() {
		real = "opened"
	}
	missing := filepath.Join(t.TempDir(), "libcuda.so.1")
	tests := []struct {
		name, libcuda, libcublas string
		want                     []string
	}{
		{"the real driver library", "", "", []string{real}},
		{"the toolkit's stub", stubLibcuda(t), "", []string{"no CUDA device: cuInit: CUDA_ERROR_STUB_LIBRARY (34)",
			"point FSDPBENCH_LIBCUDA at the real libcuda.so.1"}},
		{"a driver library that is not there", missing, "", []string{"no CUDA device: the NVIDIA driver library: CUDA driver not found; tried:",
			missing, "set FSDPBENCH_LIBCUDA"}},
		{"a library that is not the driver", "libm.so.6", "", []string{"no CUDA device: libm.so.6 is not a usable driver library: missing cuInit, "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNoDeviceHelper$", "-test.v")
			cmd.Env = append(os.Environ(), envHelper+"=1", EnvTestLibraries+"=real",
				"FSDPBENCH_LIBCUDA="+tt.libcuda, "FSDPBENCH_LIBCUBLAS="+tt.libcublas)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the helper crashed or failed:\n%s", out)
			for _, w := range tt.want {
				assert.Contains(t, string(out), w)
			}
		})
	}
}

// TestNoDeviceHelper is TestNoDevice's child process.
func TestNoDeviceHelper(t *testing.T) {
	if os.Getenv(envHelper) == "" {
		t.Skip("run by TestNoDevice in a process of its own")
	}
	d, err := New(Options{})
	if err == nil {
		require.NoError(t, d.Close())
		fmt.Println("RESULT: opened")
		return
	}
	require.ErrorIs(t, err, ErrNoDevice)
	require.True(t, errors.Is(Probe(), ErrNoDevice))
	fmt.Println("RESULT:", err)
	resources(t) // the first reads open the runtime's poller descriptors
	before := resources(t)
	for range 200 {
		_, err2 := New(Options{})
		require.Equal(t, err.Error(), err2.Error(), "the same reason every time")
	}
	assert.Equal(t, before, resources(t), "file descriptors, threads and library mappings after 200 attempts")
}

// resources counts this process's open files, threads and shared-object mappings.
func resources(t *testing.T) [3]int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)

	tasks, err := os.ReadDir("/proc/self/task")
	require.NoError(t, err)
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	libs := 0 // mappings of shared objects: the Go heap's own mappings grow as it likes
	for l := range strings.Lines(string(maps)) {
		if strings.Contains(l, ".so") {
			libs++
		}
	}
	return [3]int{len(fds), len(tasks), libs}
}
