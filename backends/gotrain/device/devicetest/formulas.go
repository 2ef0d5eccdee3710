package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// testForwardFormulas checks forwards against plain formulas written
// independently of any device (agreement with the reference alone would not catch
// a bug both share). Tolerances are float32's: the formulas run in float64.
func testForwardFormulas(t *testing.T, d device.Device) {
	rng := rand.New(rand.NewPCG(3, 4))

	t.Run("rmsnorm", func(t *testing.T) {
		rows, dim, eps := 2, 6, 1e-5
		x, w := Randoms(rng, rows*dim, 1), Randoms(rng, dim, 1)
		out, rstd := Alloc(t, d, rows*dim), Alloc(t, d, rows)
		d.RMSNormForward(out, rstd, Write(t, d, x), Write(t, d, w), rows, dim, float32(eps))
		want := make([]float64, rows*dim)
		for r := range rows {
			ms := 0.0
			for j := range dim {
				ms += x[r*dim+j] * x[r*dim+j] / float64(dim)
			}
			for j := range dim {
				want[r*dim+j] = x[r*dim+j] / math.Sqrt(ms+float64(float32(eps))) * w[j]
			}
		}
		AssertClose(t, want, Read(t, d, out), TolRow, "rmsnorm")
	})

	t.Run("rope", func(t *testing.T) {
		// Hugging Face: emb = cat(freqs, freqs); x·cos(emb) + rotate_half(x)·sin(emb),
		// rotate_half(x) = cat(−x2, x1).
		s := device.RoPEShape{Batch: 1, Seq: 4, Heads: 2, HeadDim: 6, Theta: 10000}
		x := Randoms(rng, s.Len(), 1)
		y := Write(t, d, x)
		d.RoPEForward(y, s)
		half := s.HeadDim / 2
		want := make([]float64, len(x))
		for tok := range s.Seq {
			for h := range s.Heads {
				v := x[(tok*s.Heads+h)*s.HeadDim:][:s.HeadDim]
				for i := range s.HeadDim {
					freq := float64(tok) / math.Pow(s.Theta, float64(2*(i%half))/float64(s.HeadDim))
					var rot float64
					if i < half {
						rot = -v[i+half]
					} else {
						rot = v[i-half]
					}
					want[(tok*s.Heads+h)*s.HeadDim+i] = v[i]*math.Cos(freq) + rot*math.Sin(freq)
				}
			}
		}
		AssertClose(t, want, Read(t, d, y), TolElementwise, "rope")
	})

	t.Run("attention", func(t *testing.T) {
		for _, s := range []device.AttnShape{
			{Batch: 2, Seq: 4, Heads: 4, KVHeads: 2, HeadDim: 3},
			{Batch: 2, Seq: 2*attnBlock + 3, Heads: 4, KVHeads: 2, HeadDim: 3}, // three of the cpu's query blocks
		} {
			q, k, v := Randoms(rng, s.QLen(), 1), Randoms(rng, s.KVLen(), 1), Randoms(rng, s.KVLen(), 1)
			out, lse := Alloc(t, d, s.QLen()), Alloc(t, d, s.LSELen())
			d.AttentionForward(out, lse, Write(t, d, q), Write(t, d, k), Write(t, d, v), s)
			wantOut, wantLSE := NaiveAttention(q, k, v, s)
			AssertClose(t, wantOut, Read(t, d, out), TolAttention, fmt.Sprintf("attention output, seq %d", s.Seq))
			AssertClose(t, wantLSE, Read(t, d, lse), TolAttention, fmt.Sprintf("attention log-sum-exp, seq %d", s.Seq))
		}
	})

	t.Run("swiglu", func(t *testing.T) {
		g, u := Randoms(rng, 5, 3), Randoms(rng, 5, 1)
		out := Alloc(t, d, 5)
		d.SwiGLUForward(out, Write(t, d, g), Write(t, d, u))
		want := make([]float64, 5)
		for i := range g {
			want[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		AssertClose(t, want, Read(t, d, out), TolElementwise, "swiglu")
	})

	t.Run("cross-entropy", func(t *testing.T) {
		vocab, targets := 6, []int32{5, 0, 2}
		z := Randoms(rng, len(targets)*vocab, 3)
		losses := Alloc(t, d, len(targets))
		d.CrossEntropyForward(losses, Write(t, d, z), targets, vocab)
		want := make([]float64, len(targets))
		for i, tg := range targets {
			s := 0.0
			for j := range vocab {
				s += math.Exp(z[i*vocab+j])
			}
			want[i] = -math.Log(math.Exp(z[i*vocab+int(tg)]) / s)
		}
		AssertClose(t, want, Read(t, d, losses), TolRow, "cross-entropy")
	})

	t.Run("embedding", func(t *testing.T) {
		table := Randoms(rng, 4*2, 1)
		out := Alloc(t, d, 3*2)
		d.EmbeddingForward(out, Write(t, d, table), []int32{3, 3, 0}, 2)
		assert.Equal(t, []float64{table[6], table[7], table[6], table[7], table[0], table[1]}, Read(t, d, out))
	})
	sync(t, d)
}

// NaiveAttention is attention as PyTorch's eager code writes it: repeat the kv
// heads, full score matrix, −inf above the diagonal, softmax, times v.
func NaiveAttention(q, k, v []float64, s device.AttnShape) (out, lse []float64) {
	n, d, rep := s.Seq, s.HeadDim, s.Heads/s.KVHeads
	out, lse = make([]float64, s.QLen()), make([]float64, s.LSELen())
	for b := range s.Batch {
		for h := range s.Heads {
			g := h / rep
			for i := range n {
				scores := make([]float64, n)
				for j := range n {
					scores[j] = math.Inf(-1)
					if j <= i {
						scores[j] = 0
						for c := range d {
							scores[j] += q[((b*n+i)*s.Heads+h)*d+c] * k[((b*n+j)*s.KVHeads+g)*d+c]
						}
						scores[j] /= math.Sqrt(float64(d))
					}
				}
				z := 0.0
				for _, sc := range scores {
					z += math.Exp(sc)
				}
				lse[(b*s.Heads+h)*n+i] = math.Log(z)
				for j := range n {
					p := math.Exp(scores[j]) / z
					for c := range d {
						out[((b*n+i)*s.Heads+h)*d+c] += p * v[((b*n+j)*s.KVHeads+g)*d+c]
					}
				}
			}
		}
	}
	return out, lse
}

// testCausal changes the last position's keys and values: no earlier output may
// change, bit for bit.
func testCausal(t *testing.T, d device.Device) {
	rng := rand.New(rand.NewPCG(5, 6))
	s := device.AttnShape{Batch: 1, Seq: 6, Heads: 4, KVHeads: 2, HeadDim: 4}
	q, k, v := Randoms(rng, s.QLen(), 1), Randoms(rng, s.KVLen(), 1), Randoms(rng, s.KVLen(), 1)
	run := func(k, v []float64) []float64 {
		out, lse := Alloc(t, d, s.QLen()), Alloc(t, d, s.LSELen())
		d.AttentionForward(out, lse, Write(t, d, q), Write(t, d, k), Write(t, d, v), s)
		return Read(t, d, out)
	}
	before := run(k, v)
	last := (s.Seq - 1) * s.KVHeads * s.HeadDim
	for i := last; i < len(k); i++ {
		k[i] += 1
		v[i] -= 1
	}
	after := run(k, v)
	sync(t, d)
	cut := (s.Seq - 1) * s.Heads * s.HeadDim
	assert.Equal(t, before[:cut], after[:cut], "outputs before the last position")
	assert.NotEqual(t, before[cut:], after[cut:], "the last position's output")
}

func testMatMul(t *testing.T, d device.Device) {
	rng := rand.New(rand.NewPCG(10, 11))
	for _, sh := range []struct{ m, n, k int }{{3, 4, 5}, {17, 1, 33}, {1, 29, 2}} {
		m, n, k := sh.m, sh.n, sh.k
		for _, tc := range []struct {
			transA, transB bool
			alpha, beta    float32
		}{
			{false, false, 1, 0}, {true, false, 1, 0}, {false, true, 1, 0}, {true, true, 1, 0},
			{false, true, 0.5, 1}, {true, false, -2, 0.25},
		} {
			t.Run(fmt.Sprintf("%dx%dx%d,tA=%v,tB=%v,alpha=%v,beta=%v", m, n, k, tc.transA, tc.transB, tc.alpha, tc.beta), func(t *testing.T) {
				a, b, c := Randoms(rng, m*k, 1), Randoms(rng, k*n, 1), Randoms(rng, m*n, 1)
				at := func(i, l int) float64 { // op(A)[i,l]
					if tc.transA {
						return a[l*m+i]
					}
					return a[i*k+l]
				}
				bt := func(l, j int) float64 { // op(B)[l,j]
					if tc.transB {
						return b[j*k+l]
					}
					return b[l*n+j]
				}
				want := make([]float64, m*n)
				for i := range m {
					for j := range n {
						s := 0.0
						for l := range k {
							s += at(i, l) * bt(l, j)
						}
						want[i*n+j] = float64(tc.alpha)*s + float64(tc.beta)*c[i*n+j]
					}
				}
				cb := Write(t, d, c)
				d.MatMul(cb, Write(t, d, a), Write(t, d, b), tc.transA, tc.transB, m, n, k, tc.alpha, tc.beta)
				AssertClose(t, want, Read(t, d, cb), TolGEMM, d.Name())
			})
		}
	}
	t.Run("k=0 scales C by beta", func(t *testing.T) {
		c := Write(t, d, []float64{1, 2, 3, 4})
		d.MatMul(c, Alloc(t, d, 0), Alloc(t, d, 0), false, false, 2, 2, 0, 1, 0.5)
		assert.Equal(t, []float64{0.5, 1, 1.5, 2}, Read(t, d, c))
	})
	t.Run("beta=0 ignores NaN in C", func(t *testing.T) {
		c := Write(t, d, []float64{math.NaN()})
		d.MatMul(c, Write(t, d, []float64{2}), Write(t, d, []float64{3}), false, false, 1, 1, 1, 1, 0)
		assert.Equal(t, []float64{6}, Read(t, d, c))
	})
	sync(t, d)
}

// testAdamW checks the update against the textbook algorithm (bias-corrected
// moments, decoupled decay) computed here in float64, and step 1 against its
// closed form: m̂ = g, v̂ = g², so p₁ = p₀·(1 − lr·wd) − lr·g/(|g| + eps).
func testAdamW(t *testing.T, d device.Device) {
	rng := rand.New(rand.NewPCG(12, 13))
	n := 1001
	p0, grads := Randoms(rng, n, 1), make([][]float64, 3)
	for i := range grads {
		grads[i] = Randoms(rng, n, 1)
	}
	cfg := device.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	p, m, v := slices.Clone(p0), make([]float64, n), make([]float64, n)
	want := make([][]float64, len(grads))
	for s, g := range grads {
		step := float64(s + 1)
		for i := range p {
			p[i] -= cfg.LR * cfg.WeightDecay * p[i]
			m[i] = cfg.Beta1*m[i] + (1-cfg.Beta1)*g[i]
			v[i] = cfg.Beta2*v[i] + (1-cfg.Beta2)*g[i]*g[i]
			mhat, vhat := m[i]/(1-math.Pow(cfg.Beta1, step)), v[i]/(1-math.Pow(cfg.Beta2, step))
			p[i] -= cfg.LR * mhat / (math.Sqrt(vhat) + cfg.Eps)
		}
		want[s] = slices.Clone(p)
	}
	closed := make([]float64, n)
	for i := range closed {
		closed[i] = p0[i]*(1-cfg.LR*cfg.WeightDecay) - cfg.LR*grads[0][i]/(math.Abs(grads[0][i])+cfg.Eps)
	}
	AssertClose(t, closed, want[0], 1e-12, "closed form of step 1")

	pb, mb, vb := Write(t, d, p0), Alloc(t, d, n), Alloc(t, d, n)
	for s, g := range grads {
		c := cfg
		c.Step = s + 1
		d.AdamW(pb, Write(t, d, g), mb, vb, c)
		AssertClose(t, want[s], Read(t, d, pb), 1e-6, fmt.Sprintf("%s step %d", d.Name(), c.Step))
	}
	sync(t, d)
}
