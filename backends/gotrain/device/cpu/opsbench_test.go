package cpu

import (
	"testing"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// BenchmarkOps times the non-GEMM ops of a training step at the sizes of
// llama-h512-l8 at seq 256, batch 4 (1024 tokens, hidden 512, intermediate 1408,
// vocab 4096, 8 heads / 4 kv heads of 64), the step BenchmarkStep in package fsdp
// times; run with -cpu 1 to compare kernels without the split over cores.
func BenchmarkOps(b *testing.B) {
	const tokens, hidden, inter, vocab, params = 1024, 512, 1408, 4096, 1 << 22
	d := New(Options{})
	attn := device.AttnShape{Batch: 4, Seq: 256, Heads: 8, KVHeads: 4, HeadDim: 64}
	targets := make([]int32, tokens)
	for i := range targets {
		targets[i] = int32(i * 31 % vocab)
	}
	for _, bc := range []struct {
		name string
		run  func(b *testing.B)
	}{
		{"AdamW", func(b *testing.B) {
			p, g, m, v := benchBuf(b, d, params), benchBuf(b, d, params), benchBuf(b, d, params), benchBuf(b, d, params)
			d.Zero(m)
			d.Zero(v)
			step := 0
			for b.Loop() {
				step++
				d.AdamW(p, g, m, v, device.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01, Step: step})
			}
		}},
		{"SwiGLUForward", func(b *testing.B) {
			out, g, u := benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter)
			for b.Loop() {
				d.SwiGLUForward(out, g, u)
			}
		}},
		{"SwiGLUBackward", func(b *testing.B) {
			dg, du, do, g, u := benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter), benchBuf(b, d, tokens*inter)
			for b.Loop() {
				d.SwiGLUBackward(dg, du, do, g, u)
			}
		}},
		{"RMSNormForward", func(b *testing.B) {
			out, rstd, x, w := benchBuf(b, d, tokens*hidden), benchBuf(b, d, tokens), benchBuf(b, d, tokens*hidden), benchBuf(b, d, hidden)
			for b.Loop() {
				d.RMSNormForward(out, rstd, x, w, tokens, hidden, 1e-5)
			}
		}},
		{"RMSNormBackward", func(b *testing.B) {
			out, rstd, x, w := benchBuf(b, d, tokens*hidden), benchBuf(b, d, tokens), benchBuf(b, d, tokens*hidden), benchBuf(b, d, hidden)
			d.RMSNormForward(out, rstd, x, w, tokens, hidden, 1e-5)
			dx, dw := benchBuf(b, d, tokens*hidden), benchBuf(b, d, hidden)
			for b.Loop() {
				d.RMSNormBackward(dx, dw, out, x, w, rstd, tokens, hidden)
			}
		}},
		{"CrossEntropyForward", func(b *testing.B) {
			losses, logits := benchBuf(b, d, tokens), benchBuf(b, d, tokens*vocab)
			for b.Loop() {
				d.CrossEntropyForward(losses, logits, targets, vocab)
			}
		}},
		{"CrossEntropyBackward", func(b *testing.B) {
			dl, logits := benchBuf(b, d, tokens*vocab), benchBuf(b, d, tokens*vocab)
			for b.Loop() {
				d.CrossEntropyBackward(dl, logits, targets, vocab, 1.0/tokens)
			}
		}},
		{"AttentionForward", func(b *testing.B) {
			out, lse := benchBuf(b, d, attn.QLen()), benchBuf(b, d, attn.LSELen())
			q, k, v := benchBuf(b, d, attn.QLen()), benchBuf(b, d, attn.KVLen()), benchBuf(b, d, attn.KVLen())
			d.Scale(q, 0.1)
			for b.Loop() {
				d.AttentionForward(out, lse, q, k, v, attn)
			}
		}},
		{"AttentionBackward", func(b *testing.B) {
			out, lse := benchBuf(b, d, attn.QLen()), benchBuf(b, d, attn.LSELen())
			q, k, v := benchBuf(b, d, attn.QLen()), benchBuf(b, d, attn.KVLen()), benchBuf(b, d, attn.KVLen())
			d.Scale(q, 0.1)
			d.AttentionForward(out, lse, q, k, v, attn)
			dq, dk, dv, do := benchBuf(b, d, attn.QLen()), benchBuf(b, d, attn.KVLen()), benchBuf(b, d, attn.KVLen()), benchBuf(b, d, attn.QLen())
			for b.Loop() {
				d.AttentionBackward(dq, dk, dv, do, q, k, v, out, lse, attn)
			}
		}},
		{"CopyFromHost", func(b *testing.B) {
			x, host := benchBuf(b, d, params), make([]float32, params)
			for b.Loop() {
				d.CopyFromHost(x, host)
			}
		}},
		{"Add", func(b *testing.B) {
			x, y := benchBuf(b, d, params), benchBuf(b, d, params)
			for b.Loop() {
				d.Add(x, y, 1e-9)
			}
		}},
		{"SumSquares", func(b *testing.B) {
			x := benchBuf(b, d, params)
			for b.Loop() {
				d.SumSquares(x)
			}
		}},
	} {
		b.Run(bc.name, bc.run)
	}
}
