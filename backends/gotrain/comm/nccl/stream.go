//go:build cgo

package nccl

// #include <stdint.h>
// #include <stddef.h>
// typedef int fbResult;
// static fbResult fs_allGather(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, void* comm, uintptr_t st) {
//   return ((fbResult (*)(const void*, void*, size_t, int, void*, void*))f)((const void*)s, (void*)r, n, dt, comm, (void*)st);
// }
// static fbResult fs_reduce(void* f, uintptr_t s, uintptr_t r, size_t n, int dt, int op, void* comm, uintptr_t st) {
//   return ((fbResult (*)(const void*, void*, size_t, int, int, void*, void*))f)((const void*)s, (void*)r, n, dt, op, comm, (void*)st);
// }
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

var (
	_ comm.StreamCollectives = (*Communicator)(nil)
	_ comm.StreamOrdered     = (*Communicator)(nil)
)

// orderedStream is a Stream whose handle can be had without Handle's implicit
// wait for the compute stream (the cuda device's CollectiveStream): the caller
// of Start* orders the stream itself with device.Streams events.
type orderedStream interface {
	Ordered() uintptr
}

// OnStream implements comm.StreamOrdered: collectives can be started on the
// stream when the communicator has one that the caller can order.
func (c *Communicator) OnStream() bool {
	_, ok := c.opts.Stream.(orderedStream)
	return ok
}

// errNoStream is Start* on a communicator without an orderable stream.
var errNoStream = errors.New("nccl: collectives can be started only on the cuda device's comm stream (Options.Stream with Ordered); use the blocking *Buffers calls")

// pending is a started collective; Wait finishes it once.
type pending struct {
	w    *work
	once sync.Once
	err  error
}

func (p *pending) Wait() error {
	p.once.Do(func() {
		p.w.c.started.CompareAndSwap(p, nil)
		p.err = p.w.finish()
	})
	return p.err
}

// start begins a collective of bytes on the ordered stream and returns it pending.
func (c *Communicator) start(ctx context.Context, kind comm.Kind, bytes int, keep []any, call func(h unsafe.Pointer, stream uintptr) C.fbResult) (comm.Pending, error) {
	if !c.OnStream() {
		return nil, errNoStream
	}
	w, err := c.begin(ctx, kind, bytes, true, call)
	if err != nil {
		return nil, err
	}
	w.keep = keep
	p := &pending{w: w}
	c.started.Store(p)
	return p, nil
}

// StartAllGather implements comm.StreamCollectives; bf16 buffers (the bf16
// policy's gathered parameters) go as ncclBfloat16, on device pointers only.
func (c *Communicator) StartAllGather(ctx context.Context, dst, src device.Buffer) (comm.Pending, error) {
	if err := c.checkLen(comm.KindAllGather, dst.Len(), src.Len(), src.Len()*c.size); err != nil {
		return nil, err
	}
	dt, es := C.int(ncclFloat32), 4
	switch t := device.DTypeOf(src); {
	case device.DTypeOf(dst) != t:
		return nil, fmt.Errorf("nccl: all_gather from %v into %v: one dtype on both sides", t, device.DTypeOf(dst))
	case t == device.BF16:
		_, dok := dst.(DevicePointer)
		_, sok := src.(DevicePointer)
		if !dok || !sok {
			return nil, fmt.Errorf("nccl: a started bf16 all_gather needs device buffers (%s has none)", src.Device().Name())
		}
		dt, es = ncclBfloat16, 2
	}
	d, dh, err := c.pointer(dst)
	if err != nil {
		return nil, err
	}
	s, sh, err := c.pointer(src)
	if err != nil {
		return nil, err
	}
	n := src.Len()
	return c.start(ctx, comm.KindAllGather, n*es, []any{dh, sh}, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fs_allGather(c.lib.allGather, C.uintptr_t(s), C.uintptr_t(d), C.size_t(n), dt, h, C.uintptr_t(st))
	})
}

// StartReduceScatter implements comm.StreamCollectives.
func (c *Communicator) StartReduceScatter(ctx context.Context, dst, src device.Buffer, op comm.Op) (comm.Pending, error) {
	if err := refuseBF16(comm.KindReduceScatter, dst, src); err != nil {
		return nil, err
	}
	if err := c.checkLen(comm.KindReduceScatter, dst.Len()*c.size, src.Len(), src.Len()); err != nil {
		return nil, err
	}
	o, err := ncclOp(op)
	if err != nil {
		return nil, err
	}
	d, dh, err := c.pointer(dst)
	if err != nil {
		return nil, err
	}
	s, sh, err := c.pointer(src)
	if err != nil {
		return nil, err
	}
	n := dst.Len()
	return c.start(ctx, comm.KindReduceScatter, 4*n, []any{dh, sh}, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fs_reduce(c.lib.reduceScatter, C.uintptr_t(s), C.uintptr_t(d), C.size_t(n), ncclFloat32, o, h, C.uintptr_t(st))
	})
}

// StartAllReduce implements comm.StreamCollectives.
func (c *Communicator) StartAllReduce(ctx context.Context, buf device.Buffer, op comm.Op) (comm.Pending, error) {
	if err := refuseBF16(comm.KindAllReduce, buf); err != nil {
		return nil, err
	}
	o, err := ncclOp(op)
	if err != nil {
		return nil, err
	}
	p, ph, err := c.pointer(buf)
	if err != nil {
		return nil, err
	}
	n := buf.Len()
	return c.start(ctx, comm.KindAllReduce, 4*n, []any{ph}, func(h unsafe.Pointer, st uintptr) C.fbResult {
		return C.fs_reduce(c.lib.allReduce, C.uintptr_t(p), C.uintptr_t(p), C.size_t(n), ncclFloat32, o, h, C.uintptr_t(st))
	})
}
