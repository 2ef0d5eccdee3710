package cuda

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// costDevice runs nothing: it records the cost of every op the model issues, as
// the cuda device would time it, so a step's roofline is predicted from the
// model's own op sequence without a GPU. Ops it does not implement panic through
// the nil embedded interface (the model calling something new shows up here).
// It counts the launches the cuda device would issue for each (Device.Launches:
// kernels, cuBLAS calls, memsets of Zero and Alloc, device copies), which
// TestFusedStepLaunches holds to the count of the fake-driven device.
type costDevice struct {
	device.MixedPrecision
	ops      []OpCost
	launches int64
}

type costBuf struct {
	d  *costDevice
	n  int
	dt device.DType
}

func (b *costBuf) Len() int                       { return b.n }
func (b *costBuf) Category() device.Category      { return device.Other }
func (b *costBuf) Device() device.Device          { return b.d }
func (b *costBuf) Slice(off, n int) device.Buffer { return &costBuf{b.d, n, b.dt} }
func (b *costBuf) DType() device.DType            { return b.dt }
func (d *costDevice) Name() string                { return "cost" }
func (d *costDevice) Alloc(n int, c device.Category) (device.Buffer, error) {
	return d.AllocDType(n, device.F32, c)
}
func (d *costDevice) AllocDType(n int, t device.DType, _ device.Category) (device.Buffer, error) {
	if n > 0 {
		d.launches++ // the allocation's memset
	}
	return &costBuf{d, n, t}, nil
}
func (d *costDevice) Free(device.Buffer)                                   {}
func (d *costDevice) Sync() error                                          { return nil }
func (d *costDevice) CopyFromHost(device.Buffer, []float32)                {}
func (d *costDevice) add(c OpCost)                                         { d.addN(c, 1) }
func dt(b device.Buffer) device.DType                                      { return device.DTypeOf(b) }
func (d *costDevice) Cast(dst, src device.Buffer)                          { d.add(CostCast(dt(dst), dt(src), src.Len())) }
func (d *costDevice) Zero(b device.Buffer)                                 { d.add(CostZero(dt(b), b.Len())) }
func (d *costDevice) Copy(dst, src device.Buffer)                          { d.add(CostCopy(dt(src), src.Len())) }
func (d *costDevice) Sum(x device.Buffer) float64                          { d.add(CostSum("Sum", dt(x), x.Len())); return 0 }
func (d *costDevice) AdamW(p, _, _, _ device.Buffer, _ device.AdamWConfig) { d.add(CostAdamW(p.Len())) }
func (d *costDevice) MatMul(c, a, _ device.Buffer, _, _ bool, m, n, k int, _, beta float32) {
	d.add(CostMatMul(dt(c), dt(c) == device.BF16, m, n, k, beta))
}
func (d *costDevice) EmbeddingForward(out, _ device.Buffer, tokens []int32, dim int) {
	d.add(CostEmbeddingForward(dt(out), len(tokens), dim))
}
func (d *costDevice) EmbeddingBackward(dtable, _ device.Buffer, tokens []int32, dim int) {
	d.add(CostEmbeddingBackward(dt(dtable), len(tokens), dim))
}
func (d *costDevice) RMSNormForward(out, _, _, _ device.Buffer, rows, dim int, _ float32) {
	d.add(CostRMSNormForward(dt(out), rows, dim))
}
func (d *costDevice) RMSNormBackward(dx, _, _, _, _, _ device.Buffer, rows, dim int) {
	d.addN(CostRMSNormBackward(dt(dx), rows, dim), 2) // dx, then dweight
}
func (d *costDevice) RoPEForward(x device.Buffer, s device.RoPEShape) {
	d.add(CostRoPE("RoPEForward", dt(x), s))
}
func (d *costDevice) RoPEBackward(x device.Buffer, s device.RoPEShape) {
	d.add(CostRoPE("RoPEBackward", dt(x), s))
}

// attnTC is the cuda device's choice: the tensor-core kernels for bf16 at head
// dims 64 and 128.
func attnTC(t device.DType, hd int) bool {
	return t == device.BF16 && kernels.AttentionForwardTC(hd) != nil
}

func (d *costDevice) AttentionForward(out, _, _, _, _ device.Buffer, s device.AttnShape) {
	d.add(CostAttentionForward(dt(out), attnTC(dt(out), s.HeadDim), s))
}
func (d *costDevice) AttentionBackward(dq, _, _, _, _, _, _, _, _ device.Buffer, s device.AttnShape) {
	d.addN(CostAttentionBackward(dt(dq), attnTC(dt(dq), s.HeadDim), s), 2) // dq, then dk and dv
}
func (d *costDevice) SwiGLUForward(out, _, _ device.Buffer) {
	d.add(CostSwiGLUForward(dt(out), out.Len()))
}
func (d *costDevice) SwiGLUBackward(dg, _, _, _, _ device.Buffer) {
	d.add(CostSwiGLUBackward(dt(dg), dg.Len()))
}
func (d *costDevice) CrossEntropyFused(_, _, logits device.Buffer, targets []int32, vocab int, _ float32) {
	d.add(CostCrossEntropyFused(dt(logits), len(targets), vocab))
}

// addN records an op that issues launches launches.
func (d *costDevice) addN(c OpCost, launches int64) {
	d.ops = append(d.ops, c)
	d.launches += launches
}

// The fused ops, as the cuda device runs them (one launch each).
var _ device.FusedOps = (*costDevice)(nil)

func (d *costDevice) RoPEQK(q, _ device.Buffer, sq, sk device.RoPEShape, inverse bool) {
	op := "RoPEQKForward"
	if inverse {
		op = "RoPEQKBackward"
	}
	d.add(CostRoPEQK(op, dt(q), sq, sk.Heads))
}
func (d *costDevice) ResidualRMSNorm(out, _, _, _, _ device.Buffer, rows, dim int, _ float32) {
	d.add(CostResidualRMSNorm(dt(out), rows, dim))
}
func (d *costDevice) SwiGLUPackedForward(out, _ device.Buffer, rows, inter int) {
	d.add(CostSwiGLUPackedForward(dt(out), rows, inter))
}
func (d *costDevice) SwiGLUPackedBackward(dgu, _, _ device.Buffer, rows, inter int) {
	d.add(CostSwiGLUPackedBackward(dt(dgu), rows, inter))
}

// fusedSavesPerBlock is the launches a transformer block's forward and backward
// issue fewer with device.FusedOps: forward, RoPE of q and k in one (−1), the
// residual add in the norm instead of a copy (−1), gate|up in one GEMM into one
// allocation (−2); backward, dgate|dup in one allocation (−1) through one GEMM
// for the weights' gradient and one for the input's (−2), dq and dk rotated in
// one (−1).
const fusedSavesPerBlock = 8

// predictStep runs one bf16 training step of shape s (batch × seq tokens) on a
// costDevice, fused ops or not, as rooflineStep runs it on the cuda device
// (bf16 parameters and gradients zeroed, forward and backward, the gradients cast
// to fp32 and AdamW), and returns the step's ops aggregated by op and shape and
// its launches.
//
// t may be nil (a benchmark's report): the costDevice cannot fail on a shape
// the model accepts, and an error then panics.
func predictStep(t *testing.T, s shapes.Shape, batch, seq int, unfused bool) (*costDevice, []OpTime) {
	must := func(err error) {
		if t != nil {
			t.Helper()
			require.NoError(t, err)
		} else if err != nil {
			panic(err)
		}
	}
	d := &costDevice{}
	m, err := model.New(d, s)
	must(err)
	m.Unfused = unfused
	params, grads := make([]device.Buffer, len(m.Units)), make([]device.Buffer, len(m.Units))
	f32s := make([]device.Buffer, len(m.Units))
	for i, u := range m.Units {
		params[i], _ = d.AllocDType(u.Size, device.BF16, device.Params)
		grads[i], _ = d.AllocDType(u.Size, device.BF16, device.Grads)
		f32s[i], _ = d.Alloc(u.Size, device.Optimizer)
	}
	d.ops, d.launches = nil, 0 // the step from here, as rooflineStep counts it
	for i := range m.Units {
		d.Cast(params[i], f32s[i])
		d.Zero(grads[i])
	}
	tokens := make([]int32, batch*seq+1)
	_, err = m.ForwardBackward(params, grads, tokens[:batch*seq], tokens[1:], seq, false)
	must(err)
	for i := range m.Units { // the fp32 gradients and AdamW on the masters
		d.Cast(f32s[i], grads[i])
		d.AdamW(f32s[i], f32s[i], f32s[i], f32s[i], device.AdamWConfig{Step: 1})
	}
	return d, aggregate(d.ops)
}

// aggregate sums ops into one OpTime per op and shape, in first-call order.
func aggregate(ops []OpCost) []OpTime {
	index := map[[2]string]int{}
	var times []OpTime
	for _, c := range ops {
		k := [2]string{c.Op, c.Shape}
		i, ok := index[k]
		if !ok {
			i = len(times)
			index[k] = i
			times = append(times, OpTime{OpCost: c})
		}
		times[i].Calls++
	}
	return times
}

// TestRooflinePredictionLlama1B predicts, before any GPU, the roofline of the
// bf16 step BenchmarkRooflineStep measures (llama-1b untied, seq 2048, batch 1),
// from the model's own op sequence with the cuda device's fused ops: the table a
// GPU run is to confirm. The GEMMs' FLOPs are checked against the hand count 6 ×
// tokens × GEMM parameters (forward 2, backward 4: dX and dW of every projection,
// the head's included), fused or not.
//
// It also decides item 4's CUDA-graph question from the prediction: the step's
// launches (fused: ~900) at LaunchIssue each take a few ms of host time, against
// ~18 ms the GPU needs at its peaks (and 2–3× that at a realistic efficiency),
// so the launches hide under the GPU's work and a graph would not shorten the
// step: not built. BenchmarkRooflineStep prints the same budget from a GPU's
// measurements to confirm it.
func TestRooflinePredictionLlama1B(t *testing.T) {
	s, err := shapes.Lookup("llama-1b")
	require.NoError(t, err)
	s.TiedEmbeddings = false
	const batch, seq = 1, 2048
	gemmParams := int64(s.Layers)*(2*int64(s.Hidden)*int64(s.Hidden)+2*int64(s.Hidden)*int64(s.KVDim())+
		3*int64(s.Hidden)*int64(s.Intermediate)) + int64(s.Vocab)*int64(s.Hidden)
	gemmFLOPs := func(d *costDevice) float64 {
		g := 0.0
		for _, c := range d.ops {
			if c.Op == "MatMul" {
				g += c.FLOPs
			}
		}
		return g
	}
	plain, _ := predictStep(t, s, batch, seq, true)
	d, times := predictStep(t, s, batch, seq, false)
	assert.InDelta(t, 6*float64(batch*seq)*float64(gemmParams), gemmFLOPs(plain), 1, "GEMM FLOPs of the unfused step")
	assert.InDelta(t, 6*float64(batch*seq)*float64(gemmParams), gemmFLOPs(d), 1, "GEMM FLOPs of the fused step")
	var buf bytes.Buffer
	require.NoError(t, WriteRoofline(&buf, H100(), times))
	out := buf.String()
	budget := LaunchBudget{Launches: d.launches, GPU: ExpectedTotal(H100(), times)}
	t.Logf("predicted roofline of one bf16 step, llama-1b untied, batch %d, seq %d (%d ops, %.2f TFLOP of GEMMs):\n%s",
		batch, seq, len(d.ops), gemmFLOPs(d)/1e12, out)
	t.Logf("launches: %d a step fused, %d unfused (%d fewer: %d a block); %s", d.launches, plain.launches,
		plain.launches-d.launches, (plain.launches-d.launches)/int64(s.Layers), budget)
	assert.Contains(t, out, "# top 10 by expected time")
	assert.Equal(t, int64(fusedSavesPerBlock*s.Layers), plain.launches-d.launches, "launches the fused ops save")
	assert.False(t, budget.LaunchBound(), "the prediction says launch-bound: %s (capture the step as a CUDA graph, item 4)", budget)
}
