//go:build cgo

package cuda

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// TestAttentionTensorCoresBF16 runs the cuda device's AttentionForward and
// AttentionBackward on bf16 tensors at head dims 64 and 128, which take the
// tensor-core kernels (the hook sees which kernel each launch is): the forward
// against devicetest.NaiveAttention in float64 on the same bf16 inputs, the
// backward against the cpu device (float64, storing bf16) from the same out and
// lse, at the bf16 suite's tolerances (TolBF16, lse TolBF16Stat), with odd sequence
// lengths and GQA ratios 1, 4 and 8; over the fakes in both schedule orders. The conformance suite's attention shapes (head dim 3)
// keep exercising the scalar bf16 kernels.
func TestAttentionTensorCoresBF16(t *testing.T) {
	shapes := []device.AttnShape{
		{Batch: 1, Seq: 70, Heads: 2, KVHeads: 2, HeadDim: 64},
		{Batch: 2, Seq: 29, Heads: 4, KVHeads: 1, HeadDim: 64},
		{Batch: 1, Seq: 41, Heads: 8, KVHeads: 1, HeadDim: 128},
		{Batch: 1, Seq: 66, Heads: 4, KVHeads: 1, HeadDim: 128},
	}
	orders := []string{"forward", "reverse"}
	if fakes.cuda == "" {
		orders = []string{"gpu"}
	}
	for _, order := range orders {
		t.Run(order, func(t *testing.T) {
			if fakes.cuda != "" {
				t.Setenv("FAKECUDA_SCHEDULE", order)
			}
			d := newTestDevice(t, Options{})
			var names []string
			d.launchHook = func(k *kernels.Kernel, _ []arg) { names = append(names, k.Name) }
			dut := devicetest.BF16(t, d)
			ref := devicetest.BF16(t, cpu.New(cpu.Options{Float64: true}))
			for _, s := range shapes {
				rng := rand.New(rand.NewPCG(uint64(s.Seq), uint64(s.HeadDim)))
				round := func(n int) []float64 {
					v := devicetest.Randoms(rng, n, 1)
					for i, x := range v {
						v[i] = float64(device.RoundBF16(float32(x)))
					}
					return v
				}
				q, k, v := round(s.QLen()), round(s.KVLen()), round(s.KVLen())
				out, lse := devicetest.Alloc(t, dut, s.QLen()), devicetest.AllocF32(t, dut, s.LSELen())
				names = names[:0]
				dut.AttentionForward(out, lse, devicetest.Write(t, dut, q), devicetest.Write(t, dut, k),
					devicetest.Write(t, dut, v), s)
				require.True(t, slices.Contains(names, kernels.AttentionForwardTC(s.HeadDim).Name),
					"%+v: launched %v, not the tensor-core kernel", s, names)
				wantOut, wantLSE := devicetest.NaiveAttention(q, k, v, s)
				devicetest.AssertClose(t, wantOut, devicetest.Read(t, dut, out), devicetest.TolBF16, fmt.Sprintf("out %+v", s))
				devicetest.AssertClose(t, wantLSE, devicetest.Read(t, dut, lse), devicetest.TolBF16Stat, fmt.Sprintf("lse %+v", s))

				// Backward from the same out (bf16) and lse on both, adding into
				// gradients that start at zero.
				o, l := devicetest.Read(t, dut, out), devicetest.Read(t, dut, lse)
				dout := round(s.QLen())
				grads := func(dev device.Device) [3][]float64 {
					w := func(v []float64) device.Buffer { return devicetest.Write(t, dev, v) }
					lb := devicetest.AllocF32(t, dev, s.LSELen())
					dev.CopyFromHost(lb, f32s(l))
					dq, dk, dv := w(make([]float64, s.QLen())), w(make([]float64, s.KVLen())), w(make([]float64, s.KVLen()))
					dev.AttentionBackward(dq, dk, dv, w(dout), w(q), w(k), w(v), w(o), lb, s)
					return [3][]float64{devicetest.Read(t, dev, dq), devicetest.Read(t, dev, dk), devicetest.Read(t, dev, dv)}
				}
				names = names[:0]
				got := grads(dut)
				wantDq, wantDkDv := kernels.AttentionBackwardTC(s.HeadDim)
				require.True(t, slices.Contains(names, wantDq.Name) && slices.Contains(names, wantDkDv.Name),
					"%+v: launched %v, not the tensor-core backward", s, names)
				want := grads(ref)
				for i, what := range []string{"dq", "dk", "dv"} {
					devicetest.AssertClose(t, want[i], got[i], devicetest.TolBF16, fmt.Sprintf("%s %+v", what, s))
				}
			}
		})
	}
}

func f32s(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}
