//go:build cgo

package cuda

// #include "shim.h"
import "C"

import (
	"fmt"
	"sort"
	"time"
)

// profiler is the op timings of a device with Options.Profile: each op records a
// timing event before and after its work on the compute stream; OpTimes reads
// the pairs once the stream has passed them and sums them per op and shape.
type profiler struct {
	pending []timedOp
	done    map[[2]string]*OpTime
	// free are timing events to reuse, so a step does not create thousands.
	free []C.CUevent
}

type timedOp struct {
	cost       OpCost
	start, end C.CUevent
}

// timed starts timing one op of cost c (computed only when profiling) and
// returns what ends it: both are issued on the compute stream, so the pair
// brackets exactly the op's kernels or GEMM. d.mu is held across both.
func (d *Device) timed(c func() OpCost) func() {
	if d.prof == nil || d.err != nil || d.k == nil {
		return func() {}
	}
	start, ok := d.timingEvent()
	if !ok {
		return func() {}
	}
	d.issue("cuEventRecord", func() int { return int(C.fsdp_event_record(d.ctx, start, d.compute)) })
	return func() {
		end, ok := d.timingEvent()
		if !ok {
			d.prof.free = append(d.prof.free, start)
			return
		}
		d.issue("cuEventRecord", func() int { return int(C.fsdp_event_record(d.ctx, end, d.compute)) })
		d.prof.pending = append(d.prof.pending, timedOp{cost: c(), start: start, end: end})
	}
}

func (d *Device) timingEvent() (C.CUevent, bool) {
	if n := len(d.prof.free); n > 0 {
		e := d.prof.free[n-1]
		d.prof.free = d.prof.free[:n-1]
		return e, true
	}
	var e C.CUevent
	d.issue("cuEventCreate", func() int { return int(C.fsdp_event_create_timed(d.ctx, &e)) })
	return e, d.err == nil
}

// OpTimes waits for the device and returns the ops timed since it was opened or
// last reset, one row per op and shape, sorted by op and shape. It fails without
// Options.Profile, or when the device has failed.
func (d *Device) OpTimes() ([]OpTime, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.prof == nil {
		return nil, fmt.Errorf("%s: OpTimes: the device was opened without Options.Profile", d.name)
	}
	if err := d.syncLocked(); err != nil {
		return nil, err
	}
	for _, p := range d.prof.pending {
		var ms C.float
		d.issue("cuEventElapsedTime", func() int { return int(C.fsdp_event_elapsed(d.ctx, &ms, p.start, p.end)) })
		if d.err != nil {
			return nil, d.err
		}
		k := [2]string{p.cost.Op, p.cost.Shape}
		o := d.prof.done[k]
		if o == nil {
			o = &OpTime{OpCost: p.cost}
			d.prof.done[k] = o
		}
		o.Calls++
		o.Measured += time.Duration(float64(ms) * 1e6)
		d.prof.free = append(d.prof.free, p.start, p.end)
	}
	d.prof.pending = d.prof.pending[:0]
	out := make([]OpTime, 0, len(d.prof.done))
	for _, o := range d.prof.done {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Op != out[j].Op {
			return out[i].Op < out[j].Op
		}
		return out[i].Shape < out[j].Shape
	})
	return out, nil
}

// ResetOpTimes waits for the device and forgets the timings so far (the warmup
// steps' before a measured one).
func (d *Device) ResetOpTimes() error {
	if _, err := d.OpTimes(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	clear(d.prof.done)
	return nil
}

// releaseProfiler destroys the profiler's events (at Close, before the context).
func (d *Device) releaseProfiler() {
	if d.prof == nil {
		return
	}
	for _, p := range d.prof.pending {
		d.prof.free = append(d.prof.free, p.start, p.end)
	}
	for _, e := range d.prof.free {
		C.fsdp_event_destroy(d.ctx, e)
	}
	d.prof.pending, d.prof.free = nil, nil
}

// Launches is the number of kernel launches the device has issued since it was
// opened: its own kernels, cuBLAS calls (one each: a GEMM may launch a split-K
// reduction too, which only a profiler sees), and the device-side memsets and
// copies of Zero and Copy and the memset zeroing each Alloc, each a piece of
// work the GPU's front end schedules.
// Transfers to and from the host, collectives and events are not counted. The
// worker reports it per step: a step of many short launches is launch-bound.
func (d *Device) Launches() int64 { return d.launches.Load() }

// countWork counts one launch about to be issued (not after a failure, when
// issue drops it). d.mu is held.
func (d *Device) countWork() {
	if d.err == nil {
		d.launches.Add(1)
	}
}
