package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// opRun runs an op's forward on the named inputs and returns its output. With dout
// non-nil it then runs the backward `passes` times into fresh zeroed gradients
// and returns them by input name.
type opRun func(d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64)

// opCase is one op under test: inputs (float32-representable, so both devices see
// the same values) and how to run it.
type opCase struct {
	name   string
	inputs map[string][]float64
	run    opRun
	// overwrites marks a backward that writes its gradient instead of adding to it.
	overwrites bool
	// dout, when set, gives the output gradient; the default is random. An op whose
	// backward only exists for one output gradient (cross-entropy: a uniform scale)
	// sets it.
	dout func(n int) []float64
}

// TestOpGradients checks every op's backward against central finite differences of
// its forward on the float64 device, checks that backward adds into gradients, and
// that the float32 device computes the same forward and backward as float64.
func TestOpGradients(t *testing.T) {
	for _, c := range opCases() {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(c.name))))
			d64 := New(Options{Float64: true})
			in64 := upload(t, d64, c.inputs)
			out, _ := c.run(d64, in64, nil, 0)
			require.NotEmpty(t, out)
			dout := randoms(rng, len(out), 1)
			if c.dout != nil {
				dout = c.dout(len(out))
			}
			_, grads := c.run(d64, in64, dout, 1)
			require.NotEmpty(t, grads)

			objective := func() float64 {
				o, _ := c.run(d64, in64, nil, 0)
				s := 0.0
				for i, v := range o {
					s += dout[i] * v
				}
				return s
			}
			for _, name := range sortedKeys(grads) {
				x := in64[name].(*buffer[float64]).data
				const h = 1e-5
				for i := range x {
					save := x[i]
					x[i] = save + h
					fp := objective()
					x[i] = save - h
					fm := objective()
					x[i] = save
					num := (fp - fm) / (2 * h)
					assert.InDelta(t, num, grads[name][i], 1e-7+1e-6*math.Abs(num),
						"d/d%s[%d]: finite difference %g, backward %g", name, i, num, grads[name][i])
				}
			}

			if !c.overwrites {
				_, twice := c.run(d64, in64, dout, 2)
				for name, g := range grads {
					for i := range g {
						assert.InDelta(t, 2*g[i], twice[name][i], 1e-12*(1+math.Abs(g[i])),
							"backward must add into d%s[%d]", name, i)
					}
				}
			}

			d32 := New(Options{})
			out32, grads32 := c.run(d32, upload(t, d32, c.inputs), dout, 1)
			assertClose(t, out, out32, 2e-6, "forward in float32")
			for name, g := range grads {
				assertClose(t, g, grads32[name], 2e-5, "d"+name+" in float32")
			}
		})
	}
}

func opCases() []opCase {
	rng := rand.New(rand.NewPCG(1, 2))
	var cases []opCase

	{
		rows, dim := 3, 8
		cases = append(cases, opCase{
			name:   "rmsnorm",
			inputs: map[string][]float64{"x": randoms(rng, rows*dim, 1), "w": around(rng, dim, 1, 0.3)},
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
				out, rstd := alloc(d, rows*dim), alloc(d, rows)
				d.RMSNormForward(out, rstd, in["x"], in["w"], rows, dim, 1e-5)
				if dout == nil {
					return read(out), nil
				}
				dx, dw := alloc(d, rows*dim), alloc(d, dim)
				for range passes {
					d.RMSNormBackward(dx, dw, write(d, dout), in["x"], in["w"], rstd, rows, dim)
				}
				return read(out), map[string][]float64{"x": read(dx), "w": read(dw)}
			},
		})
	}
	{
		vocab, dim := 5, 3
		tokens := []int32{4, 0, 4, 2, 4, 1}
		cases = append(cases, opCase{
			name:   "embedding",
			inputs: map[string][]float64{"table": randoms(rng, vocab*dim, 1)},
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
				out := alloc(d, len(tokens)*dim)
				d.EmbeddingForward(out, in["table"], tokens, dim)
				if dout == nil {
					return read(out), nil
				}
				dt := alloc(d, vocab*dim)
				for range passes {
					d.EmbeddingBackward(dt, write(d, dout), tokens, dim)
				}
				return read(out), map[string][]float64{"table": read(dt)}
			},
		})
	}
	{
		s := device.RoPEShape{Batch: 2, Seq: 5, Heads: 3, HeadDim: 4, Theta: 100}
		cases = append(cases, opCase{
			name:       "rope",
			inputs:     map[string][]float64{"x": randoms(rng, s.Len(), 1)},
			overwrites: true,
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, _ int) ([]float64, map[string][]float64) {
				y := alloc(d, s.Len())
				d.Copy(y, in["x"])
				d.RoPEForward(y, s)
				if dout == nil {
					return read(y), nil
				}
				dx := write(d, dout)
				d.RoPEBackward(dx, s)
				return read(y), map[string][]float64{"x": read(dx)}
			},
		})
	}
	for _, s := range []device.AttnShape{
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 4, HeadDim: 3},             // multi-head
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 2, HeadDim: 3},             // grouped-query
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 1, HeadDim: 3},             // multi-query
		{Batch: 1, Seq: attnBlock + 6, Heads: 2, KVHeads: 1, HeadDim: 2}, // two query blocks
	} {
		cases = append(cases, opCase{
			name: fmt.Sprintf("attention-seq%d-kv%d", s.Seq, s.KVHeads),
			inputs: map[string][]float64{
				"q": randoms(rng, s.QLen(), 1), "k": randoms(rng, s.KVLen(), 1), "v": randoms(rng, s.KVLen(), 1),
			},
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
				out, lse := alloc(d, s.QLen()), alloc(d, s.LSELen())
				d.AttentionForward(out, lse, in["q"], in["k"], in["v"], s)
				if dout == nil {
					return read(out), nil
				}
				dq, dk, dv := alloc(d, s.QLen()), alloc(d, s.KVLen()), alloc(d, s.KVLen())
				for range passes {
					d.AttentionBackward(dq, dk, dv, write(d, dout), in["q"], in["k"], in["v"], out, lse, s)
				}
				return read(out), map[string][]float64{"q": read(dq), "k": read(dk), "v": read(dv)}
			},
		})
	}
	{
		n := 12
		cases = append(cases, opCase{
			name:   "swiglu",
			inputs: map[string][]float64{"gate": randoms(rng, n, 2), "up": randoms(rng, n, 1)},
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
				out := alloc(d, n)
				d.SwiGLUForward(out, in["gate"], in["up"])
				if dout == nil {
					return read(out), nil
				}
				dg, du := alloc(d, n), alloc(d, n)
				for range passes {
					d.SwiGLUBackward(dg, du, write(d, dout), in["gate"], in["up"])
				}
				return read(out), map[string][]float64{"gate": read(dg), "up": read(du)}
			},
		})
	}
	{
		vocab := 7
		targets := []int32{3, 0, 6, 3}
		const scale = 0.37
		cases = append(cases, opCase{
			name:       "cross-entropy",
			inputs:     map[string][]float64{"logits": randoms(rng, len(targets)*vocab, 2)},
			overwrites: true,
			dout:       func(n int) []float64 { return slices.Repeat([]float64{scale}, n) },
			run: func(d device.Device, in map[string]device.Buffer, dout []float64, _ int) ([]float64, map[string][]float64) {
				losses := alloc(d, len(targets))
				d.CrossEntropyForward(losses, in["logits"], targets, vocab)
				if dout == nil {
					return read(losses), nil
				}
				dz := alloc(d, len(targets)*vocab)
				d.CrossEntropyBackward(dz, in["logits"], targets, vocab, float32(dout[0]))
				return read(losses), map[string][]float64{"logits": read(dz)}
			},
		})
	}
	{
		// A linear layer y = x·Wᵀ with its backward through MatMul, as the model
		// runs it: dx = dy·W, dW += dyᵀ·x (beta = 1 accumulates).
		rows, in, out := 4, 3, 5
		cases = append(cases, opCase{
			name:   "linear",
			inputs: map[string][]float64{"x": randoms(rng, rows*in, 1), "w": randoms(rng, out*in, 1)},
			run: func(d device.Device, b map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
				y := alloc(d, rows*out)
				d.MatMul(y, b["x"], b["w"], false, true, rows, out, in, 1, 0)
				if dout == nil {
					return read(y), nil
				}
				dx, dw, dy := alloc(d, rows*in), alloc(d, out*in), write(d, dout)
				for range passes {
					d.MatMul(dx, dy, b["w"], false, false, rows, in, out, 1, 1)
					d.MatMul(dw, dy, b["x"], true, false, out, in, rows, 1, 1)
				}
				return read(y), map[string][]float64{"x": read(dx), "w": read(dw)}
			},
		})
	}
	return cases
}

// TestOpForwardReference checks forwards against plain formulas written
// independently of ops.go (finite differences only prove backward matches forward).
func TestOpForwardReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	d := New(Options{Float64: true})

	t.Run("rmsnorm", func(t *testing.T) {
		rows, dim, eps := 2, 6, 1e-5
		x, w := randoms(rng, rows*dim, 1), randoms(rng, dim, 1)
		out, rstd := alloc(d, rows*dim), alloc(d, rows)
		d.RMSNormForward(out, rstd, write(d, x), write(d, w), rows, dim, float32(eps))
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
		assertClose(t, want, read(out), 1e-14, "rmsnorm")
	})

	t.Run("rope", func(t *testing.T) {
		// Hugging Face: emb = cat(freqs, freqs); x·cos(emb) + rotate_half(x)·sin(emb),
		// rotate_half(x) = cat(−x2, x1).
		s := device.RoPEShape{Batch: 1, Seq: 4, Heads: 2, HeadDim: 6, Theta: 10000}
		x := randoms(rng, s.Len(), 1)
		y := write(d, x)
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
		assertClose(t, want, read(y), 1e-14, "rope")
	})

	t.Run("attention", func(t *testing.T) {
		for _, s := range []device.AttnShape{
			{Batch: 2, Seq: 4, Heads: 4, KVHeads: 2, HeadDim: 3},
			{Batch: 2, Seq: 2*attnBlock + 3, Heads: 4, KVHeads: 2, HeadDim: 3}, // three query blocks
		} {
			q, k, v := randoms(rng, s.QLen(), 1), randoms(rng, s.KVLen(), 1), randoms(rng, s.KVLen(), 1)
			out, lse := alloc(d, s.QLen()), alloc(d, s.LSELen())
			d.AttentionForward(out, lse, write(d, q), write(d, k), write(d, v), s)
			wantOut, wantLSE := naiveAttention(q, k, v, s)
			assertClose(t, wantOut, read(out), 1e-13, fmt.Sprintf("attention output, seq %d", s.Seq))
			assertClose(t, wantLSE, read(lse), 1e-13, fmt.Sprintf("attention log-sum-exp, seq %d", s.Seq))
		}
	})

	t.Run("swiglu", func(t *testing.T) {
		g, u := randoms(rng, 5, 3), randoms(rng, 5, 1)
		out := alloc(d, 5)
		d.SwiGLUForward(out, write(d, g), write(d, u))
		want := make([]float64, 5)
		for i := range g {
			want[i] = g[i] / (1 + math.Exp(-g[i])) * u[i]
		}
		assertClose(t, want, read(out), 1e-15, "swiglu")
	})

	t.Run("cross-entropy", func(t *testing.T) {
		vocab, targets := 6, []int32{5, 0, 2}
		z := randoms(rng, len(targets)*vocab, 3)
		losses := alloc(d, len(targets))
		d.CrossEntropyForward(losses, write(d, z), targets, vocab)
		want := make([]float64, len(targets))
		for i, tg := range targets {
			s := 0.0
			for j := range vocab {
				s += math.Exp(z[i*vocab+j])
			}
			want[i] = -math.Log(math.Exp(z[i*vocab+int(tg)]) / s)
		}
		assertClose(t, want, read(losses), 1e-14, "cross-entropy")
	})

	t.Run("embedding", func(t *testing.T) {
		table := randoms(rng, 4*2, 1)
		out := alloc(d, 3*2)
		d.EmbeddingForward(out, write(d, table), []int32{3, 3, 0}, 2)
		assert.Equal(t, []float64{table[6], table[7], table[6], table[7], table[0], table[1]}, read(out))
	})
}

// naiveAttention is attention as PyTorch's eager code writes it: repeat the kv
// heads, full score matrix, −inf above the diagonal, softmax, times v.
func naiveAttention(q, k, v []float64, s device.AttnShape) (out, lse []float64) {
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

// TestAttentionIsCausal changes the last position's keys and values: no earlier
// output may change, bit for bit.
func TestAttentionIsCausal(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	d := New(Options{})
	s := device.AttnShape{Batch: 1, Seq: 6, Heads: 4, KVHeads: 2, HeadDim: 4}
	q, k, v := randoms(rng, s.QLen(), 1), randoms(rng, s.KVLen(), 1), randoms(rng, s.KVLen(), 1)
	run := func(k, v []float64) []float64 {
		out, lse := alloc(d, s.QLen()), alloc(d, s.LSELen())
		d.AttentionForward(out, lse, write(d, q), write(d, k), write(d, v), s)
		return read(out)
	}
	before := run(k, v)
	last := (s.Seq - 1) * s.KVHeads * s.HeadDim
	for i := last; i < len(k); i++ {
		k[i] += 1
		v[i] -= 1
	}
	after := run(k, v)
	cut := (s.Seq - 1) * s.Heads * s.HeadDim
	assert.Equal(t, before[:cut], after[:cut], "outputs before the last position")
	assert.NotEqual(t, before[cut:], after[cut:], "the last position's output")
}

func TestCrossEntropyBackwardInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	d := New(Options{})
	vocab, targets := 9, []int32{1, 8, 0}
	z := randoms(rng, len(targets)*vocab, 2)
	separate, logits := alloc(d, len(z)), write(d, z)
	d.CrossEntropyBackward(separate, logits, targets, vocab, 0.5)
	d.CrossEntropyBackward(logits, logits, targets, vocab, 0.5)
	assert.Equal(t, read(separate), read(logits))
}

func TestMatMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	m, n, k := 3, 4, 5
	for _, tc := range []struct {
		transA, transB bool
		alpha, beta    float32
	}{
		{false, false, 1, 0}, {true, false, 1, 0}, {false, true, 1, 0}, {true, true, 1, 0},
		{false, true, 0.5, 1}, {true, false, -2, 0.25},
	} {
		t.Run(fmt.Sprintf("tA=%v,tB=%v,alpha=%v,beta=%v", tc.transA, tc.transB, tc.alpha, tc.beta), func(t *testing.T) {
			a, b, c := randoms(rng, m*k, 1), randoms(rng, k*n, 1), randoms(rng, m*n, 1)
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
			for _, d := range []device.Device{New(Options{Float64: true}), New(Options{})} {
				cb := write(d, c)
				d.MatMul(cb, write(d, a), write(d, b), tc.transA, tc.transB, m, n, k, tc.alpha, tc.beta)
				assertClose(t, want, read(cb), 1e-6, d.Name())
			}
		})
	}
	t.Run("k=0 scales C by beta", func(t *testing.T) {
		d := New(Options{})
		c := write(d, []float64{1, 2, 3, 4})
		d.MatMul(c, alloc(d, 0), alloc(d, 0), false, false, 2, 2, 0, 1, 0.5)
		assert.Equal(t, []float64{0.5, 1, 1.5, 2}, read(c))
	})
}

// TestAdamW checks the update against the textbook algorithm (bias-corrected
// moments, decoupled decay) computed here in float64, and step 1 against its
// closed form: m̂ = g, v̂ = g², so p₁ = p₀·(1 − lr·wd) − lr·g/(|g| + eps).
func TestAdamW(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	n := 6
	p0, grads := randoms(rng, n, 1), make([][]float64, 3)
	for i := range grads {
		grads[i] = randoms(rng, n, 1)
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
	assertClose(t, closed, want[0], 1e-12, "closed form of step 1")

	for _, tc := range []struct {
		float64 bool
		tol     float64
	}{{true, 1e-12}, {false, 1e-6}} {
		d := New(Options{Float64: tc.float64})
		pb, mb, vb := write(d, p0), alloc(d, n), alloc(d, n)
		for s, g := range grads {
			c := cfg
			c.Step = s + 1
			d.AdamW(pb, write(d, g), mb, vb, c)
			assertClose(t, want[s], read(pb), tc.tol, fmt.Sprintf("%s step %d", d.Name(), c.Step))
		}
	}
}

func TestElementwise(t *testing.T) {
	for _, d := range []device.Device{New(Options{}), New(Options{Float64: true})} {
		t.Run(d.Name(), func(t *testing.T) {
			x := write(d, []float64{1, -2, 3, 0.5})
			y := write(d, []float64{10, 20, 30, 40})
			d.Add(y, x, 2)
			assert.Equal(t, []float64{12, 16, 36, 41}, read(y))
			d.Scale(y, 0.5)
			assert.Equal(t, []float64{6, 8, 18, 20.5}, read(y))
			assert.Equal(t, 2.5, d.Sum(x))
			assert.Equal(t, 14.25, d.SumSquares(x))
			d.Copy(y.Slice(1, 2), x.Slice(2, 2))
			assert.Equal(t, []float64{6, 3, 0.5, 20.5}, read(y))
			d.Zero(y.Slice(0, 2))
			assert.Equal(t, []float64{0, 0, 0.5, 20.5}, read(y))
			host := make([]float32, 2)
			d.CopyToHost(host, y.Slice(2, 2))
			assert.Equal(t, []float32{0.5, 20.5}, host)
			d.CopyFromHost(y.Slice(0, 2), []float32{7, 8})
			assert.Equal(t, []float64{7, 8, 0.5, 20.5}, read(y))
		})
	}
}

// ---- helpers ----

func alloc(d device.Device, n int) device.Buffer {
	b, err := d.Alloc(n, device.Other)
	if err != nil {
		panic(err)
	}
	return b
}

// write returns a new buffer holding v (exactly, on the float64 device).
func write(d device.Device, v []float64) device.Buffer {
	b := alloc(d, len(v))
	switch x := b.(type) {
	case *buffer[float64]:
		copy(x.data, v)
	case *buffer[float32]:
		for i, f := range v {
			x.data[i] = float32(f)
		}
	}
	return b
}

// read returns a buffer's elements as float64, without rounding on float64.
func read(b device.Buffer) []float64 {
	switch x := b.(type) {
	case *buffer[float64]:
		return slices.Clone(x.data)
	case *buffer[float32]:
		out := make([]float64, len(x.data))
		for i, f := range x.data {
			out[i] = float64(f)
		}
		return out
	}
	panic(fmt.Sprintf("read of %T", b))
}

func upload(t *testing.T, d device.Device, in map[string][]float64) map[string]device.Buffer {
	t.Helper()
	out := make(map[string]device.Buffer, len(in))
	for name, v := range in {
		out[name] = write(d, v)
	}
	return out
}

// randoms returns n float32-representable normal values of standard deviation std.
func randoms(rng *rand.Rand, n int, std float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(float32(rng.NormFloat64() * std))
	}
	return out
}

// around returns n float32-representable values mean ± uniform spread.
func around(rng *rand.Rand, n int, mean, spread float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(float32(mean + spread*(2*rng.Float64()-1)))
	}
	return out
}

// assertClose checks |want − got| ≤ tol·max(1, max|want|) element-wise.
func assertClose(t *testing.T, want, got []float64, tol float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	scale := 1.0
	for _, w := range want {
		scale = max(scale, math.Abs(w))
	}
	for i := range want {
		if !assert.InDelta(t, want[i], got[i], tol*scale, "%s [%d]", what, i) {
			return
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
