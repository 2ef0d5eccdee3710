package cpu_test

import (
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// TestConformance runs the device conformance suite on the cpu device, in float32
// (the device the trainer uses: on OpenBLAS where it loads, and on gonum) and in
// float64 (the reference itself, which must pass its own suite), against the
// float64 device.
func TestConformance(t *testing.T) {
	ref := func() device.Device { return cpu.New(cpu.Options{Float64: true}) }
	for _, tc := range []struct {
		name   string
		opts   cpu.Options
		memRef func() device.Device
	}{
		{"float32", cpu.Options{}, func() device.Device { return cpu.New(cpu.Options{}) }},
		{"float32-gonum", cpu.Options{BLAS: cpu.BLASGonum}, func() device.Device { return cpu.New(cpu.Options{}) }},
		{"float64", cpu.Options{Float64: true}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devicetest.Run(t, devicetest.Suite{
				New: func(_ *testing.T, limit int64) device.Device {
					o := tc.opts
					o.LimitBytes = limit
					return cpu.New(o)
				},
				Reference:       ref,
				MemoryReference: tc.memRef,
			})
		})
	}
}

// TestConformanceBF16 runs the bf16 suite on the cpu device in float32 against
// the cpu device in float64, both storing bf16.
func TestConformanceBF16(t *testing.T) {
	devicetest.RunBF16(t, func(_ *testing.T, limit int64) device.Device {
		return cpu.New(cpu.Options{LimitBytes: limit})
	}, func() device.Device { return cpu.New(cpu.Options{Float64: true}) })
}
