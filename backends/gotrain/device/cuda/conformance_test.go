//go:build cgo

package cuda

import (
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// TestConformance runs the device conformance suite on the cuda device against the
// cpu device: over the fake libraries here (the kernels executed on the CPU by
// the kernels' fake libcuda, GEMMs by the fake cuBLAS), and over a real GPU when
// FSDPBENCH_CUDA_TEST_LIBS=real (.ci/gpu-check), in fp32 GEMM mode.
//
// Over the fakes it runs twice: with each block's threads scheduled first to last
// and last to first between barriers (FAKECUDA_SCHEDULE=reverse), which exposes a
// missing barrier.
func TestConformance(t *testing.T) {
	suite := devicetest.Suite{
		New:             newConformanceDevice,
		Reference:       func() device.Device { return cpu.New(cpu.Options{Float64: true}) },
		MemoryReference: func() device.Device { return cpu.New(cpu.Options{}) },
	}
	if fakes.cuda == "" {
		devicetest.Run(t, suite)
		return
	}
	for _, order := range []string{"forward", "reverse"} {
		t.Run(order, func(t *testing.T) {
			t.Setenv("FAKECUDA_SCHEDULE", order)
			devicetest.Run(t, suite)
		})
	}
}

func newConformanceDevice(t *testing.T, limit int64) device.Device {
	return newTestDevice(t, Options{LimitBytes: limit})
}

// TestAccountingMatchesCPU is the suite's memory part, which needs no kernel: the
// tracker is charged exactly what the cpu device charges, step for step.
func TestAccountingMatchesCPU(t *testing.T) {
	devicetest.Accounting(t, newConformanceDevice(t, 0), cpu.New(cpu.Options{}))
	devicetest.OutOfMemory(t, newConformanceDevice)
}

// TestConformanceBF16 runs the bf16 suite on the cuda device (bf16 storage, the
// kernels' _bf16 twins, bf16 cublasGemmEx) against the cpu device in float64
// storing bf16; over the fakes in both schedule orders.
func TestConformanceBF16(t *testing.T) {
	ref := func() device.Device { return cpu.New(cpu.Options{Float64: true}) }
	if fakes.cuda == "" {
		devicetest.RunBF16(t, newConformanceDevice, ref)
		return
	}
	for _, order := range []string{"forward", "reverse"} {
		t.Run(order, func(t *testing.T) {
			t.Setenv("FAKECUDA_SCHEDULE", order)
			devicetest.RunBF16(t, newConformanceDevice, ref)
		})
	}
}
