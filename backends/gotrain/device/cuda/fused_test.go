//go:build cgo

package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
)

// TestFusedOpsMatchCPU holds each fused op to the cpu device's sequence of plain
// ops that defines it (device.FusedOps), in fp32 (the cpu device in float64) and
// bf16 (the cpu device in float64 storing bf16), both schedule orders of the
// runner: RoPE of q and k with grouped-query heads forward and inverse, the
// residual add and RMSNorm over rows wider than a block (and not a multiple of
// it), and SwiGLU over a packed gate|up forward and backward (adding into a
// gradient that is not zero).
func TestFusedOpsMatchCPU(t *testing.T) {
	for _, order := range []string{"forward", "reverse"} {
		for _, dtype := range []device.DType{device.F32, device.BF16} {
			t.Run(fmt.Sprintf("%s/%v", order, dtype), func(t *testing.T) {
				if fakes.cuda != "" {
					t.Setenv("FAKECUDA_SCHEDULE", order)
				}
				d := newTestDevice(t, Options{})
				var dut, ref device.Device = d, cpu.New(cpu.Options{Float64: true})
				tolEW, tolRow, tolStat := devicetest.TolElementwise, devicetest.TolRow, devicetest.TolRow
				round := func(v []float64) []float64 {
					for i := range v {
						v[i] = float64(float32(v[i]))
					}
					return v
				}
				if dtype == device.BF16 {
					dut, ref = devicetest.BF16(t, d), devicetest.BF16(t, ref)
					tolEW, tolRow, tolStat = devicetest.TolBF16, devicetest.TolBF16, devicetest.TolBF16Stat
					round = func(v []float64) []float64 {
						for i := range v {
							v[i] = float64(device.RoundBF16(float32(v[i])))
						}
						return v
					}
				}
				rng := rand.New(rand.NewPCG(24, uint64(dtype)))
				rnd := func(n int) []float64 { return round(devicetest.Randoms(rng, n, 1)) }

				// RoPE of q (4 heads) and k (2 kv heads) in one launch.
				sq := device.RoPEShape{Batch: 2, Seq: 5, Heads: 4, HeadDim: 8, Theta: 10000}
				sk := sq
				sk.Heads = 2
				for _, inverse := range []bool{false, true} {
					q, k := rnd(sq.Len()), rnd(sk.Len())
					rq, rk := devicetest.Write(t, ref, q), devicetest.Write(t, ref, k)
					if inverse {
						ref.RoPEBackward(rq, sq)
						ref.RoPEBackward(rk, sk)
					} else {
						ref.RoPEForward(rq, sq)
						ref.RoPEForward(rk, sk)
					}
					gq, gk := devicetest.Write(t, dut, q), devicetest.Write(t, dut, k)
					d.RoPEQK(gq, gk, sq, sk, inverse)
					what := fmt.Sprintf("RoPEQK inverse=%v", inverse)
					devicetest.AssertClose(t, devicetest.Read(t, ref, rq), devicetest.Read(t, dut, gq), tolEW, what+" q")
					devicetest.AssertClose(t, devicetest.Read(t, ref, rk), devicetest.Read(t, dut, gk), tolEW, what+" k")
				}

				// The residual add and RMSNorm: x += resid, out = RMSNorm(x).
				const rows, dim = 3, 300
				x, resid, w := rnd(rows*dim), rnd(rows*dim), round(devicetest.Around(rng, dim, 1, 0.5))
				rx, rr, rw := devicetest.Write(t, ref, x), devicetest.Write(t, ref, resid), devicetest.Write(t, ref, w)
				ro, rs := devicetest.Alloc(t, ref, rows*dim), devicetest.AllocF32(t, ref, rows)
				ref.Add(rx, rr, 1)
				ref.RMSNormForward(ro, rs, rx, rw, rows, dim, 1e-5)
				gx, gr, gw := devicetest.Write(t, dut, x), devicetest.Write(t, dut, resid), devicetest.Write(t, dut, w)
				gout, gs := devicetest.Alloc(t, dut, rows*dim), devicetest.AllocF32(t, dut, rows)
				d.ResidualRMSNorm(gout, gs, gx, gr, gw, rows, dim, 1e-5)
				devicetest.AssertClose(t, devicetest.Read(t, ref, rx), devicetest.Read(t, dut, gx), tolEW, "ResidualRMSNorm sum")
				devicetest.AssertClose(t, devicetest.Read(t, ref, ro), devicetest.Read(t, dut, gout), tolRow, "ResidualRMSNorm out")
				devicetest.AssertClose(t, devicetest.Read(t, ref, rs), devicetest.Read(t, dut, gs), tolStat, "ResidualRMSNorm rstd")

				// SwiGLU over gu = [gate | up] per row, forward and backward.
				const n, inter = 3, 37
				gu, dy, dgu0 := rnd(2*n*inter), rnd(n*inter), rnd(2*n*inter)
				split := func(v []float64) (a, b []float64) {
					for r := range n {
						a = append(a, v[2*r*inter:(2*r+1)*inter]...)
						b = append(b, v[(2*r+1)*inter:(2*r+2)*inter]...)
					}
					return a, b
				}
				gate, up := split(gu)
				dg0, du0 := split(dgu0)
				rg, ru, ry := devicetest.Write(t, ref, gate), devicetest.Write(t, ref, up), devicetest.Write(t, ref, dy)
				ract, rdg, rdu := devicetest.Alloc(t, ref, n*inter), devicetest.Write(t, ref, dg0), devicetest.Write(t, ref, du0)
				ref.SwiGLUForward(ract, rg, ru)
				ref.SwiGLUBackward(rdg, rdu, ry, rg, ru)
				ggu, gy, gdgu := devicetest.Write(t, dut, gu), devicetest.Write(t, dut, dy), devicetest.Write(t, dut, dgu0)
				gact := devicetest.Alloc(t, dut, n*inter)
				d.SwiGLUPackedForward(gact, ggu, n, inter)
				d.SwiGLUPackedBackward(gdgu, gy, ggu, n, inter)
				devicetest.AssertClose(t, devicetest.Read(t, ref, ract), devicetest.Read(t, dut, gact), tolRow, "SwiGLUPackedForward")
				gotDg, gotDu := split(devicetest.Read(t, dut, gdgu))
				devicetest.AssertClose(t, devicetest.Read(t, ref, rdg), gotDg, tolRow, "SwiGLUPackedBackward dgate")
				devicetest.AssertClose(t, devicetest.Read(t, ref, rdu), gotDu, tolRow, "SwiGLUPackedBackward dup")
				require.NoError(t, d.Sync())
			})
		}
	}
}

// fusedShape is a small Llama with grouped-query heads (4/2, head dim 8), an
// intermediate width and rows that are no multiple of a block.
var fusedShape = shapes.Shape{Name: "fused", Arch: shapes.ArchLlama, Hidden: 32, Layers: 3, Heads: 4, KVHeads: 2,
	Intermediate: 48, Vocab: 40, MaxPositions: 16, RopeTheta: 10000, NormEps: 1e-5}

// TestFusedStepLaunches runs one fp32 forward and backward of a small model on the
// cuda device (over the fakes: every kernel on the runner) with the fused ops and
// without (model.Unfused), and on the cpu device, with and without activation
// checkpointing. The fused step issues fusedSavesPerBlock launches a block fewer
// (and half as many again for the recomputed forward), and the same number the
// costDevice predicts (so the llama-1b prediction counts what the device does);
// both track the cpu device's loss and gradients.
func TestFusedStepLaunches(t *testing.T) {
	requireFakes(t)
	for _, checkpoint := range []bool{false, true} {
		t.Run(fmt.Sprintf("checkpoint=%v", checkpoint), func(t *testing.T) { testFusedStep(t, checkpoint) })
	}
}

func testFusedStep(t *testing.T, checkpoint bool) {
	const batch, seq = 2, 7
	inputs, targets, err := model.Batch(5, 0, batch, seq, fusedShape.Vocab)
	require.NoError(t, err)
	run := func(d device.Device, unfused bool) (float64, [][]float64, int64) {
		m, err := model.New(d, fusedShape)
		require.NoError(t, err)
		m.Unfused = unfused
		params, err := m.AllocUnits(device.Params)
		require.NoError(t, err)
		require.NoError(t, m.InitUnits(3, params))
		grads, err := m.AllocUnits(device.Grads)
		require.NoError(t, err)
		var before int64
		c, counts := d.(*Device)
		if counts {
			require.NoError(t, c.Sync())
			before = c.Launches()
		}
		loss, err := m.ForwardBackward(params, grads, inputs, targets, seq, checkpoint)
		require.NoError(t, err)
		require.NoError(t, d.Sync())
		var launches int64
		if counts {
			launches = c.Launches() - before
		}
		out := make([][]float64, len(grads))
		for i, g := range grads {
			out[i] = devicetest.Read(t, d, g)
		}
		return loss, out, launches
	}
	d := newTestDevice(t, Options{})
	fusedLoss, fusedGrads, fused := run(d, false)
	plainLoss, plainGrads, plain := run(d, true)
	cpuLoss, cpuGrads, _ := run(cpu.New(cpu.Options{}), false)
	t.Logf("launches of a forward and backward: %d fused, %d unfused", fused, plain)
	saves := fusedSavesPerBlock
	if checkpoint { // the forward runs twice, and saves half of the block's each time
		saves += fusedSavesPerBlock / 2
	}
	assert.Equal(t, int64(saves*fusedShape.Layers), plain-fused, "launches the fused ops save")
	for _, unfused := range []bool{false, true} {
		want := fused
		if unfused {
			want = plain
		}
		assert.Equal(t, want, predictForwardBackward(t, fusedShape, batch, seq, unfused, checkpoint),
			"the costDevice's launch count (unfused %v)", unfused)
	}
	assert.InDelta(t, cpuLoss, fusedLoss, 1e-5, "fused loss against the cpu device")
	assert.InDelta(t, cpuLoss, plainLoss, 1e-5, "unfused loss against the cpu device")
	for i := range cpuGrads {
		devicetest.AssertClose(t, cpuGrads[i], fusedGrads[i], 1e-4, fmt.Sprintf("fused gradient of unit %d", i))
		devicetest.AssertClose(t, cpuGrads[i], plainGrads[i], 1e-4, fmt.Sprintf("unfused gradient of unit %d", i))
	}
}

// predictForwardBackward is the launches the costDevice counts for one fp32
// forward and backward of shape s, as TestFusedStepLaunches runs it.
func predictForwardBackward(t *testing.T, s shapes.Shape, batch, seq int, unfused, checkpoint bool) int64 {
	d := &costDevice{}
	m, err := model.New(d, s)
	require.NoError(t, err)
	m.Unfused = unfused
	params, grads := make([]device.Buffer, len(m.Units)), make([]device.Buffer, len(m.Units))
	for i, u := range m.Units {
		params[i], _ = d.Alloc(u.Size, device.Params)
		grads[i], _ = d.Alloc(u.Size, device.Grads)
	}
	d.launches = 0
	tokens := make([]int32, batch*seq+1)
	_, err = m.ForwardBackward(params, grads, tokens[:batch*seq], tokens[1:], seq, checkpoint)
	require.NoError(t, err)
	return d.launches
}
