package cpu

import (
	"math"
	"sync"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// The kernels: each op's forward next to its backward, over plain slices. Lengths
// were checked by the device methods. Row reductions (norms, softmax sums) are
// accumulated in float64 whatever T is; the float32 device then loses nothing there
// to the float64 reference but the final rounding. Its exponentials are float32
// (expf, exp.go), within 2 ulp of the exact value.

// ---- element-wise and reductions ----

func add[T float](dst, src []T, alpha T) {
	dst = dst[:len(src)]
	for i, x := range src {
		dst[i] += alpha * x
	}
}

func scale[T float](x []T, alpha T) {
	for i := range x {
		x[i] *= alpha
	}
}

// mulScalar is scale under a name that does not collide with a parameter called scale.
func mulScalar[T float](x []T, alpha T) { scale(x, alpha) }

// sum and sumSquares accumulate in float64 over four accumulators: one chain
// of float64 additions is bound by the adder's latency, four are not.
func sum[T float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		s0 += float64(v[0])
		s1 += float64(v[1])
		s2 += float64(v[2])
		s3 += float64(v[3])
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

func sumSquares[T float](x []T) float64 {
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		a, b, c, d := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		s0 += a * a
		s1 += b * b
		s2 += c * c
		s3 += d * d
	}
	for ; i < len(x); i++ {
		s0 += float64(x[i]) * float64(x[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// ---- matrix product ----

// matmul is C = alpha·op(A)·op(B) + beta·C on contiguous row-major matrices.
func matmul[T float](gemm gemmFunc[T], c, a, b []T, transA, transB bool, m, n, k int, alpha, beta T) {
	lda, ldb := k, n
	if transA {
		lda = m
	}
	if transB {
		ldb = k
	}
	gemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, n)
}

// ---- token embedding ----

// embeddingForward: out[i,:] = table[tokens[i],:].
func embeddingForward[T float](out, table []T, tokens []int32, dim int) {
	for i, t := range tokens {
		copy(out[i*dim:(i+1)*dim], table[int(t)*dim:(int(t)+1)*dim])
	}
}

// embeddingBackward: the gather's adjoint is a scatter-add, dtable[tokens[i],:] +=
// dout[i,:]. Serial in token order, so repeated tokens always add in the same order.
func embeddingBackward[T float](dtable, dout []T, tokens []int32, dim int) {
	for i, t := range tokens {
		add(dtable[int(t)*dim:(int(t)+1)*dim], dout[i*dim:(i+1)*dim], 1)
	}
}

// ---- RMSNorm (Zhang & Sennrich 2019) ----

// rmsnormForward: per row, r = (Σ_j x_j²/dim + eps)^(−1/2) and y_j = w_j·(x_j·r),
// in the order of Hugging Face's LlamaRMSNorm.
func rmsnormForward[T float](out, rstd, x, w []T, rows, dim int, eps T) {
	parallelFor(rows, 3*dim, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, yr := x[r*dim:(r+1)*dim], out[r*dim:(r+1)*dim]
			rs := T(1 / math.Sqrt(sumSquares(xr)/float64(dim)+float64(eps)))
			rstd[r] = rs
			for j, v := range xr {
				yr[j] = w[j] * (v * rs)
			}
		}
	})
}

// rmsnormBackward: with y_j = w_j·x_j·r and ∂r/∂x_k = −r³·x_k/dim,
//
//	dx_k += r·w_k·dy_k − (r³/dim)·x_k·Σ_j w_j·dy_j·x_j
//	dw_j += Σ_rows dy_j·x_j·r
//
// dw is summed per column over rows in row order, so it does not depend on threads.
func rmsnormBackward[T float](dx, dw, dy, x, w, rstd []T, rows, dim int) {
	w = w[:dim]
	dw = dw[:dim]
	// row does one row's dx, and its share of dw when addDW: every dw[j] then
	// still adds the rows in row order, so fusing the passes changes no bit.
	row := func(r int, addDW bool) {
		xr := x[r*dim : (r+1)*dim]
		dyr, dxr := dy[r*dim : (r+1)*dim][:len(xr)], dx[r*dim : (r+1)*dim][:len(xr)]
		w := w[:len(xr)]
		rs := float64(rstd[r])
		// Σ_j w_j·dy_j·x_j in float64 over four accumulators, as one chain of
		// float64 additions is bound by the adder's latency.
		var d0, d1, d2, d3 float64
		j := 0
		for ; j+4 <= len(xr); j += 4 {
			xv, dv, wv := xr[j:j+4:j+4], dyr[j:j+4:j+4], w[j:j+4:j+4]
			d0 += float64(wv[0]) * float64(dv[0]) * float64(xv[0])
			d1 += float64(wv[1]) * float64(dv[1]) * float64(xv[1])
			d2 += float64(wv[2]) * float64(dv[2]) * float64(xv[2])
			d3 += float64(wv[3]) * float64(dv[3]) * float64(xv[3])
		}
		for ; j < len(xr); j++ {
			d0 += float64(w[j]) * float64(dyr[j]) * float64(xr[j])
		}
		c := T(rs * rs * rs * ((d0 + d1) + (d2 + d3)) / float64(dim))
		rsT := T(rs)
		if addDW {
			dw := dw[:len(xr)]
			for j, v := range xr {
				dxr[j] += rsT*w[j]*dyr[j] - c*v
				dw[j] += dyr[j] * (v * rstd[r])
			}
			return
		}
		for j, v := range xr {
			dxr[j] += rsT*w[j]*dyr[j] - c*v
		}
	}
	if serial(rows, 5*dim) && serial(dim, 3*rows) {
		for r := range rows {
			row(r, true)
		}
		return
	}
	parallelFor(rows, 5*dim, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row(r, false)
		}
	})
	parallelFor(dim, 3*rows, func(lo, hi int) {
		for r := range rows {
			xr, dyr, rs := x[r*dim : (r+1)*dim][lo:hi], dy[r*dim : (r+1)*dim][lo:hi], rstd[r]
			dw := dw[lo:hi][:len(xr)]
			dyr = dyr[:len(xr)]
			for j, v := range xr {
				dw[j] += dyr[j] * (v * rs)
			}
		}
	})
}

// ---- rotary position embedding (Su et al. 2021, RoFormer) ----

// ropeTable returns cos and sin of t·θ^(−2i/headDim) for t < seq, i < headDim/2,
// row-major [seq, headDim/2], computed in float64 and rounded once.
func ropeTable[T float](s device.RoPEShape) (cos, sin []T) {
	half := s.HeadDim / 2
	cos, sin = make([]T, s.Seq*half), make([]T, s.Seq*half)
	for i := range half {
		inv := math.Pow(s.Theta, -float64(2*i)/float64(s.HeadDim))
		for t := range s.Seq {
			sn, cs := math.Sincos(float64(t) * inv)
			cos[t*half+i], sin[t*half+i] = T(cs), T(sn)
		}
	}
	return cos, sin
}

// ropeForward rotates each pair (x_i, x_{i+half}) of every head by the angle of
// its position: (x1·cos − x2·sin, x2·cos + x1·sin), i.e. x·cos + rotate_half(x)·sin.
// cos and sin are ropeTable's.
func ropeForward[T float](x []T, s device.RoPEShape, cos, sin []T) {
	rope(x, s, cos, sin, 1)
}

// ropeBackward: the rotation is orthogonal, so its adjoint is the rotation by the
// opposite angle: (dy1·cos + dy2·sin, dy2·cos − dy1·sin).
func ropeBackward[T float](dx []T, s device.RoPEShape, cos, sin []T) {
	rope(dx, s, cos, sin, -1)
}

// ropeKey is what a RoPE table depends on.
type ropeKey struct {
	seq, headDim int
	theta        float64
}

// ropeTables keeps each table a device computed: every layer's q and k, forward
// and backward, of every step rotates by the same one.
type ropeTables[T float] struct {
	mu sync.Mutex
	m  map[ropeKey][2][]T
}

// get returns ropeTable(s), computed once per geometry.
func (r *ropeTables[T]) get(s device.RoPEShape) (cos, sin []T) {
	k := ropeKey{s.Seq, s.HeadDim, s.Theta}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.m[k]; ok {
		return t[0], t[1]
	}
	if r.m == nil {
		r.m = map[ropeKey][2][]T{}
	}
	cos, sin = ropeTable[T](s)
	r.m[k] = [2][]T{cos, sin}
	return cos, sin
}

// rope rotates in place by sign·angle.
func rope[T float](x []T, s device.RoPEShape, cos, sin []T, sign T) {
	half, hd := s.HeadDim/2, s.HeadDim
	parallelFor(s.Batch*s.Seq, 4*s.Heads*hd, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			t := bt % s.Seq
			c, sn := cos[t*half:(t+1)*half], sin[t*half:(t+1)*half]
			for h := range s.Heads {
				v := x[(bt*s.Heads+h)*hd : (bt*s.Heads+h+1)*hd]
				for i := range half {
					x1, x2, si := v[i], v[i+half], sign*sn[i]
					v[i] = x1*c[i] - x2*si
					v[i+half] = x2*c[i] + x1*si
				}
			}
		}
	})
}

// ---- causal grouped-query attention (Vaswani et al. 2017; Ainslie et al. 2023) ----

// attnBlock is the number of query rows attention handles at once: its score
// scratch is attnBlock × seq per goroutine, and the product of a query block with
// the keys up to its last row wastes at most half a block on masked scores.
const attnBlock = 64

// attnView returns where sample b's head h (of heads) starts in a [batch, seq,
// heads, headDim] tensor, and its row stride: a head is a strided matrix [seq, headDim].
func attnView(b, h, heads int, s device.AttnShape) (off, stride int) {
	return (b*s.Seq*heads + h) * s.HeadDim, heads * s.HeadDim
}

// attentionForward, per sample b and query head h reading kv head g = h/(H/KV):
//
//	S_ij = q_i·k_j/sqrt(d) for j ≤ i,  lse_i = log Σ_j exp S_ij,
//	P_ij = exp(S_ij − lse_i),           o_i = Σ_j P_ij·v_j.
//
// For a block of query rows [i0, i1) it computes S = Q·Kᵀ for keys [0, i1) with
// one GEMM, the masked softmax row by row (max subtracted before exp), and O = P·V
// with another.
func attentionForward[T float](gemm gemmFunc[T], work *scratch[T], out, lse, q, k, v []T, s device.AttnShape) {
	H, n := s.Heads, s.Seq
	rep, sc := H/s.KVHeads, T(1/math.Sqrt(float64(s.HeadDim)))
	parallelFor(s.Batch*H, 2*n*n*s.HeadDim, func(lo, hi int) {
		buf := work.get(min(attnBlock, n) * n)
		defer work.put(buf)
		scores := *buf
		for item := lo; item < hi; item++ {
			b, h := item/H, item%H
			qOff, qStride := attnView(b, h, H, s)
			kOff, kStride := attnView(b, h/rep, s.KVHeads, s)
			for i0 := 0; i0 < n; i0 += attnBlock {
				i1 := min(i0+attnBlock, n)
				rows, cols := i1-i0, i1
				S := scores[:rows*cols]
				gemm(false, true, rows, cols, s.HeadDim, sc, q[qOff+i0*qStride:], qStride, k[kOff:], kStride, 0, S, cols)
				for r := range rows {
					i, row := i0+r, S[r*cols:(r+1)*cols]
					mx := maxOf(row[:i+1])
					z := expShiftSum(row[:i+1], row[:i+1], mx)
					scale(row[:i+1], T(1/z))
					clear(row[i+1:])
					lse[(b*H+h)*n+i] = mx + T(math.Log(z))
				}
				gemm(false, false, rows, s.HeadDim, cols, 1, S, cols, v[kOff:], kStride, 0, out[qOff+i0*qStride:], qStride)
			}
		}
	})
}

// attentionBackward recomputes P from q, k and lse and applies
//
//	dv_j += Σ_i P_ij·do_i,  dP_ij = do_i·v_j,  D_i = Σ_j P_ij·dP_ij = do_i·o_i,
//	dS_ij = P_ij·(dP_ij − D_i),  dq_i += Σ_j dS_ij·k_j/sqrt(d),  dk_j += Σ_i dS_ij·q_i/sqrt(d)
//
// (the softmax Jacobian diag(P) − P·Pᵀ, as FlashAttention's backward, Dao 2022),
// by query blocks as the forward, each product a GEMM. Work is split by (sample,
// kv head), so the query heads that share a kv head add into dk and dv from one
// goroutine, in a fixed order.
func attentionBackward[T float](gemm gemmFunc[T], work *scratch[T], dq, dk, dv, dout, q, k, v, out, lse []T, s device.AttnShape) {
	H, KV, d, n := s.Heads, s.KVHeads, s.HeadDim, s.Seq
	rep, sc := H/KV, T(1/math.Sqrt(float64(d)))
	parallelFor(s.Batch*KV, 4*rep*n*n*d, func(lo, hi int) {
		blk := min(attnBlock, n)
		bp, bdp := work.get(blk*n), work.get(blk*n)
		defer work.put(bp)
		defer work.put(bdp)
		P, dP := *bp, *bdp
		for item := lo; item < hi; item++ {
			b, g := item/KV, item%KV
			kOff, kStride := attnView(b, g, KV, s)
			for h := g * rep; h < (g+1)*rep; h++ {
				qOff, qStride := attnView(b, h, H, s)
				for i0 := 0; i0 < n; i0 += attnBlock {
					i1 := min(i0+attnBlock, n)
					rows, cols := i1-i0, i1
					qb, ob := qOff+i0*qStride, qOff+i0*qStride
					p, dp := P[:rows*cols], dP[:rows*cols]
					gemm(false, true, rows, cols, d, sc, q[qb:], qStride, k[kOff:], kStride, 0, p, cols)
					gemm(false, true, rows, cols, d, 1, dout[ob:], qStride, v[kOff:], kStride, 0, dp, cols)
					for r := range rows {
						i := i0 + r
						prow, dprow := p[r*cols:(r+1)*cols], dp[r*cols:(r+1)*cols]
						di := dot(dout[ob+r*qStride:][:d], out[ob+r*qStride:][:d])
						expShiftSum(prow[:i+1], prow[:i+1], lse[(b*H+h)*n+i])
						for j, pj := range prow[:i+1] {
							dprow[j] = pj * (dprow[j] - di) * sc // dS/sqrt(d), ready for dq and dk
						}
						clear(prow[i+1:])
						clear(dprow[i+1:])
					}
					gemm(true, false, cols, d, rows, 1, p, cols, dout[ob:], qStride, 1, dv[kOff:], kStride)
					gemm(false, false, rows, d, cols, 1, dp, cols, k[kOff:], kStride, 1, dq[qb:], qStride)
					gemm(true, false, cols, d, rows, 1, dp, cols, q[qb:], qStride, 1, dk[kOff:], kStride)
				}
			}
		}
	})
}

func dot[T float](a, b []T) T {
	var s T
	for i, x := range a {
		s += x * b[i]
	}
	return s
}

// ---- SwiGLU (Shazeer 2020) ----

// swigluForward: y = silu(g)·u with silu(g) = g·σ(g), σ(g) = 1/(1+e^−g).
func swigluForward[T float](out, gate, up []T) {
	parallelFor(len(out), 20, func(lo, hi int) {
		if o32, ok := any(out[lo:hi]).([]float32); ok {
			g32, u32 := any(gate[lo:hi]).([]float32), any(up[lo:hi]).([]float32)
			var buf [expChunk]float32
			for c0 := 0; c0 < len(g32); c0 += expChunk {
				g := g32[c0:min(c0+expChunk, len(g32))]
				e, u, o := buf[:len(g)], u32[c0:c0+len(g)], o32[c0:c0+len(g)]
				expAffine(e, g, -1, 0)
				for i, gi := range g {
					o[i] = gi / (1 + e[i]) * u[i]
				}
			}
			return
		}
		for i := lo; i < hi; i++ {
			g := float64(gate[i])
			out[i] = T(g/(1+math.Exp(-g))) * up[i]
		}
	})
}

// swigluBackward: ∂y/∂u = silu(g), ∂y/∂g = u·σ(g)·(1 + g·(1 − σ(g))).
func swigluBackward[T float](dgate, dup, dout, gate, up []T) {
	parallelFor(len(dout), 25, func(lo, hi int) {
		if dg32, ok := any(dgate[lo:hi]).([]float32); ok {
			du32, do32 := any(dup[lo:hi]).([]float32), any(dout[lo:hi]).([]float32)
			g32, u32 := any(gate[lo:hi]).([]float32), any(up[lo:hi]).([]float32)
			var buf [expChunk]float32
			for c0 := 0; c0 < len(g32); c0 += expChunk {
				g := g32[c0:min(c0+expChunk, len(g32))]
				n := len(g)
				e, u, do, dg, du := buf[:n], u32[c0:c0+n], do32[c0:c0+n], dg32[c0:c0+n], du32[c0:c0+n]
				expAffine(e, g, -1, 0)
				for i, gi := range g {
					sg := 1 / (1 + e[i])
					dg[i] += do[i] * u[i] * (sg * (1 + gi*(1-sg)))
					du[i] += do[i] * (gi * sg)
				}
			}
			return
		}
		for i := lo; i < hi; i++ {
			g := float64(gate[i])
			sg := 1 / (1 + math.Exp(-g))
			dgate[i] += dout[i] * up[i] * T(sg*(1+g*(1-sg)))
			dup[i] += dout[i] * T(g*sg)
		}
	})
}

// ---- cross-entropy over the vocabulary, fused with softmax ----

// crossEntropyForward: loss_i = −log softmax(z_i)[t_i] = logsumexp(z_i) − z_i[t_i],
// with the row's max subtracted before exp.
func crossEntropyForward[T float](losses, logits []T, targets []int32, vocab int) {
	parallelFor(len(targets), 25*vocab, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			z := logits[i*vocab : (i+1)*vocab]
			mx := maxOf(z)
			losses[i] = T(float64(mx) + math.Log(sumExpShift(z, mx)) - float64(z[targets[i]]))
		}
	})
}

// crossEntropyBackward: ∂loss_i/∂z_ij = softmax(z_i)_j − [j = t_i], times scale:
// one exp per element, written into dz and then scaled by scale/Σ. Each element
// is read before it is written, so dlogits may alias logits.
func crossEntropyBackward[T float](dlogits, logits []T, targets []int32, vocab int, scale T) {
	parallelFor(len(targets), 25*vocab, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			z, dz := logits[i*vocab:(i+1)*vocab], dlogits[i*vocab:(i+1)*vocab]
			s := expShiftSum(dz, z, maxOf(z))
			mulScalar(dz, T(float64(scale)/s))
			dz[targets[i]] -= scale
		}
	})
}

// ---- AdamW (Loshchilov & Hutter 2019), as torch.optim.AdamW computes it ----

// adamw follows torch's single-tensor AdamW step:
//
//	p *= 1 − lr·wd
//	m = lerp(m, g, 1 − β1)            (m + (1−β1)·(g − m))
//	v = v·β2 + (1 − β2)·g²
//	p −= lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + eps)
//
// the scalars computed in float64 on the host, as Python does, then rounded to T.
// The two divisions per element stay (multiplying by 1/sqrt(1 − β2^t) instead
// is a third faster but an ulp off torch and the CUDA kernel, which the kernel
// tests hold to the same bits).
func adamw[T float](p, g, m, v []T, c device.AdamWConfig) {
	decay := T(1 - c.LR*c.WeightDecay)
	b1, b2 := T(1-c.Beta1), T(c.Beta2)
	omb2 := T(1 - c.Beta2)
	stepSize := T(c.LR / (1 - math.Pow(c.Beta1, float64(c.Step))))
	bc2Sqrt := T(math.Sqrt(1 - math.Pow(c.Beta2, float64(c.Step))))
	eps := T(c.Eps)
	parallelFor(len(p), 30, func(lo, hi int) {
		p := p[lo:hi]
		g, m, v := g[lo:hi][:len(p)], m[lo:hi][:len(p)], v[lo:hi][:len(p)] // one bounds check, not four per element
		for i, pi := range p {
			gi, mi := g[i], m[i]
			mi += b1 * (gi - mi)
			vi := v[i]*b2 + omb2*(gi*gi)
			m[i], v[i] = mi, vi
			denom := T(math.Sqrt(float64(vi)))/bc2Sqrt + eps
			p[i] = pi*decay - stepSize*mi/denom
		}
	})
}
