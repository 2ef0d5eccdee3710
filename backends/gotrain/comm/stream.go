package comm

import (
	"context"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// StreamCollectives is implemented by communicators that enqueue collectives on
// the device's communication stream (NCCL on the cuda device): a Start call
// returns once the collective is enqueued, in the caller's order, and the
// collective runs on the stream after whatever the caller ordered there before
// (device.Streams.Wait on the comm stream), never after an implicit wait for
// the compute stream. So fsdp issues every collective of a step from one
// goroutine, in the same order on every rank (collectives of two communicators
// that share one stream deadlock when two ranks enqueue them in different
// orders), and the collectives overlap the compute issued meanwhile.
//
// A communicator has at most one started collective that was not waited for:
// Wait it before the next collective of the same communicator, Start or not.
type StreamCollectives interface {
	// StartAllGather enqueues AllGatherBuffers.
	StartAllGather(ctx context.Context, dst, src device.Buffer) (Pending, error)
	// StartReduceScatter enqueues ReduceScatterBuffers.
	StartReduceScatter(ctx context.Context, dst, src device.Buffer, op Op) (Pending, error)
	// StartAllReduce enqueues AllReduceBuffers.
	StartAllReduce(ctx context.Context, buf device.Buffer, op Op) (Pending, error)
}

// Pending is a collective enqueued on a stream.
type Pending interface {
	// Wait blocks until the collective has finished and returns its error, as the
	// blocking collective would have; it is called exactly once.
	Wait() error
}

// StreamOrdered is how a communicator says whether its collectives run on a
// device stream; one that implements StreamCollectives only conditionally
// (NCCL without a stream runs host-memory collectives that are done when they
// return) implements it.
type StreamOrdered interface {
	OnStream() bool
}

// OnStream returns c's stream collectives when c enqueues on a device stream.
func OnStream(c Communicator) (StreamCollectives, bool) {
	s, ok := c.(StreamCollectives)
	if !ok {
		return nil, false
	}
	if o, ok := c.(StreamOrdered); ok && !o.OnStream() {
		return nil, false
	}
	return s, true
}
