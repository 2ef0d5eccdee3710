// Package cpu is the reference Device: host memory, every op written by hand in Go
// (ops.go, forward next to backward), float32 matrix products through OpenBLAS
// loaded at run time (package openblas; gonum's pure-Go BLAS where it is absent),
// float64 ones through gonum.
// Ops run synchronously on the calling goroutine and split their heavy loops over
// GOMAXPROCS goroutines, only ever over independent outputs, so results do not
// depend on the number of threads; nor do OpenBLAS's products, which it splits by
// rows and columns, never over the sum.
//
// The same code runs in float64 (Options.Float64): that device is the reference the
// gradient checks use, where finite differences are exact to ~1e-8 instead of the
// ~1e-3 that float32 allows.
package cpu

import (
	"fmt"
	"sync/atomic"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
)

// Options configure a cpu device; the zero value is a float32 device without limit.
type Options struct {
	// LimitBytes makes Alloc fail with device.ErrOutOfMemory once the bytes held
	// would exceed it (0: no limit), so out-of-memory behaviour is testable on cpu.
	LimitBytes int64
	// Float64 stores and computes in float64; buffers then cost 8 bytes per element
	// and device.HostBuffer.Host returns nil. CopyFromHost and CopyToHost still
	// take float32.
	Float64 bool
	// BLAS picks the float32 GEMM: BLASAuto (OpenBLAS when it loads, else
	// gonum) or BLASGonum. The float64 device always runs gonum.
	BLAS string
}

// New returns a cpu device.
func New(o Options) device.Device {
	if o.Float64 {
		d := &dev[float64]{name: "cpu-float64", tr: device.NewTracker(o.LimitBytes), elemBytes: 8}
		d.gemm, d.lib = pickGEMM[float64](o)
		return d
	}
	d := &dev[float32]{name: "cpu", tr: device.NewTracker(o.LimitBytes), elemBytes: 4}
	d.gemm, d.lib = pickGEMM[float32](o)
	return d
}

// float is the element type of a device.
type float interface{ float32 | float64 }

// dev is a cpu device over elements of type T.
type dev[T float] struct {
	name      string
	tr        *device.Tracker
	elemBytes int64
	gemm      gemmFunc[T]
	lib       *openblas.Library // nil on gonum
	pool      pool[T]           // memory of freed buffers, for the next Alloc
	rope      ropeTables[T]     // RoPE's cos and sin by geometry
	scratch   scratch[T]        // ops' work space
}

// allocation is what Alloc handed out; its views share it.
type allocation struct {
	bytes int64
	cat   device.Category
	dt    device.DType
	freed atomic.Bool
	// external: the memory is the caller's (AllocDTypeOn), not the pool's.
	external bool
}

// buffer is a cpu buffer or a view of one.
type buffer[T float] struct {
	d    *dev[T]
	data []T
	a    *allocation
	view bool
}

func (b *buffer[T]) Len() int                  { return len(b.data) }
func (b *buffer[T]) Category() device.Category { return b.a.cat }
func (b *buffer[T]) Device() device.Device     { return b.d }

func (b *buffer[T]) Slice(off, n int) device.Buffer {
	if off < 0 || n < 0 || off+n > len(b.data) {
		panic(fmt.Sprintf("cpu: Slice(%d, %d) of a buffer of %d elements", off, n, len(b.data)))
	}
	return &buffer[T]{d: b.d, data: b.data[off : off+n : off+n], a: b.a, view: true}
}

// Host returns the elements of a float32 buffer, nil for float64.
func (b *buffer[T]) Host() []float32 {
	s, _ := any(b.data).([]float32)
	return s
}

func (d *dev[T]) Name() string { return d.name }

func (d *dev[T]) Alloc(n int, cat device.Category) (device.Buffer, error) {
	return d.AllocDType(n, device.F32, cat)
}

func (d *dev[T]) Free(b device.Buffer) {
	x := d.buf("Free", b)
	if x.view {
		panic(fmt.Sprintf("%s: Free of a view (Slice): free the buffer it was cut from", d.name))
	}
	if !x.a.freed.CompareAndSwap(false, true) {
		panic(fmt.Sprintf("%s: Free of a buffer freed already", d.name))
	}
	d.tr.Release(x.a.bytes, x.a.cat)
	if !x.a.external {
		d.pool.give(x.data, d.elemBytes, d.tr.Stats().PeakTotal)
	}
}

func (d *dev[T]) Memory() device.Stats { return d.tr.Stats() }
func (d *dev[T]) ResetPeak()           { d.tr.ResetPeak() }

// Sync has nothing to wait for: every op has finished when it returns.
func (d *dev[T]) Sync() error { return nil }

// buf checks that b is a live buffer of d.
func (d *dev[T]) buf(op string, b device.Buffer) *buffer[T] {
	x, ok := b.(*buffer[T])
	if !ok || x.d != d {
		panic(fmt.Sprintf("%s: %s: buffer %T does not belong to this device", d.name, op, b))
	}
	if x.a.freed.Load() {
		panic(fmt.Sprintf("%s: %s: buffer used after Free", d.name, op))
	}
	return x
}

// get returns the elements of b after checking it is d's and holds want elements.
func (d *dev[T]) get(op string, b device.Buffer, want int) []T {
	x := d.buf(op, b)
	if len(x.data) != want {
		panic(fmt.Sprintf("%s: %s: buffer of %d elements, want %d", d.name, op, len(x.data), want))
	}
	return x.data
}

func (d *dev[T]) CopyFromHost(dst device.Buffer, src []float32) {
	out := d.get("CopyFromHost", dst, len(src))
	if o32, ok := any(out).([]float32); ok { // a memmove, not a conversion per element
		copy(o32, src)
	} else {
		for i, x := range src {
			out[i] = T(x)
		}
	}
	d.round(dst)
}

func (d *dev[T]) CopyToHost(dst []float32, src device.Buffer) {
	in := d.get("CopyToHost", src, len(dst))
	if i32, ok := any(in).([]float32); ok {
		copy(dst, i32)
		return
	}
	for i, x := range in {
		dst[i] = float32(x)
	}
}

func (d *dev[T]) Copy(dst, src device.Buffer) {
	in := d.buf("Copy", src).data
	d.dtypes("Copy", nil, dst, src)
	copy(d.get("Copy", dst, len(in)), in)
}

func (d *dev[T]) Zero(b device.Buffer) { clear(d.buf("Zero", b).data) }

func (d *dev[T]) Add(dst, src device.Buffer, alpha float32) {
	in := d.buf("Add", src).data
	if device.DTypeOf(dst) != device.F32 { // an fp32 destination may add a bf16 source
		d.dtypes("Add", nil, dst, src)
	}
	add(d.get("Add", dst, len(in)), in, T(alpha))
	d.round(dst)
}

func (d *dev[T]) Scale(x device.Buffer, alpha float32) {
	scale(d.buf("Scale", x).data, T(alpha))
	d.round(x)
}

func (d *dev[T]) Sum(x device.Buffer) float64 { return sum(d.buf("Sum", x).data) }

func (d *dev[T]) SumSquares(x device.Buffer) float64 {
	return sumSquares(d.buf("SumSquares", x).data)
}

func (d *dev[T]) MatMul(c, a, b device.Buffer, transA, transB bool, m, n, k int, alpha, beta float32) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("%s: MatMul: negative size m=%d n=%d k=%d", d.name, m, n, k))
	}
	d.dtypes("MatMul", nil, c, a, b)
	matmul(d.gemm, d.get("MatMul C", c, m*n), d.get("MatMul A", a, m*k), d.get("MatMul B", b, k*n),
		transA, transB, m, n, k, T(alpha), T(beta))
	d.round(c)
}

func (d *dev[T]) EmbeddingForward(out, table device.Buffer, tokens []int32, dim int) {
	tab := d.buf("EmbeddingForward table", table).data
	d.checkTokens("EmbeddingForward", tokens, len(tab), dim)
	d.dtypes("EmbeddingForward", nil, out, table)
	embeddingForward(d.get("EmbeddingForward out", out, len(tokens)*dim), tab, tokens, dim)
	d.round(out)
}

func (d *dev[T]) EmbeddingBackward(dtable, dout device.Buffer, tokens []int32, dim int) {
	tab := d.buf("EmbeddingBackward dtable", dtable).data
	d.checkTokens("EmbeddingBackward", tokens, len(tab), dim)
	g := d.get("EmbeddingBackward dout", dout, len(tokens)*dim)
	if d.dtypes("EmbeddingBackward", nil, dtable, dout) == device.BF16 {
		embeddingBackwardBF16(tab, g, tokens, dim)
		return
	}
	embeddingBackward(tab, g, tokens, dim)
}

// checkTokens panics unless every token indexes a row of a table of n elements.
func (d *dev[T]) checkTokens(op string, tokens []int32, n, dim int) {
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

func (d *dev[T]) RMSNormForward(out, rstd, x, weight device.Buffer, rows, dim int, eps float32) {
	n := rows * dim
	d.dtypes("RMSNormForward", []device.Buffer{rstd}, out, x, weight)
	defer d.round(out)
	rmsnormForward(d.get("RMSNormForward out", out, n), d.get("RMSNormForward rstd", rstd, rows),
		d.get("RMSNormForward x", x, n), d.get("RMSNormForward weight", weight, dim), rows, dim, T(eps))
}

func (d *dev[T]) RMSNormBackward(dx, dweight, dout, x, weight, rstd device.Buffer, rows, dim int) {
	n := rows * dim
	d.dtypes("RMSNormBackward", []device.Buffer{rstd}, dx, dweight, dout, x, weight)
	defer d.round(dx, dweight)
	rmsnormBackward(d.get("RMSNormBackward dx", dx, n), d.get("RMSNormBackward dweight", dweight, dim),
		d.get("RMSNormBackward dout", dout, n), d.get("RMSNormBackward x", x, n),
		d.get("RMSNormBackward weight", weight, dim), d.get("RMSNormBackward rstd", rstd, rows), rows, dim)
}

func (d *dev[T]) RoPEForward(x device.Buffer, s device.RoPEShape) {
	d.checkRoPE("RoPEForward", s)
	cos, sin := d.rope.get(s)
	ropeForward(d.get("RoPEForward x", x, s.Len()), s, cos, sin)
	d.round(x)
}

func (d *dev[T]) RoPEBackward(dx device.Buffer, s device.RoPEShape) {
	d.checkRoPE("RoPEBackward", s)
	cos, sin := d.rope.get(s)
	ropeBackward(d.get("RoPEBackward dx", dx, s.Len()), s, cos, sin)
	d.round(dx)
}

func (d *dev[T]) checkRoPE(op string, s device.RoPEShape) {
	if s.HeadDim <= 0 || s.HeadDim%2 != 0 || s.Theta <= 0 || s.Batch < 0 || s.Seq < 0 || s.Heads < 0 {
		panic(fmt.Sprintf("%s: %s: bad shape %+v (head dim must be even, theta positive)", d.name, op, s))
	}
}

func (d *dev[T]) AttentionForward(out, lse, q, k, v device.Buffer, s device.AttnShape) {
	d.checkAttn("AttentionForward", s)
	d.dtypes("AttentionForward", []device.Buffer{lse}, out, q, k, v)
	defer d.round(out)
	o, l := d.get("AttentionForward out", out, s.QLen()), d.get("AttentionForward lse", lse, s.LSELen())
	qq, kk, vv := d.get("AttentionForward q", q, s.QLen()), d.get("AttentionForward k", k, s.KVLen()), d.get("AttentionForward v", v, s.KVLen())
	d.serialBLAS(func() { attentionForward(d.gemm, &d.scratch, o, l, qq, kk, vv, s) })
}

func (d *dev[T]) AttentionBackward(dq, dk, dv, dout, q, k, v, out, lse device.Buffer, s device.AttnShape) {
	d.checkAttn("AttentionBackward", s)
	d.dtypes("AttentionBackward", []device.Buffer{lse}, dq, dk, dv, dout, q, k, v, out)
	defer d.round(dq, dk, dv)
	gq, gk, gv := d.get("AttentionBackward dq", dq, s.QLen()), d.get("AttentionBackward dk", dk, s.KVLen()), d.get("AttentionBackward dv", dv, s.KVLen())
	do, o, l := d.get("AttentionBackward dout", dout, s.QLen()), d.get("AttentionBackward out", out, s.QLen()), d.get("AttentionBackward lse", lse, s.LSELen())
	qq, kk, vv := d.get("AttentionBackward q", q, s.QLen()), d.get("AttentionBackward k", k, s.KVLen()), d.get("AttentionBackward v", v, s.KVLen())
	d.serialBLAS(func() { attentionBackward(d.gemm, &d.scratch, gq, gk, gv, do, qq, kk, vv, o, l, s) })
}

func (d *dev[T]) checkAttn(op string, s device.AttnShape) {
	if s.Batch < 0 || s.Seq < 0 || s.HeadDim <= 0 || s.KVHeads <= 0 || s.Heads < s.KVHeads || s.Heads%s.KVHeads != 0 {
		panic(fmt.Sprintf("%s: %s: bad shape %+v (kv heads must divide heads)", d.name, op, s))
	}
}

func (d *dev[T]) SwiGLUForward(out, gate, up device.Buffer) {
	g := d.buf("SwiGLUForward gate", gate).data
	d.dtypes("SwiGLUForward", nil, out, gate, up)
	swigluForward(d.get("SwiGLUForward out", out, len(g)), g, d.get("SwiGLUForward up", up, len(g)))
	d.round(out)
}

func (d *dev[T]) SwiGLUBackward(dgate, dup, dout, gate, up device.Buffer) {
	g := d.buf("SwiGLUBackward gate", gate).data
	n := len(g)
	d.dtypes("SwiGLUBackward", nil, dgate, dup, dout, gate, up)
	defer d.round(dgate, dup)
	swigluBackward(d.get("SwiGLUBackward dgate", dgate, n), d.get("SwiGLUBackward dup", dup, n),
		d.get("SwiGLUBackward dout", dout, n), g, d.get("SwiGLUBackward up", up, n))
}

func (d *dev[T]) CrossEntropyForward(losses, logits device.Buffer, targets []int32, vocab int) {
	d.checkTargets("CrossEntropyForward", targets, vocab)
	d.dtypes("CrossEntropyForward", []device.Buffer{losses}, logits)
	crossEntropyForward(d.get("CrossEntropyForward losses", losses, len(targets)),
		d.get("CrossEntropyForward logits", logits, len(targets)*vocab), targets, vocab)
}

func (d *dev[T]) CrossEntropyBackward(dlogits, logits device.Buffer, targets []int32, vocab int, scale float32) {
	d.checkTargets("CrossEntropyBackward", targets, vocab)
	d.dtypes("CrossEntropyBackward", nil, dlogits, logits)
	defer d.round(dlogits)
	n := len(targets) * vocab
	crossEntropyBackward(d.get("CrossEntropyBackward dlogits", dlogits, n),
		d.get("CrossEntropyBackward logits", logits, n), targets, vocab, T(scale))
}

func (d *dev[T]) checkTargets(op string, targets []int32, vocab int) {
	for i, t := range targets {
		if t < 0 || int(t) >= vocab {
			panic(fmt.Sprintf("%s: %s: target %d at %d is outside the vocabulary of %d", d.name, op, t, i, vocab))
		}
	}
}

func (d *dev[T]) AdamW(params, grads, m, v device.Buffer, c device.AdamWConfig) {
	if c.Step < 1 {
		panic(fmt.Sprintf("%s: AdamW: step %d, want ≥ 1 (steps count from 1)", d.name, c.Step))
	}
	p := d.buf("AdamW params", params).data
	n := len(p)
	d.dtypes("AdamW (fp32 master weights and state)", []device.Buffer{params, grads, m, v}, params)
	adamw(p, d.get("AdamW grads", grads, n), d.get("AdamW m", m, n), d.get("AdamW v", v, n), c)
}
