package openblas

import (
	"os"
	"testing"
)

// TestMain pins OpenBLAS's kernels to a set whose products do not depend on the
// thread count (DeterministicCoreType): TestThreadsDoNotChangeResults checks
// that property, which an environment's OPENBLAS_CORETYPE=Haswell breaks.
func TestMain(m *testing.M) {
	if c := DeterministicCoreType(); c != "" {
		_ = os.Setenv("OPENBLAS_CORETYPE", c)
	}
	os.Exit(m.Run())
}
