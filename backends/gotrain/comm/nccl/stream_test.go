//go:build cgo

package nccl

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
)

// countingStream stands for the cuda device's CollectiveStream: it counts which
// handle the communicator asked for (Handle waits for the compute stream,
// Ordered does not) and is always done (no fake libcuda is loaded in this
// process, so the fake NCCL runs each collective when it is called).
type countingStream struct {
	handles, ordered atomic.Int64
}

func (s *countingStream) Handle() uintptr     { s.handles.Add(1); return 0x1234 }
func (s *countingStream) Ordered() uintptr    { s.ordered.Add(1); return 0x1234 }
func (s *countingStream) Done() (bool, error) { return true, nil }

// TestStartedCollectives: Start* enqueues on the stream as the caller ordered it
// (Ordered, never Handle), Wait gives what the blocking collective gives, and a
// second collective on a communicator with one started and not waited for is an
// error, not a hang.
func TestStartedCollectives(t *testing.T) {
	const size, n = 2, 6
	streams := []*countingStream{{}, {}}
	nc := ncclGroup(t, size, Options{})
	for r, c := range nc {
		c.opts.Stream = streams[r]
		_, ok := comm.OnStream(c)
		require.True(t, ok, "a communicator on an orderable stream has stream collectives")
	}
	ctx := context.Background()
	type out struct{ gathered, scattered, reduced []float32 }
	outs := make([]out, size)
	errs := eachRank(size, func(r int) error {
		dev := cpu.New(cpu.Options{})
		wrap := func(n int, data []float32) devBuffer {
			b, err := dev.Alloc(n, device.Params)
			if err != nil {
				panic(err)
			}
			if data != nil {
				dev.CopyFromHost(b, data)
			}
			return devBuffer{Buffer: b, host: b.(device.HostBuffer).Host()}
		}
		c := nc[r]
		src, gathered := wrap(n, rankData(r, n)), wrap(n*size, nil)
		p, err := c.StartAllGather(ctx, gathered, src)
		if err != nil {
			return err
		}
		if err := c.Barrier(ctx); err == nil {
			return assert.AnError // must refuse: the all-gather holds the communicator
		}
		if err := p.Wait(); err != nil {
			return err
		}
		full, shard := wrap(n*size, rankData(10+r, n*size)), wrap(n, nil)
		if p, err = c.StartReduceScatter(ctx, shard, full, comm.Average); err != nil {
			return err
		}
		if err := p.Wait(); err != nil {
			return err
		}
		all := wrap(n, rankData(20+r, n))
		if p, err = c.StartAllReduce(ctx, all, comm.Sum); err != nil {
			return err
		}
		if err := p.Wait(); err != nil {
			return err
		}
		outs[r] = out{gathered.host, shard.host, all.host}
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	// The blocking calls on the same inputs are the reference.
	want := make([]out, size)
	errs = eachRank(size, func(r int) error {
		c := nc[r]
		c.opts.Stream = nil
		w := out{make([]float32, n*size), make([]float32, n), rankData(20+r, n)}
		if err := c.AllGather(ctx, w.gathered, rankData(r, n)); err != nil {
			return err
		}
		if err := c.ReduceScatter(ctx, w.scattered, rankData(10+r, n*size), comm.Average); err != nil {
			return err
		}
		if err := c.AllReduce(ctx, w.reduced, comm.Sum); err != nil {
			return err
		}
		want[r] = w
		return nil
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		requireSame(t, want[r].gathered, outs[r].gathered, "all-gather")
		requireSame(t, want[r].scattered, outs[r].scattered, "reduce-scatter")
		requireSame(t, want[r].reduced, outs[r].reduced, "all-reduce")
		assert.EqualValues(t, 3, streams[r].ordered.Load(), "rank %d: every started collective on the ordered handle", r)
		assert.Zero(t, streams[r].handles.Load(), "rank %d: no implicit wait for the compute stream", r)
	}
}

// TestStartNeedsAnOrderedStream: without a stream the caller can order (the
// cpu device's host memory, a plain Stream), there are no stream collectives.
func TestStartNeedsAnOrderedStream(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stream Stream
	}{
		{"no stream", nil},
		{"a stream without Ordered", fakeStream{done: func() (bool, error) { return true, nil }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc := ncclGroup(t, 1, Options{Stream: tc.stream})
			_, ok := comm.OnStream(nc[0])
			assert.False(t, ok)
			dev := cpu.New(cpu.Options{})
			b, err := dev.Alloc(4, device.Params)
			require.NoError(t, err)
			_, err = nc[0].StartAllReduce(context.Background(), b, comm.Sum)
			require.ErrorContains(t, err, "only on the cuda device's comm stream")
			require.NoError(t, nc[0].AllReduceBuffers(context.Background(), b, comm.Sum), "the blocking call still works")
		})
	}
}
