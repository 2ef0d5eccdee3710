//go:build cgo

package nccl

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
)

// devBuffer stands for a cuda buffer: it has a device pointer (here the host
// address of a cpu buffer, which the fake can read) and no host view.
type devBuffer struct {
	device.Buffer
	host []float32
}

func (b devBuffer) DevicePointer() uintptr { return hostPtr(b.host) }

// hostStaging stands for the cuda device's staging: "device" scratch that is
// host memory the fake can read, with counted copies.
type hostStaging struct {
	scratch       []float32
	toDev, toHost atomic.Int64
}

func (s *hostStaging) Scratch(n int) (uintptr, error) {
	if cap(s.scratch) < n {
		s.scratch = make([]float32, n)
	}
	return hostPtr(s.scratch[:n]), nil
}

func (s *hostStaging) index(p uintptr) int { return int((p - hostPtr(s.scratch)) / 4) }

func (s *hostStaging) ToDevice(dst uintptr, src []float32) error {
	s.toDev.Add(1)
	copy(s.scratch[s.index(dst):], src)
	return nil
}

func (s *hostStaging) ToHost(dst []float32, src uintptr) error {
	s.toHost.Add(1)
	i := s.index(src)
	copy(dst, s.scratch[i:i+len(dst)])
	return nil
}

// deviceMemory makes c behave as on a device-memory NCCL.
func deviceMemory(c *Communicator) {
	l := *c.lib
	l.HostMemory = false
	c.lib = &l
}

// TestDevicePointersAndStaging runs the communicator as it runs with the cuda
// device: buffers through their device pointers, host slices (the loss)
// through the staging's scratch, on a library that takes device memory only.
func TestDevicePointersAndStaging(t *testing.T) {
	const size, n = 2, 6
	stagings := []*hostStaging{{}, {}}
	nc := ncclGroup(t, size, Options{})
	for r, c := range nc {
		deviceMemory(c)
		c.opts.Staging = stagings[r]
	}
	ctx := context.Background()
	gathered := make([][]float32, size)
	losses := make([][]float32, size)
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
		src, dst := wrap(n, rankData(r, n)), wrap(n*size, nil)
		if err := nc[r].AllGatherBuffers(ctx, dst, src); err != nil {
			return err
		}
		gathered[r] = dst.host
		losses[r] = []float32{float32(r + 1)}
		if err := nc[r].AllReduce(ctx, losses[r], comm.Average); err != nil {
			return err
		}
		return nc[r].Barrier(ctx)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		requireSame(t, append(rankData(0, n), rankData(1, n)...), gathered[r], fmt.Sprintf("rank %d", r))
		assert.Equal(t, []float32{1.5}, losses[r])
		assert.EqualValues(t, 2, stagings[r].toDev.Load(), "the loss and the barrier went in through the staging")
		assert.EqualValues(t, 1, stagings[r].toHost.Load(), "the loss came back through it")
	}
}

// fakeStream is a CUDA stream as the communicator polls it.
type fakeStream struct {
	done func() (bool, error)
}

func (fakeStream) Handle() uintptr       { return 0x1234 }
func (s fakeStream) Done() (bool, error) { return s.done() }

// TestStreamWaits: with a stream, a collective is done when the stream says
// so; a stream that never finishes is a hang the watchdog ends, and a device
// error under the collective fails it; both name the rank.
func TestStreamWaits(t *testing.T) {
	tests := []struct {
		name string
		done func(polls *atomic.Int64) (bool, error)
		want string
	}{
		{"finishes after a few polls", func(p *atomic.Int64) (bool, error) { return p.Add(1) > 3, nil }, ""},
		{"never finishes", func(*atomic.Int64) (bool, error) { return false, nil }, "did not finish within 300ms"},
		{"device error", func(*atomic.Int64) (bool, error) { return false, errors.New("CUDA_ERROR_LAUNCH_FAILED") },
			"the device failed under the collective: CUDA_ERROR_LAUNCH_FAILED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var polls atomic.Int64
			nc := ncclGroup(t, 1, Options{Timeout: 300 * time.Millisecond,
				Stream: fakeStream{done: func() (bool, error) { return tt.done(&polls) }}})
			start := time.Now()
			err := nc[0].AllReduce(context.Background(), []float32{1, 2}, comm.Sum)
			if tt.want == "" {
				require.NoError(t, err)
				assert.Greater(t, polls.Load(), int64(3))
				return
			}
			var ne *Error
			require.ErrorAs(t, err, &ne)
			assert.Equal(t, 0, ne.Rank)
			assert.Contains(t, err.Error(), tt.want)
			assert.Less(t, time.Since(start), 5*time.Second)
			err = nc[0].Barrier(context.Background())
			require.ErrorContains(t, err, "unusable after an earlier error")
		})
	}
	runtime.GC()
}

// TestCancelEndsACollective: a cancelled ctx aborts a collective that waits
// for a peer that never comes, instead of waiting for the timeout.
func TestCancelEndsACollective(t *testing.T) {
	nc := ncclGroup(t, 2, Options{Timeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	done := make(chan error, 2)
	go func() { done <- nc[0].AllReduce(ctx, []float32{1}, comm.Sum) }()
	// Rank 1 joins only the status exchange, as a rank whose own ctx was
	// cancelled too.
	go func() {
		<-ctx.Done()
		done <- nc[1].AllReduce(ctx, []float32{1}, comm.Sum)
	}()
	for range 2 {
		select {
		case err := <-done:
			require.Error(t, err)
			assert.Contains(t, err.Error(), "cancelled")
		case <-time.After(20 * time.Second):
			t.Fatal("cancel did not end the collective")
		}
	}
}
