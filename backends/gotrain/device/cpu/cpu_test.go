package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

func TestAccounting(t *testing.T) {
	for _, tc := range []struct {
		opts      Options
		elemBytes int64
	}{{Options{}, 4}, {Options{Float64: true}, 8}} {
		d := New(tc.opts)
		t.Run(d.Name(), func(t *testing.T) {
			p, err := d.Alloc(1000, device.Params)
			require.NoError(t, err)
			a, err := d.Alloc(500, device.Activations)
			require.NoError(t, err)

			// Views share memory and cost nothing.
			view := p.Slice(100, 10)
			assert.Equal(t, 10, view.Len())
			assert.Equal(t, device.Params, view.Category())
			d.CopyFromHost(view, make([]float32, 10))
			s := d.Memory()
			assert.Equal(t, 1000*tc.elemBytes, s.Current[device.Params])
			assert.Equal(t, 1500*tc.elemBytes, s.Total)

			d.Free(a)
			g, err := d.Alloc(200, device.Grads)
			require.NoError(t, err)
			s = d.Memory()
			assert.Equal(t, int64(0), s.Current[device.Activations], "Free reduces current")
			assert.Equal(t, 500*tc.elemBytes, s.Peak[device.Activations])
			assert.Equal(t, 1200*tc.elemBytes, s.Total)
			assert.Equal(t, 1500*tc.elemBytes, s.PeakTotal, "peak of the total, not the sum of peaks")

			assert.Panics(t, func() { d.Free(view) }, "a view is not freed on its own")
			d.Free(g)
			assert.Panics(t, func() { d.Free(g) }, "double free")
			assert.Panics(t, func() { d.Zero(g) }, "use after free")
			d.Free(p)
			assert.Equal(t, int64(0), d.Memory().Total)
		})
	}
}

func TestOutOfMemory(t *testing.T) {
	d := New(Options{LimitBytes: 4000})
	a, err := d.Alloc(600, device.Params)
	require.NoError(t, err)
	_, err = d.Alloc(400, device.Grads)
	require.NoError(t, err, "exactly at the limit fits")
	_, err = d.Alloc(1, device.Activations)
	require.ErrorIs(t, err, device.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "cpu: allocate 4 bytes of activations")
	d.Free(a)
	_, err = d.Alloc(600, device.Activations)
	require.NoError(t, err, "freed memory is available again")
}

func TestBuffersBelongToTheirDevice(t *testing.T) {
	d1, d2 := New(Options{}), New(Options{})
	b, err := d2.Alloc(4, device.Other)
	require.NoError(t, err)
	assert.Same(t, d2, b.Device())
	assert.PanicsWithValue(t, "cpu: Zero: buffer *cpu.buffer[float32] does not belong to this device",
		func() { d1.Zero(b) })
	assert.Panics(t, func() { b.Slice(2, 3) }, "a view past the end")
	_, err = d1.Alloc(-1, device.Other)
	require.Error(t, err)
}

func TestHostBuffer(t *testing.T) {
	b, err := New(Options{}).Alloc(3, device.Comm)
	require.NoError(t, err)
	hb, ok := b.(device.HostBuffer)
	require.True(t, ok)
	hb.Host()[1] = 5
	view := b.Slice(1, 2).(device.HostBuffer)
	assert.Equal(t, []float32{5, 0}, view.Host(), "views share the memory")

	b64, err := New(Options{Float64: true}).Alloc(3, device.Comm)
	require.NoError(t, err)
	assert.Nil(t, b64.(device.HostBuffer).Host())
}
