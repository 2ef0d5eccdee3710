package fsdp

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/results"
)

// Where the step time goes (issue 27). Every step the trainer records an
// interval for each piece of computation (a unit's forward, its backward, the
// optimizer, the gradient clipping), each collective (all-gather,
// reduce-scatter, all-reduce) while it runs, and each wait on one, and at the
// step's end turns them into a results.StepBreakdown by interval unions:
// compute is the union of the computation's intervals, the collectives' the
// union of theirs (runs and waits alike), exposed communication the part of the
// collectives' union that no computation covers, other the rest of the step
// (data, allocation, host overhead). These are PyTorch's Holistic Trace
// Analysis definitions ("temporal breakdown", "comm/comp overlap").
//
// Where the times come from:
//   - without device streams (the cpu device, over shared memory or TCP), from
//     the host's monotonic clock on the goroutine that does the work: the
//     trainer's for computation, blocking collectives (reduce-scatter,
//     all-reduce) and waits on an all-gather; a gather goroutine's for the
//     all-gather it runs (carried back on the unit's pending channel, so
//     nothing is shared between goroutines);
//   - with device streams (cuda + NCCL), from timing events recorded on the
//     compute stream around each unit's computation and on the comm stream
//     around each collective, resolved after the step's Sync as offsets from an
//     event recorded on the compute stream when the step began: the GPU's own
//     execution, not the host's enqueueing. A wait there is the compute stream
//     idling on an event, which is time in which no computation runs, so the
//     union rule counts it without an interval of its own.
//
// The recorder keeps one step's intervals in a slice reused every step, and,
// for the timeline (timeline.json), the measured steps' intervals up to a cap
// fixed when keeping starts: no allocation per op once the slices have grown.

// opKind is what an interval did.
type opKind uint8

const (
	opForward opKind = iota
	opBackward
	opOptimizer
	opClip
	opAllGather
	opReduceScatter
	opAllReduce
	numOps
)

var opNames = [numOps]string{"forward", "backward", "optimizer", "clip", "all-gather", "reduce-scatter", "all-reduce"}

// collective is true for the collectives' kinds.
func (o opKind) collective() bool { return o >= opAllGather }

// Lane is the timeline's thread an interval is drawn on.
type Lane uint8

const (
	// LaneCompute is the trainer's goroutine (cpu) or the compute stream (cuda):
	// computation, and the waits on a collective.
	LaneCompute Lane = iota + 1
	// LaneGather is the all-gathers' goroutine (cpu) or the comm stream (cuda).
	LaneGather
	// LaneReduce is the gradient reductions and the blocking all-reduces (loss,
	// gradient norm), on the trainer's goroutine (cpu) or the comm stream.
	LaneReduce
)

// Units of an interval that are not a model unit.
const (
	unitNone = -1 // the optimizer, the clipping: every unit
	unitNorm = -2 // the gradient norm's all-reduce
	unitLoss = -3 // the loss's all-reduce
)

// interval is one recorded piece of a step, times since the step's start.
type interval struct {
	start, end time.Duration
	op         opKind
	lane       Lane
	wait       bool
	unit       int16
}

// TimelineEvent is one kept interval of a measured step, for timeline.json.
type TimelineEvent struct {
	// Step is the optimizer step (StepReport.Step) it belongs to.
	Step int
	// Name says what ran ("forward layers.0", "all-gather head", "wait
	// all-gather layers.1", "all-reduce loss").
	Name string
	// Cat is "compute", "all-gather", "reduce-scatter" or "all-reduce".
	Cat string
	// Lane is the thread it is drawn on.
	Lane Lane
	// Start is its start since the step's, Dur its length.
	Start, Dur time.Duration
}

// TimelineStep is one kept step: its wall-clock start and length.
type TimelineStep struct {
	Step  int
	Start time.Time
	Dur   time.Duration
}

// timedPair is a computation or collective bracketed by two timing events, to
// resolve after the step.
type timedPair struct {
	iv         interval
	start, end device.Event
	// host: iv holds host times, start the compute stream's event before it
	// (end is nil).
	host bool
}

// timedStreams is a device whose streams record timing events (the cuda
// device): RecordTimed is Record with timing, Elapsed the time from a to b once
// both have completed. Events from RecordTimed are given back with Release.
type timedStreams interface {
	RecordTimed(s device.Stream) device.Event
	Elapsed(a, b device.Event) (time.Duration, error)
}

// recorder is the trainer's step recorder.
type recorder struct {
	start time.Time
	cur   []interval
	// ev, when set, times the work on the device streams; evStart is the
	// step's start event on the compute stream and pairs the bracketed work.
	ev      timedStreams
	streams device.Streams
	evStart device.Event
	pairs   []timedPair
	// spans, kset, cset: scratch for the unions.
	spans, kset, cset []span
	// keep is the cap on kept intervals (0: not keeping); kept and steps the
	// measured steps' intervals and starts, dropped the intervals left out.
	keep    int
	kept    []keptInterval
	steps   []TimelineStep
	dropped int
}

type keptInterval struct {
	interval
	step int
}

type span struct{ a, b time.Duration }

// begin starts a step.
func (r *recorder) begin() {
	r.cur = r.cur[:0]
	r.start = time.Now()
	if r.ev != nil {
		r.evStart = r.ev.RecordTimed(device.ComputeStream)
	}
}

// now is the time since the step's start on the host's monotonic clock.
func (r *recorder) now() time.Duration { return time.Since(r.start) }

// since converts a time taken on another goroutine.
func (r *recorder) since(t time.Time) time.Duration { return t.Sub(r.start) }

func (r *recorder) add(op opKind, lane Lane, unit int, wait bool, start, end time.Duration) {
	r.cur = append(r.cur, interval{start: start, end: end, op: op, lane: lane, wait: wait, unit: int16(unit)})
}

// host times f on the host and records it. With timed streams, f is a
// blocking collective that the host issues after work it enqueued on the
// compute stream and that cannot begin before that work is done (its buffer
// is staged through the device): the host is ahead of the GPU there, so an
// event recorded on the compute stream just before f gives its true start
// (resolve takes the later of the two), and the interval does not pretend to
// overlap the computation it waited for.
func (r *recorder) host(op opKind, lane Lane, unit int, f func() error) error {
	var after device.Event
	if r.ev != nil {
		after = r.ev.RecordTimed(device.ComputeStream)
	}
	s := r.now()
	err := f()
	iv := interval{start: s, end: r.now(), op: op, lane: lane, unit: int16(unit)}
	if after != nil {
		r.pairs = append(r.pairs, timedPair{iv: iv, start: after, host: true})
		return err
	}
	r.cur = append(r.cur, iv)
	return err
}

// onStream brackets what enqueue issues on stream s with timing events when
// the device times its streams, and otherwise times it on the host.
func (r *recorder) onStream(s device.Stream, op opKind, lane Lane, unit int, enqueue func() error) error {
	if r.ev == nil {
		return r.host(op, lane, unit, enqueue)
	}
	a := r.ev.RecordTimed(s)
	err := enqueue()
	b := r.ev.RecordTimed(s)
	r.pairs = append(r.pairs, timedPair{iv: interval{op: op, lane: lane, unit: int16(unit)}, start: a, end: b})
	return err
}

// resolve turns the step's timing events into intervals (after the step's
// Sync, when they have all completed) and gives the events back.
func (r *recorder) resolve() error {
	if r.ev == nil {
		return nil
	}
	var first error
	for _, p := range r.pairs {
		if first == nil && p.host {
			a, err := r.ev.Elapsed(r.evStart, p.start)
			if err != nil {
				first = fmt.Errorf("read the step's timing events: %w", err)
			} else {
				iv := p.iv
				iv.start = max(iv.start, a)
				iv.end = max(iv.end, iv.start)
				r.cur = append(r.cur, iv)
			}
		} else if first == nil {
			a, err1 := r.ev.Elapsed(r.evStart, p.start)
			b, err2 := r.ev.Elapsed(r.evStart, p.end)
			if err1 != nil || err2 != nil {
				first = fmt.Errorf("read the step's timing events: %w", cmp.Or(err1, err2))
			} else {
				iv := p.iv
				iv.start, iv.end = max(a, 0), max(b, a, 0)
				r.cur = append(r.cur, iv)
			}
		}
		r.release(p)
	}
	r.streams.Release(r.evStart)
	r.evStart = nil
	clear(r.pairs)
	r.pairs = r.pairs[:0]
	return first
}

func (r *recorder) release(p timedPair) {
	r.streams.Release(p.start)
	if p.end != nil {
		r.streams.Release(p.end)
	}
}

// drop gives back the events of a step that failed.
func (r *recorder) drop() {
	if r.ev == nil || r.evStart == nil {
		return
	}
	for _, p := range r.pairs {
		r.release(p)
	}
	r.streams.Release(r.evStart)
	r.evStart = nil
	clear(r.pairs)
	r.pairs = r.pairs[:0]
}

// union sorts and merges r.spans into dst (reused) and returns it with its
// measure.
func union(dst, spans []span) ([]span, time.Duration) {
	slices.SortFunc(spans, func(x, y span) int { return cmp.Compare(x.a, y.a) })
	dst = dst[:0]
	var total time.Duration
	for _, s := range spans {
		if s.b <= s.a {
			continue
		}
		if n := len(dst); n > 0 && s.a <= dst[n-1].b {
			dst[n-1].b = max(dst[n-1].b, s.b)
			continue
		}
		dst = append(dst, s)
	}
	for _, s := range dst {
		total += s.b - s.a
	}
	return dst, total
}

// collect fills r.spans with the step's intervals that keep says, clipped to
// [0, step].
func (r *recorder) collect(step time.Duration, keep func(interval) bool) {
	r.spans = r.spans[:0]
	for _, iv := range r.cur {
		if keep(iv) {
			r.spans = append(r.spans, span{min(max(iv.start, 0), step), min(max(iv.end, 0), step)})
		}
	}
}

// breakdown is the step's breakdown (the step lasted step) by interval unions.
func (r *recorder) breakdown(step time.Duration, source string) results.StepBreakdown {
	var compute, coll time.Duration
	r.collect(step, func(iv interval) bool { return !iv.op.collective() })
	r.kset, compute = union(r.kset, r.spans)
	r.collect(step, func(iv interval) bool { return iv.op.collective() })
	r.cset, coll = union(r.cset, r.spans)
	// exposed = |C \ K|: walk the two sorted, disjoint lists together.
	covered := time.Duration(0)
	j := 0
	for _, c := range r.cset {
		for j < len(r.kset) && r.kset[j].b <= c.a {
			j++
		}
		for k := j; k < len(r.kset) && r.kset[k].a < c.b; k++ {
			covered += min(c.b, r.kset[k].b) - max(c.a, r.kset[k].a)
		}
	}
	exposed := coll - covered
	sec := func(d time.Duration) float64 { return d.Seconds() }
	b := results.StepBreakdown{StepS: sec(step), ComputeS: sec(compute), CollectiveS: sec(coll),
		ExposedCommS: sec(exposed), Source: source}
	b.OtherS = max(b.StepS-b.ComputeS-b.ExposedCommS, 0)
	for _, k := range []struct {
		op  opKind
		dst **float64
	}{{opAllGather, &b.AllGatherS}, {opReduceScatter, &b.ReduceScatterS}, {opAllReduce, &b.AllReduceS}} {
		r.collect(step, func(iv interval) bool { return iv.op == k.op })
		if len(r.spans) == 0 {
			continue
		}
		var d time.Duration
		r.spans, d = union(r.spans, r.spans)
		*k.dst = results.F64(sec(d))
	}
	return b
}

// keepStep adds the step's intervals to the timeline while there is room.
func (r *recorder) keepStep(step int, dur time.Duration) {
	if r.keep <= 0 {
		return
	}
	r.steps = append(r.steps, TimelineStep{Step: step, Start: r.start, Dur: dur})
	room := r.keep - len(r.kept)
	n := min(room, len(r.cur))
	for _, iv := range r.cur[:n] {
		r.kept = append(r.kept, keptInterval{interval: iv, step: step})
	}
	r.dropped += len(r.cur) - n
}

// KeepTimeline makes the trainer keep the intervals of the steps from now on,
// at most maxEvents of them (the rest are counted as dropped), for Timeline:
// the worker turns it on for the measured steps.
func (t *Trainer) KeepTimeline(maxEvents int) {
	t.rec.keep = max(maxEvents, 0)
	if c := min(t.rec.keep, 1<<16); cap(t.rec.kept) < c {
		t.rec.kept = make([]keptInterval, 0, c)
	}
}

// Timeline returns the kept steps and their intervals, and how many intervals
// were left out for the cap.
func (t *Trainer) Timeline() (steps []TimelineStep, events []TimelineEvent, dropped int) {
	events = make([]TimelineEvent, 0, len(t.rec.kept))
	for _, k := range t.rec.kept {
		events = append(events, TimelineEvent{Step: k.step, Name: t.opName(k.interval), Cat: k.cat(),
			Lane: k.lane, Start: k.start, Dur: max(k.end-k.start, 0)})
	}
	return slices.Clone(t.rec.steps), events, t.rec.dropped
}

func (iv interval) cat() string {
	if iv.op.collective() {
		return opNames[iv.op]
	}
	return "compute"
}

// opName is an interval's name in the timeline.
func (t *Trainer) opName(iv interval) string {
	name := opNames[iv.op]
	if iv.wait {
		name = "wait " + name
	}
	switch u := int(iv.unit); {
	case u >= 0 && u < len(t.model.Units):
		return name + " " + t.model.Units[u].Name
	case u == unitNorm:
		return name + " grad norm"
	case u == unitLoss:
		return name + " loss"
	}
	return name
}
