package fsdp

import (
	"os"
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
)

// TestMain pins OpenBLAS's kernels to a set whose products do not depend on the
// thread count (openblas.DeterministicCoreType): the tests here run every rank
// as goroutines of one process, and compare transports and gathers bitwise.
func TestMain(m *testing.M) {
	if c := openblas.DeterministicCoreType(); c != "" {
		_ = os.Setenv("OPENBLAS_CORETYPE", c)
	}
	os.Exit(m.Run())
}
