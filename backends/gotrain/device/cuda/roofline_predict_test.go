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
type costDevice struct {
	device.MixedPrecision
	ops []OpCost
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
func (d *costDevice) Alloc(n int, _ device.Category) (device.Buffer, error) {
	return &costBuf{d, n, device.F32}, nil
}
func (d *costDevice) AllocDType(n int, t device.DType, _ device.Category) (device.Buffer, error) {
	return &costBuf{d, n, t}, nil
}
func (d *costDevice) Free(device.Buffer)                                   {}
func (d *costDevice) Sync() error                                          { return nil }
func (d *costDevice) CopyFromHost(device.Buffer, []float32)                {}
func (d *costDevice) add(c OpCost)                                         { d.ops = append(d.ops, c) }
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
	d.add(CostRMSNormBackward(dt(dx), rows, dim))
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
	d.add(CostAttentionBackward(dt(dq), attnTC(dt(dq), s.HeadDim), s))
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

// TestRooflinePredictionLlama1B predicts, before any GPU, the roofline of the
// bf16 step BenchmarkRooflineStep measures (llama-1b untied, seq 2048, batch 1),
// from the model's own op sequence: the table a GPU run is to confirm. The GEMMs'
// FLOPs are checked against the hand count 6 × tokens × GEMM parameters (forward
// 2, backward 4: dX and dW of every projection, the head's included).
func TestRooflinePredictionLlama1B(t *testing.T) {
	s, err := shapes.Lookup("llama-1b")
	require.NoError(t, err)
	s.TiedEmbeddings = false
	const batch, seq = 1, 2048
	d := &costDevice{}
	m, err := model.New(d, s)
	require.NoError(t, err)
	params, grads := make([]device.Buffer, len(m.Units)), make([]device.Buffer, len(m.Units))
	for i, u := range m.Units {
		params[i], _ = d.AllocDType(u.Size, device.BF16, device.Params)
		grads[i], _ = d.AllocDType(u.Size, device.BF16, device.Grads)
	}
	tokens := make([]int32, batch*seq+1)
	_, err = m.ForwardBackward(params, grads, tokens[:batch*seq], tokens[1:], seq, false)
	require.NoError(t, err)
	for i, u := range m.Units { // the fp32 gradients and AdamW on the masters
		f32, _ := d.Alloc(u.Size, device.Optimizer)
		d.Cast(f32, grads[i])
		d.AdamW(f32, f32, f32, f32, device.AdamWConfig{Step: 1})
	}

	gemmParams := int64(s.Layers)*(2*int64(s.Hidden)*int64(s.Hidden)+2*int64(s.Hidden)*int64(s.KVDim())+
		3*int64(s.Hidden)*int64(s.Intermediate)) + int64(s.Vocab)*int64(s.Hidden)
	rows := map[[2]string]*OpTime{}
	var times []OpTime
	gemm := 0.0
	for _, c := range d.ops {
		if c.Op == "MatMul" {
			gemm += c.FLOPs
		}
		k := [2]string{c.Op, c.Shape}
		if rows[k] == nil {
			rows[k] = &OpTime{OpCost: c}
		}
		rows[k].Calls++
	}
	assert.InDelta(t, 6*float64(batch*seq)*float64(gemmParams), gemm, 1, "GEMM FLOPs of the step")
	for _, o := range rows {
		times = append(times, *o)
	}
	var buf bytes.Buffer
	require.NoError(t, WriteRoofline(&buf, H100(), times))
	out := buf.String()
	t.Logf("predicted roofline of one bf16 step, llama-1b untied, batch %d, seq %d (%d ops, %.2f TFLOP of GEMMs):\n%s",
		batch, seq, len(d.ops), gemm/1e12, out)
	assert.Contains(t, out, "# top 10 by expected time")
}
