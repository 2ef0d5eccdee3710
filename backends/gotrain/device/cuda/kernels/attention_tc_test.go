package kernels_test

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	. "github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/kernels"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/devicetest"
)

// The tensor-core attention kernels (attention_tc.cu) run on the CPU runner, whose
// mma.sync, ldmatrix and cp.async follow the PTX ISA's per-lane layouts, against
// the cpu device on the same bf16-rounded inputs, at the bf16 suite's tolerances:
// out within devicetest.TolBF16 and lse within devicetest.TolBF16Stat, relative to
// max(1, max |reference|). The kernels round P to bf16 before P·V and store bf16,
// the reference computes in float32 throughout: both within the tolerance.

// tcShapes cover odd sequence lengths (tails in query and key tiles, one and
// several query blocks, so several key tiles and the cp.async prefetch), GQA ratios
// 1, 4 and 8 and head dims 64 and 128.
var tcShapes = []device.AttnShape{
	{Batch: 1, Seq: 1, Heads: 1, KVHeads: 1, HeadDim: 64},
	{Batch: 2, Seq: 67, Heads: 2, KVHeads: 2, HeadDim: 64},
	{Batch: 1, Seq: 131, Heads: 4, KVHeads: 1, HeadDim: 64},
	{Batch: 1, Seq: 45, Heads: 8, KVHeads: 1, HeadDim: 128},
	{Batch: 1, Seq: 97, Heads: 4, KVHeads: 1, HeadDim: 128},
	{Batch: 2, Seq: 33, Heads: 2, KVHeads: 2, HeadDim: 128},
}

// roundBF16 returns x rounded to bf16 (as float32) and its bf16 bytes.
func roundBF16(x []float32) ([]float32, []byte) {
	r := make([]float32, len(x))
	b := make([]byte, 2*len(x))
	for i, v := range x {
		h := bf16(v)
		binary.LittleEndian.PutUint16(b[2*i:], h)
		r[i] = math.Float32frombits(uint32(h) << 16)
	}
	return r, b
}

func fromBF16(b []byte) []float32 {
	x := make([]float32, len(b)/2)
	for i := range x {
		x[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
	}
	return x
}

// tcErr is the worst |got − want| / max(1, max |want|) over the elements.
func tcErr(want, got []float32) (worst float64, at int) {
	scale := 1.0
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	at = -1
	for i := range want {
		e := math.Abs(float64(got[i])-float64(want[i])) / scale
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > worst || at < 0 {
			worst, at = e, i
		}
	}
	return worst, at
}

// runAttnTC runs the tensor-core forward on d and the cpu device on the same bf16
// inputs and returns the relative errors of out and lse (tcErr).
func runAttnTC(t *testing.T, d *driver, s device.AttnShape) (outErr, lseErr float64) {
	t.Helper()
	k := AttentionForwardTC(s.HeadDim)
	require.NotNil(t, k, "no tensor-core kernel for head dim %d", s.HeadDim)
	rng := rand.New(rand.NewPCG(uint64(s.Seq), uint64(s.HeadDim*s.Heads)))
	q, qb := roundBF16(randn(rng, s.QLen(), 1))
	kk, kb := roundBF16(randn(rng, s.KVLen(), 1))
	v, vb := roundBF16(randn(rng, s.KVLen(), 1))
	r := newRef(t)
	out, lse := r.buf(make([]float32, s.QLen())), r.buf(make([]float32, s.LSELen()))
	r.d.AttentionForward(out, lse, r.buf(q), r.buf(kk), r.buf(v), s)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	shape := []any{int32(s.Batch), int32(s.Seq), int32(s.Heads), int32(s.KVHeads), int32(s.HeadDim), scale}
	got := d.run(t, k, [3]int{CeilDiv(s.Seq, AttnTCRows), s.Heads, s.Batch}, k.Shared(s.HeadDim),
		[][]byte{make([]byte, 2*s.QLen()), make([]byte, 4*s.LSELen()), qb, kb, vb},
		append([]any{buf(0), buf(1), buf(2), buf(3), buf(4)}, shape...)...)
	outErr, _ = tcErr(r.host(out), fromBF16(got[0]))
	lseErr, _ = tcErr(r.host(lse), bf32(got[1]))
	return outErr, lseErr
}

// runAttnTCBackward runs the tensor-core dq and dk/dv kernels on d and the cpu
// device's backward on the same bf16 inputs (out rounded to bf16 as the forward
// stores it, lse from the reference forward, bf16 gradients to add into) and
// returns the relative errors (tcErr) of dq, dk and dv.
func runAttnTCBackward(t *testing.T, d *driver, s device.AttnShape) (errs [3]float64) {
	t.Helper()
	kdq, kdkdv := AttentionBackwardTC(s.HeadDim)
	require.NotNil(t, kdq, "no tensor-core backward for head dim %d", s.HeadDim)
	rng := rand.New(rand.NewPCG(uint64(s.Seq)+7, uint64(s.HeadDim*s.Heads)))
	q, qb := roundBF16(randn(rng, s.QLen(), 1))
	kk, kb := roundBF16(randn(rng, s.KVLen(), 1))
	v, vb := roundBF16(randn(rng, s.KVLen(), 1))
	dout, doutb := roundBF16(randn(rng, s.QLen(), 1))
	dq0, dq0b := roundBF16(randn(rng, s.QLen(), 1))
	dk0, dk0b := roundBF16(randn(rng, s.KVLen(), 1))
	dv0, dv0b := roundBF16(randn(rng, s.KVLen(), 1))
	r := newRef(t)
	outF, lseB := r.buf(make([]float32, s.QLen())), r.buf(make([]float32, s.LSELen()))
	r.d.AttentionForward(outF, lseB, r.buf(q), r.buf(kk), r.buf(v), s)
	out, outb := roundBF16(r.host(outF))
	lse := r.host(lseB)
	dq, dk, dv := r.buf(dq0), r.buf(dk0), r.buf(dv0)
	r.d.AttentionBackward(dq, dk, dv, r.buf(dout), r.buf(q), r.buf(kk), r.buf(v), r.buf(out), lseB, s)
	scale := float32(1 / math.Sqrt(float64(s.HeadDim)))
	shape := []any{int32(s.Batch), int32(s.Seq), int32(s.Heads), int32(s.KVHeads), int32(s.HeadDim), scale}
	got := d.run(t, kdq, [3]int{CeilDiv(s.Seq, AttnTCRows), s.Heads, s.Batch}, kdq.Shared(s.HeadDim),
		[][]byte{dq0b, doutb, qb, kb, vb, outb, f32b(lse)},
		append([]any{buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), buf(6)}, shape...)...)
	errs[0], _ = tcErr(r.host(dq), fromBF16(got[0]))
	got = d.run(t, kdkdv, [3]int{CeilDiv(s.Seq, AttnTCBwdKeys(s.HeadDim)), s.KVHeads, s.Batch},
		kdkdv.Shared(s.HeadDim), [][]byte{dk0b, dv0b, doutb, qb, kb, vb, outb, f32b(lse)},
		append([]any{buf(0), buf(1), buf(2), buf(3), buf(4), buf(5), buf(6), buf(7)}, shape...)...)
	errs[1], _ = tcErr(r.host(dk), fromBF16(got[0]))
	errs[2], _ = tcErr(r.host(dv), fromBF16(got[1]))
	return errs
}

func TestAttentionTCBackward(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range tcShapes {
				t.Run(name("%d-%d-%d-%d-%d", s.Batch, s.Seq, s.Heads, s.KVHeads, s.HeadDim), func(t *testing.T) {
					errs := runAttnTCBackward(t, d, s)
					t.Logf("dq error %.3g, dk error %.3g, dv error %.3g (tolerance %.3g)", errs[0], errs[1], errs[2],
						devicetest.TolBF16)
					for i, what := range []string{"dq", "dk", "dv"} {
						require.LessOrEqual(t, errs[i], devicetest.TolBF16, what)
					}
				})
			}
		})
	}
}

func TestAttentionTC(t *testing.T) {
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			d := getDriver(t, o.reverse)
			for _, s := range tcShapes {
				t.Run(name("%d-%d-%d-%d-%d", s.Batch, s.Seq, s.Heads, s.KVHeads, s.HeadDim), func(t *testing.T) {
					outErr, lseErr := runAttnTC(t, d, s)
					t.Logf("out error %.3g (tolerance %.3g), lse error %.3g (tolerance %.3g)", outErr, devicetest.TolBF16,
						lseErr, devicetest.TolBF16Stat)
					require.LessOrEqual(t, outErr, devicetest.TolBF16, "out")
					require.LessOrEqual(t, lseErr, devicetest.TolBF16Stat, "lse")
				})
			}
		})
	}
}

// TestAttentionTCPlantedLayoutBug swaps two registers of an A fragment in the
// kernels (FSDP_PLANT_SWAP, switched on by FAKECUDA_PLANT=fragment-swap: Q in the
// forward and dq kernels, K in the dk/dv kernel): rows g and g+8 trade their
// columns 2t, 2t+1 and 8+2t, 8+2t+1. The emulated mma.sync must then give results
// far outside the tolerances TestAttentionTC and TestAttentionTCBackward hold.
func TestAttentionTCPlantedLayoutBug(t *testing.T) {
	testPlanted(t, "fragment-swap")
}

// TestAttentionTCPlantedEarlyRead skips the cp.async wait for each prefetched key
// and value tile (FAKECUDA_PLANT=cp-async-early): the runner performs a copy only
// when a wait covers it, so the kernel reads the poisoned buffer and its output
// must fail the comparison (lse too: the scores read stale keys).
func TestAttentionTCPlantedEarlyRead(t *testing.T) {
	testPlanted(t, "cp-async-early")
}

func testPlanted(t *testing.T, plant string) {
	needFake(t)
	b := fake(t)
	d := startDriver(t, b.Driver, fatbin, false, []string{"FAKECUDA_PLANT=" + plant})
	defer d.close()
	// Shapes with several key tiles, so a prefetched tile is read.
	for _, s := range []device.AttnShape{tcShapes[2], tcShapes[4]} {
		outErr, lseErr := runAttnTC(t, d, s)
		t.Logf("head dim %d with %s planted: out error %.3g, lse error %.3g", s.HeadDim, plant, outErr, lseErr)
		require.Greater(t, outErr, 4*devicetest.TolBF16, "out: %s went unnoticed", plant)
		require.Greater(t, lseErr, 4*devicetest.TolBF16Stat, "lse: %s went unnoticed", plant)
		if plant != "fragment-swap" {
			continue
		}
		// The swap is planted into the backward kernels' Q and K fragments too.
		errs := runAttnTCBackward(t, d, s)
		t.Logf("backward with %s planted: dq error %.3g, dk error %.3g, dv error %.3g", plant, errs[0], errs[1], errs[2])
		for i, what := range []string{"dq", "dk", "dv"} {
			require.Greater(t, errs[i], 4*devicetest.TolBF16, "%s: %s went unnoticed", what, plant)
		}
	}
}
