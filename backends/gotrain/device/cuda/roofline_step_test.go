//go:build cgo

package cuda

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// rooflineStep runs steps bf16 training steps of shape s (batch × seq tokens) on d
// as the FSDP trainer's bf16 policy runs them on one rank: bf16 parameters cast
// from the fp32 masters, forward and backward, the gradients cast to fp32 and
// AdamW on the masters. The op timings of the last step are kept (the earlier
// ones are warmup) and returned with the step's launch count and wall time (from
// a synchronized device to the step's end on the GPU).
func rooflineStep(tb testing.TB, d *Device, s shapes.Shape, batch, seq, steps int) ([]OpTime, int64, time.Duration) {
	tb.Helper()
	m, err := model.New(d, s)
	require.NoError(tb, err)
	master, err := m.AllocUnits(device.Params)
	require.NoError(tb, err)
	// A cheap pattern, not InitUnits: a GPU's times do not depend on the values,
	// and generating llama-1b's 1.5 billion normals on the host would take most
	// of the GPU check's minute.
	for _, p := range master {
		host := make([]float32, p.Len())
		for i := range host {
			host[i] = float32(i%251-125) * 1e-4
		}
		d.CopyFromHost(p, host)
	}
	bf := func(cat device.Category) []device.Buffer {
		out := make([]device.Buffer, len(master))
		for i, p := range master {
			b, err := d.AllocDType(p.Len(), device.BF16, cat)
			require.NoError(tb, err)
			out[i] = b
		}
		return out
	}
	params, grads := bf(device.Params), bf(device.Grads)
	fp32 := func(cat device.Category) []device.Buffer {
		bufs, err := m.AllocUnits(cat)
		require.NoError(tb, err)
		return bufs
	}
	g32, mom, vel := fp32(device.Grads), fp32(device.Optimizer), fp32(device.Optimizer)
	tokens := make([]int32, batch*seq+1)
	for i := range tokens {
		tokens[i] = int32((i*7919 + 13) % s.Vocab)
	}
	var launches int64
	var start time.Time
	for step := 1; step <= steps; step++ {
		if step == steps {
			require.NoError(tb, d.ResetOpTimes())
			launches = d.Launches()
			start = time.Now()
		}
		for i := range master {
			d.Cast(params[i], master[i])
			d.Zero(grads[i])
		}
		_, err := m.ForwardBackward(params, grads, tokens[:batch*seq], tokens[1:], seq, false)
		require.NoError(tb, err)
		for i := range master {
			d.Cast(g32[i], grads[i])
			d.AdamW(master[i], g32[i], mom[i], vel[i], device.AdamWConfig{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: step})
		}
	}
	require.NoError(tb, d.Sync())
	wall := time.Since(start)
	times, err := d.OpTimes()
	require.NoError(tb, err)
	return times, d.Launches() - launches, wall
}

// TestRooflineTableOnTheRunner runs a small bf16 model's step (head dim 64: the
// tensor-core attention) with the profiler on the fake driver and checks the
// table's plumbing: every op the step runs has a row with the costs of the one
// place that computes them and a measured time, and the top 10 follows. The
// fake's times are the CPU's, meaningless as GPU figures.
func TestRooflineTableOnTheRunner(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{Profile: true})
	s := shapes.Shape{Name: "tiny", Arch: shapes.ArchLlama, Hidden: 128, Layers: 2, Heads: 2, KVHeads: 1,
		Intermediate: 256, Vocab: 300, MaxPositions: 64, RopeTheta: 10000, NormEps: 1e-5}
	times, launches, wall := rooflineStep(t, d, s, 2, 17, 2)
	assert.Positive(t, wall)
	ops := map[string]OpTime{}
	for _, o := range times {
		assert.Positive(t, o.Calls, o.Op)
		assert.Positive(t, o.Measured, "%s %s: no measured time", o.Op, o.Shape)
		ops[o.Op] = o
	}
	for _, op := range []string{"MatMul", "AttentionForward", "AttentionBackward", "RMSNormForward", "RMSNormBackward",
		"RoPEQKForward", "RoPEQKBackward", "ResidualRMSNorm", "SwiGLUPackedForward", "SwiGLUPackedBackward",
		"CrossEntropyFused", "EmbeddingForward", "EmbeddingBackward", "Sum", "Cast", "Zero", "AdamW"} {
		assert.Contains(t, ops, op, "the step's %s has no row", op)
	}
	// The block's fused ops replace the plain ones (device.FusedOps).
	for _, op := range []string{"RoPEForward", "RoPEBackward", "SwiGLUForward", "SwiGLUBackward"} {
		assert.NotContains(t, ops, op, "the step runs the unfused %s", op)
	}
	assert.Equal(t, CostResidualRMSNorm(device.BF16, 34, 128), ops["ResidualRMSNorm"].OpCost)
	// The rows' costs are the cost functions' for the step's shapes.
	as := device.AttnShape{Batch: 2, Seq: 17, Heads: 2, KVHeads: 1, HeadDim: 64}
	assert.Equal(t, CostAttentionForward(device.BF16, true, as), ops["AttentionForward"].OpCost)
	assert.Equal(t, 2, ops["AttentionForward"].Calls) // one per layer
	// The training forward runs the fused cross-entropy, and nothing else does.
	assert.Equal(t, CostCrossEntropyFused(device.BF16, 34, 300), ops["CrossEntropyFused"].OpCost)
	assert.NotContains(t, ops, "CrossEntropyForward")
	assert.NotContains(t, ops, "CrossEntropyBackward")
	var buf bytes.Buffer
	require.NoError(t, WriteRoofline(&buf, H100(), times))
	out := buf.String()
	t.Log("\n" + out)
	assert.Contains(t, out, "# top 10 by measured time")
	assert.Contains(t, out, "989.5 TFLOP/s tensor, 67.0 TFLOP/s fp32, 3.35 TB/s")
	top := out[strings.Index(out, "# top 10"):]
	assert.Equal(t, 12, strings.Count(top, "\n"), "a header and 10 rows after the title:\n%s", top)
	// A launch per kernel, GEMM, memset or copy of the step: at least one per
	// timed op call, since every op issues something; and exactly what the
	// costDevice predicts for the step.
	calls := 0
	for _, o := range times {
		calls += o.Calls
	}
	assert.GreaterOrEqual(t, launches, int64(calls))
	predicted, _ := predictStep(t, s, 2, 17, false)
	assert.Equal(t, predicted.launches, launches, "the step's launches against the costDevice's count")
	t.Log(stepLaunches(H100(), s, 2, 17, launches, times))
}

// stepLaunches is the launch report of a measured step (shape s, batch × seq):
// its launch count against the costDevice's for the fused and the unfused op
// sequence, and the launch budget (LaunchBudget) from the roofline's prediction
// and from the measured op times, so a GPU run confirms or refutes item 4's
// decision not to capture the step as a CUDA graph.
func stepLaunches(r Roofline, s shapes.Shape, batch, seq int, launches int64, times []OpTime) string {
	fused, predicted := predictStep(nil, s, batch, seq, false)
	plain, _ := predictStep(nil, s, batch, seq, true)
	var gpu time.Duration
	for _, o := range times {
		gpu += o.Measured
	}
	return fmt.Sprintf("# launches: %d a step measured; predicted %d with the fused ops, %d without (%d fewer: RoPEQK, ResidualRMSNorm, SwiGLUPacked and the gate|up GEMM)\n"+
		"# launch budget, predicted: %s\n# launch budget, measured: %s\n",
		launches, fused.launches, plain.launches, plain.launches-fused.launches,
		LaunchBudget{Launches: fused.launches, GPU: ExpectedTotal(r, predicted)},
		LaunchBudget{Launches: launches, GPU: gpu})
}

// BenchmarkRooflineStep prints issue 24's per-op table for one bf16 step of
// llama-1b untied at seq 2048 (batch FSDPBENCH_ROOFLINE_BATCH, default 1) on a
// real GPU: each op's FLOPs and bytes, the time they take at the H100's peaks,
// the time CUDA events measured, and the step's top 10 ops.
func BenchmarkRooflineStep(b *testing.B) {
	d := benchDevice(b, Options{Profile: true})
	s, err := shapes.Lookup("llama-1b")
	require.NoError(b, err)
	s.TiedEmbeddings = false
	batch := 1
	if v := os.Getenv("FSDPBENCH_ROOFLINE_BATCH"); v != "" {
		_, err := fmt.Sscan(v, &batch)
		require.NoError(b, err, "FSDPBENCH_ROOFLINE_BATCH=%q: give a batch of 1 to 16", v)
		require.True(b, batch >= 1 && batch <= 16, "FSDPBENCH_ROOFLINE_BATCH=%d: give a batch of 1 to 16", batch)
	}
	var times []OpTime
	var launches int64
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		times, launches, wall = rooflineStep(b, d, s, batch, 2048, 2)
	}
	b.StopTimer()
	var gpu time.Duration
	for _, o := range times {
		gpu += o.Measured
	}
	var buf bytes.Buffer
	require.NoError(b, WriteRoofline(&buf, H100(), times))
	// The step's wall time against the ops' GPU time: the gap is what the GPU
	// waited for the host (launches, host syncs); divided by the launches it bounds
	// what a CUDA graph could save per launch.
	fmt.Printf("# roofline: llama-1b untied, bf16, batch %d, seq 2048, %s; the step: %d launches, %.1f ms wall, %.1f ms in the ops on the GPU (%.2f µs of gap a launch)\n%s%s",
		batch, d.Info().GPU, launches, float64(wall)/1e6, float64(gpu)/1e6, float64(wall-gpu)/1e3/float64(max(launches, 1)),
		stepLaunches(H100(), s, batch, 2048, launches, times), buf.String())
	b.ReportMetric(float64(launches), "launches/step")
}

// TestLaunchesCounted: Launches counts each kernel, cuBLAS call, memset and
// device copy the ops issue, the memset of each allocation, and nothing for host
// transfers, empty allocations or after a failure.
func TestLaunchesCounted(t *testing.T) {
	requireFakes(t)
	d := newTestDevice(t, Options{})
	a, b, c := alloc(t, d, 6), alloc(t, d, 6), alloc(t, d, 4) // 3 memsets
	_ = alloc(t, d, 0)                                        // nothing to zero
	d.CopyFromHost(a, make([]float32, 6))                     // a transfer: no launch
	require.Equal(t, int64(3), d.Launches())
	d.MatMul(c, a, b, false, true, 2, 2, 3, 1, 0) // 1 GEMM
	d.Zero(c)                                     // 1 memset
	d.Copy(b, a)                                  // 1 device copy
	w, rstd := alloc(t, d, 3), alloc(t, d, 2)     // 2 memsets
	d.RMSNormBackward(a, w, b, a, w, rstd, 2, 3)  // dx and dweight kernels
	d.Sum(a)                                      // 1 kernel (the host finishes)
	require.NoError(t, d.Sync())
	assert.Equal(t, int64(11), d.Launches())
}

// TestOpTimesNeedProfile: without Options.Profile OpTimes says how to get them;
// with it, a reset forgets the ops so far and calls of one op and shape add up;
// Close runs with a timed op not yet read (its events are freed there).
func TestOpTimesNeedProfile(t *testing.T) {
	requireFakes(t)
	_, err := newTestDevice(t, Options{}).OpTimes()
	require.ErrorContains(t, err, "opened without Options.Profile")

	d := newTestDevice(t, Options{Profile: true})
	x := alloc(t, d, 8)
	d.Scale(x, 2)
	require.NoError(t, d.ResetOpTimes())
	d.Scale(x, 2)
	d.Scale(x, 3)
	times, err := d.OpTimes()
	require.NoError(t, err)
	require.Len(t, times, 1)
	assert.Equal(t, OpTime{OpCost: CostScale(device.F32, 8), Calls: 2, Measured: times[0].Measured}, times[0])
	d.Zero(x) // timed, never read: Close frees its events
}
