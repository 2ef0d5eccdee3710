//go:build cgo

package gotrain

import (
	"context"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// cgoEnabled says the test binary was built with cgo, which loading OpenBLAS,
// NCCL and the CUDA libraries needs.
const cgoEnabled = true

func TestLossDoesNotDependOnBLAS(t *testing.T) {
	var losses [2][]float64
	for i, blas := range []string{BLASOpenBLAS, BLASGonum} {
		rc := tinyRun(2, 1, sweeps.DDP)
		rc.BackendOptions = map[string]any{"blas": blas}
		rc.AssignID()
		var stderr syncBuffer
		res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, "%s: %s\nstderr:\n%s", blas, res.Error, stderr.String())
		for _, s := range res.Steps {
			losses[i] = append(losses[i], *s.Loss)
		}
		if blas == BLASGonum {
			assert.Regexp(t, `^gonum`, res.Env.BLAS)
			assert.Equal(t, runtime.GOMAXPROCS(0), res.Env.BLASThreads, "gonum splits a GEMM over GOMAXPROCS goroutines")
		} else {
			assert.Regexp(t, `^OpenBLAS \d`, res.Env.BLAS)
		}
	}
	require.Len(t, losses[1], len(losses[0]))
	for i := range losses[0] {
		assert.InEpsilon(t, losses[0][i], losses[1][i], 1e-5, "step %d", i+1)
	}
}
