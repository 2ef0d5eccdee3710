package devicetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

func testElementwise(t *testing.T, d device.Device) {
	x := Write(t, d, []float64{1, -2, 3, 0.5})
	y := Write(t, d, []float64{10, 20, 30, 40})
	d.Add(y, x, 2)
	assert.Equal(t, []float64{12, 16, 36, 41}, Read(t, d, y))
	d.Scale(y, 0.5)
	assert.Equal(t, []float64{6, 8, 18, 20.5}, Read(t, d, y))
	assert.Equal(t, 2.5, d.Sum(x))
	assert.Equal(t, 14.25, d.SumSquares(x))
	d.Copy(y.Slice(1, 2), x.Slice(2, 2))
	assert.Equal(t, []float64{6, 3, 0.5, 20.5}, Read(t, d, y))
	d.Zero(y.Slice(0, 2))
	assert.Equal(t, []float64{0, 0, 0.5, 20.5}, Read(t, d, y))
	host := make([]float32, 2)
	d.CopyToHost(host, y.Slice(2, 2))
	assert.Equal(t, []float32{0.5, 20.5}, host)
	d.CopyFromHost(y.Slice(0, 2), []float32{7, 8})
	assert.Equal(t, []float64{7, 8, 0.5, 20.5}, Read(t, d, y))

	t.Run("add into itself", func(t *testing.T) {
		z := Write(t, d, []float64{1, 2, 3})
		d.Add(z, z, 2)
		assert.Equal(t, []float64{3, 6, 9}, Read(t, d, z))
	})
	t.Run("scale a view", func(t *testing.T) {
		z := Write(t, d, []float64{1, 2, 3, 4, 5})
		d.Scale(z.Slice(1, 3), -1)
		assert.Equal(t, []float64{1, -2, -3, -4, 5}, Read(t, d, z))
	})
	t.Run("copy between overlapping views", func(t *testing.T) {
		for _, tc := range []struct {
			dst, src int
			want     []float64
		}{
			{2, 0, []float64{0, 1, 0, 1, 2, 3, 4, 5, 8, 9}},
			{0, 2, []float64{2, 3, 4, 5, 6, 7, 6, 7, 8, 9}},
		} {
			z := Write(t, d, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
			d.Copy(z.Slice(tc.dst, 6), z.Slice(tc.src, 6))
			assert.Equal(t, tc.want, Read(t, d, z), "copy of [%d, %d) to %d", tc.src, tc.src+6, tc.dst)
		}
	})
	t.Run("cross-entropy backward in place", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(8, 9))
		vocab, targets := 9, []int32{1, 8, 0}
		z := Randoms(rng, len(targets)*vocab, 2)
		separate, logits := Alloc(t, d, len(z)), Write(t, d, z)
		d.CrossEntropyBackward(separate, logits, targets, vocab, 0.5)
		d.CrossEntropyBackward(logits, logits, targets, vocab, 0.5)
		assert.Equal(t, Read(t, d, separate), Read(t, d, logits))
	})
	t.Run("empty buffers", func(t *testing.T) {
		e := Alloc(t, d, 0)
		d.Zero(e)
		d.Add(e, e, 1)
		d.Scale(e, 2)
		d.Copy(e, e)
		assert.Zero(t, d.Sum(e))
		assert.Zero(t, d.SumSquares(e))
		d.CopyFromHost(e, nil)
		d.CopyToHost(nil, e)
	})
	sync(t, d)
}

// testSums checks Sum and SumSquares on sizes around and far past a reduction
// block against float64 sums of the same float32 values, within TolSum of Σ|x|.
func testSums(t *testing.T, d device.Device) {
	rng := rand.New(rand.NewPCG(14, 15))
	for _, n := range []int{1, 255, 256, 257, 4099, 1<<18 + 7} {
		v := Randoms(rng, n, 1)
		for i := range v {
			v[i] += 0.25 // a mean, so the sum does not cancel to nothing
		}
		b := Write(t, d, v)
		var s, sq, abs float64
		for _, x := range v {
			s += x
			sq += x * x
			abs += math.Abs(x)
		}
		assert.InDelta(t, s, d.Sum(b), TolSum*abs, "Sum of %d", n)
		assert.InDelta(t, sq, d.SumSquares(b), TolSum*sq, "SumSquares of %d", n)
		assert.InDelta(t, s-v[0], d.Sum(b.Slice(1, n-1)), TolSum*abs, "Sum of a view of %d", n-1)
	}
	sync(t, d)
}

// accountingSequence is the Alloc/Free sequence both devices run: categories,
// sizes including zero, frees in another order than the allocations.
var accountingSequence = []struct {
	n    int
	cat  device.Category
	free int // index of an earlier allocation to free after this one, or −1
}{
	{1000, device.Params, -1}, {500, device.Activations, -1}, {0, device.Grads, -1}, {3, device.Comm, 1},
	{1 << 20, device.Optimizer, -1}, {257, device.Activations, 0}, {7, device.Other, 4}, {1 << 18, device.Grads, 3},
}

// Accounting runs a sequence of Alloc and Free (sizes including zero, frees out of
// order, a ResetPeak midway) on dut and, when ref is not nil, on ref, and compares
// Memory() after every step byte for byte; views cost nothing.
func Accounting(t *testing.T, dut, ref device.Device) {
	devs := []device.Device{dut}
	if ref != nil {
		devs = append(devs, ref)
	}
	bufs := make([][]device.Buffer, len(devs))
	for i, step := range accountingSequence {
		var stats []device.Stats
		for j, d := range devs {
			b, err := d.Alloc(step.n, step.cat)
			require.NoError(t, err)
			require.Equal(t, step.n, b.Len())
			require.Equal(t, step.cat, b.Category())
			bufs[j] = append(bufs[j], b)
			_ = b.Slice(0, step.n/2) // views are not accounted
			if step.free >= 0 {
				d.Free(bufs[j][step.free])
			}
			if i == 4 {
				d.ResetPeak()
			}
			stats = append(stats, d.Memory())
		}
		s := stats[0]
		var sum int64
		for _, c := range s.Current {
			sum += c
		}
		assert.Equal(t, sum, s.Total, "step %d: the total is the sum of the categories", i)
		assert.GreaterOrEqual(t, s.PeakTotal, s.Total, "step %d", i)
		if ref != nil {
			assert.Equal(t, stats[1], s, "step %d: %s and %s account the same bytes", i, dut.Name(), ref.Name())
		}
	}
	freed := map[int]bool{}
	for _, step := range accountingSequence {
		freed[step.free] = true
	}
	for j, d := range devs {
		for i := range accountingSequence {
			if !freed[i] {
				d.Free(bufs[j][i])
			}
		}
		assert.Zero(t, d.Memory().Total, "%s: everything freed", d.Name())
	}
	sync(t, dut)
}

// OutOfMemory checks the tracker's limit: an allocation exactly at it fits, one
// byte past it fails with device.ErrOutOfMemory naming the device and the bytes,
// and freed memory is available again.
func OutOfMemory(t *testing.T, newDevice Factory) {
	probe := newDevice(t, 0)
	one, err := probe.Alloc(1, device.Other)
	require.NoError(t, err)
	elem := probe.Memory().Total // 4 bytes, 8 on the cpu device in float64
	probe.Free(one)
	d := newDevice(t, 1000*elem)
	a, err := d.Alloc(600, device.Params)
	require.NoError(t, err)
	_, err = d.Alloc(400, device.Grads)
	require.NoError(t, err, "exactly at the limit fits")
	_, err = d.Alloc(1, device.Activations)
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	assert.Contains(t, err.Error(), fmt.Sprintf("%s: allocate %d bytes of activations", d.Name(), elem))
	d.Free(a)
	_, err = d.Alloc(600, device.Activations)
	require.NoError(t, err, "freed memory is available again")
	_, err = d.Alloc(-1, device.Other)
	require.Error(t, err)
	sync(t, d)
}

// testForeign checks the programming errors that panic: another device's buffer,
// a view past the end, freeing a view, double free, use after free.
func testForeign(t *testing.T, d, other device.Device) {
	b := Alloc(t, other, 4)
	assert.Same(t, other, b.Device())
	assert.Panics(t, func() { d.Zero(b) }, "a buffer of another device")
	mine := Alloc(t, d, 4)
	assert.Same(t, d, mine.Device())
	assert.Panics(t, func() { mine.Slice(2, 3) }, "a view past the end")
	assert.Panics(t, func() { d.Free(mine.Slice(0, 2)) }, "a view is not freed on its own")
	assert.Panics(t, func() { d.Add(mine, Alloc(t, d, 3), 1) }, "lengths differ")
	d.Free(mine)
	assert.Panics(t, func() { d.Free(mine) }, "double free")
	assert.Panics(t, func() { d.Zero(mine) }, "use after free")
	assert.Panics(t, func() { d.EmbeddingForward(Alloc(t, d, 2), Alloc(t, d, 4), []int32{2}, 2) }, "a token outside the table")
	sync(t, d)
}
