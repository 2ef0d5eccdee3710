package model

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// Pass is one micro-batch's trip through the model: Forward of every unit in
// order, then Backward in reverse order. It owns the activations in between.
// A Pass is used from one goroutine at a time.
type Pass struct {
	m               *Model
	inputs, targets []int32
	rows            int // batch × seq tokens
	rope            [2]device.RoPEShape
	attn            device.AttnShape

	// LossScale multiplies the gradient: backward computes the gradient of
	// LossScale × Σ per-token losses. NewPass sets 1/tokens (the mean over this
	// micro-batch); with gradient accumulation over k micro-batches use 1/(k·tokens).
	// Set it before the head's forward: on a device.FusedCrossEntropy the
	// training forward computes the logits' gradient already.
	LossScale float32

	loss    float64
	nextFwd int             // the unit Forward expects next
	nextBwd int             // the unit Backward expects next
	hidden  []device.Buffer // hidden[u]: output of unit u (residual stream), u ≤ layers
	blocks  []*blockActs    // saved activations of block u−1, nil when not saved
	head    *headActs       // saved activations of the head, nil when not saved
	dh      device.Buffer   // gradient of the residual stream during backward
	live    map[device.Buffer]struct{}
	// fused is the device's fused ops, nil on a device without them or when the
	// model is Unfused: the block then runs the plain ops.
	fused device.FusedOps
	// dt is the activations' dtype: the parameters' (bf16 under FSDP's
	// MixedPrecisionPolicy(param_dtype=bf16), which gathers bf16 parameters),
	// taken from the first unit's and required of every other unit and gradient.
	dt device.DType
}

// blockActs are a block's activations kept for backward.
type blockActs struct {
	xn1, rstd1, q, k, v, att, lse, mid, xn2, rstd2, gate, up, act device.Buffer
	// gu is the fused gate|up GEMM's output ([rows, 2·intermediate]), in place
	// of gate and up when the pass runs fused ops.
	gu device.Buffer
}

// headActs are the head's activations kept for backward.
type headActs struct {
	xn, rstd, logits device.Buffer
	// fused says logits hold their gradient already (device.FusedCrossEntropy).
	fused bool
}

// NewPass starts a micro-batch of len(inputs)/seqLen samples of seqLen tokens
// each, inputs and targets laid out [batch, seqLen] (as Batch returns them). The
// pass keeps the slices, so they must not change until it ends.
func (m *Model) NewPass(inputs, targets []int32, seqLen int) (*Pass, error) {
	s := m.Shape
	switch {
	case seqLen <= 0:
		return nil, fmt.Errorf("model: seq_len %d must be positive", seqLen)
	case len(inputs) == 0 || len(inputs)%seqLen != 0:
		return nil, fmt.Errorf("model: %d input tokens are not a positive number of samples of seq_len %d", len(inputs), seqLen)
	case len(targets) != len(inputs):
		return nil, fmt.Errorf("model: %d targets for %d inputs; give one target per input token", len(targets), len(inputs))
	}
	for _, toks := range []struct {
		name string
		ids  []int32
	}{{"input", inputs}, {"target", targets}} {
		for i, t := range toks.ids {
			if t < 0 || int(t) >= s.Vocab {
				return nil, fmt.Errorf("model: %s token %d at %d is outside the vocabulary of %d", toks.name, t, i, s.Vocab)
			}
		}
	}
	batch, hd := len(inputs)/seqLen, s.HeadDim()
	p := &Pass{
		m: m, inputs: inputs, targets: targets, rows: len(inputs),
		rope: [2]device.RoPEShape{
			{Batch: batch, Seq: seqLen, Heads: s.Heads, HeadDim: hd, Theta: s.RopeTheta},
			{Batch: batch, Seq: seqLen, Heads: s.KVHeads, HeadDim: hd, Theta: s.RopeTheta},
		},
		attn:      device.AttnShape{Batch: batch, Seq: seqLen, Heads: s.Heads, KVHeads: s.KVHeads, HeadDim: hd},
		LossScale: 1 / float32(len(inputs)),
		nextBwd:   len(m.Units) - 1,
		hidden:    make([]device.Buffer, s.Layers+1),
		blocks:    make([]*blockActs, s.Layers),
		live:      map[device.Buffer]struct{}{},
	}
	if f, ok := m.dev.(device.FusedOps); ok && !m.Unfused {
		p.fused = f
	}
	return p, nil
}

// Loss is the mean cross-entropy over the micro-batch's tokens, known once the
// head unit has run forward.
func (p *Pass) Loss() float64 { return p.loss }

// Forward runs unit u on params, the unit's flat parameters (at least Units[u].Size
// elements; any more, FSDP's padding, are ignored). Units run in order 0, 1, ...
// With save false the unit keeps only its input and Backward recomputes the rest.
// No call keeps a reference to params or grads, so FSDP may free or reuse the
// gathered buffer as soon as it returns.
// An allocation over the device's limit returns an error wrapping
// device.ErrOutOfMemory; call Free to release the pass's activations then.
func (p *Pass) Forward(u int, params device.Buffer, save bool) (err error) {
	defer p.recoverOOM(&err)
	last := len(p.m.Units) - 1
	if u != p.nextFwd {
		return fmt.Errorf("model: forward of unit %d, want unit %d (units run forward in order 0..%d)", u, p.nextFwd, last)
	}
	w, err := p.views("forward", u, params)
	if err != nil {
		return err
	}
	if u == 0 {
		p.dt = device.DTypeOf(params)
	}
	switch {
	case u == 0:
		p.hidden[0] = p.alloc(p.rows * p.m.Shape.Hidden)
		p.m.dev.EmbeddingForward(p.hidden[0], w[0], p.inputs, p.m.Shape.Hidden)
	case u == last:
		p.head = p.headForward(w, save)
	default:
		var a *blockActs
		p.hidden[u], a = p.blockForward(w, p.hidden[u-1], modeOf(save))
		if save {
			p.blocks[u-1] = a
		}
	}
	p.nextFwd++
	return nil
}

// Backward runs unit u's backward, adding the unit's parameter gradients into
// grads (its flat gradient buffer, laid out as params). Units run in reverse order
// after the whole forward. Each call frees the activations it was the last to need.
func (p *Pass) Backward(u int, params, grads device.Buffer) (err error) {
	defer p.recoverOOM(&err)
	last := len(p.m.Units) - 1
	switch {
	case p.nextFwd <= last:
		return fmt.Errorf("model: backward of unit %d before the forward of unit %d; run every unit forward first", u, p.nextFwd)
	case u != p.nextBwd:
		return fmt.Errorf("model: backward of unit %d, want unit %d (units run backward in order %d..0)", u, p.nextBwd, last)
	}
	w, err := p.views("backward", u, params)
	if err != nil {
		return err
	}
	g, err := p.views("backward (gradients)", u, grads)
	if err != nil {
		return err
	}
	switch {
	case u == last:
		h := p.head
		if h == nil {
			h = p.headForward(w, true)
		}
		p.head = nil
		p.dh = p.headBackward(w, g, h)
	case u == 0:
		p.m.dev.EmbeddingBackward(g[0], p.dh, p.inputs, p.m.Shape.Hidden)
		p.free(p.dh)
		p.dh = nil
	default:
		a := p.blocks[u-1]
		if a == nil {
			_, a = p.blockForward(w, p.hidden[u-1], recompute)
		}
		p.blocks[u-1] = nil
		p.blockBackward(w, g, p.hidden[u-1], a, p.dh)
	}
	if u > 0 { // the unit's input is no longer needed by anyone
		p.free(p.hidden[u-1])
		p.hidden[u-1] = nil
	}
	p.nextBwd--
	return nil
}

// Free releases every activation the pass still holds (a pass stopped early, or
// one that ran forward only). A finished backward has released them all already.
func (p *Pass) Free() {
	for b := range p.live {
		p.m.dev.Free(b)
	}
	clear(p.live)
	clear(p.hidden)
	clear(p.blocks)
	p.head, p.dh = nil, nil
}

// views cuts unit u's tensors out of its flat buffer.
func (p *Pass) views(what string, u int, flat device.Buffer) ([]device.Buffer, error) {
	unit := p.m.Units[u]
	if flat == nil || flat.Len() < unit.Size {
		n := 0
		if flat != nil {
			n = flat.Len()
		}
		return nil, fmt.Errorf("model: %s of unit %s: flat buffer of %d elements, the unit has %d", what, unit.Name, n, unit.Size)
	}
	if flat.Device() != p.m.dev {
		return nil, fmt.Errorf("model: %s of unit %s: buffer on %s, the model runs on %s",
			what, unit.Name, flat.Device().Name(), p.m.dev.Name())
	}
	if t := device.DTypeOf(flat); t != p.dt && (u > 0 || what != "forward") {
		return nil, fmt.Errorf("model: %s of unit %s: %v buffer, the pass computes in %v (every unit's parameters and gradients share the first unit's dtype)",
			what, unit.Name, t, p.dt)
	}
	out := make([]device.Buffer, len(unit.Tensors), len(unit.Tensors)+1)
	for i, t := range unit.Tensors {
		out[i] = flat.Slice(t.Offset, t.Size)
	}
	if u >= 1 && u <= p.m.Shape.Layers { // a block: gate and up lie back to back (Layout)
		g, up := unit.Tensors[tGate], unit.Tensors[tUp]
		out = append(out, flat.Slice(g.Offset, g.Size+up.Size))
	}
	return out, nil
}

// oomError carries an allocation failure from deep in a unit's forward or
// backward up to Forward/Backward, which return it.
type oomError struct{ err error }

// alloc returns a zeroed activation buffer of n elements in the pass's dtype,
// tracked by the pass.
func (p *Pass) alloc(n int) device.Buffer { return p.allocAs(n, p.dt) }

// allocStat returns a zeroed fp32 activation buffer of n elements: the row
// statistics (rstd, lse, per-token losses) stay fp32 under bf16, as in PyTorch's
// fused kernels, since bf16's 8 bits would round a normalizer or a loss visibly.
func (p *Pass) allocStat(n int) device.Buffer { return p.allocAs(n, device.F32) }

func (p *Pass) allocAs(n int, t device.DType) device.Buffer {
	b, err := device.AllocDType(p.m.dev, n, t, device.Activations)
	if err != nil {
		panic(oomError{err})
	}
	p.live[b] = struct{}{}
	return b
}

// free releases activation buffers (nil ones are skipped).
func (p *Pass) free(bs ...device.Buffer) {
	for _, b := range bs {
		if b == nil {
			continue
		}
		delete(p.live, b)
		p.m.dev.Free(b)
	}
}

func (p *Pass) recoverOOM(err *error) {
	if r := recover(); r != nil {
		oom, ok := r.(oomError)
		if !ok {
			panic(r)
		}
		*err = fmt.Errorf("model: activations: %w", oom.err)
	}
}

// blockMode says what blockForward keeps.
type blockMode int

const (
	saveAll   blockMode = iota // forward, keep every activation for backward
	keepNone                   // forward under checkpointing: keep only the output
	recompute                  // backward's recomputation: keep every activation, no output
)

func modeOf(save bool) blockMode {
	if save {
		return saveAll
	}
	return keepNone
}

// blockForward runs one transformer block on hin ([rows, hidden]):
//
//	mid = hin + Attn(RMSNorm(hin))·Woᵀ,  out = mid + SwiGLU(RMSNorm(mid))·Wdownᵀ
//
// and returns out (nil under recompute) and the activations (nil under keepNone,
// which frees each one after its last use in forward).
func (p *Pass) blockForward(w []device.Buffer, hin device.Buffer, mode blockMode) (device.Buffer, *blockActs) {
	d, s := p.m.dev, p.m.Shape
	n, c, in := p.rows, s.Hidden, s.Intermediate
	qd, kvd := s.Heads*s.HeadDim(), s.KVDim()
	eps := float32(s.NormEps)
	drop := func(bs ...device.Buffer) {
		if mode == keepNone {
			p.free(bs...)
		}
	}

	a := &blockActs{xn1: p.alloc(n * c), rstd1: p.allocStat(n)}
	d.RMSNormForward(a.xn1, a.rstd1, hin, w[tAttnNorm], n, c, eps)
	a.q, a.k, a.v = p.alloc(n*qd), p.alloc(n*kvd), p.alloc(n*kvd)
	d.MatMul(a.q, a.xn1, w[tq], false, true, n, qd, c, 1, 0)
	d.MatMul(a.k, a.xn1, w[tk], false, true, n, kvd, c, 1, 0)
	d.MatMul(a.v, a.xn1, w[tv], false, true, n, kvd, c, 1, 0)
	drop(a.xn1, a.rstd1)
	if f := p.fused; f != nil {
		f.RoPEQK(a.q, a.k, p.rope[0], p.rope[1], false)
	} else {
		d.RoPEForward(a.q, p.rope[0])
		d.RoPEForward(a.k, p.rope[1])
	}
	a.att, a.lse = p.alloc(n*qd), p.allocStat(p.attn.LSELen())
	d.AttentionForward(a.att, a.lse, a.q, a.k, a.v, p.attn)
	drop(a.q, a.k, a.v, a.lse)
	a.mid = p.alloc(n * c)
	if f := p.fused; f != nil {
		// The branch's projection into mid, then the residual add and the MLP's
		// norm in one kernel (no copy of the stream into mid first). mid rounds
		// the projection once before the add, as PyTorch's x + o_proj(a) does.
		d.MatMul(a.mid, a.att, w[to], false, true, n, c, qd, 1, 0)
		drop(a.att)
		a.xn2, a.rstd2 = p.alloc(n*c), p.allocStat(n)
		f.ResidualRMSNorm(a.xn2, a.rstd2, a.mid, hin, w[tMLPNorm], n, c, eps)
	} else {
		d.Copy(a.mid, hin)
		d.MatMul(a.mid, a.att, w[to], false, true, n, c, qd, 1, 1)
		drop(a.att)
		a.xn2, a.rstd2 = p.alloc(n*c), p.allocStat(n)
		d.RMSNormForward(a.xn2, a.rstd2, a.mid, w[tMLPNorm], n, c, eps)
	}
	if f := p.fused; f != nil {
		// One GEMM by the gate and up weights together ([rows, 2·inter] out):
		// the bytes of gate and up, allocated and freed where they are.
		a.gu = p.alloc(2 * n * in)
		d.MatMul(a.gu, a.xn2, w[tGateUp], false, true, n, 2*in, c, 1, 0)
		drop(a.xn2, a.rstd2)
		a.act = p.alloc(n * in)
		f.SwiGLUPackedForward(a.act, a.gu, n, in)
		drop(a.gu)
	} else {
		a.gate, a.up = p.alloc(n*in), p.alloc(n*in)
		d.MatMul(a.gate, a.xn2, w[tGate], false, true, n, in, c, 1, 0)
		d.MatMul(a.up, a.xn2, w[tUp], false, true, n, in, c, 1, 0)
		drop(a.xn2, a.rstd2)
		a.act = p.alloc(n * in)
		d.SwiGLUForward(a.act, a.gate, a.up)
		drop(a.gate, a.up)
	}
	if mode == recompute {
		return nil, a
	}
	out := p.alloc(n * c)
	d.Copy(out, a.mid)
	d.MatMul(out, a.act, w[tDown], false, true, n, c, in, 1, 1)
	drop(a.mid, a.act)
	if mode == keepNone {
		return out, nil
	}
	return out, a
}

// blockBackward turns dh, the gradient of the block's output, into the gradient
// of its input in place (the residual connections pass it through; each branch
// adds its part), adds the weight gradients into g and frees a.
func (p *Pass) blockBackward(w, g []device.Buffer, hin device.Buffer, a *blockActs, dh device.Buffer) {
	d, s := p.m.dev, p.m.Shape
	n, c, in := p.rows, s.Hidden, s.Intermediate
	qd, kvd := s.Heads*s.HeadDim(), s.KVDim()

	// MLP branch: out = mid + act·Wdownᵀ.
	d.MatMul(g[tDown], dh, a.act, true, false, c, in, n, 1, 1) // dWdown += dhᵀ·act
	dact := p.alloc(n * in)
	d.MatMul(dact, dh, w[tDown], false, false, n, in, c, 1, 0) // dact = dh·Wdown
	p.free(a.act)
	var dxn2 device.Buffer
	if f := p.fused; f != nil {
		// dgate|dup packed as gu: one GEMM for the gate|up weight gradient, one
		// for the input's, instead of two each.
		dgu := p.alloc(2 * n * in)
		f.SwiGLUPackedBackward(dgu, dact, a.gu, n, in)
		p.free(dact, a.gu)
		d.MatMul(g[tGateUp], dgu, a.xn2, true, false, 2*in, c, n, 1, 1)
		dxn2 = p.alloc(n * c)
		d.MatMul(dxn2, dgu, w[tGateUp], false, false, n, c, 2*in, 1, 0)
		p.free(dgu, a.xn2)
	} else {
		dgate, dup := p.alloc(n*in), p.alloc(n*in)
		d.SwiGLUBackward(dgate, dup, dact, a.gate, a.up)
		p.free(dact, a.gate, a.up)
		d.MatMul(g[tGate], dgate, a.xn2, true, false, in, c, n, 1, 1)
		d.MatMul(g[tUp], dup, a.xn2, true, false, in, c, n, 1, 1)
		dxn2 = p.alloc(n * c)
		d.MatMul(dxn2, dgate, w[tGate], false, false, n, c, in, 1, 0)
		d.MatMul(dxn2, dup, w[tUp], false, false, n, c, in, 1, 1)
		p.free(dgate, dup, a.xn2)
	}
	d.RMSNormBackward(dh, g[tMLPNorm], dxn2, a.mid, w[tMLPNorm], a.rstd2, n, c) // dh is now d(mid)
	p.free(dxn2, a.mid, a.rstd2)

	// Attention branch: mid = hin + att·Woᵀ.
	d.MatMul(g[to], dh, a.att, true, false, c, qd, n, 1, 1)
	datt := p.alloc(n * qd)
	d.MatMul(datt, dh, w[to], false, false, n, qd, c, 1, 0)
	dq, dk, dv := p.alloc(n*qd), p.alloc(n*kvd), p.alloc(n*kvd)
	d.AttentionBackward(dq, dk, dv, datt, a.q, a.k, a.v, a.att, a.lse, p.attn)
	p.free(datt, a.att, a.lse, a.q, a.k, a.v)
	if f := p.fused; f != nil {
		f.RoPEQK(dq, dk, p.rope[0], p.rope[1], true)
	} else {
		d.RoPEBackward(dq, p.rope[0])
		d.RoPEBackward(dk, p.rope[1])
	}
	d.MatMul(g[tq], dq, a.xn1, true, false, qd, c, n, 1, 1)
	d.MatMul(g[tk], dk, a.xn1, true, false, kvd, c, n, 1, 1)
	d.MatMul(g[tv], dv, a.xn1, true, false, kvd, c, n, 1, 1)
	dxn1 := p.alloc(n * c)
	d.MatMul(dxn1, dq, w[tq], false, false, n, c, qd, 1, 0)
	d.MatMul(dxn1, dk, w[tk], false, false, n, c, kvd, 1, 1)
	d.MatMul(dxn1, dv, w[tv], false, false, n, c, kvd, 1, 1)
	p.free(dq, dk, dv, a.xn1)
	d.RMSNormBackward(dh, g[tAttnNorm], dxn1, hin, w[tAttnNorm], a.rstd1, n, c) // dh is now d(hin)
	p.free(dxn1, a.rstd1)
}

// headForward runs the final norm, the output projection and the loss on the last
// block's output, sets p.loss and returns the activations (nil when not saved).
func (p *Pass) headForward(w []device.Buffer, save bool) *headActs {
	d, s := p.m.dev, p.m.Shape
	n, c, v := p.rows, s.Hidden, s.Vocab
	h := &headActs{xn: p.alloc(n * c), rstd: p.allocStat(n), logits: p.alloc(n * v)}
	d.RMSNormForward(h.xn, h.rstd, p.hidden[s.Layers], w[tFinalNorm], n, c, float32(s.NormEps))
	d.MatMul(h.logits, h.xn, w[tOutput], false, true, n, v, c, 1, 0)
	losses := p.allocStat(n)
	if f, ok := d.(device.FusedCrossEntropy); ok && save {
		// Training: the loss and the logits' gradient (in place) in one pass over
		// the logits instead of a forward pass and a backward pass.
		f.CrossEntropyFused(losses, h.logits, h.logits, p.targets, v, p.LossScale)
		h.fused = true
	} else {
		d.CrossEntropyForward(losses, h.logits, p.targets, v)
	}
	p.loss = d.Sum(losses) / float64(n)
	p.free(losses)
	if !save {
		p.free(h.xn, h.rstd, h.logits)
		return nil
	}
	return h
}

// headBackward returns the gradient of the last block's output, adds the head's
// weight gradients into g and frees h. The logits' gradient overwrites the logits.
func (p *Pass) headBackward(w, g []device.Buffer, h *headActs) device.Buffer {
	d, s := p.m.dev, p.m.Shape
	n, c, v := p.rows, s.Hidden, s.Vocab
	if !h.fused {
		d.CrossEntropyBackward(h.logits, h.logits, p.targets, v, p.LossScale)
	}
	d.MatMul(g[tOutput], h.logits, h.xn, true, false, v, c, n, 1, 1) // dWout += dzᵀ·xn
	dxn := p.alloc(n * c)
	d.MatMul(dxn, h.logits, w[tOutput], false, false, n, c, v, 1, 0) // dxn = dz·Wout
	p.free(h.logits)
	dh := p.alloc(n * c)
	d.RMSNormBackward(dh, g[tFinalNorm], dxn, p.hidden[s.Layers], w[tFinalNorm], h.rstd, n, c)
	p.free(dxn, h.xn, h.rstd)
	return dh
}
