//go:build cgo

package gotrain

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl/ncclfake"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/dynload"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// useFakeNCCL builds the fake libnccl and points the workers (which inherit
// this process's environment) at it.
func useFakeNCCL(t *testing.T) {
	t.Helper()
	path, err := ncclfake.Build(t.TempDir())
	require.NoError(t, err)
	t.Setenv(dynload.NCCL.EnvVar, path)
}

// runWith runs rc with backend_options opts and returns the result and stderr.
func runWith(t *testing.T, rc sweeps.RunConfig, opts map[string]any) (results.Result, string) {
	t.Helper()
	rc.BackendOptions = opts
	var stderr syncBuffer
	res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, nil)
	require.NoError(t, err)
	return res, stderr.String()
}

// TestNCCLPathMatchesTCP runs every strategy through real worker processes
// twice, over the TCP ring and over the NCCL communicator (the fake libnccl,
// on the cpu device's buffers): the losses agree within 1e-5 and the memory
// per category is the same byte for byte.
func TestNCCLPathMatchesTCP(t *testing.T) {
	useFakeNCCL(t)
	for _, tc := range []struct {
		ws, nodes int
		sharding  string
		forward   bool
	}{
		{1, 1, sweeps.FullShard, false},
		{2, 1, sweeps.FullShard, true},
		{4, 1, sweeps.FullShard, false},
		{2, 1, sweeps.ShardGradOp, false},
		{4, 1, sweeps.ShardGradOp, true},
		{2, 2, sweeps.HybridShard, false},
		{4, 2, sweeps.HybridShard, false},
		{2, 1, sweeps.NoShard, false},
		{4, 1, sweeps.NoShard, false},
		{1, 1, sweeps.DDP, false},
		{2, 1, sweeps.DDP, false},
		{4, 1, sweeps.DDP, false},
	} {
		t.Run(fmt.Sprintf("ws%d-n%d-%s", tc.ws, tc.nodes, tc.sharding), func(t *testing.T) {
			rc := tinyRun(tc.ws, tc.nodes, tc.sharding)
			rc.ForwardPrefetch = tc.forward
			opts := map[string]any{"grad_clip": 0.5, "collective_timeout": "60s"}
			tcp, stderr := runWith(t, rc, opts)
			require.Equal(t, results.StatusOK, tcp.Status, "tcp: %s\n%s", tcp.Error, stderr)
			opts["comm"] = CommNCCL
			nc, stderr := runWith(t, rc, opts)
			require.Equal(t, results.StatusOK, nc.Status, "nccl: %s\n%s", nc.Error, stderr)

			require.Len(t, nc.Steps, len(tcp.Steps))
			bitwise := true
			for i := range tcp.Steps {
				want, got := *tcp.Steps[i].Loss, *nc.Steps[i].Loss
				assert.InEpsilon(t, want, got, 1e-5, "step %d loss", i+1)
				bitwise = bitwise && math.Float64bits(want) == math.Float64bits(got)
			}
			t.Logf("losses %v (tcp) vs %v (nccl), bitwise equal: %v", lossesOf(tcp), lossesOf(nc), bitwise)
			assert.Equal(t, tcp.MemBreakdownBytes, nc.MemBreakdownBytes, "memory per category")
			require.NotNil(t, nc.PeakMemAllocatedBytes)
			assert.Equal(t, *tcp.PeakMemAllocatedBytes, *nc.PeakMemAllocatedBytes)
			require.Len(t, nc.PerRank, tc.ws)
			for r := range tc.ws {
				assert.Equal(t, *tcp.PerRank[r].PeakMemAllocatedBytes, *nc.PerRank[r].PeakMemAllocatedBytes, "rank %d", r)
			}
			require.NotNil(t, nc.CommBytesPerStep)
			assert.Equal(t, tcp.CommBytesPerStep.AllGather, nc.CommBytesPerStep.AllGather)
			assert.Equal(t, tcp.CommBytesPerStep.ReduceScatter, nc.CommBytesPerStep.ReduceScatter)
			assert.Contains(t, nc.Env.NCCL, "2.27.3 (", "the NCCL version is reported")
			assert.Empty(t, tcp.Env.NCCL)
		})
	}
}

func lossesOf(r results.Result) []float64 {
	out := make([]float64, len(r.Steps))
	for i, s := range r.Steps {
		out[i] = *s.Loss
	}
	return out
}

// ncclCulprit matches an error naming the failed rank: the NCCL communicator's
// own, or the backend's status line when a worker saw its peer stopped.
var ncclCulprit = regexp.MustCompile(`nccl: \w+ #\d+: rank (\d+):|^rank (\d+) failed`)

// TestNCCLFaultsFailTheRun injects faults into the fake under a real run: the
// run ends failed, in bounded time, with an error naming the faulty rank.
func TestNCCLFaultsFailTheRun(t *testing.T) {
	useFakeNCCL(t)
	for _, tc := range []struct {
		name, fault string
		ws, nodes   int
		sharding    string
		culprit     string
		limit       time.Duration
	}{
		{"async error", "async:1:9", 2, 1, sweeps.FullShard, "1", 20 * time.Second},
		{"async error in hybrid_shard's replicate group", "async:3:12", 4, 2, sweeps.HybridShard, "3", 30 * time.Second},
		{"hung rank", "hang:0:9", 2, 1, sweeps.FullShard, "0", 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(ncclfake.EnvFault, tc.fault)
			rc := tinyRun(tc.ws, tc.nodes, tc.sharding)
			rc.Steps = 20
			start := time.Now()
			res, stderr := runWith(t, rc, map[string]any{"comm": CommNCCL, "collective_timeout": "1s"})
			elapsed := time.Since(start)
			assert.Equal(t, results.StatusFailed, res.Status, "%s\n%s", res.Error, stderr)
			m := ncclCulprit.FindStringSubmatch(res.Error)
			require.NotNil(t, m, "the error names the rank: %s\nstderr:\n%s", res.Error, stderr)
			assert.Equal(t, tc.culprit, m[1]+m[2], res.Error)
			assert.Less(t, elapsed, tc.limit, "the fault ended the run in bounded time")
			t.Logf("failed after %v: %s", elapsed.Round(time.Millisecond), res.Error)
		})
	}
}

// TestNCCLMissingLibrary: comm nccl without a libnccl is an infeasible run
// whose error lists where the library was looked for.
func TestNCCLMissingLibrary(t *testing.T) {
	t.Setenv(dynload.NCCL.EnvVar, "/nonexistent/libnccl.so.2")
	rc := tinyRun(2, 1, sweeps.FullShard)
	res, _ := runWith(t, rc, map[string]any{"comm": CommNCCL})
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "comm nccl")
	assert.Contains(t, res.Error, "/nonexistent/libnccl.so.2")
	assert.Contains(t, res.Error, "FSDPBENCH_LIBNCCL")
}
