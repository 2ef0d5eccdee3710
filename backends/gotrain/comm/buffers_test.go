package comm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
)

// TestOnBuffersUsesHostViews runs every buffer-level collective through the TCP
// ring on cpu buffers and checks the results land in the buffers themselves.
func TestOnBuffersUsesHostViews(t *testing.T) {
	const size, n = 3, 5
	comms := newGroup(t, size, Options{})
	ctx := context.Background()
	devs := make([]device.Device, size)
	for r := range devs {
		devs[r] = cpu.New(cpu.Options{})
	}
	alloc := func(r, n int, data []float32) device.Buffer {
		b, err := devs[r].Alloc(n, device.Comm)
		require.NoError(t, err)
		if data != nil {
			devs[r].CopyFromHost(b, data)
		}
		return b
	}
	inputs := make([][]float32, size)
	for r := range inputs {
		inputs[r] = rankData(r, n*size)
	}
	gathered := make([]device.Buffer, size)
	scattered := make([]device.Buffer, size)
	reduced := make([]device.Buffer, size)
	bcast := make([]device.Buffer, size)
	run(t, comms, func(r int, c Communicator) error {
		b := OnBuffers(c)
		gathered[r] = alloc(r, n*size, nil)
		if err := b.AllGatherBuffers(ctx, gathered[r], alloc(r, n, inputs[r][:n])); err != nil {
			return err
		}
		scattered[r] = alloc(r, n, nil)
		if err := b.ReduceScatterBuffers(ctx, scattered[r], alloc(r, n*size, inputs[r]), Sum); err != nil {
			return err
		}
		reduced[r] = alloc(r, n*size, inputs[r])
		if err := b.AllReduceBuffers(ctx, reduced[r], Average); err != nil {
			return err
		}
		bcast[r] = alloc(r, n, inputs[r][:n])
		return b.BroadcastBuffers(ctx, bcast[r], 2)
	})
	for r := range size {
		host := func(b device.Buffer) []float32 { return b.(device.HostBuffer).Host() }
		for q := range size {
			requireSame(t, inputs[q][:n], host(gathered[r])[q*n:(q+1)*n], "all-gather")
		}
		want := make([]float64, n)
		for i := range want {
			want[i] = seqSum(inputs, r*n+i)
		}
		requireClose(t, want, host(scattered[r]), "reduce-scatter")
		avg := make([]float64, n*size)
		for i := range avg {
			avg[i] = seqSum(inputs, i) / size
		}
		requireClose(t, avg, host(reduced[r]), "all-reduce")
		requireSame(t, inputs[2][:n], host(bcast[r]), "broadcast")
	}
	assert.True(t, NeedsHostBuffers(comms[0]))
}

// TestOnBuffersRefusesNonHostMemory: a buffer without float32 host memory gets an
// error saying what the TCP ring needs, never a nil slice into a collective.
func TestOnBuffersRefusesNonHostMemory(t *testing.T) {
	comms := newGroup(t, 1, Options{})
	b, err := cpu.New(cpu.Options{Float64: true}).Alloc(4, device.Params)
	require.NoError(t, err)
	err = OnBuffers(comms[0]).AllReduceBuffers(context.Background(), b, Sum)
	require.ErrorContains(t, err, "does not hold float32")
	_, err = HostView(foreign{})
	require.ErrorContains(t, err, "not in host memory")
	require.ErrorContains(t, err, "comm: nccl")
}

// foreign is a buffer of a device without host memory.
type foreign struct{ device.Buffer }

func (foreign) Device() device.Device { return cpu.New(cpu.Options{}) }

// native is a communicator with its own buffer-level collectives.
type native struct {
	Communicator
	calls int
}

func (n *native) AllGatherBuffers(context.Context, device.Buffer, device.Buffer) error {
	n.calls++
	return nil
}
func (n *native) ReduceScatterBuffers(context.Context, device.Buffer, device.Buffer, Op) error {
	n.calls++
	return nil
}
func (n *native) AllReduceBuffers(context.Context, device.Buffer, Op) error { n.calls++; return nil }
func (n *native) BroadcastBuffers(context.Context, device.Buffer, int) error {
	n.calls++
	return nil
}

func TestOnBuffersPrefersNativeCollectives(t *testing.T) {
	n := &native{}
	b := OnBuffers(n)
	require.NoError(t, b.AllReduceBuffers(context.Background(), foreign{}, Sum))
	assert.Equal(t, 1, n.calls, "the communicator's own method ran, not the host adapter")
	assert.False(t, NeedsHostBuffers(n))
}
