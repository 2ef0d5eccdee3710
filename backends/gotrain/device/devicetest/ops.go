package devicetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// OpRun runs an op's forward on the named inputs and returns its output buffer.
// With dout non-nil it then runs the backward `passes` times into fresh zeroed
// gradients and returns them by input name. Buffers, not values: the cpu device's
// finite differences read its float64 buffers without rounding.
type OpRun func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer)

// OpCase is one op under test: inputs (float32-representable, so every device
// sees the same values), how to run it, and its tolerances.
type OpCase struct {
	Name   string
	Inputs map[string][]float64
	Run    OpRun
	// Overwrites marks a backward that writes its gradient instead of adding to it.
	Overwrites bool
	// Dout, when set, gives the output gradient; the default is random. An op whose
	// backward only exists for one output gradient (cross-entropy: a uniform scale)
	// sets it.
	Dout func(n int) []float64
	// TolFwd and TolBwd bound the forward output and the gradients (AssertClose).
	TolFwd, TolBwd float64
	// Small marks shapes small enough for finite differences on every element.
	Small bool
}

// attnBlock is the cpu device's query block; shapes straddle it.
const attnBlock = 64

// OpCases are the ops with a forward and a backward, on small shapes (for finite
// differences on the cpu device) and on odd ones.
func OpCases() []OpCase {
	rng := rand.New(rand.NewPCG(1, 2))
	var cases []OpCase
	for _, sh := range []struct{ rows, dim int }{{3, 8}, {5, 257}, {2, 1000}} {
		rows, dim := sh.rows, sh.dim
		cases = append(cases, OpCase{
			Name:   fmt.Sprintf("rmsnorm-%dx%d", rows, dim),
			Small:  rows*dim < 100,
			Inputs: map[string][]float64{"x": Randoms(rng, rows*dim, 1), "w": Around(rng, dim, 1, 0.3)},
			TolFwd: TolRow, TolBwd: TolRow,
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer) {
				out, rstd := Alloc(t, d, rows*dim), AllocF32(t, d, rows)
				d.RMSNormForward(out, rstd, in["x"], in["w"], rows, dim, 1e-5)
				if dout == nil {
					return out, nil
				}
				dx, dw := Alloc(t, d, rows*dim), Alloc(t, d, dim)
				for range passes {
					d.RMSNormBackward(dx, dw, Write(t, d, dout), in["x"], in["w"], rstd, rows, dim)
				}
				return out, map[string]device.Buffer{"x": dx, "w": dw}
			},
		})
	}
	for _, sh := range []struct {
		vocab, dim int
		tokens     []int32
	}{{5, 3, []int32{4, 0, 4, 2, 4, 1}}, {11, 300, []int32{10, 3, 3, 0, 7, 3, 10}}} {
		vocab, dim, tokens := sh.vocab, sh.dim, sh.tokens
		cases = append(cases, OpCase{
			Name:   fmt.Sprintf("embedding-%dx%d", vocab, dim),
			Small:  vocab*dim < 100,
			Inputs: map[string][]float64{"table": Randoms(rng, vocab*dim, 1)},
			TolFwd: TolElementwise, TolBwd: TolElementwise,
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer) {
				out := Alloc(t, d, len(tokens)*dim)
				d.EmbeddingForward(out, in["table"], tokens, dim)
				if dout == nil {
					return out, nil
				}
				dt := Alloc(t, d, vocab*dim)
				for range passes {
					d.EmbeddingBackward(dt, Write(t, d, dout), tokens, dim)
				}
				return out, map[string]device.Buffer{"table": dt}
			},
		})
	}
	for _, s := range []device.RoPEShape{
		{Batch: 2, Seq: 5, Heads: 3, HeadDim: 4, Theta: 100},
		{Batch: 1, Seq: 37, Heads: 2, HeadDim: 18, Theta: 10000},
	} {
		cases = append(cases, OpCase{
			Name:       fmt.Sprintf("rope-seq%d-hd%d", s.Seq, s.HeadDim),
			Small:      s.Len() < 200,
			Inputs:     map[string][]float64{"x": Randoms(rng, s.Len(), 1)},
			Overwrites: true,
			TolFwd:     TolElementwise, TolBwd: TolElementwise,
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, _ int) (device.Buffer, map[string]device.Buffer) {
				y := Alloc(t, d, s.Len())
				d.Copy(y, in["x"])
				d.RoPEForward(y, s)
				if dout == nil {
					return y, nil
				}
				dx := Write(t, d, dout)
				d.RoPEBackward(dx, s)
				return y, map[string]device.Buffer{"x": dx}
			},
		})
	}
	for _, s := range []device.AttnShape{
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 4, HeadDim: 3},             // multi-head
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 2, HeadDim: 3},             // grouped-query
		{Batch: 2, Seq: 5, Heads: 4, KVHeads: 1, HeadDim: 3},             // multi-query
		{Batch: 1, Seq: attnBlock + 6, Heads: 2, KVHeads: 1, HeadDim: 2}, // two of the cpu's query blocks
		{Batch: 1, Seq: 37, Heads: 4, KVHeads: 2, HeadDim: 64},           // a real head size, seq off every tile
	} {
		cases = append(cases, OpCase{
			Name:  fmt.Sprintf("attention-seq%d-kv%d-hd%d", s.Seq, s.KVHeads, s.HeadDim),
			Small: s.QLen() < 500,
			Inputs: map[string][]float64{
				"q": Randoms(rng, s.QLen(), 1), "k": Randoms(rng, s.KVLen(), 1), "v": Randoms(rng, s.KVLen(), 1),
			},
			TolFwd: TolAttention, TolBwd: TolAttention,
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer) {
				out, lse := Alloc(t, d, s.QLen()), AllocF32(t, d, s.LSELen())
				d.AttentionForward(out, lse, in["q"], in["k"], in["v"], s)
				if dout == nil {
					return out, nil
				}
				dq, dk, dv := Alloc(t, d, s.QLen()), Alloc(t, d, s.KVLen()), Alloc(t, d, s.KVLen())
				for range passes {
					d.AttentionBackward(dq, dk, dv, Write(t, d, dout), in["q"], in["k"], in["v"], out, lse, s)
				}
				return out, map[string]device.Buffer{"q": dq, "k": dk, "v": dv}
			},
		})
	}
	for _, n := range []int{12, 1031} {
		cases = append(cases, OpCase{
			Name:   fmt.Sprintf("swiglu-%d", n),
			Small:  n < 100,
			Inputs: map[string][]float64{"gate": Randoms(rng, n, 2), "up": Randoms(rng, n, 1)},
			TolFwd: TolElementwise, TolBwd: TolElementwise,
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer) {
				out := Alloc(t, d, n)
				d.SwiGLUForward(out, in["gate"], in["up"])
				if dout == nil {
					return out, nil
				}
				dg, du := Alloc(t, d, n), Alloc(t, d, n)
				for range passes {
					d.SwiGLUBackward(dg, du, Write(t, d, dout), in["gate"], in["up"])
				}
				return out, map[string]device.Buffer{"gate": dg, "up": du}
			},
		})
	}
	for _, sh := range []struct {
		vocab   int
		targets []int32
	}{{7, []int32{3, 0, 6, 3}}, {1000, []int32{999, 0, 500, 3, 3}}} {
		vocab, targets := sh.vocab, sh.targets
		const scale = 0.37
		cases = append(cases, OpCase{
			Name:       fmt.Sprintf("cross-entropy-%d", vocab),
			Small:      vocab < 100,
			Inputs:     map[string][]float64{"logits": Randoms(rng, len(targets)*vocab, 2)},
			Overwrites: true,
			TolFwd:     TolRow, TolBwd: TolRow,
			Dout: func(n int) []float64 { return slices.Repeat([]float64{scale}, n) },
			Run: func(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, _ int) (device.Buffer, map[string]device.Buffer) {
				losses := AllocF32(t, d, len(targets))
				d.CrossEntropyForward(losses, in["logits"], targets, vocab)
				if dout == nil {
					return losses, nil
				}
				dz := Alloc(t, d, len(targets)*vocab)
				d.CrossEntropyBackward(dz, in["logits"], targets, vocab, float32(dout[0]))
				return losses, map[string]device.Buffer{"logits": dz}
			},
		})
	}
	for _, sh := range []struct{ rows, in, out int }{{4, 3, 5}, {33, 65, 17}} {
		// A linear layer y = x·Wᵀ with its backward through MatMul, as the model
		// runs it: dx = dy·W, dW += dyᵀ·x (beta = 1 accumulates).
		rows, in, out := sh.rows, sh.in, sh.out
		cases = append(cases, OpCase{
			Name:   fmt.Sprintf("linear-%dx%dx%d", rows, in, out),
			Small:  rows*in < 100,
			Inputs: map[string][]float64{"x": Randoms(rng, rows*in, 1), "w": Randoms(rng, out*in, 1)},
			TolFwd: TolGEMM, TolBwd: TolGEMM,
			Run: func(t *testing.T, d device.Device, b map[string]device.Buffer, dout []float64, passes int) (device.Buffer, map[string]device.Buffer) {
				y := Alloc(t, d, rows*out)
				d.MatMul(y, b["x"], b["w"], false, true, rows, out, in, 1, 0)
				if dout == nil {
					return y, nil
				}
				dx, dw, dy := Alloc(t, d, rows*in), Alloc(t, d, out*in), Write(t, d, dout)
				for range passes {
					d.MatMul(dx, dy, b["w"], false, false, rows, in, out, 1, 1)
					d.MatMul(dw, dy, b["x"], true, false, out, in, rows, 1, 1)
				}
				return y, map[string]device.Buffer{"x": dx, "w": dw}
			},
		})
	}
	return cases
}

// Upload writes each named input to a new buffer of d.
func Upload(t *testing.T, d device.Device, in map[string][]float64) map[string]device.Buffer {
	t.Helper()
	out := make(map[string]device.Buffer, len(in))
	for name, v := range in {
		out[name] = Write(t, d, v)
	}
	return out
}

// SortedKeys returns m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// read runs c and reads its output and gradients with Read.
func (c OpCase) read(t *testing.T, d device.Device, in map[string]device.Buffer, dout []float64, passes int) ([]float64, map[string][]float64) {
	t.Helper()
	out, grads := c.Run(t, d, in, dout, passes)
	g := make(map[string][]float64, len(grads))
	for name, b := range grads {
		g[name] = Read(t, d, b)
	}
	return Read(t, d, out), g
}

// testOps runs every OpCase on dut and ref: forward and one backward pass agree
// within the case's tolerances, and a second pass doubles every gradient of a
// backward that adds into them.
func testOps(t *testing.T, dut, ref device.Device) {
	for _, c := range OpCases() {
		t.Run(c.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(len(c.Name))))
			inRef, inDut := Upload(t, ref, c.Inputs), Upload(t, dut, c.Inputs)
			o, _ := c.Run(t, ref, inRef, nil, 0)
			dout := Randoms(rng, o.Len(), 1)
			if c.Dout != nil {
				dout = c.Dout(o.Len())
			}
			wantOut, wantGrads := c.read(t, ref, inRef, dout, 1)
			gotOut, gotGrads := c.read(t, dut, inDut, dout, 1)
			sync(t, dut)
			AssertClose(t, wantOut, gotOut, c.TolFwd, "forward")
			require.Equal(t, SortedKeys(wantGrads), SortedKeys(gotGrads))
			for _, name := range SortedKeys(wantGrads) {
				AssertClose(t, wantGrads[name], gotGrads[name], c.TolBwd, "d"+name)
			}
			if !c.Overwrites {
				_, twice := c.read(t, dut, inDut, dout, 2)
				sync(t, dut)
				for _, name := range SortedKeys(gotGrads) {
					g2 := make([]float64, len(gotGrads[name]))
					for i, g := range gotGrads[name] {
						g2[i] = 2 * g
					}
					AssertClose(t, g2, twice[name], c.TolBwd, "backward adds into d"+name)
				}
			}
		})
	}
}
