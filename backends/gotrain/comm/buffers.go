package comm

import (
	"context"
	"fmt"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// BufferCollectives is the buffer-level side of a Communicator: the collectives
// fsdp issues on device buffers (a unit's shard, its gathered parameters, its
// gradients). A communicator that works on device memory (NCCL) implements it on
// the buffers' device pointers; OnBuffers adapts any other Communicator through
// host views. Semantics, sizes and ordering are those of the Communicator method
// of the same name.
type BufferCollectives interface {
	// AllGatherBuffers is AllGather on buffers: dst holds src.Len()×Size elements.
	AllGatherBuffers(ctx context.Context, dst, src device.Buffer) error
	// ReduceScatterBuffers is ReduceScatter on buffers.
	ReduceScatterBuffers(ctx context.Context, dst, src device.Buffer, op Op) error
	// AllReduceBuffers is AllReduce on buffers, in place.
	AllReduceBuffers(ctx context.Context, buf device.Buffer, op Op) error
	// BroadcastBuffers is Broadcast on buffers.
	BroadcastBuffers(ctx context.Context, buf device.Buffer, root int) error
}

// OnBuffers returns c's buffer-level collectives: c itself when it implements
// BufferCollectives, otherwise an adapter that runs c's collectives on the host
// views of the buffers (device.HostBuffer, the cpu device's float32 buffers), so
// the TCP ring reads and writes the device's memory in place, without copies.
func OnBuffers(c Communicator) BufferCollectives {
	if b, ok := c.(BufferCollectives); ok {
		return b
	}
	return hostAdapter{c}
}

// NeedsHostBuffers reports whether c can only run collectives on buffers through
// their host memory (the TCP ring), so a caller can refuse a device whose buffers
// have none before any training starts.
func NeedsHostBuffers(c Communicator) bool {
	_, ok := c.(BufferCollectives)
	return !ok
}

// hostAdapter runs a host-slice Communicator on buffers' host views.
type hostAdapter struct{ c Communicator }

// HostView returns b's host memory, or an error saying why collectives that need
// host memory cannot run on b.
func HostView(b device.Buffer) ([]float32, error) {
	if h, ok := b.(device.HostBuffer); ok {
		if v := h.Host(); v != nil {
			return v, nil
		}
		return nil, fmt.Errorf("comm: %s buffer does not hold float32 (the cpu device in float64 mode); the TCP communicator needs float32 host memory", b.Device().Name())
	}
	return nil, fmt.Errorf("comm: %s buffers are not in host memory; the TCP communicator needs the cpu device (use comm: nccl for device memory)", b.Device().Name())
}

func hostViews(bs ...device.Buffer) ([][]float32, error) {
	out := make([][]float32, len(bs))
	for i, b := range bs {
		v, err := HostView(b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func (a hostAdapter) AllGatherBuffers(ctx context.Context, dst, src device.Buffer) error {
	v, err := hostViews(dst, src)
	if err != nil {
		return err
	}
	if t, u := device.DTypeOf(dst), device.DTypeOf(src); t != u {
		return fmt.Errorf("comm: all_gather from %v into %v: one dtype on both sides", u, t)
	} else if t == device.BF16 {
		return allGatherBF16(ctx, a.c, v[0], v[1])
	}
	return a.c.AllGather(ctx, v[0], v[1])
}

func (a hostAdapter) ReduceScatterBuffers(ctx context.Context, dst, src device.Buffer, op Op) error {
	if err := refuseBF16(KindReduceScatter, dst, src); err != nil {
		return err
	}
	v, err := hostViews(dst, src)
	if err != nil {
		return err
	}
	return a.c.ReduceScatter(ctx, v[0], v[1], op)
}

func (a hostAdapter) AllReduceBuffers(ctx context.Context, buf device.Buffer, op Op) error {
	if err := refuseBF16(KindAllReduce, buf); err != nil {
		return err
	}
	v, err := hostViews(buf)
	if err != nil {
		return err
	}
	return a.c.AllReduce(ctx, v[0], op)
}

func (a hostAdapter) BroadcastBuffers(ctx context.Context, buf device.Buffer, root int) error {
	v, err := hostViews(buf)
	if err != nil {
		return err
	}
	return a.c.Broadcast(ctx, v[0], root)
}
