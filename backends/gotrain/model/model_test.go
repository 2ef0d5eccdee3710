package model

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// setup is a model with initialized parameters and zeroed gradients.
type setup struct {
	m             *Model
	params, grads []device.Buffer
}

func newSetup(t testing.TB, d device.Device, s shapes.Shape, seed uint64) setup {
	t.Helper()
	m, err := New(d, s)
	require.NoError(t, err)
	params, err := m.AllocUnits(device.Params)
	require.NoError(t, err)
	grads, err := m.AllocUnits(device.Grads)
	require.NoError(t, err)
	require.NoError(t, m.InitUnits(seed, params))
	return setup{m: m, params: params, grads: grads}
}

// perturbed returns the objective at params[u][i] moved by ±h, and the exact
// steps taken (the buffer holds float32-rounded values, even in float64).
func centralDifference(d device.Device, buf device.Buffer, i int, h float64, f func() float64) float64 {
	cell := buf.Slice(i, 1)
	orig := make([]float32, 1)
	d.CopyToHost(orig, cell)
	x := float64(orig[0])
	up, down := float32(x+h), float32(x-h)
	d.CopyFromHost(cell, []float32{up})
	fp := f()
	d.CopyFromHost(cell, []float32{down})
	fm := f()
	d.CopyFromHost(cell, orig)
	return (fp - fm) / (float64(up) - float64(down))
}

func read(d device.Device, b device.Buffer) []float32 {
	out := make([]float32, b.Len())
	d.CopyToHost(out, b)
	return out
}

// TestBlockGradient checks a whole transformer block's backward (input and every
// weight) against central differences of its forward, in float64, on the
// objective Σ(out − r)² whose gradient is 2(out − r).
func TestBlockGradient(t *testing.T) {
	d := cpu.New(cpu.Options{Float64: true})
	s := tinyShape(t)
	s.Hidden, s.Heads, s.KVHeads, s.Intermediate = 16, 4, 2, 24 // small enough to check every input
	st := newSetup(t, d, s, 1)
	const batch, seq = 2, 5
	inputs, targets, err := Batch(1, 0, batch, seq, s.Vocab)
	require.NoError(t, err)
	p, err := st.m.NewPass(inputs, targets, seq)
	require.NoError(t, err)
	defer p.Free()

	rng := rand.New(rand.NewPCG(2, 3))
	n := batch * seq * s.Hidden
	// Larger weights than at init make every path through the block matter.
	unit := st.m.Units[1]
	host := make([]float32, unit.Size)
	for i := range host {
		host[i] = float32(rng.NormFloat64() * 0.3)
	}
	for _, idx := range []int{tAttnNorm, tMLPNorm} {
		tn := unit.Tensors[idx]
		for i := tn.Offset; i < tn.Offset+tn.Size; i++ {
			host[i] += 1
		}
	}
	d.CopyFromHost(st.params[1], host)
	hin, r := p.alloc(n), p.alloc(n)
	d.CopyFromHost(hin, normals(rng, n, 1))
	d.CopyFromHost(r, normals(rng, n, 1))
	w, err := p.views("test", 1, st.params[1])
	require.NoError(t, err)
	g, err := p.views("test", 1, st.grads[1])
	require.NoError(t, err)

	objective := func() float64 {
		out, _ := p.blockForward(w, hin, keepNone)
		d.Add(out, r, -1)
		v := d.SumSquares(out)
		p.free(out)
		return v
	}
	out, acts := p.blockForward(w, hin, saveAll)
	d.Add(out, r, -1)
	d.Scale(out, 2)
	p.blockBackward(w, g, hin, acts, out) // out now holds d objective / d hin
	dhin, dparams := read(d, out), read(d, st.grads[1])

	check := func(what string, buf device.Buffer, i int, analytic float32) {
		num := centralDifference(d, buf, i, 1e-4, objective)
		assert.InDelta(t, num, float64(analytic), 1e-6+2e-5*math.Abs(num), "%s: finite difference %g, backward %g", what, num, analytic)
	}
	for i := range n {
		check("d hin", hin, i, dhin[i])
	}
	for _, tn := range unit.Tensors {
		for i := tn.Offset; i < tn.Offset+tn.Size; i++ {
			check(tn.Name, st.params[1], i, dparams[i])
		}
	}
}

// TestModelGradient checks the whole tiny model's gradients, a few parameters of
// every tensor (the largest gradient and two random ones), against central
// differences of the mean loss, in float64.
func TestModelGradient(t *testing.T) {
	d := cpu.New(cpu.Options{Float64: true})
	st := newSetup(t, d, tinyShape(t), 5)
	const batch, seq = 2, 6
	inputs, targets, err := Batch(5, 0, batch, seq, st.m.Shape.Vocab)
	require.NoError(t, err)
	_, err = st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, false)
	require.NoError(t, err)
	loss := func() float64 {
		l, err := st.m.ForwardBackward(st.params, nil, inputs, targets, seq, false)
		require.NoError(t, err)
		return l
	}

	rng := rand.New(rand.NewPCG(6, 7))
	for u, unit := range st.m.Units {
		grads := read(d, st.grads[u])
		for _, tn := range unit.Tensors {
			largest, scale := tn.Offset, 0.0
			for i := tn.Offset; i < tn.Offset+tn.Size; i++ {
				if a := math.Abs(float64(grads[i])); a > scale {
					largest, scale = i, a
				}
			}
			require.Positive(t, scale, "%s has a gradient", tn.Name)
			for _, i := range []int{largest, tn.Offset + rng.IntN(tn.Size), tn.Offset + rng.IntN(tn.Size)} {
				num := centralDifference(d, st.params[u], i, 1e-4, loss)
				assert.InDelta(t, num, float64(grads[i]), 1e-5*scale,
					"%s[%d]: finite difference %g, backward %g", tn.Name, i-tn.Offset, num, grads[i])
			}
		}
	}
}

// TestGradientAccumulation: backward adds into the gradient buffers, so two
// micro-batches run into the same buffers give the sum of their gradients.
func TestGradientAccumulation(t *testing.T) {
	d := cpu.New(cpu.Options{Float64: true})
	st := newSetup(t, d, tinyShape(t), 0)
	const seq = 8
	gradsOf := func(first int) [][]float32 {
		for _, g := range st.grads {
			d.Zero(g)
		}
		inputs, targets, err := Batch(0, first, 1, seq, st.m.Shape.Vocab)
		require.NoError(t, err)
		_, err = st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, false)
		require.NoError(t, err)
		var out [][]float32
		for _, g := range st.grads {
			out = append(out, read(d, g))
		}
		return out
	}
	a, b := gradsOf(0), gradsOf(1)
	// Sample 1 is now in the buffers; add sample 0 on top.
	inputs, targets, err := Batch(0, 0, 1, seq, st.m.Shape.Vocab)
	require.NoError(t, err)
	_, err = st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, false)
	require.NoError(t, err)
	for u, g := range st.grads {
		both := read(d, g)
		for i := range both {
			// Values are read back as float32: allow their rounding, relative to the parts.
			tol := 1e-6*(math.Abs(float64(a[u][i]))+math.Abs(float64(b[u][i]))) + 1e-12
			require.InDelta(t, float64(a[u][i])+float64(b[u][i]), float64(both[i]), tol,
				"unit %d element %d", u, i)
		}
	}
}

// TestLossAtInit: with small random weights the logits are nearly equal, so the
// loss is about ln(vocab), plus σ²/2 for logits of variance σ² = hidden·0.02².
func TestLossAtInit(t *testing.T) {
	st := newSetup(t, cpu.New(cpu.Options{}), tinyShape(t), 0)
	s := st.m.Shape
	inputs, targets, err := Batch(0, 0, 4, 32, s.Vocab)
	require.NoError(t, err)
	loss, err := st.m.ForwardBackward(st.params, nil, inputs, targets, 32, false)
	require.NoError(t, err)
	variance := float64(s.Hidden) * InitStd * InitStd
	assert.InDelta(t, math.Log(float64(s.Vocab))+variance/2, loss, 0.02)
}

// TestAdamWLowersTheLoss trains on one repeated batch: it must memorize.
func TestAdamWLowersTheLoss(t *testing.T) {
	d := cpu.New(cpu.Options{})
	st := newSetup(t, d, tinyShape(t), 0)
	m1, err := st.m.AllocUnits(device.Optimizer)
	require.NoError(t, err)
	m2, err := st.m.AllocUnits(device.Optimizer)
	require.NoError(t, err)
	const seq = 16
	inputs, targets, err := Batch(0, 0, 2, seq, st.m.Shape.Vocab)
	require.NoError(t, err)

	var losses []float64
	for step := 1; step <= 6; step++ {
		for _, g := range st.grads {
			d.Zero(g)
		}
		loss, err := st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, false)
		require.NoError(t, err)
		losses = append(losses, loss)
		for u := range st.params {
			d.AdamW(st.params[u], st.grads[u], m1[u], m2[u],
				device.AdamWConfig{LR: 2e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step})
		}
	}
	for i := 1; i < len(losses); i++ {
		assert.Less(t, losses[i], losses[i-1], "loss after step %d: %v", i, losses)
	}
}

// TestCheckpointing: recomputing blocks in backward gives bit-identical gradients
// and a lower activation peak, and every activation is freed by the end.
func TestCheckpointing(t *testing.T) {
	d := cpu.New(cpu.Options{})
	s := tinyShape(t)
	const batch, seq = 2, 32
	inputs, targets, err := Batch(0, 0, batch, seq, s.Vocab)
	require.NoError(t, err)

	type result struct {
		loss  float64
		grads [][]float32
		peak  int64
	}
	run := func(checkpoint bool) result {
		st := newSetup(t, d, s, 0)
		defer st.m.FreeUnits(st.params)
		defer st.m.FreeUnits(st.grads)
		d.ResetPeak()
		loss, err := st.m.ForwardBackward(st.params, st.grads, inputs, targets, seq, checkpoint)
		require.NoError(t, err)
		mem := d.Memory()
		assert.Zero(t, mem.Current[device.Activations], "activations left after backward")
		r := result{loss: loss, peak: mem.Peak[device.Activations]}
		for _, g := range st.grads {
			r.grads = append(r.grads, read(d, g))
		}
		return r
	}
	full, ckpt := run(false), run(true)
	assert.Equal(t, full.loss, ckpt.loss)
	assert.Equal(t, full.grads, ckpt.grads, "gradients with checkpointing, bit for bit")

	// Without checkpointing every block keeps its activations for backward.
	units := blockActivationElems(s, batch*seq)
	assert.GreaterOrEqual(t, full.peak, int64(s.Layers*units*4), "peak without checkpointing holds every block's activations")
	assert.Less(t, ckpt.peak, full.peak)
	t.Logf("activation peak: %d bytes saving everything, %d with checkpointing", full.peak, ckpt.peak)
}

// blockActivationElems is what one block keeps for backward, from blockActs.
func blockActivationElems(s shapes.Shape, rows int) int {
	c, qd, kvd, in := s.Hidden, s.Heads*s.HeadDim(), s.KVDim(), s.Intermediate
	return rows*(c+1) + rows*qd + 2*rows*kvd + rows*qd + s.Heads*rows + // xn1, rstd1, q, k, v, att, lse
		rows*c + rows*(c+1) + 3*rows*in // mid, xn2, rstd2, gate, up, act
}

// TestOutOfMemory: activations over the limit end the pass with ErrOutOfMemory
// and leave nothing allocated.
func TestOutOfMemory(t *testing.T) {
	s := tinyShape(t)
	params := 2 * 4 * s.Params() // parameters and gradients, float32
	d := cpu.New(cpu.Options{LimitBytes: params + 64<<10})
	st := newSetup(t, d, s, 0)
	inputs, targets, err := Batch(0, 0, 4, 128, s.Vocab)
	require.NoError(t, err)
	_, err = st.m.ForwardBackward(st.params, st.grads, inputs, targets, 128, false)
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	assert.Zero(t, d.Memory().Current[device.Activations])
}

func TestPassMisuse(t *testing.T) {
	d := cpu.New(cpu.Options{})
	st := newSetup(t, d, tinyShape(t), 0)
	inputs, targets, err := Batch(0, 0, 1, 4, st.m.Shape.Vocab)
	require.NoError(t, err)
	last := len(st.m.Units) - 1

	p, err := st.m.NewPass(inputs, targets, 4)
	require.NoError(t, err)
	defer p.Free()
	assert.ErrorContains(t, p.Forward(1, st.params[1], true), "want unit 0")
	assert.ErrorContains(t, p.Forward(0, st.params[0].Slice(0, 10), true), "flat buffer of")
	other, err := cpu.New(cpu.Options{}).Alloc(st.m.Units[0].Size, device.Params)
	require.NoError(t, err)
	assert.ErrorContains(t, p.Forward(0, other, true), "the model runs on")
	require.NoError(t, p.Forward(0, st.params[0], true))
	assert.ErrorContains(t, p.Backward(0, st.params[0], st.grads[0]), "run every unit forward first")
	for u := 1; u <= last; u++ {
		require.NoError(t, p.Forward(u, st.params[u], true))
	}
	assert.ErrorContains(t, p.Backward(0, st.params[0], st.grads[0]), "want unit 3")

	for _, tc := range []struct {
		name            string
		inputs, targets []int32
		seq             int
		want            string
	}{
		{"zero seq", inputs, targets, 0, "must be positive"},
		{"partial sample", inputs, targets, 3, "not a positive number of samples"},
		{"targets missing", inputs, targets[:2], 4, "targets for"},
		{"token outside vocab", []int32{0, 1, 2, 256}, targets, 4, "outside the vocabulary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.m.NewPass(tc.inputs, tc.targets, tc.seq)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// TestPaddedUnitBuffers: FSDP hands over gathered buffers padded past the unit's
// size; the result is the same as with exact buffers.
func TestPaddedUnitBuffers(t *testing.T) {
	d := cpu.New(cpu.Options{})
	st := newSetup(t, d, tinyShape(t), 0)
	inputs, targets, err := Batch(0, 0, 1, 8, st.m.Shape.Vocab)
	require.NoError(t, err)
	want, err := st.m.ForwardBackward(st.params, st.grads, inputs, targets, 8, false)
	require.NoError(t, err)

	padded := make([]device.Buffer, len(st.params))
	paddedGrads := make([]device.Buffer, len(st.params))
	for u, p := range st.params {
		padded[u], err = d.Alloc(p.Len()+3, device.Params)
		require.NoError(t, err)
		d.Copy(padded[u].Slice(0, p.Len()), p)
		paddedGrads[u], err = d.Alloc(p.Len()+3, device.Grads)
		require.NoError(t, err)
	}
	got, err := st.m.ForwardBackward(padded, paddedGrads, inputs, targets, 8, false)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	for u, g := range st.grads {
		assert.Equal(t, read(d, g), read(d, paddedGrads[u].Slice(0, g.Len())))
		assert.Equal(t, make([]float32, 3), read(d, paddedGrads[u].Slice(g.Len(), 3)), "padding untouched")
	}
}

func normals(rng *rand.Rand, n int, std float64) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * std)
	}
	return out
}

// TestBF16Pass runs a pass on bf16 copies of the parameters: the activations are
// bf16 (2 bytes) but for the fp32 statistics, the loss is the fp32 pass's within
// bf16's rounding, the gradients come out as bf16 values, and a unit or gradient
// of another dtype than the first unit's is an error.
func TestBF16Pass(t *testing.T) {
	d := cpu.New(cpu.Options{})
	mp := d.(device.MixedPrecision)
	st := newSetup(t, d, tinyShape(t), 3)
	inputs, targets, err := Batch(0, 0, 2, 8, st.m.Shape.Vocab)
	require.NoError(t, err)
	half := func(bs []device.Buffer) []device.Buffer {
		out := make([]device.Buffer, len(bs))
		for i, b := range bs {
			out[i], err = mp.AllocDType(b.Len(), device.BF16, device.Params)
			require.NoError(t, err)
			mp.Cast(out[i], b)
		}
		return out
	}
	run := func(params, grads []device.Buffer) (float64, int64) {
		d.ResetPeak()
		p, err := st.m.NewPass(inputs, targets, 8)
		require.NoError(t, err)
		defer p.Free()
		for u := range params {
			require.NoError(t, p.Forward(u, params[u], true))
		}
		for u := len(params) - 1; u >= 0; u-- {
			require.NoError(t, p.Backward(u, params[u], grads[u]))
		}
		return p.Loss(), d.Memory().Peak[device.Activations]
	}
	loss32, act32 := run(st.params, st.grads)
	p16, g16 := half(st.params), half(st.grads)
	loss16, act16 := run(p16, g16)
	assert.InEpsilon(t, loss32, loss16, 1e-2, "bf16 loss")
	assert.Less(t, act16, act32*3/5, "bf16 activations, fp32 statistics: a little over half")
	assert.Greater(t, act16, act32/2)
	for _, v := range read(d, g16[1]) {
		require.Equal(t, device.RoundBF16(v), v, "gradients are bf16 values")
	}

	p, err := st.m.NewPass(inputs, targets, 8)
	require.NoError(t, err)
	defer p.Free()
	require.NoError(t, p.Forward(0, p16[0], true))
	assert.ErrorContains(t, p.Forward(1, st.params[1], true), "the pass computes in bfloat16")
}
