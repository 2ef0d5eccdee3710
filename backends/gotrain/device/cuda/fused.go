//go:build cgo

package cuda

import (
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// The fused ops of device.FusedOps (issue 24, item 4): RMSNorm, RoPE and SwiGLU
// folded into their neighbours, each defined by the cpu device's sequence of plain
// ops and checked against it (fused_test.go). Each saves a launch and a pass over
// its tensors; with the fused gate|up GEMM the model also runs 3 GEMMs of a
// block's MLP instead of 6.

var _ device.FusedOps = (*Device)(nil)

// RoPEQK rotates q and k in place with one kernels.RoPEQK launch: RoPEForward (or
// RoPEBackward when inverse) of each.
func (d *Device) RoPEQK(q, k device.Buffer, sq, sk device.RoPEShape, inverse bool) {
	d.checkRoPE("RoPEQK", sq)
	d.checkRoPE("RoPEQK", sk)
	if sq.Batch != sk.Batch || sq.Seq != sk.Seq || sq.HeadDim != sk.HeadDim || sq.Theta != sk.Theta {
		panic(fmt.Sprintf("%s: RoPEQK: q shape %+v and k shape %+v differ in more than heads", d.name, sq, sk))
	}
	qb, kb := d.get("RoPEQK q", q, sq.Len()), d.get("RoPEQK k", k, sk.Len())
	kern := d.pick("RoPEQK", &kernels.RoPEQK, &kernels.RoPEQKBF16, nil, q, k)
	if sq.Len()+sk.Len() == 0 {
		return
	}
	op, sign := "RoPEQKForward", float32(1)
	if inverse {
		op, sign = "RoPEQKBackward", -1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostRoPEQK(op, qb.a.dt, sq, sk.Heads) })()
	tab, ok := d.ropeTablesLocked(sq)
	if !ok {
		return
	}
	rows, half := sq.Batch*sq.Seq, sq.HeadDim/2
	d.launch(kern, grid{kernels.GridStride(int64(rows * (sq.Heads + sk.Heads) * half)), 1, 1}, 0, ptrArg(qb), ptrArg(kb),
		addrArg(tab), addrArg(tab+uint64(sq.Seq*half)*elemBytes), i32Arg(rows), i32Arg(sq.Seq), i32Arg(sq.Heads),
		i32Arg(sk.Heads), i32Arg(sq.HeadDim), f32Arg(sign))
}

// ResidualRMSNorm runs kernels.ResidualRMSNorm: x += resid, then out, rstd =
// RMSNorm(x), one block a row.
func (d *Device) ResidualRMSNorm(out, rstd, x, resid, weight device.Buffer, rows, dim int, eps float32) {
	n := rows * dim
	o, r := d.get("ResidualRMSNorm out", out, n), d.get("ResidualRMSNorm rstd", rstd, rows)
	xb, rb := d.get("ResidualRMSNorm x", x, n), d.get("ResidualRMSNorm resid", resid, n)
	w := d.get("ResidualRMSNorm weight", weight, dim)
	if o.a == xb.a || rb.a == xb.a || rb.a == o.a {
		panic(fmt.Sprintf("%s: ResidualRMSNorm: out, x and resid must be separate buffers", d.name))
	}
	k := d.pick("ResidualRMSNorm", &kernels.ResidualRMSNorm, &kernels.ResidualRMSNormBF16, []device.Buffer{rstd}, out, x, resid, weight)
	if rows == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostResidualRMSNorm(o.a.dt, rows, dim) })()
	d.launch(k, grid{rows, 1, 1}, 0, ptrArg(o), ptrArg(r), ptrArg(xb), ptrArg(rb), ptrArg(w),
		i32Arg(rows), i32Arg(dim), f32Arg(eps))
}

// SwiGLUPackedForward runs kernels.SwiGLUPackedForward over the gate|up GEMM's
// output gu ([rows, 2·inter]).
func (d *Device) SwiGLUPackedForward(out, gu device.Buffer, rows, inter int) {
	checkPacked(d, "SwiGLUPackedForward", rows, inter)
	o, g := d.get("SwiGLUPackedForward out", out, rows*inter), d.get("SwiGLUPackedForward gu", gu, 2*rows*inter)
	k := d.pick("SwiGLUPackedForward", &kernels.SwiGLUPackedForward, &kernels.SwiGLUPackedForwardBF16, nil, out, gu)
	if rows*inter == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostSwiGLUPackedForward(o.a.dt, rows, inter) })()
	d.launch(k, grid{kernels.GridStride(int64(rows * inter)), 1, 1}, 0, ptrArg(o), ptrArg(g), i32Arg(rows), i32Arg(inter))
}

// SwiGLUPackedBackward runs kernels.SwiGLUPackedBackward: dgate and dup added
// into dgu, laid out as gu.
func (d *Device) SwiGLUPackedBackward(dgu, dout, gu device.Buffer, rows, inter int) {
	checkPacked(d, "SwiGLUPackedBackward", rows, inter)
	n := rows * inter
	dg, dy, g := d.get("SwiGLUPackedBackward dgu", dgu, 2*n), d.get("SwiGLUPackedBackward dout", dout, n), d.get("SwiGLUPackedBackward gu", gu, 2*n)
	k := d.pick("SwiGLUPackedBackward", &kernels.SwiGLUPackedBackward, &kernels.SwiGLUPackedBackwardBF16, nil, dgu, dout, gu)
	if n == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	defer d.timed(func() OpCost { return CostSwiGLUPackedBackward(dg.a.dt, rows, inter) })()
	d.launch(k, grid{kernels.GridStride(int64(n)), 1, 1}, 0, ptrArg(dg), ptrArg(dy), ptrArg(g), i32Arg(rows), i32Arg(inter))
}

// checkPacked bounds the packed SwiGLU's sizes: the kernels take int32 rows and
// widths and index 2·rows·inter in 64 bits.
func checkPacked(d *Device, op string, rows, inter int) {
	if rows < 0 || inter < 0 || 2*inter > 1<<31-1 || rows > 1<<31-1 {
		panic(fmt.Sprintf("%s: %s: bad shape rows %d, inter %d", d.name, op, rows, inter))
	}
}
