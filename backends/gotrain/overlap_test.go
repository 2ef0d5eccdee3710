package gotrain

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl/ncclfake"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/cudatest"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// envOverlapCase tells TestStreamSchedule, in a process bound to the fakes,
// which part to run: "parity" or "drop:<wait>".
const envOverlapCase = "FSDPBENCH_OVERLAP_CASE"

// Stream delays of the fake libcuda under FAKECUDA_STREAMS=async (the cuda device
// creates its compute stream first, index 0, then its comm stream, index 1): each
// operation of the late stream sleeps first, so the other runs ahead of it.
const (
	commLate    = "1:20000" // the comm stream 20 ms late per operation
	computeLate = "0:3000"  // the compute stream 3 ms late per operation
)

// overlapChild runs TestStreamSchedule in a process bound to the fake libcuda
// (every stream on a thread of its own), the fake cuBLAS and the fake NCCL
// (collectives in the comm stream's order), with env added.
func overlapChild(t *testing.T, env ...string) string {
	t.Helper()
	dir := t.TempDir()
	f, err := cudatest.Build(dir)
	require.NoError(t, err)
	lib, err := ncclfake.Build(dir)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestStreamSchedule$", "-test.v", "-test.count=1")
	cmd.Env = append(append(os.Environ(), f.Env()...), "FSDPBENCH_LIBNCCL="+lib, EnvRequireGPU+"=1",
		EnvShareGPUs+"=1", "FAKECUDA_STREAMS=async")
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: TestStreamSchedule")
	return string(out)
}

// TestStreamScheduleOverFakes trains on the cuda device over the fakes with the
// comm stream on its own thread, late, and then with the compute stream late:
// every strategy and prefetch setting gives the cpu device's losses over the TCP
// ring (≤ 1e-5 relative) and the same memory per category, byte for byte, so
// the events order the two streams wherever data flows between them, and the
// arena never hands out memory a stream still uses.
func TestStreamScheduleOverFakes(t *testing.T) {
	for _, late := range []string{commLate, computeLate} {
		t.Run("late="+late, func(t *testing.T) {
			out := overlapChild(t, envOverlapCase+"=parity", "FAKECUDA_STREAM_DELAY_US="+late)
			t.Logf("%s", out)
		})
	}
}

// TestStreamScheduleCatchesAMissingWait leaves out each of the schedule's event
// waits in turn (fsdp.EnvDropWait) with the stream it protects late: the run
// then trains on wrong data, which TestStreamSchedule's child reports as losses
// off the reference. This is what shows the parity test above would fail if
// the ordering were wrong.
func TestStreamScheduleCatchesAMissingWait(t *testing.T) {
	for _, tc := range []struct{ drop, late string }{
		{"gather", commLate},    // compute reads the gathered buffer before the all-gather filled it
		{"free", commLate},      // the arena hands the full gradient to compute before the reduce-scatter read it
		{"shard", computeLate},  // the all-gather reads the shard (and its zeroed buffer) before compute is done with them
		{"reduce", computeLate}, // the reduce-scatter reads the gradient before backward wrote it
	} {
		t.Run(tc.drop, func(t *testing.T) {
			out := overlapChild(t, envOverlapCase+"=drop:"+tc.drop, "FAKECUDA_STREAM_DELAY_US="+tc.late,
				fsdp.EnvDropWait+"="+tc.drop)
			t.Logf("%s", out)
		})
	}
}

// overlapConfig is one strategy and prefetch setting of TestStreamSchedule.
type overlapConfig struct {
	ws, nodes int
	sharding  string
	backward  string
	forward   bool
}

func (c overlapConfig) String() string {
	return fmt.Sprintf("ws%d-%s-bwd=%s-fwd=%v", c.ws, c.sharding, c.backward, c.forward)
}

// overlapConfigs are every strategy with every prefetch setting that changes its
// schedule: backward prefetch only exists where backward gathers (full_shard,
// hybrid_shard), forward prefetch where forward gathers (the sharded ones).
func overlapConfigs() []overlapConfig {
	var out []overlapConfig
	for _, fwd := range []bool{false, true} {
		for _, bwd := range []string{sweeps.PrefetchNone, sweeps.BackwardPre, sweeps.BackwardPost} {
			out = append(out, overlapConfig{2, 1, sweeps.FullShard, bwd, fwd})
		}
		out = append(out, overlapConfig{2, 1, sweeps.ShardGradOp, sweeps.PrefetchNone, fwd})
	}
	out = append(out,
		overlapConfig{4, 2, sweeps.HybridShard, sweeps.BackwardPre, true},
		overlapConfig{2, 1, sweeps.NoShard, sweeps.PrefetchNone, false},
		overlapConfig{2, 1, sweeps.DDP, sweeps.PrefetchNone, false})
	return out
}

// TestStreamSchedule is the child of the two tests above.
func TestStreamSchedule(t *testing.T) {
	which := os.Getenv(envOverlapCase)
	if which == "" {
		t.Skip("run by TestStreamScheduleOverFakes in a process bound to the fakes")
	}
	requireGPU(t)
	run := func(t *testing.T, c overlapConfig, hw string, opts map[string]any) results.Result {
		rc := tinyRun(c.ws, c.nodes, c.sharding)
		rc.Hardware, rc.BackwardPrefetch, rc.ForwardPrefetch, rc.BackendOptions = hw, c.backward, c.forward, opts
		rc.AssignID()
		var stderr syncBuffer
		res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, "%s: %s\n%s", hw, res.Error, stderr.String())
		return res
	}
	configs := overlapConfigs()
	if drop, ok := strings.CutPrefix(which, "drop:"); ok {
		// One configuration that exercises every wait: prefetch in both passes,
		// two ranks, so gathers and reduce-scatters go over the comm stream.
		c := overlapConfig{2, 1, sweeps.FullShard, sweeps.BackwardPre, true}
		ref := run(t, c, "cpu", nil)
		t.Setenv(fsdp.EnvDropWait, drop)
		got := run(t, c, "auto", map[string]any{"comm": "nccl"})
		worst := 0.0
		for i := range ref.Steps {
			r, g := *ref.Steps[i].Loss, *got.Steps[i].Loss
			d := math.Abs(r-g) / math.Abs(r)
			if math.IsNaN(g) {
				d = math.Inf(1)
			}
			worst = max(worst, d)
		}
		t.Logf("without the %q wait: losses %v, reference %v, worst relative difference %.3g", drop, lossesOf(got), lossesOf(ref), worst)
		assert.Greater(t, worst, 1e-3, "a missing %q wait went unnoticed", drop)
		return
	}
	byPrefetch := map[string][]float64{}
	for _, c := range configs {
		t.Run(c.String(), func(t *testing.T) {
			tcp := run(t, c, "cpu", nil)
			gpu := run(t, c, "auto", map[string]any{"comm": "nccl"})
			require.NotEmpty(t, gpu.Env.GPU, "the run trained on the (fake) GPU")
			require.Len(t, gpu.Steps, len(tcp.Steps))
			for i := range tcp.Steps {
				assert.InEpsilon(t, *tcp.Steps[i].Loss, *gpu.Steps[i].Loss, 1e-5, "step %d loss", i+1)
			}
			assert.Equal(t, tcp.MemBreakdownBytes, gpu.MemBreakdownBytes, "memory per category")
			require.NotNil(t, gpu.PeakMemAllocatedBytes)
			assert.Equal(t, *tcp.PeakMemAllocatedBytes, *gpu.PeakMemAllocatedBytes, "peak allocated")
			for r := range c.ws {
				assert.Equal(t, *tcp.PerRank[r].PeakMemAllocatedBytes, *gpu.PerRank[r].PeakMemAllocatedBytes, "rank %d", r)
			}
			require.NotNil(t, gpu.CommBytesPerStep)
			assert.Equal(t, tcp.CommBytesPerStep.AllGather, gpu.CommBytesPerStep.AllGather, "the same all-gathers")
			assert.Equal(t, tcp.CommBytesPerStep.ReduceScatter, gpu.CommBytesPerStep.ReduceScatter, "the same reduce-scatters")
			key := fmt.Sprintf("ws%d-%s", c.ws, c.sharding)
			if prev, ok := byPrefetch[key]; ok {
				// On one device, prefetch changes when collectives run, never what
				// they compute: the losses are the same bits.
				assert.Equal(t, prev, lossesOf(gpu), "%s: losses across prefetch settings", key)
			}
			byPrefetch[key] = lossesOf(gpu)
			t.Logf("%s: tcp %v, cuda %v; peak allocated %d, reserved %v", c, lossesOf(tcp), lossesOf(gpu),
				*gpu.PeakMemAllocatedBytes, deref(gpu.PeakMemReservedBytes))
		})
	}
}
