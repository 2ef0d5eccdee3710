//go:build cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// TestCrossEntropyFused holds the fused cross-entropy (one launch: losses and
// dlogits) to the cpu device's CrossEntropyForward then CrossEntropyBackward,
// in fp32 and in bf16 (the cpu device in float64 storing bf16), in place and
// into a separate buffer, both schedule orders, up to Llama 3's 128256-wide
// vocabulary (even: the bf16 pair loads; 128257, odd: element loads). dlogits
// are compared element by element relative to each value: softmax entries over
// 128k columns are ~1e-5, far under AssertClose's scale of 1, and a wrong lse
// would hide there.
func TestCrossEntropyFused(t *testing.T) {
	for _, order := range []string{"forward", "reverse"} {
		for _, dt := range []device.DType{device.F32, device.BF16} {
			t.Run(fmt.Sprintf("%s/%v", order, dt), func(t *testing.T) {
				if fakes.cuda != "" {
					t.Setenv("FAKECUDA_SCHEDULE", order)
				}
				d := newTestDevice(t, Options{})
				ref := device.Device(cpu.New(cpu.Options{Float64: true}))
				var dut device.Device = d
				// An fp32 logit's dlogit is within 2e-5 of float64's; a bf16 one is the
				// same value rounded to bf16 from a float32 a few ulps away: 2 bf16 ulps.
				rel, statTol := 2e-5, 2e-6
				if dt == device.BF16 {
					ref, dut = devicetest.BF16(t, ref), devicetest.BF16(t, d)
					rel, statTol = 2.0/256, devicetest.TolBF16Stat
				}
				for _, s := range []struct{ rows, vocab int }{{1, 1}, {3, 5}, {7, 1000}, {2, 50257}, {2, 128256}, {3, 128257}} {
					rng := rand.New(rand.NewPCG(uint64(s.rows), uint64(s.vocab)))
					n := s.rows * s.vocab
					logits := devicetest.Randoms(rng, n, 4)
					targets := make([]int32, s.rows)
					for i := range targets {
						targets[i] = int32(rng.IntN(s.vocab))
					}
					targets[0] = int32(s.vocab - 1) // the last column: a pair's high half when even
					scale := float32(1) / float32(s.rows)

					rl, rz := devicetest.AllocF32(t, ref, s.rows), devicetest.Write(t, ref, logits)
					ref.CrossEntropyForward(rl, rz, targets, s.vocab)
					ref.CrossEntropyBackward(rz, rz, targets, s.vocab, scale)
					wantLoss, wantGrad := devicetest.Read(t, ref, rl), devicetest.Read(t, ref, rz)

					what := fmt.Sprintf("%dx%d", s.rows, s.vocab)
					// Into a separate buffer: the logits are left as they were.
					l, z, g := devicetest.AllocF32(t, dut, s.rows), devicetest.Write(t, dut, logits), devicetest.Alloc(t, dut, n)
					before := devicetest.Read(t, dut, z)
					d.CrossEntropyFused(l, g, z, targets, s.vocab, scale)
					devicetest.AssertClose(t, wantLoss, devicetest.Read(t, dut, l), statTol, what+" losses")
					assertRelClose(t, wantGrad, devicetest.Read(t, dut, g), rel, what+" dlogits")
					assert.Equal(t, before, devicetest.Read(t, dut, z), what+": the logits untouched")
					// In place, as the model's head runs it.
					d.Zero(l)
					d.CrossEntropyFused(l, z, z, targets, s.vocab, scale)
					devicetest.AssertClose(t, wantLoss, devicetest.Read(t, dut, l), statTol, what+" losses (in place)")
					assertRelClose(t, wantGrad, devicetest.Read(t, dut, z), rel, what+" dlogits (in place)")
					require.NoError(t, d.Sync())
				}
			})
		}
	}
}

// assertRelClose checks |want − got| ≤ rel·|want| + 1e-30 element-wise: every
// value to its own precision, however small.
func assertRelClose(t *testing.T, want, got []float64, rel float64, what string) {
	t.Helper()
	require.Len(t, got, len(want), what)
	bad := 0
	for i := range want {
		if e := math.Abs(want[i] - got[i]); !(e <= rel*math.Abs(want[i])+1e-30) {
			if bad == 0 {
				t.Errorf("%s: [%d] want %g, got %g (relative tolerance %g)", what, i, want[i], got[i], rel)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d elements off", what, bad, len(want))
	}
}

// TestCrossEntropyFusedNoFP32Copy: the fused op over bf16 logits of a 128256-wide
// vocabulary takes no memory but the targets' scratch: no fp32 copy of the
// logits (1 MiB here), tracked or in the arena.
func TestCrossEntropyFusedNoFP32Copy(t *testing.T) {
	d := newTestDevice(t, Options{})
	const rows, vocab = 2, 128256
	z, err := d.AllocDType(rows*vocab, device.BF16, device.Activations)
	require.NoError(t, err)
	d.Zero(z)
	l := alloc(t, d, rows)
	used, x := d.Memory().Total, d.Extras()
	d.CrossEntropyFused(l, z, z, []int32{0, vocab - 1}, vocab, 0.5)
	require.NoError(t, d.Sync())
	after := d.Extras()
	assert.Equal(t, used, d.Memory().Total, "tracked bytes")
	assert.LessOrEqual(t, after.Scratch-x.Scratch, int64(4096), "scratch: the targets only (a scratch piece is at least 4 KiB)")
	assert.LessOrEqual(t, after.Arena.PeakReserved-x.Arena.PeakReserved, int64(4096), "the arena's peak")
	// Every logit 0: the loss is log(vocab), each dlogit 0.5/vocab (less 0.5 at the target).
	assert.InDelta(t, math.Log(vocab), float64(download(t, d, l)[1]), 1e-5)
}
