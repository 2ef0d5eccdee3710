package cpu

import (
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
	s := p.take(100, 4)
	assert.Len(t, s, 100)
	assert.Equal(t, int64(400), p.bytes)
	assert.Len(t, p.take(7, 4), 7, "an empty length allocates")
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
