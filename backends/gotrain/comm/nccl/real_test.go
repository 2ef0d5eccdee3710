//go:build cgo

package nccl

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
)

// TestRealNCCL loads the real libnccl.so.2 (not the fake) the way a worker
// does and builds a one-rank communicator with it, which checks the
// hand-written prototypes against the real library (ncclUniqueId by value,
// ncclCommInitRank, ncclCommCount/UserRank, ncclCommDestroy). NCCL is not in
// Debian, so without it the test skips, unless FSDPBENCH_REQUIRE_NCCL=1 (the
// GPU machine's run), where a missing NCCL fails.
func TestRealNCCL(t *testing.T) {
	t.Setenv(dynload.NCCL.EnvVar, os.Getenv("FSDPBENCH_REAL_LIBNCCL"))
	lib, err := open()
	if err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_NCCL") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_NCCL=1 but %v", err)
		}
		t.Skipf("no real NCCL here (set FSDPBENCH_REQUIRE_NCCL=1 to make this a failure): %v", err)
	}
	require.False(t, lib.HostMemory, "%s is the fake", lib.Path)
	t.Logf("NCCL %s from %s, ncclCommSplit: %v", lib.VersionString(), lib.Path, lib.HasSplit())
	ctl := tcpGroup(t, 1, comm.Options{})
	c, err := New(context.Background(), ctl[0], lib, []int{0}, Options{})
	require.NoError(t, err)
	assert.Equal(t, 1, c.Size())
	assert.Equal(t, 0, c.Rank())
	err = c.AllReduce(context.Background(), []float32{1}, comm.Sum)
	require.ErrorContains(t, err, "needs the device's staging", "host memory is refused before NCCL sees it")
	require.NoError(t, c.Close())
}
