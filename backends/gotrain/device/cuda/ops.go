//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// The ops: each checks its buffers and shapes as the cpu device does (panicking
// with the op's name), then issues its kernels with the grid kernels' ABI names.

var _ device.Device = (*Device)(nil)

// Add runs kernels.Add: dst += alpha·src.
func (d *Device) Add(dst, src device.Buffer, alpha float32) {
	s := d.buf("Add", src)
	t := d.get("Add", dst, s.n)
	k := &kernels.AddF32BF16 // an fp32 destination may add a bf16 source
	if t.a.dt != device.F32 || s.a.dt != device.BF16 {
		k = d.pick("Add", &kernels.Add, &kernels.AddBF16, nil, dst, src)
	}
	if s.n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostAdd(t.a.dt, s.a.dt, s.n) })()
	d.launch(k, grid{kernels.GridStride(int64(s.n)), 1, 1}, 0, ptrArg(t), ptrArg(s), f32Arg(alpha), i64Arg(s.n))
}

// Scale runs kernels.Scale: x *= alpha.
func (d *Device) Scale(x device.Buffer, alpha float32) {
	b := d.buf("Scale", x)
	k := d.pick("Scale", &kernels.Scale, &kernels.ScaleBF16, nil, x)
	if b.n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostScale(b.a.dt, b.n) })()
	d.launch(k, grid{kernels.GridStride(int64(b.n)), 1, 1}, 0, ptrArg(b), f32Arg(alpha), i64Arg(b.n))
}

// Sum is Σ x, reduced by kernels.SumPartials and finished in float64 on the host.
func (d *Device) Sum(x device.Buffer) float64 { return d.sum("Sum", x, 0) }

// SumSquares is Σ x², as Sum.
func (d *Device) SumSquares(x device.Buffer) float64 { return d.sum("SumSquares", x, 1) }

// sum reduces x on the device to at most kernels.SumMaxPartials float32 partials
// (a fixed tree per block) and adds those on the host in float64, as the cpu
// device accumulates. It returns NaN when the device has failed (Sync says why).
func (d *Device) sum(op string, x device.Buffer, squares int) float64 {
	b := d.buf(op, x)
	k := d.pick(op, &kernels.SumPartials, &kernels.SumPartialsBF16, nil, x)
	if b.n == 0 {
		return 0
	}
	blocks := kernels.SumGrid(int64(b.n))
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostSum(op, b.a.dt, b.n) })()
	partials, ok := d.scratchLocked("sum", kernels.SumMaxPartials*elemBytes)
	if !ok {
		return math.NaN()
	}
	d.launch(k, grid{blocks, 1, 1}, 0, addrArg(partials), ptrArg(b), i64Arg(b.n), i32Arg(squares))
	host := make([]float32, blocks)
	d.issue(op, func() int {
		return int(C.fsdp_dtoh(d.ctx, unsafe.Pointer(&host[0]), C.CUdeviceptr(partials), C.size_t(blocks*elemBytes), d.compute))
	})
	if d.err != nil {
		return math.NaN()
	}
	s := 0.0
	for _, p := range host {
		s += float64(p)
	}
	return s
}

// uploadInt32 copies v into the named scratch and returns its address; ok is false
// after a recorded failure. d.mu is held.
func (d *Device) uploadInt32(name string, v []int32) (uint64, bool) {
	p, ok := d.scratchLocked(name, int64(len(v))*4)
	if !ok {
		return 0, false
	}
	d.issue("upload "+name, func() int {
		return int(C.fsdp_htod(d.ctx, C.CUdeviceptr(p), unsafe.Pointer(&v[0]), C.size_t(len(v)*4), d.compute))
	})
	return p, d.err == nil
}

// checkTokens panics unless every token indexes a row of a table of n elements.
func (d *Device) checkTokens(op string, tokens []int32, n, dim int) {
	if dim <= 0 || n%dim != 0 {
		panic(fmt.Sprintf("%s: %s: table of %d elements is not rows of %d", d.name, op, n, dim))
	}
	rows := n / dim
	for i, t := range tokens {
		if t < 0 || int(t) >= rows {
			panic(fmt.Sprintf("%s: %s: token %d at %d is outside the vocabulary of %d", d.name, op, t, i, rows))
		}
	}
}

// EmbeddingForward runs kernels.EmbeddingForward with the tokens staged in scratch.
func (d *Device) EmbeddingForward(out, table device.Buffer, tokens []int32, dim int) {
	tab := d.buf("EmbeddingForward table", table)
	d.checkTokens("EmbeddingForward", tokens, tab.n, dim)
	o := d.get("EmbeddingForward out", out, len(tokens)*dim)
	k := d.pick("EmbeddingForward", &kernels.EmbeddingForward, &kernels.EmbeddingForwardBF16, nil, out, table)
	if len(tokens) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostEmbeddingForward(o.a.dt, len(tokens), dim) })()
	if tok, ok := d.uploadInt32("tokens", tokens); ok {
		d.launch(k, grid{len(tokens), 1, 1}, 0, ptrArg(o), ptrArg(tab), addrArg(tok),
			i32Arg(len(tokens)), i32Arg(dim))
	}
}

// EmbeddingBackward runs kernels.EmbeddingBackward (deterministic, in token order).
func (d *Device) EmbeddingBackward(dtable, dout device.Buffer, tokens []int32, dim int) {
	tab := d.buf("EmbeddingBackward dtable", dtable)
	d.checkTokens("EmbeddingBackward", tokens, tab.n, dim)
	g := d.get("EmbeddingBackward dout", dout, len(tokens)*dim)
	k := d.pick("EmbeddingBackward", &kernels.EmbeddingBackward, &kernels.EmbeddingBackwardBF16, nil, dtable, dout)
	if len(tokens) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostEmbeddingBackward(tab.a.dt, len(tokens), dim) })()
	if tok, ok := d.uploadInt32("tokens", tokens); ok {
		d.launch(k, grid{kernels.CeilDiv(dim, kernels.ElemBlock), 1, 1}, 0, ptrArg(tab), ptrArg(g),
			addrArg(tok), i32Arg(len(tokens)), i32Arg(dim))
	}
}

// RMSNormForward runs kernels.RMSNormForward, one block per row.
func (d *Device) RMSNormForward(out, rstd, x, weight device.Buffer, rows, dim int, eps float32) {
	n := rows * dim
	o, r := d.get("RMSNormForward out", out, n), d.get("RMSNormForward rstd", rstd, rows)
	xb, w := d.get("RMSNormForward x", x, n), d.get("RMSNormForward weight", weight, dim)
	k := d.pick("RMSNormForward", &kernels.RMSNormForward, &kernels.RMSNormForwardBF16, []device.Buffer{rstd}, out, x, weight)
	if rows == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostRMSNormForward(o.a.dt, rows, dim) })()
	d.launch(k, grid{rows, 1, 1}, 0, ptrArg(o), ptrArg(r), ptrArg(xb), ptrArg(w),
		i32Arg(rows), i32Arg(dim), f32Arg(eps))
}

// RMSNormBackward runs kernels.RMSNormBackwardDx and kernels.RMSNormBackwardDw.
func (d *Device) RMSNormBackward(dx, dweight, dout, x, weight, rstd device.Buffer, rows, dim int) {
	n := rows * dim
	gx, gw := d.get("RMSNormBackward dx", dx, n), d.get("RMSNormBackward dweight", dweight, dim)
	gy, xb := d.get("RMSNormBackward dout", dout, n), d.get("RMSNormBackward x", x, n)
	w, r := d.get("RMSNormBackward weight", weight, dim), d.get("RMSNormBackward rstd", rstd, rows)
	kdx, kdw := &kernels.RMSNormBackwardDx, &kernels.RMSNormBackwardDw
	if d.pick("RMSNormBackward", kdx, &kernels.RMSNormBackwardDxBF16, []device.Buffer{rstd}, dx, dweight, dout, x, weight) != kdx {
		kdx, kdw = &kernels.RMSNormBackwardDxBF16, &kernels.RMSNormBackwardDwBF16
	}
	if rows == 0 || dim == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostRMSNormBackward(gx.a.dt, rows, dim) })()
	d.launch(kdx, grid{rows, 1, 1}, 0, ptrArg(gx), ptrArg(gy), ptrArg(xb), ptrArg(w), ptrArg(r),
		i32Arg(rows), i32Arg(dim))
	d.launch(kdw, grid{kernels.CeilDiv(dim, kernels.ElemBlock), 1, 1}, 0, ptrArg(gw), ptrArg(gy),
		ptrArg(xb), ptrArg(r), i32Arg(rows), i32Arg(dim))
}

// RoPEForward rotates x in place with kernels.RoPE.
func (d *Device) RoPEForward(x device.Buffer, s device.RoPEShape) {
	d.checkRoPE("RoPEForward", s)
	d.rotate(d.get("RoPEForward x", x, s.Len()), s, 1)
}

// RoPEBackward rotates dx back in place with kernels.RoPE.
func (d *Device) RoPEBackward(dx device.Buffer, s device.RoPEShape) {
	d.checkRoPE("RoPEBackward", s)
	d.rotate(d.get("RoPEBackward dx", dx, s.Len()), s, -1)
}

func (d *Device) checkRoPE(op string, s device.RoPEShape) {
	if s.HeadDim <= 0 || s.HeadDim%2 != 0 || s.Theta <= 0 || s.Batch < 0 || s.Seq < 0 || s.Heads < 0 {
		panic(fmt.Sprintf("%s: %s: bad shape %+v (head dim must be even, theta positive)", d.name, op, s))
	}
}

// rotate runs the RoPE kernel with the cos/sin tables of s, uploaded to scratch
// once per shape (every layer of a step shares them).
func (d *Device) rotate(x *buffer, s device.RoPEShape, sign float32) {
	k := d.pick("RoPE", &kernels.RoPE, &kernels.RoPEBF16, nil, x)
	if s.Len() == 0 {
		return
	}
	half := s.HeadDim / 2
	d.mu.Lock()
	defer d.mu.Unlock()
	op := "RoPEForward"
	if sign < 0 {
		op = "RoPEBackward"
	}
	defer d.timed(func() OpCost { return CostRoPE(op, x.a.dt, s) })()
	tab, ok := d.ropeTablesLocked(s)
	if !ok {
		return
	}
	rows := s.Batch * s.Seq
	d.launch(k, grid{kernels.GridStride(int64(rows * s.Heads * half)), 1, 1}, 0, ptrArg(x), addrArg(tab),
		addrArg(tab+uint64(s.Seq*half)*elemBytes), i32Arg(rows), i32Arg(s.Seq), i32Arg(s.Heads), i32Arg(s.HeadDim), f32Arg(sign))
}

// ropeTablesLocked returns the scratch address of the cos then sin tables of s
// ([seq, headDim/2] each), uploading them when the last upload was for another
// seq, head dim or theta (every layer of a step shares them); ok is false after a
// recorded failure. d.mu is held.
func (d *Device) ropeTablesLocked(s device.RoPEShape) (uint64, bool) {
	tab, ok := d.scratchLocked("rope", int64(2*s.Seq*(s.HeadDim/2))*elemBytes)
	if !ok {
		return 0, false
	}
	key := device.RoPEShape{Seq: s.Seq, HeadDim: s.HeadDim, Theta: s.Theta}
	if d.rope != key {
		host := ropeTable(s)
		d.issue("upload the RoPE tables", func() int {
			return int(C.fsdp_htod(d.ctx, C.CUdeviceptr(tab), unsafe.Pointer(&host[0]), C.size_t(len(host)*elemBytes), d.compute))
		})
		if d.err != nil {
			return 0, false
		}
		d.rope = key
	}
	return tab, true
}

// ropeTable is cos then sin of t·θ^(−2i/headDim) for t < seq, i < headDim/2, row-major
// [seq, headDim/2] each, computed in float64 and rounded once: the cpu device's
// ropeTable, so both devices rotate by the same float32 angles.
func ropeTable(s device.RoPEShape) []float32 {
	half := s.HeadDim / 2
	out := make([]float32, 2*s.Seq*half)
	cos, sin := out[:s.Seq*half], out[s.Seq*half:]
	for i := range half {
		inv := math.Pow(s.Theta, -float64(2*i)/float64(s.HeadDim))
		for t := range s.Seq {
			sn, cs := math.Sincos(float64(t) * inv)
			cos[t*half+i], sin[t*half+i] = float32(cs), float32(sn)
		}
	}
	return out
}

func (d *Device) checkAttn(op string, s device.AttnShape) {
	if s.Batch < 0 || s.Seq < 0 || s.HeadDim <= 0 || s.KVHeads <= 0 || s.Heads < s.KVHeads || s.Heads%s.KVHeads != 0 {
		panic(fmt.Sprintf("%s: %s: bad shape %+v (kv heads must divide heads)", d.name, op, s))
	}
	if s.HeadDim > kernels.MaxHeadDim {
		panic(fmt.Sprintf("%s: %s: head dim %d over the attention kernels' %d", d.name, op, s.HeadDim, kernels.MaxHeadDim))
	}
}

// attnArgs are the shape parameters every attention kernel ends with.
func attnArgs(s device.AttnShape) []arg {
	return []arg{i32Arg(s.Batch), i32Arg(s.Seq), i32Arg(s.Heads), i32Arg(s.KVHeads), i32Arg(s.HeadDim),
		f32Arg(float32(1 / math.Sqrt(float64(s.HeadDim))))}
}

// AttentionForward runs the flash-style kernels.AttentionForward, or with bf16
// tensors at head dim 64 or 128 the tensor-core kernels.AttentionForwardTC.
func (d *Device) AttentionForward(out, lse, q, k, v device.Buffer, s device.AttnShape) {
	d.checkAttn("AttentionForward", s)
	o, l := d.get("AttentionForward out", out, s.QLen()), d.get("AttentionForward lse", lse, s.LSELen())
	qb, kb, vb := d.get("AttentionForward q", q, s.QLen()), d.get("AttentionForward k", k, s.KVLen()), d.get("AttentionForward v", v, s.KVLen())
	kf := d.pick("AttentionForward", &kernels.AttentionForward, &kernels.AttentionForwardBF16, []device.Buffer{lse}, out, q, k, v)
	rows := kernels.AttnFwdTile
	if kf == &kernels.AttentionForwardBF16 {
		// bf16 at head dim 64 or 128 runs on tensor cores. Its 16-byte cp.async rows
		// need 16-byte aligned tensors: every buffer is an arena block (512-aligned).
		if tc := kernels.AttentionForwardTC(s.HeadDim); tc != nil {
			kf, rows = tc, kernels.AttnTCRows
		}
	}
	if s.QLen() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost {
		return CostAttentionForward(o.a.dt, rows == kernels.AttnTCRows && kf != &kernels.AttentionForwardBF16 && kf != &kernels.AttentionForward, s)
	})()
	args := append([]arg{ptrArg(o), ptrArg(l), ptrArg(qb), ptrArg(kb), ptrArg(vb)}, attnArgs(s)...)
	d.launch(kf, grid{kernels.CeilDiv(s.Seq, rows), s.Heads, s.Batch}, kf.Shared(s.HeadDim), args...)
}

// AttentionBackward runs kernels.AttentionBackwardDq and kernels.AttentionBackwardDkDv,
// or with bf16 tensors at head dim 64 or 128 the tensor-core kernels.AttentionBackwardTC.
func (d *Device) AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse device.Buffer, s device.AttnShape) {
	d.checkAttn("AttentionBackward", s)
	gq, gk, gv := d.get("AttentionBackward dq", dq, s.QLen()), d.get("AttentionBackward dk", dk, s.KVLen()), d.get("AttentionBackward dv", dv, s.KVLen())
	gout := d.get("AttentionBackward dout", dout, s.QLen())
	qb, kb, vb := d.get("AttentionBackward q", q, s.QLen()), d.get("AttentionBackward k", k, s.KVLen()), d.get("AttentionBackward v", v, s.KVLen())
	o, l := d.get("AttentionBackward out", out, s.QLen()), d.get("AttentionBackward lse", lse, s.LSELen())
	kdq, kdkdv := &kernels.AttentionBackwardDq, &kernels.AttentionBackwardDkDv
	qRows, kRows := kernels.AttnBwdTile, kernels.AttnBwdTile
	if d.pick("AttentionBackward", kdq, &kernels.AttentionBackwardDqBF16, []device.Buffer{lse}, dq, dk, dv, dout, q, k, v, out) != kdq {
		kdq, kdkdv = &kernels.AttentionBackwardDqBF16, &kernels.AttentionBackwardDkDvBF16
		// As the forward: bf16 at head dim 64 or 128 on tensor cores.
		if tq, tkv := kernels.AttentionBackwardTC(s.HeadDim); tq != nil {
			kdq, kdkdv, qRows, kRows = tq, tkv, kernels.AttnTCRows, kernels.AttnTCBwdKeys(s.HeadDim)
		}
	}
	if s.QLen() == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost {
		return CostAttentionBackward(gq.a.dt, kdq != &kernels.AttentionBackwardDq && kdq != &kernels.AttentionBackwardDqBF16, s)
	})()
	args := append([]arg{ptrArg(gq), ptrArg(gout), ptrArg(qb), ptrArg(kb), ptrArg(vb), ptrArg(o), ptrArg(l)}, attnArgs(s)...)
	d.launch(kdq, grid{kernels.CeilDiv(s.Seq, qRows), s.Heads, s.Batch}, kdq.Shared(s.HeadDim), args...)
	args = append([]arg{ptrArg(gk), ptrArg(gv), ptrArg(gout), ptrArg(qb), ptrArg(kb), ptrArg(vb), ptrArg(o), ptrArg(l)}, attnArgs(s)...)
	d.launch(kdkdv, grid{kernels.CeilDiv(s.Seq, kRows), s.KVHeads, s.Batch}, kdkdv.Shared(s.HeadDim), args...)
}

// SwiGLUForward runs kernels.SwiGLUForward.
func (d *Device) SwiGLUForward(out, gate, up device.Buffer) {
	g := d.buf("SwiGLUForward gate", gate)
	o, u := d.get("SwiGLUForward out", out, g.n), d.get("SwiGLUForward up", up, g.n)
	k := d.pick("SwiGLUForward", &kernels.SwiGLUForward, &kernels.SwiGLUForwardBF16, nil, out, gate, up)
	if g.n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostSwiGLUForward(o.a.dt, g.n) })()
	d.launch(k, grid{kernels.GridStride(int64(g.n)), 1, 1}, 0, ptrArg(o), ptrArg(g), ptrArg(u), i64Arg(g.n))
}

// SwiGLUBackward runs kernels.SwiGLUBackward.
func (d *Device) SwiGLUBackward(dgate, dup, dout, gate, up device.Buffer) {
	g := d.buf("SwiGLUBackward gate", gate)
	n := g.n
	gg, gu := d.get("SwiGLUBackward dgate", dgate, n), d.get("SwiGLUBackward dup", dup, n)
	gy, u := d.get("SwiGLUBackward dout", dout, n), d.get("SwiGLUBackward up", up, n)
	k := d.pick("SwiGLUBackward", &kernels.SwiGLUBackward, &kernels.SwiGLUBackwardBF16, nil, dgate, dup, dout, gate, up)
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostSwiGLUBackward(gg.a.dt, n) })()
	d.launch(k, grid{kernels.GridStride(int64(n)), 1, 1}, 0, ptrArg(gg), ptrArg(gu), ptrArg(gy),
		ptrArg(g), ptrArg(u), i64Arg(n))
}

func (d *Device) checkTargets(op string, targets []int32, vocab int) {
	for i, t := range targets {
		if t < 0 || int(t) >= vocab {
			panic(fmt.Sprintf("%s: %s: target %d at %d is outside the vocabulary of %d", d.name, op, t, i, vocab))
		}
	}
}

// CrossEntropyForward runs kernels.CrossEntropyForward with the targets staged in scratch.
func (d *Device) CrossEntropyForward(losses, logits device.Buffer, targets []int32, vocab int) {
	d.checkTargets("CrossEntropyForward", targets, vocab)
	l := d.get("CrossEntropyForward losses", losses, len(targets))
	z := d.get("CrossEntropyForward logits", logits, len(targets)*vocab)
	k := d.pick("CrossEntropyForward", &kernels.CrossEntropyForward, &kernels.CrossEntropyForwardBF16, []device.Buffer{losses}, logits)
	if len(targets) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostCrossEntropyForward(z.a.dt, len(targets), vocab) })()
	if tg, ok := d.uploadInt32("targets", targets); ok {
		d.launch(k, grid{len(targets), 1, 1}, 0, ptrArg(l), ptrArg(z), addrArg(tg),
			i32Arg(len(targets)), i32Arg(vocab))
	}
}

// CrossEntropyBackward runs kernels.CrossEntropyBackward; dlogits may be logits.
func (d *Device) CrossEntropyBackward(dlogits, logits device.Buffer, targets []int32, vocab int, scale float32) {
	d.checkTargets("CrossEntropyBackward", targets, vocab)
	n := len(targets) * vocab
	gz, z := d.get("CrossEntropyBackward dlogits", dlogits, n), d.get("CrossEntropyBackward logits", logits, n)
	k := d.pick("CrossEntropyBackward", &kernels.CrossEntropyBackward, &kernels.CrossEntropyBackwardBF16, nil, dlogits, logits)
	if len(targets) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostCrossEntropyBackward(z.a.dt, len(targets), vocab) })()
	if tg, ok := d.uploadInt32("targets", targets); ok {
		d.launch(k, grid{len(targets), 1, 1}, 0, ptrArg(gz), ptrArg(z), addrArg(tg),
			i32Arg(len(targets)), i32Arg(vocab), f32Arg(scale))
	}
}

// CrossEntropyFused is CrossEntropyForward then CrossEntropyBackward in one
// launch of kernels.CrossEntropyFused: each row's loss into losses and
// dlogits = scale·(softmax(logits) − onehot(targets)), from two reads of the row
// and one write (the separate ops read it five times). dlogits may be logits.
// The logits stay in their dtype: bf16 logits are never widened into an fp32
// copy, so the head of a 128k vocabulary costs no memory beyond its bf16 logits.
func (d *Device) CrossEntropyFused(losses, dlogits, logits device.Buffer, targets []int32, vocab int, scale float32) {
	d.checkTargets("CrossEntropyFused", targets, vocab)
	n := len(targets) * vocab
	l := d.get("CrossEntropyFused losses", losses, len(targets))
	gz, z := d.get("CrossEntropyFused dlogits", dlogits, n), d.get("CrossEntropyFused logits", logits, n)
	k := d.pick("CrossEntropyFused", &kernels.CrossEntropyFused, &kernels.CrossEntropyFusedBF16, []device.Buffer{losses}, dlogits, logits)
	if len(targets) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostCrossEntropyFused(z.a.dt, len(targets), vocab) })()
	if tg, ok := d.uploadInt32("targets", targets); ok {
		d.launch(k, grid{len(targets), 1, 1}, 0, ptrArg(l), ptrArg(gz), ptrArg(z), addrArg(tg),
			i32Arg(len(targets)), i32Arg(vocab), f32Arg(scale))
	}
}

// AdamW computes torch's scalars in float64 and rounds them once, as the cpu
// device does, so both devices run the same float32 arithmetic per element.
func (d *Device) AdamW(params, grads, m, v device.Buffer, c device.AdamWConfig) {
	if c.Step < 1 {
		panic(fmt.Sprintf("%s: AdamW: step %d, want ≥ 1 (steps count from 1)", d.name, c.Step))
	}
	p := d.buf("AdamW params", params)
	n := p.n
	g, mb, vb := d.get("AdamW grads", grads, n), d.get("AdamW m", m, n), d.get("AdamW v", v, n)
	device.CheckDTypes(d.name, "AdamW (fp32 master weights and state)", []device.Buffer{params, grads, m, v}, params)
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostAdamW(n) })()
	d.launch(&kernels.AdamW, grid{kernels.GridStride(int64(n)), 1, 1}, 0, ptrArg(p), ptrArg(g), ptrArg(mb), ptrArg(vb), i64Arg(n),
		f32Arg(float32(1-c.LR*c.WeightDecay)), f32Arg(float32(1-c.Beta1)), f32Arg(float32(c.Beta2)),
		f32Arg(float32(1-c.Beta2)), f32Arg(float32(c.LR/(1-math.Pow(c.Beta1, float64(c.Step))))),
		f32Arg(float32(math.Sqrt(1-math.Pow(c.Beta2, float64(c.Step))))), f32Arg(float32(c.Eps)))
}
