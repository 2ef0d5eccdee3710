package cpu

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// TestAllocReusesFreedMemory: a step's second Alloc of a length takes the
// memory the first one freed, zeroed, while the accounting and the checks on
// freed buffers stay as they were.
func TestAllocReusesFreedMemory(t *testing.T) {
	for _, o := range []Options{{}, {Float64: true}} {
		d := New(o)
		t.Run(d.Name(), func(t *testing.T) {
			a, err := d.Alloc(1000, device.Activations)
			require.NoError(t, err)
			d.CopyFromHost(a, ones(1000))
			d.Free(a)
			assert.Zero(t, d.Memory().Current[device.Activations], "Free releases the bytes")
			assert.Panics(t, func() { d.Zero(a) }, "a freed buffer still refuses use")

			b, err := d.Alloc(1000, device.Grads)
			require.NoError(t, err)
			assert.Same(t, elem0(t, a), elem0(t, b), "the freed memory is reused")
			got := make([]float32, 1000)
			d.CopyToHost(got, b)
			assert.Equal(t, make([]float32, 1000), got, "and zeroed")
			s := d.Memory()
			assert.Equal(t, int64(1000)*elemBytes(o), s.Current[device.Grads])
			assert.Equal(t, int64(1000)*elemBytes(o), s.PeakTotal, "the pool holds nothing on the books")

			c, err := d.Alloc(10, device.Other)
			require.NoError(t, err)
			assert.NotSame(t, elem0(t, b), elem0(t, c), "another length, other memory")
		})
	}
}

// TestPoolIsBounded: the pool keeps no more than its limit.
func TestPoolIsBounded(t *testing.T) {
	var p pool[float32]
	for range 3 {
		p.give(make([]float32, 100), 4, 1000)
	}
	assert.Equal(t, int64(800), p.bytes, "two fit in 1000 bytes, the third is dropped")
	s, dirty := p.take(100, 4)
	assert.Len(t, s, 100)
	assert.True(t, dirty, "a pooled slice is to be cleared")
	assert.Equal(t, int64(400), p.bytes)
	s, dirty = p.take(7, 4)
	assert.Len(t, s, 7, "an empty length allocates")
	assert.False(t, dirty, "fresh memory is zero")
}

// TestPooledMemoryReadsZero: a buffer over memory a NaN-filled buffer freed
// reads as zeroed by every kind of first use: read, accumulated into, cut into
// views, handed out by Host; and an op that overwrites it all (a GEMM with
// beta = 0, on both BLAS) leaves no stale element, also for k = 0.
func TestPooledMemoryReadsZero(t *testing.T) {
	const n = 12 // 3×4 = (3×2)·(2×4)
	nan := make([]float32, n)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	for _, o := range []Options{{}, {BLAS: BLASGonum}, {Float64: true}} {
		d := New(o)
		reused := func(t *testing.T) device.Buffer {
			a, err := d.Alloc(n, device.Activations)
			require.NoError(t, err)
			d.CopyFromHost(a, nan)
			d.Free(a)
			b, err := d.Alloc(n, device.Activations)
			require.NoError(t, err)
			require.Same(t, elem0(t, a), elem0(t, b), "the test needs the pooled memory")
			t.Cleanup(func() { d.Free(b) })
			return b
		}
		host := func(b device.Buffer) []float32 {
			got := make([]float32, b.Len())
			d.CopyToHost(got, b)
			return got
		}
		ab := func(t *testing.T, k int) (device.Buffer, device.Buffer) {
			a, err := d.Alloc(3*k, device.Other)
			require.NoError(t, err)
			b, err := d.Alloc(k*4, device.Other)
			require.NoError(t, err)
			d.CopyFromHost(a, ones(3*k))
			d.CopyFromHost(b, ones(k*4))
			return a, b
		}
		for _, tc := range []struct {
			name string
			use  func(t *testing.T, b device.Buffer) []float32
			want float32
		}{
			{"read", func(t *testing.T, b device.Buffer) []float32 { return host(b) }, 0},
			{"accumulated into", func(t *testing.T, b device.Buffer) []float32 {
				src, err := d.Alloc(n, device.Other)
				require.NoError(t, err)
				d.CopyFromHost(src, ones(n))
				d.Add(b, src, 2)
				return host(b)
			}, 2},
			{"a view read", func(t *testing.T, b device.Buffer) []float32 {
				v := b.Slice(4, 4)
				d.Scale(v, 3)
				return host(b)
			}, 0},
			{"a view overwritten", func(t *testing.T, b device.Buffer) []float32 {
				d.CopyFromHost(b.Slice(0, 4), make([]float32, 4))
				return host(b)
			}, 0},
			{"MatMul beta=0", func(t *testing.T, b device.Buffer) []float32 {
				x, y := ab(t, 2)
				d.MatMul(b, x, y, false, false, 3, 4, 2, 1, 0)
				return host(b)
			}, 2},
			{"MatMul k=0", func(t *testing.T, b device.Buffer) []float32 {
				x, y := ab(t, 0)
				d.MatMul(b, x, y, false, false, 3, 4, 0, 1, 0)
				return host(b)
			}, 0},
			{"Host", func(t *testing.T, b device.Buffer) []float32 {
				hb, ok := b.(device.HostBuffer)
				if !ok || hb.Host() == nil {
					return host(b) // the float64 device has no host view
				}
				return append([]float32(nil), hb.Host()...)
			}, 0},
		} {
			t.Run(d.Name()+"/"+o.BLAS+"/"+tc.name, func(t *testing.T) {
				got := tc.use(t, reused(t))
				want := make([]float32, n)
				for i := range want {
					want[i] = tc.want
				}
				assert.Equal(t, want, got)
			})
		}
	}
}

func ones(n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

func elemBytes(o Options) int64 {
	if o.Float64 {
		return 8
	}
	return 4
}

// elem0 is the address of a buffer's first element, whatever its type.
func elem0(t *testing.T, b device.Buffer) any {
	switch x := b.(type) {
	case *buffer[float32]:
		return &x.data[:1][0]
	case *buffer[float64]:
		return &x.data[:1][0]
	}
	t.Fatalf("buffer %T is not the cpu device's", b)
	return nil
}
