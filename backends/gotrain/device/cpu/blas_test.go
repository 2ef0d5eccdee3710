package cpu

import (
	"os"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
)

// TestBLASChoice: float32 GEMMs run on OpenBLAS when it loads unless gonum is
// asked for; float64, the reference, always on gonum; BLAS says which.
func TestBLASChoice(t *testing.T) {
	lib, err := openblas.Load()
	if err != nil && os.Getenv("FSDPBENCH_REQUIRE_OPENBLAS") == "1" {
		t.Fatalf("OpenBLAS does not load (%v), and FSDPBENCH_REQUIRE_OPENBLAS=1", err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"float32 auto", Options{}, map[bool]string{true: "OpenBLAS", false: "gonum"}[err == nil]},
		{"float32 gonum", Options{BLAS: BLASGonum}, "gonum"},
		{"float64", Options{Float64: true}, "gonum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info := New(tc.o).(BLASReporter).BLAS()
			assert.Equal(t, tc.want, info.Name)
			if info.Name == "OpenBLAS" {
				assert.Equal(t, lib.Version(), info.Version)
				assert.Equal(t, lib.Config, info.Config)
				assert.Equal(t, lib.Threads(), info.Threads)
				return
			}
			assert.Empty(t, info.Config)
			assert.Equal(t, runtime.GOMAXPROCS(0), info.Threads, "gonum splits over GOMAXPROCS goroutines")
		})
	}
}
