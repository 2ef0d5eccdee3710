package kernels_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	. "github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
)

// Every kernel against the cpu device's op on odd shapes, under both schedule
// orders. Tolerances, per op (|got − want| ≤ atol + rtol·|want|):
//   - bit for bit: zero, copy, add, scale, casts, embedding forward and backward,
//     RMSNorm dweight's order, RoPE (same tables, same operations), AdamW.
//   - sums: rtol 1e-5 (float partials in a tree against float64).
//   - RMSNorm, SwiGLU, cross-entropy: rtol 2e-5, atol 1e-6 (float vs float64
//     row reductions and exp).
//   - attention: rtol 1e-4, atol 2e-5 (online softmax in float, different
//     summation order than the cpu's GEMMs).

// ref is a cpu reference device.
type ref struct {
	t *testing.T
	d device.Device
}

func newRef(t *testing.T) ref { return ref{t, cpu.New(cpu.Options{})} }

// buf allocates a cpu buffer holding x.
func (r ref) buf(x []float32) device.Buffer {
	b, err := r.d.Alloc(len(x), device.Other)
	require.NoError(r.t, err)
	r.d.CopyFromHost(b, x)
	return b
}

// host reads a cpu buffer.
func (r ref) host(b device.Buffer) []float32 {
	x := make([]float32, b.Len())
	r.d.CopyToHost(x, b)
	return x
}

func randn(rng *rand.Rand, n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * scale)
	}
	return x
}

func tokens(rng *rand.Rand, n, vocab int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(rng.IntN(vocab))
	}
	return x
}

func grid1(n int) [3]int { return [3]int{n, 1, 1} }

func TestElementwise(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 7, 255, 256, 1000, 70001} {
				t.Run(name("n%d", n), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(n), 1))
					r := newRef(t)
					x, y := randn(rng, n, 1), randn(rng, n, 3)
					n64 := int64(n)
					// A grid smaller than n/256 exercises the grid-stride loop.
					g := grid1(max(1, GridStride(n64)/3))

					got := d.run(t, &Zero, g, 0, [][]byte{f32b(x)}, buf(0), n64)
					requireClose(t, "zero", make([]float32, n), bf32(got[0]), 0, 0)

					got = d.run(t, &Copy, g, 0, [][]byte{f32b(y), f32b(x)}, buf(0), buf(1), n64)
					requireClose(t, "copy", x, bf32(got[0]), 0, 0)

					dst := r.buf(y)
					r.d.Add(dst, r.buf(x), -0.37)
					got = d.run(t, &Add, g, 0, [][]byte{f32b(y), f32b(x)}, buf(0), buf(1), float32(-0.37), n64)
					requireClose(t, "add", r.host(dst), bf32(got[0]), 0, 0)

					// In place: dst += alpha·dst.
					dst = r.buf(y)
					r.d.Add(dst, dst, 2.5)
					got = d.run(t, &Add, g, 0, [][]byte{f32b(y)}, buf(0), buf(0), float32(2.5), n64)
					requireClose(t, "add in place", r.host(dst), bf32(got[0]), 0, 0)

					sx := r.buf(x)
					r.d.Scale(sx, 1.0/3)
					got = d.run(t, &Scale, g, 0, [][]byte{f32b(x)}, buf(0), float32(1.0/3), n64)
					requireClose(t, "scale", r.host(sx), bf32(got[0]), 0, 0)
				})
			}
		})
	}
}

// bf16 is the reference rounding: nearest even, NaN quiet.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestCasts(t *testing.T) {
	special := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 1.00390625, 1.01171875, 3.4e38, -3.4e38,
		float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()), 1e-40, -1e-45, 65504, 1.0000001}
	rng := rand.New(rand.NewPCG(3, 4))
	x := append(special, randn(rng, 997, 100)...)
	n := int64(len(x))
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			got := d.run(t, &CastF32ToBF16, grid1(GridStride(n)), 0, [][]byte{make([]byte, 2*n), f32b(x)}, buf(0), buf(1), n)
			bits := got[0]
			for i, v := range x {
				g := uint16(bits[2*i]) | uint16(bits[2*i+1])<<8
				require.Equal(t, bf16(v), g, "element %d (%v)", i, v)
			}
			got = d.run(t, &CastBF16ToF32, grid1(GridStride(n)), 0, [][]byte{make([]byte, 4*n), bits}, buf(0), buf(1), n)
			back := bf32(got[0])
			for i := range x {
				g := uint16(bits[2*i]) | uint16(bits[2*i+1])<<8
				require.Equal(t, uint32(g)<<16, math.Float32bits(back[i]), "element %d", i)
			}
		})
	}
}

func TestSums(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 33, 256, 4097, 300001} {
				rng := rand.New(rand.NewPCG(uint64(n), 9))
				r := newRef(t)
				x := randn(rng, n, 1)
				xb := r.buf(x)
				for sq, want := range []float64{r.d.Sum(xb), r.d.SumSquares(xb)} {
					parts := SumGrid(int64(n))
					got := d.run(t, &SumPartials, grid1(parts), 0, [][]byte{make([]byte, 4*parts), f32b(x)},
						buf(0), buf(1), int64(n), int32(sq))
					partials := bf32(got[0])
					host := 0.0
					for _, p := range partials {
						host += float64(p)
					}
					require.InDelta(t, want, host, 1e-5*math.Max(1, math.Abs(want)), "n=%d squares=%d partials on the host", n, sq)
					got = d.run(t, &SumFinish, grid1(1), 0, [][]byte{make([]byte, 4), got[0]}, buf(0), buf(1), int32(parts))
					require.InDelta(t, want, float64(bf32(got[0])[0]), 1e-5*math.Max(1, math.Abs(want)), "n=%d squares=%d finished", n, sq)
				}
			}
		})
	}
}

func TestEmbedding(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range []struct{ ntok, vocab, dim int }{{1, 1, 1}, {13, 5, 7}, {70, 11, 300}, {5, 1000, 257}} {
				t.Run(name("%dx%dx%d", s.ntok, s.vocab, s.dim), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(s.ntok), uint64(s.dim)))
					r := newRef(t)
					table, tok := randn(rng, s.vocab*s.dim, 1), tokens(rng, s.ntok, s.vocab)
					out := r.buf(make([]float32, s.ntok*s.dim))
					r.d.EmbeddingForward(out, r.buf(table), tok, s.dim)
					got := d.run(t, &EmbeddingForward, grid1(s.ntok), 0,
						[][]byte{make([]byte, 4*s.ntok*s.dim), f32b(table), i32b(tok)},
						buf(0), buf(1), buf(2), int32(s.ntok), int32(s.dim))
					requireClose(t, "forward", r.host(out), bf32(got[0]), 0, 0)

					dtable, dout := randn(rng, s.vocab*s.dim, 1), randn(rng, s.ntok*s.dim, 1)
					dt := r.buf(dtable)
					r.d.EmbeddingBackward(dt, r.buf(dout), tok, s.dim)
					got = d.run(t, &EmbeddingBackward, grid1(CeilDiv(s.dim, ElemBlock)), 0,
						[][]byte{f32b(dtable), f32b(dout), i32b(tok)}, buf(0), buf(1), buf(2), int32(s.ntok), int32(s.dim))
					requireClose(t, "backward", r.host(dt), bf32(got[0]), 0, 0)
				})
			}
		})
	}
}

func TestRMSNorm(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range []struct{ rows, dim int }{{1, 1}, {3, 7}, {17, 255}, {5, 1000}, {2, 2049}} {
				t.Run(name("%dx%d", s.rows, s.dim), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(s.rows), uint64(s.dim)))
					r := newRef(t)
					n := s.rows * s.dim
					x, w := randn(rng, n, 2), randn(rng, s.dim, 1)
					out, rstd := r.buf(make([]float32, n)), r.buf(make([]float32, s.rows))
					r.d.RMSNormForward(out, rstd, r.buf(x), r.buf(w), s.rows, s.dim, 1e-5)
					got := d.run(t, &RMSNormForward, grid1(s.rows), 0,
						[][]byte{make([]byte, 4*n), make([]byte, 4*s.rows), f32b(x), f32b(w)},
						buf(0), buf(1), buf(2), buf(3), int32(s.rows), int32(s.dim), float32(1e-5))
					requireClose(t, "out", r.host(out), bf32(got[0]), 2e-5, 1e-6)
					requireClose(t, "rstd", r.host(rstd), bf32(got[1]), 2e-5, 1e-6)
					got = d.run(t, &RMSNormForward, grid1(s.rows), 0,
						[][]byte{f32b(x), make([]byte, 4*s.rows), f32b(w)},
						buf(0), buf(1), buf(0), buf(2), int32(s.rows), int32(s.dim), float32(1e-5))
					requireClose(t, "out in place of x", r.host(out), bf32(got[0]), 2e-5, 1e-6)

					// Backward from the reference's rstd, so dw's column sums compare exactly.
					rs := r.host(rstd)
					dx0, dw0, dy := randn(rng, n, 1), randn(rng, s.dim, 1), randn(rng, n, 1)
					dx, dw := r.buf(dx0), r.buf(dw0)
					r.d.RMSNormBackward(dx, dw, r.buf(dy), r.buf(x), r.buf(w), rstd, s.rows, s.dim)
					got = d.run(t, &RMSNormBackwardDx, grid1(s.rows), 0,
						[][]byte{f32b(dx0), f32b(dy), f32b(x), f32b(w), f32b(rs)},
						buf(0), buf(1), buf(2), buf(3), buf(4), int32(s.rows), int32(s.dim))
					requireClose(t, "dx", r.host(dx), bf32(got[0]), 2e-5, 2e-5)
					got = d.run(t, &RMSNormBackwardDw, grid1(CeilDiv(s.dim, ElemBlock)), 0,
						[][]byte{f32b(dw0), f32b(dy), f32b(x), f32b(rs)},
						buf(0), buf(1), buf(2), buf(3), int32(s.rows), int32(s.dim))
					requireClose(t, "dweight", r.host(dw), bf32(got[0]), 0, 0)
				})
			}
		})
	}
}

// ropeTable is the cpu device's table: float64, rounded once.
func ropeTable(s device.RoPEShape) (cos, sin []float32) {
	half := s.HeadDim / 2
	cos, sin = make([]float32, s.Seq*half), make([]float32, s.Seq*half)
	for i := range half {
		inv := math.Pow(s.Theta, -float64(2*i)/float64(s.HeadDim))
		for t := range s.Seq {
			sn, cs := math.Sincos(float64(t) * inv)
			cos[t*half+i], sin[t*half+i] = float32(cs), float32(sn)
		}
	}
	return cos, sin
}

func TestRoPE(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range []device.RoPEShape{
				{Batch: 1, Seq: 1, Heads: 1, HeadDim: 2, Theta: 10000},
				{Batch: 2, Seq: 5, Heads: 3, HeadDim: 6, Theta: 10000},
				{Batch: 3, Seq: 37, Heads: 4, HeadDim: 64, Theta: 500000},
			} {
				t.Run(name("%d-%d-%d-%d", s.Batch, s.Seq, s.Heads, s.HeadDim), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(s.Seq), uint64(s.HeadDim)))
					r := newRef(t)
					x := randn(rng, s.Len(), 1)
					cos, sin := ropeTable(s)
					for _, sign := range []float32{1, -1} {
						xb := r.buf(x)
						if sign > 0 {
							r.d.RoPEForward(xb, s)
						} else {
							r.d.RoPEBackward(xb, s)
						}
						n := int64(s.Batch * s.Seq * s.Heads * s.HeadDim / 2)
						got := d.run(t, &RoPE, grid1(GridStride(n)), 0, [][]byte{f32b(x), f32b(cos), f32b(sin)},
							buf(0), buf(1), buf(2), int32(s.Batch*s.Seq), int32(s.Seq), int32(s.Heads), int32(s.HeadDim), sign)
						requireClose(t, name("sign %v", sign), r.host(xb), bf32(got[0]), 0, 0)
					}
				})
			}
		})
	}
}

func TestSwiGLU(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 9, 1000, 33333} {
				rng := rand.New(rand.NewPCG(uint64(n), 5))
				r := newRef(t)
				gate, up := randn(rng, n, 3), randn(rng, n, 1)
				out := r.buf(make([]float32, n))
				r.d.SwiGLUForward(out, r.buf(gate), r.buf(up))
				g := grid1(GridStride(int64(n)))
				got := d.run(t, &SwiGLUForward, g, 0, [][]byte{make([]byte, 4*n), f32b(gate), f32b(up)},
					buf(0), buf(1), buf(2), int64(n))
				requireClose(t, "out", r.host(out), bf32(got[0]), 2e-5, 1e-6)
				got = d.run(t, &SwiGLUForward, g, 0, [][]byte{f32b(gate), f32b(up)}, buf(1), buf(0), buf(1), int64(n))
				requireClose(t, "out in place of up", r.host(out), bf32(got[1]), 2e-5, 1e-6)

				dg0, du0, dy := randn(rng, n, 1), randn(rng, n, 1), randn(rng, n, 1)
				dg, du := r.buf(dg0), r.buf(du0)
				r.d.SwiGLUBackward(dg, du, r.buf(dy), r.buf(gate), r.buf(up))
				got = d.run(t, &SwiGLUBackward, g, 0, [][]byte{f32b(dg0), f32b(du0), f32b(dy), f32b(gate), f32b(up)},
					buf(0), buf(1), buf(2), buf(3), buf(4), int64(n))
				requireClose(t, "dgate", r.host(dg), bf32(got[0]), 2e-5, 1e-6)
				requireClose(t, "dup", r.host(du), bf32(got[1]), 2e-5, 1e-6)
			}
		})
	}
}

func TestCrossEntropy(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range []struct{ rows, vocab int }{{1, 1}, {3, 5}, {7, 1000}, {2, 50257}} {
				t.Run(name("%dx%d", s.rows, s.vocab), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(s.rows), uint64(s.vocab)))
					r := newRef(t)
					n := s.rows * s.vocab
					logits, tgt := randn(rng, n, 4), tokens(rng, s.rows, s.vocab)
					losses := r.buf(make([]float32, s.rows))
					lb := r.buf(logits)
					r.d.CrossEntropyForward(losses, lb, tgt, s.vocab)
					got := d.run(t, &CrossEntropyForward, grid1(s.rows), 0,
						[][]byte{make([]byte, 4*s.rows), f32b(logits), i32b(tgt)}, buf(0), buf(1), buf(2), int32(s.rows), int32(s.vocab))
					requireClose(t, "losses", r.host(losses), bf32(got[0]), 2e-5, 2e-6)

					scale := float32(1) / float32(s.rows)
					r.d.CrossEntropyBackward(lb, lb, tgt, s.vocab, scale) // in place on the reference too
					want := r.host(lb)
					got = d.run(t, &CrossEntropyBackward, grid1(s.rows), 0,
						[][]byte{make([]byte, 4*n), f32b(logits), i32b(tgt)}, buf(0), buf(1), buf(2), int32(s.rows), int32(s.vocab), scale)
					requireClose(t, "dlogits", want, bf32(got[0]), 2e-5, 1e-7)
					got = d.run(t, &CrossEntropyBackward, grid1(s.rows), 0,
						[][]byte{f32b(logits), i32b(tgt)}, buf(0), buf(0), buf(1), int32(s.rows), int32(s.vocab), scale)
					requireClose(t, "dlogits in place", want, bf32(got[0]), 2e-5, 1e-7)
					// The fused kernel: both outputs from one launch, separate and in place.
					got = d.run(t, &CrossEntropyFused, grid1(s.rows), 0,
						[][]byte{make([]byte, 4*s.rows), make([]byte, 4*n), f32b(logits), i32b(tgt)},
						buf(0), buf(1), buf(2), buf(3), int32(s.rows), int32(s.vocab), scale)
					requireClose(t, "fused losses", r.host(losses), bf32(got[0]), 2e-5, 2e-6)
					requireClose(t, "fused dlogits", want, bf32(got[1]), 2e-5, 1e-7)
					got = d.run(t, &CrossEntropyFused, grid1(s.rows), 0,
						[][]byte{make([]byte, 4*s.rows), f32b(logits), i32b(tgt)},
						buf(0), buf(1), buf(1), buf(2), int32(s.rows), int32(s.vocab), scale)
					requireClose(t, "fused losses in place", r.host(losses), bf32(got[0]), 2e-5, 2e-6)
					requireClose(t, "fused dlogits in place", want, bf32(got[1]), 2e-5, 1e-7)
				})
			}
		})
	}
}

func TestAdamW(t *testing.T) {
	c := device.AdamWConfig{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 7}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, n := range []int{1, 77, 10007} {
				rng := rand.New(rand.NewPCG(uint64(n), 11))
				r := newRef(t)
				p, g, m := randn(rng, n, 1), randn(rng, n, 1), randn(rng, n, 0.1)
				v := randn(rng, n, 0.1)
				for i := range v {
					v[i] *= v[i]
				}
				pb, mb, vb := r.buf(p), r.buf(m), r.buf(v)
				r.d.AdamW(pb, r.buf(g), mb, vb, c)
				got := d.run(t, &AdamW, grid1(GridStride(int64(n))), 0, [][]byte{f32b(p), f32b(g), f32b(m), f32b(v)},
					buf(0), buf(1), buf(2), buf(3), int64(n),
					float32(1-c.LR*c.WeightDecay), float32(1-c.Beta1), float32(c.Beta2), float32(1-c.Beta2),
					float32(c.LR/(1-math.Pow(c.Beta1, float64(c.Step)))), float32(math.Sqrt(1-math.Pow(c.Beta2, float64(c.Step)))),
					float32(c.Eps))
				requireClose(t, "params", r.host(pb), bf32(got[0]), 0, 0)
				requireClose(t, "m", r.host(mb), bf32(got[2]), 0, 0)
				requireClose(t, "v", r.host(vb), bf32(got[3]), 0, 0)
			}
		})
	}
}

func TestAttention(t *testing.T) {
	shapes := []device.AttnShape{
		{Batch: 1, Seq: 1, Heads: 1, KVHeads: 1, HeadDim: 1},
		{Batch: 2, Seq: 5, Heads: 2, KVHeads: 1, HeadDim: 3},
		{Batch: 1, Seq: 37, Heads: 4, KVHeads: 2, HeadDim: 16},
		{Batch: 2, Seq: 33, Heads: 3, KVHeads: 3, HeadDim: 64},
		{Batch: 1, Seq: 70, Heads: 2, KVHeads: 1, HeadDim: 128},
	}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range shapes {
				t.Run(name("%d-%d-%d-%d-%d", s.Batch, s.Seq, s.Heads, s.KVHeads, s.HeadDim), func(t *testing.T) {
					rng := rand.New(rand.NewPCG(uint64(s.Seq), uint64(s.HeadDim)))
					r := newRef(t)
					q, k, v := randn(rng, s.QLen(), 1), randn(rng, s.KVLen(), 1), randn(rng, s.KVLen(), 1)
					out, lse := r.buf(make([]float32, s.QLen())), r.buf(make([]float32, s.LSELen()))
					r.d.AttentionForward(out, lse, r.buf(q), r.buf(k), r.buf(v), s)
					scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
					shape := []any{int32(s.Batch), int32(s.Seq), int32(s.Heads), int32(s.KVHeads), int32(s.HeadDim), scale}
					got := d.run(t, &AttentionForward, [3]int{CeilDiv(s.Seq, AttnFwdTile), s.Heads, s.Batch},
						AttnFwdShared(s.HeadDim),
						[][]byte{make([]byte, 4*s.QLen()), make([]byte, 4*s.LSELen()), f32b(q), f32b(k), f32b(v)},
						append([]any{buf(0), buf(1), buf(2), buf(3), buf(4)}, shape...)...)
					requireClose(t, "out", r.host(out), bf32(got[0]), 1e-4, 2e-5)
					requireClose(t, "lse", r.host(lse), bf32(got[1]), 1e-4, 2e-5)

					// Backward from the reference's out and lse, into nonzero gradients.
					o, l := r.host(out), r.host(lse)
					dq0, dk0, dv0, dout := randn(rng, s.QLen(), 1), randn(rng, s.KVLen(), 1), randn(rng, s.KVLen(), 1),
						randn(rng, s.QLen(), 1)
					dq, dk, dv := r.buf(dq0), r.buf(dk0), r.buf(dv0)
					r.d.AttentionBackward(dq, dk, dv, r.buf(dout), r.buf(q), r.buf(k), r.buf(v), out, lse, s)
					got = d.run(t, &AttentionBackwardDq, [3]int{CeilDiv(s.Seq, AttnBwdTile), s.Heads, s.Batch},
						AttnBwdShared(s.HeadDim),
						[][]byte{f32b(dq0), f32b(dout), f32b(q), f32b(k), f32b(v), f32b(o), f32b(l)},
						append([]any{buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), buf(6)}, shape...)...)
					requireClose(t, "dq", r.host(dq), bf32(got[0]), 1e-4, 5e-5)
					got = d.run(t, &AttentionBackwardDkDv, [3]int{CeilDiv(s.Seq, AttnBwdTile), s.KVHeads, s.Batch},
						AttnBwdShared(s.HeadDim),
						[][]byte{f32b(dk0), f32b(dv0), f32b(dout), f32b(q), f32b(k), f32b(v), f32b(o), f32b(l)},
						append([]any{buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), buf(6), buf(7)}, shape...)...)
					requireClose(t, "dk", r.host(dk), bf32(got[0]), 1e-4, 5e-5)
					requireClose(t, "dv", r.host(dv), bf32(got[1]), 1e-4, 5e-5)
				})
			}
		})
	}
}
