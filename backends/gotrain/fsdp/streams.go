package fsdp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
)

// The stream schedule. On a device with a compute and a communication stream
// (device.Streams: cuda) whose communicators enqueue on that comm stream
// (comm.StreamCollectives: NCCL), the trainer does not gather on a goroutine:
// every collective of a step is enqueued from the trainer's goroutine, in
// program order (the same on every rank, which NCCL needs: two communicators
// sharing a stream deadlock when ranks enqueue them in different orders), and
// the two streams are ordered by events only where data flows between them:
//
//   - all-gather of unit i: its gathered buffer is allocated (charged to the
//     tracker at the same point as on cpu) and an event "ready" is recorded on
//     the compute stream; the comm stream waits for it and runs the all-gather,
//     then records "gathered". Ready covers the shard (last written by AdamW on
//     the compute stream), the buffer's zeroing by Alloc, and every compute op
//     that used the buffer's memory before it was freed and handed out again.
//     With forward_prefetch and backward_pre, the prefetch's buffer is
//     allocated before the current unit's compute is enqueued, so the
//     all-gather overlaps that compute; with backward_post it is allocated
//     after the current unit's backward, so the all-gather waits for it (its
//     memory may be the freed parameters that backward reads) and overlaps the
//     reduce-scatter's wait instead.
//   - before unit i's compute, the compute stream waits for "gathered".
//   - reduce-scatter of unit i: an event recorded on the compute stream at the
//     end of unit i's backward; the comm stream waits for it, reduce-scatters
//     (and, hybrid_shard, all-reduces across replicas) and records "reduced".
//     The full gradient is released with device.Streams.FreeAfter("reduced"):
//     accounted as freed now, its memory back in the arena only once the
//     reduce-scatter has read it, so the next unit's backward neither waits for
//     the reduction nor reuses memory it still reads.
//   - after the backward of the last micro-step, the compute stream waits for
//     the comm stream (the gradient shards feed clipping and AdamW).
//
// A gathered buffer is last used by compute (the unit's forward or backward),
// so it is freed with Free on the compute stream's order; the all-gather that
// wrote it is ordered before that use by "gathered".

// EnvDropWait names a fault-injection variable for tests: it makes the stream
// schedule leave out one of its event waits, so that the tests can show they
// catch a missing one (with the fake libcuda running the comm stream on its own
// thread, late, the run then trains on wrong data). Values: "gather" (compute
// does not wait for the all-gather), "shard" (the all-gather does not wait for
// the compute stream), "reduce" (the reduce-scatter does not wait for the
// backward), "free" (the full gradient is freed at once instead of after the
// reduce-scatter). Never set it outside tests.
const EnvDropWait = "FSDPBENCH_FSDP_DROP_WAIT"

var dropWaitValues = []string{"gather", "shard", "reduce", "free"}

// streamsOf is how the trainer finds its device's streams; tests replace it to
// run the schedule on the cpu device with streams that log what they are asked.
var streamsOf = func(d device.Device) (device.Streams, bool) {
	s, ok := d.(device.Streams)
	return s, ok
}

// streamSchedule runs the trainer's collectives on the device's comm stream.
type streamSchedule struct {
	s device.Streams
	// gather, shard and replicate are the trainer's communicators as stream
	// collectives (nil where the group is one rank).
	gather, shard, replicate comm.StreamCollectives
	// last is each communicator's started collective not yet waited for.
	last map[comm.StreamCollectives]comm.Pending
	// gathered holds, per unit with an all-gather in flight, the comm-stream
	// event after it.
	gathered map[int]device.Event
	drop     string
	// rec, when the device times its streams, brackets each collective with
	// timing events on the comm stream (timeline.go).
	rec *recorder
}

// newStreamSchedule returns the stream schedule for t, or nil when t's device or
// communicators do not support it (the cpu device, the TCP ring): the trainer
// then prefetches on a goroutine.
func newStreamSchedule(t *Trainer) (*streamSchedule, error) {
	s, ok := streamsOf(t.dev)
	if !ok {
		return nil, nil
	}
	ss := &streamSchedule{s: s, last: map[comm.StreamCollectives]comm.Pending{}, gathered: map[int]device.Event{}}
	for _, c := range []struct {
		from comm.Communicator
		to   *comm.StreamCollectives
	}{{t.gather, &ss.gather}, {t.shard, &ss.shard}, {t.replicate, &ss.replicate}} {
		if c.from == nil {
			continue
		}
		sc, ok := comm.OnStream(c.from)
		if !ok {
			return nil, nil
		}
		*c.to = sc
	}
	if v := os.Getenv(EnvDropWait); v != "" {
		found := false
		for _, w := range dropWaitValues {
			found = found || v == w
		}
		if !found {
			return nil, fmt.Errorf("fsdp: %s=%q is not one of %s (a test hook: unset it)", EnvDropWait, v, strings.Join(dropWaitValues, ", "))
		}
		ss.drop = v
	}
	return ss, nil
}

// start enqueues a collective on c after waiting for c's previous one. When
// the device times its streams, timing events on the comm stream bracket the
// collective's enqueueing, recorded after that host wait, so that the pair
// brackets the collective's own run (timeline.go).
func (ss *streamSchedule) start(c comm.StreamCollectives, op opKind, lane Lane, unit int, do func() (comm.Pending, error)) error {
	if p := ss.last[c]; p != nil {
		delete(ss.last, c)
		if err := p.Wait(); err != nil {
			return err
		}
	}
	var p comm.Pending
	var err error
	if ss.rec != nil {
		err = ss.rec.onStream(device.CommStream, op, lane, unit, func() error {
			p, err = do()
			return err
		})
	} else {
		p, err = do()
	}
	if err != nil {
		return err
	}
	ss.last[c] = p
	return nil
}

// afterCompute makes the comm stream wait for the compute stream's work so far.
func (ss *streamSchedule) afterCompute(what string) {
	if ss.drop == what {
		return
	}
	e := ss.s.Record(device.ComputeStream)
	ss.s.Wait(device.CommStream, e)
	ss.s.Release(e)
}

// startGather enqueues unit i's all-gather into full, which was just allocated.
func (ss *streamSchedule) startGather(ctx context.Context, i int, full, shard device.Buffer) error {
	ss.afterCompute("shard")
	err := ss.start(ss.gather, opAllGather, LaneGather, i, func() (comm.Pending, error) {
		return ss.gather.StartAllGather(ctx, full, shard)
	})
	if err != nil {
		return err
	}
	ss.gathered[i] = ss.s.Record(device.CommStream)
	return nil
}

// use makes the compute stream wait for unit i's all-gather, if one is in flight.
func (ss *streamSchedule) use(i int) {
	e, ok := ss.gathered[i]
	if !ok {
		return
	}
	delete(ss.gathered, i)
	if ss.drop != "gather" {
		ss.s.Wait(device.ComputeStream, e)
	}
	ss.s.Release(e)
}

// reduce enqueues unit i's gradient reduction (reduce-scatter of the full
// gradient into the shard and/or the all-reduce across replicas) after the
// unit's backward, and frees the full gradient once the comm stream read it.
func (ss *streamSchedule) reduce(ctx context.Context, t *Trainer, i int) error {
	u, name := t.units[i], t.model.Units[i].Name
	if u.accum != nil && ss.shard == nil {
		t.dev.Copy(u.gradShard, u.accum)
		t.dev.Free(u.accum)
		u.accum = nil
	}
	if u.accum == nil && ss.replicate == nil {
		return nil
	}
	ss.afterCompute("reduce")
	if u.accum != nil {
		accum := u.accum
		u.accum = nil
		err := ss.start(ss.shard, opReduceScatter, LaneReduce, i, func() (comm.Pending, error) {
			return ss.shard.StartReduceScatter(ctx, u.gradShard, accum, comm.Average)
		})
		if err != nil {
			t.dev.Free(accum) // nothing was enqueued that reads it
			return fmt.Errorf("reduce-scatter the gradient of unit %s: %w", name, err)
		}
		if ss.drop == "free" {
			t.dev.Free(accum)
		} else {
			ss.s.FreeAfter(accum, ss.s.Record(device.CommStream))
		}
	}
	if ss.replicate != nil {
		err := ss.start(ss.replicate, opAllReduce, LaneReduce, i, func() (comm.Pending, error) {
			return ss.replicate.StartAllReduce(ctx, u.gradShard, comm.Average)
		})
		if err != nil {
			return fmt.Errorf("all-reduce the gradient of unit %s: %w", name, err)
		}
	}
	return nil
}

// finish waits for every collective in flight and makes the compute stream
// wait for the comm stream: the gradient shards are complete for clipping and
// AdamW, and every communicator is free for the blocking collectives (the
// gradient norm, the loss).
func (ss *streamSchedule) finish() error {
	var errs []error
	for _, c := range []comm.StreamCollectives{ss.gather, ss.shard, ss.replicate} {
		if p := ss.last[c]; p != nil {
			delete(ss.last, c)
			errs = append(errs, p.Wait())
		}
	}
	for i, e := range ss.gathered {
		delete(ss.gathered, i)
		ss.s.Release(e)
	}
	e := ss.s.Record(device.CommStream)
	ss.s.Wait(device.ComputeStream, e)
	ss.s.Release(e)
	return errors.Join(errs...)
}
