package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
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
