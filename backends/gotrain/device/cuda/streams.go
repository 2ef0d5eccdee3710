//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

var (
	_ device.Streams     = (*Device)(nil)
	_ device.ExtraMemory = (*Device)(nil)
)

// event is a CUDA event of the device's context.
type event struct {
	d *Device
	e C.CUevent
}

func (d *Device) stream(s device.Stream) C.CUstream {
	switch s {
	case device.ComputeStream:
		return d.compute
	case device.CommStream:
		return d.comm
	}
	panic(fmt.Sprintf("%s: unknown stream %d", d.name, s))
}

// Record records an event on s. After a device failure it returns an event that
// is never waited on (the failure is reported by Sync).
func (d *Device) Record(s device.Stream) device.Event {
	st := d.stream(s)
	d.mu.Lock()
	defer d.mu.Unlock()
	var e C.CUevent
	d.issue("cuEventCreate", func() int { return int(C.fsdp_event_create(d.ctx, &e)) })
	d.issue("cuEventRecord", func() int { return int(C.fsdp_event_record(d.ctx, e, st)) })
	return &event{d: d, e: e}
}

func (d *Device) event(e device.Event) *event {
	ev, ok := e.(*event)
	if !ok || ev.d != d {
		panic(fmt.Sprintf("%s: event %T does not belong to this device", d.name, e))
	}
	return ev
}

// Wait makes later work on s wait for e.
func (d *Device) Wait(s device.Stream, e device.Event) {
	st, ev := d.stream(s), d.event(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ev.e == nil {
		return
	}
	d.issue("cuStreamWaitEvent", func() int { return int(C.fsdp_stream_wait(d.ctx, st, ev.e)) })
}

// WaitHost blocks until e has completed and returns the device's failure, if any.
func (d *Device) WaitHost(e device.Event) error {
	ev := d.event(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ev.e != nil {
		d.issue("cuEventSynchronize", func() int { return int(C.fsdp_event_sync(d.ctx, ev.e)) })
	}
	return d.errLocked()
}

// Release destroys e (the driver frees it once its work completed).
func (d *Device) Release(e device.Event) {
	ev := d.event(e)
	d.mu.Lock()
	defer d.mu.Unlock()
	if ev.e != nil && d.ctx != nil {
		C.fsdp_event_destroy(d.ctx, ev.e)
	}
	ev.e = nil
}

// ComputeStream and CommStream return the streams' CUstream handles, for
// libraries that take one (NCCL runs its collectives on CommStream).
func (d *Device) ComputeStream() uintptr { return uintptr(unsafePointer(d.compute)) }

// CommStream returns the communication stream's CUstream handle.
func (d *Device) CommStream() uintptr { return uintptr(unsafePointer(d.comm)) }

// Ordinal is the GPU's index (what cudaSetDevice takes).
func (d *Device) Ordinal() int { return d.opts.Ordinal }

// ExtraMemory reports Extras by name for device.ExtraMemory.
func (d *Device) ExtraMemory() map[string]int64 {
	e := d.Extras()
	return map[string]int64{
		"arena_reserved": e.Arena.Reserved, "arena_peak_reserved": e.Arena.PeakReserved,
		"arena_slack": e.Slack, "cublas_workspace": e.Workspace, "scratch": e.Scratch,
		"context": e.Context, "device_used": e.DeviceUsed, "peak_device_used": e.PeakDeviceUsed,
	}
}

func unsafePointer(s C.CUstream) unsafe.Pointer { return unsafe.Pointer(s) }

// deferredFree is a block whose release waits for an event (FreeAfter).
type deferredFree struct {
	ptr uint64
	e   C.CUevent
}

// FreeAfter implements device.Streams: the tracker is released at once, the
// block joins d.deferred and returns to the arena when e has completed. This is
// PyTorch's record_stream made explicit: the free is recorded on the stream
// that used the block last, so the arena, which hands memory out in
// compute-stream order, never gives it to a compute op while that stream still
// reads it.
func (d *Device) FreeAfter(b device.Buffer, e device.Event) {
	x, ev := d.buf("FreeAfter", b), d.event(e)
	if x.view {
		panic(fmt.Sprintf("%s: FreeAfter of a view (Slice): free the buffer it was cut from", d.name))
	}
	if !x.a.freed.CompareAndSwap(false, true) {
		panic(fmt.Sprintf("%s: FreeAfter of a buffer freed already", d.name))
	}
	d.mu.Lock()
	switch {
	case x.a.ptr == 0 || d.closed:
		if ev.e != nil && d.ctx != nil {
			C.fsdp_event_destroy(d.ctx, ev.e)
		}
	case ev.e == nil: // recorded after a device failure: nothing runs any more
		if err := d.arena.free(x.a.ptr); err != nil {
			d.mu.Unlock()
			panic(fmt.Sprintf("%s: FreeAfter: %v", d.name, err))
		}
	default:
		d.deferred = append(d.deferred, deferredFree{ptr: x.a.ptr, e: ev.e})
	}
	ev.e = nil
	d.mu.Unlock()
	d.tr.Release(x.a.bytes, x.a.cat)
}

// reclaimLocked returns the deferred blocks whose event has completed to the
// arena; with wait, it first makes the compute stream wait for every pending
// one (the arena's next user runs there), so all of them can go back. d.mu is
// held.
func (d *Device) reclaimLocked(wait bool) {
	kept := d.deferred[:0]
	for _, f := range d.deferred {
		done := wait
		if wait {
			d.issue("cuStreamWaitEvent", func() int { return int(C.fsdp_stream_wait(d.ctx, d.compute, f.e)) })
		} else {
			switch r := int(C.fsdp_event_query(d.ctx, f.e)); r {
			case 0:
				done = true
			case cudaErrorNotReady:
			default:
				if d.err == nil {
					d.err = fmt.Errorf("deferred free: %w", cuErr("cuEventQuery", r))
				}
				done = true // the device failed: nothing will touch the block again
			}
		}
		if !done {
			kept = append(kept, f)
			continue
		}
		C.fsdp_event_destroy(d.ctx, f.e)
		_ = d.arena.free(f.ptr)
	}
	clear(d.deferred[len(kept):])
	d.deferred = kept
}

// allocLocked is arena.alloc after reclaiming completed deferred frees; when
// the arena cannot grow, the still pending ones are reclaimed through a
// compute-stream wait and the allocation retried, rather than failing with
// memory that only waits for the comm stream. d.mu is held.
func (d *Device) allocLocked(bytes int64) (uint64, error) {
	if len(d.deferred) > 0 {
		d.reclaimLocked(false)
	}
	ptr, err := d.arena.alloc(bytes)
	if err != nil && len(d.deferred) > 0 {
		d.reclaimLocked(true)
		ptr, err = d.arena.alloc(bytes)
	}
	return ptr, err
}

// dropDeferred destroys the deferred frees' events at Close (the arena gives
// every segment back anyway). d.mu is held or the device is being torn down.
func (d *Device) dropDeferred() {
	for _, f := range d.deferred {
		if d.ctx != nil {
			C.fsdp_event_destroy(d.ctx, f.e)
		}
	}
	d.deferred = nil
}

// RecordTimed is Record with a timing event (the step recorder's, fsdp's
// timeline.go): Elapsed reads the time between two of them once both have
// completed; Release gives it back like any event.
func (d *Device) RecordTimed(s device.Stream) device.Event {
	st := d.stream(s)
	d.mu.Lock()
	defer d.mu.Unlock()
	var e C.CUevent
	d.issue("cuEventCreate", func() int { return int(C.fsdp_event_create_timed(d.ctx, &e)) })
	d.issue("cuEventRecord", func() int { return int(C.fsdp_event_record(d.ctx, e, st)) })
	return &event{d: d, e: e}
}

// Elapsed is the time from timing event a to b (cuEventElapsedTime, about half
// a microsecond of resolution), both recorded with RecordTimed and completed
// (after Sync). It fails for an event recorded after a device failure, a
// released one, or one without timing; only the first is the device's failure:
// reading a time the driver refuses leaves the device usable.
func (d *Device) Elapsed(a, b device.Event) (time.Duration, error) {
	ea, eb := d.event(a), d.event(b)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errLocked(); err != nil {
		return 0, err
	}
	if ea.e == nil || eb.e == nil || d.ctx == nil {
		return 0, fmt.Errorf("%s: Elapsed: an event was released, or the device closed", d.name)
	}
	var ms C.float
	if r := int(C.fsdp_event_elapsed(d.ctx, &ms, ea.e, eb.e)); r != 0 {
		return 0, fmt.Errorf("%s: %w (an event recorded without timing, or not yet completed)", d.name, cuErr("cuEventElapsedTime", r))
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
