//go:build cgo

package gotrain

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestBF16NCCLPathMatchesTCP runs bf16 through real worker processes over the TCP
// ring and over the NCCL communicator (the fake libnccl on the cpu device's
// buffers, the all-gathers as ncclBfloat16): the losses agree within 1e-5, the
// memory per category and the bytes moved per collective are the same, the
// all-gather moves half of fp32's bytes, and metrics say what precision ran.
func TestBF16NCCLPathMatchesTCP(t *testing.T) {
	useFakeNCCL(t)
	for _, tc := range []struct {
		ws, nodes int
		sharding  string
		forward   bool
	}{
		{2, 1, sweeps.FullShard, true},
		{4, 1, sweeps.ShardGradOp, false},
		{4, 2, sweeps.HybridShard, false},
		{2, 1, sweeps.DDP, false},
	} {
		t.Run(fmt.Sprintf("ws%d-n%d-%s", tc.ws, tc.nodes, tc.sharding), func(t *testing.T) {
			rc := tinyRun(tc.ws, tc.nodes, tc.sharding)
			rc.ForwardPrefetch = tc.forward
			opts := map[string]any{"grad_clip": 0.5, "collective_timeout": "60s"}
			fp32, stderr := runWith(t, rc, opts)
			require.Equal(t, results.StatusOK, fp32.Status, "fp32 tcp: %s\n%s", fp32.Error, stderr)
			rc.MixedPrecision = sweeps.BF16
			rc.AssignID()
			tcp, stderr := runWith(t, rc, opts)
			require.Equal(t, results.StatusOK, tcp.Status, "bf16 tcp: %s\n%s", tcp.Error, stderr)
			opts["comm"] = CommNCCL
			nc, stderr := runWith(t, rc, opts)
			require.Equal(t, results.StatusOK, nc.Status, "bf16 nccl: %s\n%s", nc.Error, stderr)

			require.Len(t, nc.Steps, len(tcp.Steps))
			for i := range tcp.Steps {
				assert.InEpsilon(t, *tcp.Steps[i].Loss, *nc.Steps[i].Loss, 1e-5, "step %d loss", i+1)
				assert.InEpsilon(t, *fp32.Steps[i].Loss, *tcp.Steps[i].Loss, 1e-2, "step %d: bf16 tracks fp32", i+1)
			}
			t.Logf("losses fp32 %v, bf16 tcp %v, bf16 nccl %v", lossesOf(fp32), lossesOf(tcp), lossesOf(nc))
			assert.Equal(t, tcp.MemBreakdownBytes, nc.MemBreakdownBytes, "memory per category")
			assert.Equal(t, *tcp.PeakMemAllocatedBytes, *nc.PeakMemAllocatedBytes)
			assert.Less(t, tcp.MemBreakdownBytes["activations"], fp32.MemBreakdownBytes["activations"])
			for r := range tc.ws {
				assert.Equal(t, *tcp.PerRank[r].PeakMemAllocatedBytes, *nc.PerRank[r].PeakMemAllocatedBytes, "rank %d", r)
			}
			assert.Equal(t, tcp.CommBytesPerStep.ReduceScatter, nc.CommBytesPerStep.ReduceScatter)
			// (NCCL's all-reduce count rounds a one-element loss differently from the
			// ring's, in fp32 as well: compare each path with fp32's on the ring.)
			assert.Equal(t, fp32.CommBytesPerStep.AllReduce, tcp.CommBytesPerStep.AllReduce, "all-reduce stays fp32")
			assert.Equal(t, fp32.CommBytesPerStep.ReduceScatter, nc.CommBytesPerStep.ReduceScatter, "reduce-scatter stays fp32")
			// NCCL moves exactly 2 bytes an element; the ring packs two to a word,
			// padding an odd shard by one element.
			assert.Equal(t, fp32.CommBytesPerStep.AllGather/2, nc.CommBytesPerStep.AllGather, "all-gather in bf16")
			assert.InDelta(t, nc.CommBytesPerStep.AllGather, tcp.CommBytesPerStep.AllGather, float64(nc.CommBytesPerStep.AllGather)/100)
			require.Contains(t, nc.Extra, "precision")
			assert.Contains(t, fmt.Sprint(nc.Extra["precision"]), "param_dtype=bfloat16, reduce_dtype=float32")
			assert.Contains(t, fmt.Sprint(fp32.Extra["precision"]), "float32 throughout")
		})
	}
}
