package cpu

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// allocatorOn is AllocDTypeOn, as fsdp sees it.
type allocatorOn interface {
	AllocDTypeOn(mem []float32, t device.DType, cat device.Category) (device.Buffer, error)
}

// TestAllocDTypeOn: a buffer over the caller's memory is charged exactly as
// AllocDType's (fp32 and bf16), keeps the memory's contents (not zeroed: a peer
// may still read it), uses that memory, counts against the limit, and is not
// pooled by Free, so no later Alloc hands the caller's memory out.
func TestAllocDTypeOn(t *testing.T) {
	for _, dt := range []device.DType{device.F32, device.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			ref, on := New(Options{}), New(Options{})
			b, err := device.AllocDType(ref, 1000, dt, device.Params)
			require.NoError(t, err)
			mem := make([]float32, 1000)
			mem[0], mem[999] = 3, 5
			x, err := on.(allocatorOn).AllocDTypeOn(mem, dt, device.Params)
			require.NoError(t, err)
			assert.Equal(t, ref.Memory(), on.Memory(), "charged as AllocDType")
			assert.Equal(t, dt, device.DTypeOf(x))
			got := x.(device.HostBuffer).Host()
			assert.Same(t, &mem[0], &got[0], "the caller's memory")
			assert.Equal(t, float32(5), got[999], "not zeroed")
			ref.Free(b)
			on.Free(x)
			assert.Equal(t, ref.Memory(), on.Memory(), "released as Free releases")
			y, err := on.Alloc(1000, device.Params)
			require.NoError(t, err)
			assert.NotSame(t, &mem[0], &y.(device.HostBuffer).Host()[0], "Free did not pool the caller's memory")
			assert.Equal(t, float32(3), mem[0], "nor cleared it")
		})
	}
	t.Run("errors", func(t *testing.T) {
		small := New(Options{LimitBytes: 1000})
		_, err := small.(allocatorOn).AllocDTypeOn(make([]float32, 1000), device.F32, device.Params)
		assert.ErrorIs(t, err, device.ErrOutOfMemory)
		_, err = New(Options{Float64: true}).(allocatorOn).AllocDTypeOn(make([]float32, 4), device.F32, device.Params)
		assert.ErrorContains(t, err, "float64")
		_, err = New(Options{}).(allocatorOn).AllocDTypeOn(make([]float32, 4), device.DType(99), device.Params)
		assert.ErrorContains(t, err, "unknown dtype")
	})
}
