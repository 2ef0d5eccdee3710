//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// CollectiveStream is the device's communication stream as a communication
// library (NCCL) uses it: Handle before each collective, Done to wait for it.
type CollectiveStream struct{ d *Device }

// CollectiveStream returns the comm stream for collectives.
func (d *Device) CollectiveStream() *CollectiveStream { return &CollectiveStream{d} }

// Handle returns the comm stream's CUstream after making it wait for every op
// issued on the compute stream so far: a collective issued next reads what those
// ops wrote (a shard after AdamW, gradients after backward), whatever the caller
// did about streams. A caller that waits for the collective (Done) before issuing
// more ops needs nothing else; overlap beyond that comes from device.Streams.
func (s *CollectiveStream) Handle() uintptr {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	var e C.CUevent
	d.issue("cuEventCreate", func() int { return int(C.fsdp_event_create(d.ctx, &e)) })
	d.issue("cuEventRecord", func() int { return int(C.fsdp_event_record(d.ctx, e, d.compute)) })
	d.issue("cuStreamWaitEvent", func() int { return int(C.fsdp_stream_wait(d.ctx, d.comm, e)) })
	if e != nil {
		C.fsdp_event_destroy(d.ctx, e) // released by the driver once the wait is satisfied
	}
	return uintptr(unsafePointer(d.comm))
}

// Ordered returns the comm stream's CUstream as it is, without Handle's wait
// for the compute stream: for a caller that orders the comm stream itself with
// device.Streams events (fsdp's prefetch), so that a collective waits only for
// the work it reads and overlaps the compute issued since.
func (s *CollectiveStream) Ordered() uintptr { return uintptr(unsafePointer(s.d.comm)) }

// Done reports whether the work issued on the comm stream has finished
// (cuStreamQuery), or the device's failure.
func (s *CollectiveStream) Done() (bool, error) {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.errLocked(); err != nil {
		return false, err
	}
	switch r := int(C.fsdp_stream_query(d.ctx, d.comm)); r {
	case 0:
		return true, nil
	case cudaErrorNotReady:
		return false, nil
	default:
		d.err = fmt.Errorf("comm stream: %w", cuErr("cuStreamQuery", r))
		return false, d.errLocked()
	}
}

// MakeCurrent makes the device's context current on the calling OS thread, for
// libraries that use the CUDA runtime (NCCL picks its GPU from the thread's
// context); the caller holds the thread (runtime.LockOSThread).
func (d *Device) MakeCurrent() error {
	return cuErr("cuCtxSetCurrent", int(C.fsdp_make_current(d.ctx)))
}

// Scratch returns device memory for at least n float32, valid until the next
// Scratch call: the staging area of collectives on host slices (the loss, the
// gradient norm) when the communicator works on device memory.
func (d *Device) Scratch(n int) (uintptr, error) {
	if n < 0 {
		return 0, fmt.Errorf("%s: scratch of %d elements", d.name, n)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p, ok := d.scratchLocked("staging", int64(max(n, 1))*elemBytes)
	if !ok {
		return 0, d.errLocked()
	}
	return uintptr(p), nil
}

// ToDevice copies src to device address dst after the compute stream's work and
// returns when the copy is done.
func (d *Device) ToDevice(dst uintptr, src []float32) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(src) > 0 {
		d.issue("ToDevice", func() int {
			return int(C.fsdp_htod(d.ctx, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)*elemBytes), d.compute))
		})
		d.issue("ToDevice", func() int { return int(C.fsdp_stream_sync(d.ctx, d.compute)) })
	}
	return d.errLocked()
}

// ToHost copies from device address src into dst once the comm stream's work
// (the collective that wrote src) and the compute stream's are done.
func (d *Device) ToHost(dst []float32, src uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(dst) > 0 {
		d.issue("ToHost", func() int { return int(C.fsdp_stream_sync(d.ctx, d.comm)) })
		d.issue("ToHost", func() int {
			return int(C.fsdp_dtoh(d.ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)*elemBytes), d.compute))
		})
	}
	return d.errLocked()
}
