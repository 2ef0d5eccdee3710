package torchrun

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// EnvProfileDir names the directory a launched script writes its torch.profiler
// traces to: one Chrome trace (JSON) per rank, <dir>/*.json or *.json.gz, named with its rank
// (rank-<r>.pt.trace.json; "rank<r>" or "rank_<r>" anywhere in the name will do)
// unless the trace says it (Kineto's distributedInfo.rank). The harness reads
// the traces' ProfilerStep#N spans into each rank's step breakdown.
const EnvProfileDir = "FSDPBENCH_PROFILE_DIR"

// ProfileDir is the profile directory's name in the run directory.
const ProfileDir = "profile"

// TimelineFile is the merged timeline of a repeat, in its run directory: the
// name every backend uses, so report --timeline finds it.
const TimelineFile = results.TimelineFile

// Bounds of what a trace may hold where it enters. A trace of three steps of a
// large model on a GPU is some tens of megabytes and a few hundred thousand
// events; past these it is not a trace of a few steps.
// They are variables so tests can lower them.
var (
	maxTraceBytes    int64 = 256 << 20
	maxTraceEvents         = 2_000_000
	maxTimelineBytes       = results.MaxTimelineBytes
)

const (
	// maxTraceTS bounds a timestamp or duration (µs): Kineto's are µs since the
	// epoch (about 1.8e15 now); 1e17 µs is three thousand years.
	maxTraceTS = 1e17
	// maxTraceSteps bounds the recorded steps the harness reads per rank (the
	// project's script records 3; a schedule that repeats may record more).
	maxTraceSteps = 16
	// maxTimelineArgs is the largest event args kept in the timeline (shapes,
	// kernel grids); longer ones (stacks, long shape lists) are dropped there.
	maxTimelineArgs = 512
)

// traceLimits are the bounds of a trace file, for input.ReadFile.
func traceLimits() input.Limits {
	return input.Limits{What: "profiler trace", MaxBytes: maxTraceBytes, MaxDepth: 64}
}

// traceID is a trace's pid or tid: a number (Kineto) or a string (torch's legacy
// profiler writes "CPU functions").
type traceID string

func (t *traceID) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*t = traceID(s)
		return nil
	}
	if _, err := strconv.ParseFloat(string(b), 64); err != nil && string(b) != "null" {
		return fmt.Errorf("pid/tid %s is neither a number nor a string", input.Clip(string(b), 40))
	}
	*t = traceID(b)
	return nil
}

// rawEvent is one Chrome trace event as read.
type rawEvent struct {
	Name string          `json:"name"`
	Ph   string          `json:"ph"`
	Cat  string          `json:"cat"`
	Ts   *float64        `json:"ts"`
	Dur  *float64        `json:"dur"`
	Pid  traceID         `json:"pid"`
	Tid  traceID         `json:"tid"`
	Args json.RawMessage `json:"args"`
}

// traceEvent is a complete ("X") event of a trace, checked.
type traceEvent struct {
	name, cat  string
	pid, tid   traceID
	start, end float64 // µs
	args       json.RawMessage
}

// rankTrace is one rank's trace: its complete events and recorded steps.
type rankTrace struct {
	path   string
	rank   int
	events []traceEvent
	steps  []traceEvent // the ProfilerStep#N spans on the host, by start
	baseUS float64      // Kineto's baseTimeNanoseconds in µs: ts counts from it
}

// readTrace reads a Chrome trace file (an array of events, torch's legacy
// profiler; or an object with traceEvents, Kineto), bounded: its size, its
// event count, and every complete event's timestamp and duration finite and
// non-negative. Errors name the file and what to do.
func readTrace(path string) (*rankTrace, error) {
	data, err := input.ReadFile(path, traceLimits())
	if err != nil {
		return nil, fmt.Errorf("%w (record fewer steps, or profile without record_shapes/with_stack)", err)
	}
	if strings.HasSuffix(path, ".gz") {
		// tensorboard_trace_handler(use_gzip=True): the bound is on what it
		// inflates to, which is what is decoded.
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("profiler trace %s: %w", path, err)
		}
		data, err = io.ReadAll(io.LimitReader(zr, maxTraceBytes+1))
		if err != nil {
			return nil, fmt.Errorf("profiler trace %s: %w", path, err)
		}
		if int64(len(data)) > maxTraceBytes {
			return nil, fmt.Errorf("profiler trace %s inflates to more than %d MiB; record fewer steps, or profile without record_shapes/with_stack", path, maxTraceBytes>>20)
		}
	}
	if err := input.CheckJSON(path, data, traceLimits()); err != nil {
		return nil, err
	}
	tr := &rankTrace{path: path, rank: -1}
	dec := json.NewDecoder(bytes.NewReader(data))
	bad := func(format string, a ...any) error {
		return fmt.Errorf("profiler trace %s: %s", path, fmt.Sprintf(format, a...))
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, bad("not JSON: %v", err)
	}
	switch tok {
	case json.Delim('['):
		if err := tr.readEvents(dec, bad); err != nil {
			return nil, err
		}
	case json.Delim('{'):
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, bad("%v", err)
			}
			switch k {
			case "traceEvents":
				if t, err := dec.Token(); err != nil || t != json.Delim('[') {
					return nil, bad("traceEvents must be a list of events")
				}
				if err := tr.readEvents(dec, bad); err != nil {
					return nil, err
				}
			case "baseTimeNanoseconds":
				// Kineto's origin of ts, when it writes one: wall-clock ns.
				var ns float64
				if err := dec.Decode(&ns); err != nil || math.IsNaN(ns) || ns < 0 || ns > maxTraceTS*1e3 {
					return nil, bad("baseTimeNanoseconds must be a time in ns from 0 to %g", maxTraceTS*1e3)
				}
				tr.baseUS = ns / 1e3
			case "distributedInfo":
				var di struct {
					Rank *int `json:"rank"`
				}
				if err := dec.Decode(&di); err != nil {
					return nil, bad("distributedInfo: %v", err)
				}
				if di.Rank != nil {
					tr.rank = *di.Rank
				}
			default:
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return nil, bad("%v: %v", k, err)
				}
			}
		}
	default:
		return nil, bad("a Chrome trace is a list of events or an object with traceEvents, not %v", tok)
	}
	sort.SliceStable(tr.steps, func(a, b int) bool { return tr.steps[a].start < tr.steps[b].start })
	tr.prune()
	return tr, nil
}

// prune keeps only the events that overlap the recorded steps, which is all
// the analysis and the timeline read: a run's ranks' traces are held together
// until the timeline is written.
func (tr *rankTrace) prune() {
	steps := tr.recorded()
	if len(steps) == 0 {
		return
	}
	lo, hi := steps[0].start, steps[len(steps)-1].end
	kept := tr.events[:0]
	for _, e := range tr.events {
		if e.end >= lo && e.start <= hi {
			if len(e.args) > maxTimelineArgs && e.name != "record_param_comms" {
				e.args = nil // neither the analysis nor the timeline keeps them
			}
			kept = append(kept, e)
		}
	}
	tr.events = slices.Clone(kept) // a new array: the old one's other events are freed
}

// readEvents reads the events of a list whose '[' was read, up to its ']'.
//
// A recorded step's span given twice (two ProfilerStep#1) is refused: which of
// the two is the step cannot be told, and two spans of one step mean two
// profilers recorded into one trace, or two cycles' traces were joined, so a
// breakdown from either would be of a step that was not measured alone. The run
// keeps its throughput; the breakdown is left out, with this reason.
func (tr *rankTrace) readEvents(dec *json.Decoder, bad func(string, ...any) error) error {
	stepAt := map[string]int{} // each ProfilerStep#N span's event index
	for n := 0; dec.More(); n++ {
		if n == maxTraceEvents {
			return bad("more than %d events; record fewer steps (at most %d are read) or profile without with_stack", maxTraceEvents, maxTraceSteps)
		}
		var e rawEvent
		if err := dec.Decode(&e); err != nil {
			return bad("event %d: %v", n, err)
		}
		if e.Ph != "X" {
			continue // metadata, instants, flows and counters carry no interval
		}
		if e.Ts == nil || e.Dur == nil {
			return bad("event %d (%q) is a complete event (ph X) without ts or dur", n, input.Clip(e.Name, 80))
		}
		for _, v := range []struct {
			what string
			x    float64
		}{{"ts", *e.Ts}, {"dur", *e.Dur}} {
			if math.IsNaN(v.x) || math.IsInf(v.x, 0) || v.x < 0 || v.x > maxTraceTS {
				return bad("event %d (%q): %s %v is not a time in µs from 0 to %g", n, input.Clip(e.Name, 80), v.what, v.x, maxTraceTS)
			}
		}
		ev := traceEvent{name: e.Name, cat: e.Cat, pid: e.Pid, tid: e.Tid, start: *e.Ts, end: *e.Ts + *e.Dur, args: e.Args}
		tr.events = append(tr.events, ev)
		if isStep(ev) {
			if *e.Dur > results.MaxBreakdownStepS*1e6 {
				return bad("event %d (%q) is a recorded step of %g s, longer than a day", n, input.Clip(e.Name, 80), *e.Dur/1e6)
			}
			if len(tr.steps) == maxTraceSteps*64 {
				return bad("more than %d ProfilerStep#N spans; record at most %d steps", len(tr.steps), maxTraceSteps)
			}
			if first, dup := stepAt[ev.name]; dup {
				return bad("%s is recorded twice (events %d and %d): a trace holds one span per recorded step; write one profiler cycle per file (tensorboard_trace_handler does) and start one profiler at a time",
					input.Clip(ev.name, 80), first, n)
			}
			stepAt[ev.name] = n
			tr.steps = append(tr.steps, ev)
		}
	}
	_, err := dec.Token() // ']'
	if err != nil {
		return bad("%v", err)
	}
	return nil
}

// isStep says whether e is a host-side ProfilerStep#N span (Kineto repeats it
// on the GPU as a gpu_user_annotation, which is not the step).
func isStep(e traceEvent) bool {
	return strings.HasPrefix(e.name, "ProfilerStep#") && !isGPU(e) && !strings.HasPrefix(strings.ToLower(e.cat), "gpu_")
}

// isGPU says whether e is device activity: a kernel, a memcpy or a memset
// (Kineto's categories "kernel", "gpu_memcpy", "gpu_memset"; "Kernel",
// "Memcpy", "Memset" in torch 1.8–1.9).
func isGPU(e traceEvent) bool {
	switch strings.ToLower(e.cat) {
	case "kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset":
		return true
	}
	return false
}

// Collective kinds.
const (
	kindAllGather     = "all_gather"
	kindReduceScatter = "reduce_scatter"
	kindAllReduce     = "all_reduce"
	kindOther         = "other"
)

// collective says whether e is a collective (launched, run or waited on) and
// which kind. The names matched (case-insensitively), in PyTorch 1.13 and 2.x:
//
//   - NCCL kernels on a GPU stream: ncclKernel_*, ncclDevKernel_* (any name
//     starting with "nccl");
//   - host-side titles of a process group's work: "nccl:*" ("nccl:all_reduce",
//     "nccl:_all_gather_base"), "gloo:*" ("gloo:all_reduce", "gloo:all_gather",
//     "gloo:reduce_scatter", on gloo's worker threads);
//   - the c10d operators on the calling thread: "c10d::*" (c10d::allreduce_,
//     c10d::_allgather_base_, c10d::_reduce_scatter_base_,
//     c10d::allgather_into_tensor_coalesced, c10d::barrier, c10d::wait), and
//     the functional collectives "_c10d_functional::*" / "c10d_functional::*"
//     (all_gather_into_tensor, reduce_scatter_tensor, wait_tensor);
//   - "record_param_comms" (torch 2.x), whose args name the collective.
//
// The kind comes from the name (or record_param_comms' "Collective name") with
// case and underscores ignored: "allgather" is an all-gather (all_gather,
// _allgather_base, AllGather), "reducescatter" a reduce-scatter, "allreduce"
// an all-reduce; any other collective (broadcast, barrier, send/recv, waits)
// counts in the collectives' time under no kind.
func collective(e traceEvent) (bool, string) {
	n := strings.ToLower(e.name)
	switch {
	case strings.HasPrefix(n, "nccl"), strings.HasPrefix(n, "gloo:"), strings.HasPrefix(n, "c10d::"),
		strings.HasPrefix(n, "_c10d_functional::"), strings.HasPrefix(n, "c10d_functional::"):
	case n == "record_param_comms":
		var a struct {
			Name string `json:"Collective name"`
		}
		if json.Unmarshal(e.args, &a) == nil && a.Name != "" {
			n = strings.ToLower(a.Name)
		}
	default:
		return false, ""
	}
	flat := strings.NewReplacer("_", "", " ", "", "-", "").Replace(n)
	switch {
	case strings.Contains(flat, "allgather"):
		return true, kindAllGather
	case strings.Contains(flat, "reducescatter"):
		return true, kindReduceScatter
	case strings.Contains(flat, "allreduce"):
		return true, kindAllReduce
	}
	return true, kindOther
}

// span is an interval of time, [lo, hi) in µs.
type span struct{ lo, hi float64 }

// spans is a sorted list of disjoint spans (a union).
type spans []span

// unionOf is the union of xs clipped to w.
func unionOf(xs []span, w span) spans {
	var c []span
	for _, x := range xs {
		lo, hi := math.Max(x.lo, w.lo), math.Min(x.hi, w.hi)
		if hi > lo {
			c = append(c, span{lo, hi})
		}
	}
	sort.Slice(c, func(a, b int) bool { return c[a].lo < c[b].lo })
	var u spans
	for _, x := range c {
		if n := len(u); n > 0 && x.lo <= u[n-1].hi {
			u[n-1].hi = math.Max(u[n-1].hi, x.hi)
			continue
		}
		u = append(u, x)
	}
	return u
}

// minus is a \ b.
func (a spans) minus(b spans) spans {
	var out spans
	j := 0
	for _, x := range a {
		lo := x.lo
		for j < len(b) && b[j].hi <= lo {
			j++
		}
		for k := j; k < len(b) && b[k].lo < x.hi; k++ {
			if b[k].lo > lo {
				out = append(out, span{lo, b[k].lo})
			}
			lo = math.Max(lo, b[k].hi)
		}
		if lo < x.hi {
			out = append(out, span{lo, x.hi})
		}
	}
	return out
}

// length is the spans' total time in µs.
func (a spans) length() float64 {
	var t float64
	for _, x := range a {
		t += x.hi - x.lo
	}
	return t
}

// recorded are the recorded steps analysed: the last maxTraceSteps.
func (tr *rankTrace) recorded() []traceEvent {
	if len(tr.steps) > maxTraceSteps {
		return tr.steps[len(tr.steps)-maxTraceSteps:]
	}
	return tr.steps
}

// onDevice says whether the trace recorded device activity during the recorded
// steps: then the breakdown is the GPU's (kernels on streams), else the host's.
func (tr *rankTrace) onDevice() bool {
	steps := tr.recorded()
	if len(steps) == 0 {
		return false
	}
	lo, hi := steps[0].start, steps[len(steps)-1].end
	for _, e := range tr.events {
		if isGPU(e) && e.end > lo && e.start < hi {
			return true
		}
	}
	return false
}

// breakdowns are the breakdowns of the trace's recorded steps (the last
// maxTraceSteps of them), each from the intervals within its ProfilerStep span:
//
//   - on a GPU (the trace has kernels): the collectives are the NCCL kernels'
//     intervals on their streams, the computation every other kernel, memcpy
//     and memset (the union over all streams), as HTA's comm/comp overlap;
//   - on the host (gloo on CPU): the collectives are every collective's interval
//     on any thread (gloo's worker threads run them, the main thread launches
//     and waits on them); the computation is the main thread's operators (the
//     thread with the ProfilerStep spans; legacy events, or Kineto's cpu_op),
//     less the time the main thread spends in a collective.
//
// Exposed communication is the collectives' time with no computation; other the
// step's remaining time (host gaps, a wait no operator encloses).
func (tr *rankTrace) breakdowns() []results.StepBreakdown {
	steps := tr.recorded()
	gpu := tr.onDevice()
	var out []results.StepBreakdown
	for _, st := range steps {
		w := span{st.start, st.end}
		var comm, compute, hostComm []span
		kinds := map[string][]span{}
		for _, e := range tr.events {
			if e.end <= w.lo || e.start >= w.hi || isStep(e) {
				continue
			}
			x := span{e.start, e.end}
			isColl, kind := collective(e)
			switch {
			case gpu && isGPU(e) && isColl:
				comm = append(comm, x)
				kinds[kind] = append(kinds[kind], x)
			case gpu && isGPU(e):
				compute = append(compute, x)
			case gpu:
			case isColl:
				comm = append(comm, x)
				kinds[kind] = append(kinds[kind], x)
				if e.pid == st.pid && e.tid == st.tid {
					hostComm = append(hostComm, x)
				}
			case e.pid == st.pid && e.tid == st.tid && hostCompute(e):
				compute = append(compute, x)
			}
		}
		cu := unionOf(compute, w).minus(unionOf(hostComm, w))
		co := unionOf(comm, w)
		exposed := co.minus(cu).length()
		stepUS, computeUS := w.hi-w.lo, cu.length()
		b := results.StepBreakdown{StepS: stepUS / 1e6, ComputeS: computeUS / 1e6, CollectiveS: co.length() / 1e6,
			ExposedCommS: exposed / 1e6, OtherS: math.Max(0, stepUS-computeUS-exposed) / 1e6, Source: "torch.profiler",
			AllGatherS:     results.F64(unionOf(kinds[kindAllGather], w).length() / 1e6),
			ReduceScatterS: results.F64(unionOf(kinds[kindReduceScatter], w).length() / 1e6),
			AllReduceS:     results.F64(unionOf(kinds[kindAllReduce], w).length() / 1e6)}
		out = append(out, b)
	}
	return out
}

// hostCompute says whether a host event counts as computation: an operator
// (Kineto's cpu_op; the legacy profiler's events have no category), not a
// Python frame, a CUDA runtime call or a user's annotation spanning others.
func hostCompute(e traceEvent) bool {
	switch strings.ToLower(e.cat) {
	case "", "cpu_op", "operator":
		return true
	}
	return false
}

// traceRank is the rank a trace file is of: Kineto's distributedInfo.rank, else
// the number after "rank" in the file's name.
var rankInName = regexp.MustCompile(`(?i)rank[-_]?(\d{1,6})`)

func traceRank(tr *rankTrace) (int, error) {
	if tr.rank >= 0 {
		return tr.rank, nil
	}
	m := rankInName.FindStringSubmatch(filepath.Base(tr.path))
	if m == nil {
		return 0, fmt.Errorf("profiler trace %s: cannot tell its rank: name it rank-<r>.pt.trace.json (e.g. torch.profiler.tensorboard_trace_handler(dir, worker_name=f\"rank-{rank}\"))", tr.path)
	}
	r, _ := strconv.Atoi(m[1])
	return r, nil
}

// profileFigures reads the traces in dir (*.json or *.json.gz, one per rank) into res: each
// rank's median recorded step in PerRank[r].StepBreakdown (or the slowest
// rank's in res.StepBreakdown when the result has no entry for a rank), the
// merged timeline in runDir/timeline.json (res.TimelinePath), and the
// profiled steps' overhead in res.Extra["profiler_overhead"] when the steps
// resolve it (results.ProfilerOverheadResolved), else in
// res.Extra["profiler_overhead_unresolved"]. No trace leaves
// res as it is: the figures are absent, not zero. The raw traces are removed
// once read and merged (the timeline holds the recorded steps), so a repeat
// keeps at most one 50 MB file of them; they stay when reading them failed.
func profileFigures(res *results.Result, dir, runDir string, worldSize int) error {
	var paths []string
	for _, pat := range []string{"*.json", "*.json.gz"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			return err
		}
		paths = append(paths, m...)
	}
	if len(paths) == 0 {
		return nil
	}
	sort.Strings(paths)
	if len(paths) > worldSize {
		return fmt.Errorf("profiler traces: %d files in %s for %d ranks; write one trace per rank (the last profiler cycle's)", len(paths), dir, worldSize)
	}
	byRank := map[int]*rankTrace{}
	for _, p := range paths {
		tr, err := readTrace(p)
		if err != nil {
			return err
		}
		r, err := traceRank(tr)
		if err != nil {
			return err
		}
		if r >= worldSize {
			return fmt.Errorf("profiler trace %s is rank %d's but the run has %d ranks", p, r, worldSize)
		}
		if prev, dup := byRank[r]; dup {
			return fmt.Errorf("profiler traces %s and %s are both rank %d's; write one trace per rank", prev.path, p, r)
		}
		if len(tr.steps) == 0 {
			return fmt.Errorf("profiler trace %s has no ProfilerStep#N span: call prof.step() after each training step under a torch.profiler.schedule", p)
		}
		tr.rank = r
		byRank[r] = tr
	}
	ranks := make([]int, 0, len(byRank))
	for r := range byRank {
		ranks = append(ranks, r)
	}
	sort.Ints(ranks)
	var slowest *results.StepBreakdown
	var profiled []float64
	per := map[int]*results.StepBreakdown{}
	for _, r := range ranks {
		steps := byRank[r].breakdowns()
		b := results.MedianBreakdown(steps)
		if f, msg := b.Check(); f != "" {
			return fmt.Errorf("profiler trace %s: the breakdown's %s: %s", byRank[r].path, f, msg)
		}
		per[r] = b
		if slowest == nil || b.StepS > slowest.StepS {
			slowest, profiled = b, profiled[:0]
			for _, s := range steps {
				profiled = append(profiled, s.StepS)
			}
		}
	}
	traces := make([]*rankTrace, len(ranks))
	for i, r := range ranks {
		traces[i] = byRank[r]
	}
	if err := writeTimeline(filepath.Join(runDir, TimelineFile), traces); err != nil {
		return err
	}
	// Only now, with every trace read and the timeline written, does res change.
	res.TimelinePath = TimelineFile
	for r, b := range per {
		attached := false
		for i := range res.PerRank {
			if res.PerRank[i].Rank == r {
				res.PerRank[i].StepBreakdown, attached = b, true
			}
		}
		if !attached {
			res.StepBreakdown = slowest // the result has no entry for the rank: the run's breakdown stands for it
		}
	}
	if m := medianStepTime(res.Steps); m > 0 {
		if res.Extra == nil {
			res.Extra = map[string]any{}
		}
		sort.Float64s(profiled)
		measured := make([]float64, len(res.Steps))
		for i, s := range res.Steps {
			measured[i] = s.StepTimeS
		}
		// Shown only when the steps resolve it; otherwise kept under a name
		// that says it is noise.
		key := results.ExtraProfilerOverheadUnresolved
		if results.ProfilerOverheadResolved(profiled, measured) {
			key = results.ExtraProfilerOverhead
		}
		res.Extra[key] = profiled[(len(profiled)-1)/2]/m - 1
	}
	for _, p := range paths {
		_ = os.Remove(p)
	}
	return nil
}

// medianStepTime is the lower median of the steps' times, 0 for none.
func medianStepTime(steps []results.Step) float64 {
	if len(steps) == 0 {
		return 0
	}
	ts := make([]float64, len(steps))
	for i, s := range steps {
		ts[i] = s.StepTimeS
	}
	sort.Float64s(ts)
	return ts[(len(ts)-1)/2]
}

// timelineEvent is an event of timeline.json (Chrome Trace Event format).
type timelineEvent struct {
	Name string          `json:"name"`
	Ph   string          `json:"ph"`
	Cat  string          `json:"cat,omitempty"`
	Ts   float64         `json:"ts"`
	Dur  *float64        `json:"dur,omitempty"`
	Pid  int             `json:"pid"`
	Tid  int             `json:"tid"`
	Args json.RawMessage `json:"args,omitempty"`
}

// writeTimeline merges the ranks' recorded steps into one Chrome trace at path:
// rank r is process r ("rank r"), each of its host threads and GPU streams a
// thread of it (the main thread first, then the host's other threads, then the
// streams, "stream <s>" on "GPU <d>"). Time 0 is the first recorded step's
// start: the earliest rank's when every trace counts wall-clock time (Kineto's
// µs since the epoch, or from its baseTimeNanoseconds), so a rank that starts
// late shows so; each rank's own otherwise (torch 1.13's legacy traces count
// from each profiler's start, so their clocks are not comparable). The file
// is at most 50 MB: past that, the shortest events are left out (and counted
// in the metadata) first.
func writeTimeline(path string, traces []*rankTrace) error {
	var meta, evs []timelineEvent
	var durs []float64
	// wallClock: every trace's first recorded step is past 2001 in µs since
	// the epoch.
	const epoch2001US = 1e15
	wallClock, origin := true, math.Inf(1)
	for _, tr := range traces {
		a := tr.baseUS + tr.recorded()[0].start
		wallClock = wallClock && a >= epoch2001US
		origin = math.Min(origin, a)
	}
	for _, tr := range traces {
		steps := tr.recorded()
		first, last := steps[0], steps[len(steps)-1]
		w := span{first.start, last.end}
		shift := 0.0 // the rank's first step's start on the timeline
		if wallClock {
			shift = tr.baseUS + first.start - origin
		}
		type key struct{ pid, tid traceID }
		tids := map[key]int{}
		var order []key
		var gpuKeys []key
		add := func(k key, gpu bool) {
			if _, ok := tids[k]; ok {
				return
			}
			tids[k] = -1
			if gpu {
				gpuKeys = append(gpuKeys, k)
			} else {
				order = append(order, k)
			}
		}
		add(key{first.pid, first.tid}, false)
		for _, e := range tr.events {
			if e.end >= w.lo && e.start <= w.hi {
				add(key{e.pid, e.tid}, isGPU(e))
			}
		}
		order = append(order, gpuKeys...)
		gpuSet := map[key]bool{}
		for _, k := range gpuKeys {
			gpuSet[k] = true
		}
		nameOf := func(s string) string { return strings.Trim(s, `"`) }
		meta = append(meta, timelineEvent{Name: "process_name", Ph: "M", Pid: tr.rank, Args: mustJSON(map[string]string{"name": "rank " + strconv.Itoa(tr.rank)})},
			timelineEvent{Name: "process_sort_index", Ph: "M", Pid: tr.rank, Args: mustJSON(map[string]int{"sort_index": tr.rank})})
		for i, k := range order {
			tids[k] = i
			name := "thread " + nameOf(string(k.tid))
			switch {
			case i == 0:
				name = "main thread " + nameOf(string(k.tid))
			case gpuSet[k]:
				name = "GPU " + nameOf(string(k.pid)) + " stream " + nameOf(string(k.tid))
			}
			meta = append(meta, timelineEvent{Name: "thread_name", Ph: "M", Pid: tr.rank, Tid: i, Args: mustJSON(map[string]string{"name": name})},
				timelineEvent{Name: "thread_sort_index", Ph: "M", Pid: tr.rank, Tid: i, Args: mustJSON(map[string]int{"sort_index": i})})
		}
		for _, e := range tr.events {
			lo, hi := math.Max(e.start, w.lo), math.Min(e.end, w.hi)
			if hi < lo || (hi == lo && e.end > e.start) {
				continue
			}
			d := hi - lo
			te := timelineEvent{Name: e.name, Ph: "X", Cat: e.cat, Ts: lo - w.lo + shift, Dur: &d, Pid: tr.rank, Tid: tids[key{e.pid, e.tid}]}
			if len(e.args) <= maxTimelineArgs && json.Valid(e.args) && !bytes.Equal(bytes.TrimSpace(e.args), []byte("{}")) {
				te.Args = e.args
			}
			evs = append(evs, te)
			durs = append(durs, d)
		}
	}
	// The file's exact size, to keep it within its bound: the head, each event
	// with the "\n" before it and the "," after all but the last, the tail.
	sizes := make([]int, len(evs))
	fixed := len(timelineTail) - 1
	for _, m := range meta {
		fixed += len(mustJSON(m)) + 2
	}
	total := fixed + len(timelineHead(0))
	for i, e := range evs {
		sizes[i] = len(mustJSON(e)) + 2
		total += sizes[i]
	}
	dropped := 0
	if total > maxTimelineBytes {
		// The longest events first, while they fit (the head's count of
		// dropped events at its widest).
		budget := fixed + len(timelineHead(len(evs)))
		idx := make([]int, len(evs))
		for i := range idx {
			idx[i] = i
		}
		sort.SliceStable(idx, func(a, b int) bool { return durs[idx[a]] > durs[idx[b]] })
		keep := make([]bool, len(evs))
		for _, i := range idx {
			if budget+sizes[i] > maxTimelineBytes {
				break
			}
			keep[i], budget = true, budget+sizes[i]
		}
		kept := evs[:0]
		for i, e := range evs {
			if keep[i] {
				kept = append(kept, e)
			}
		}
		dropped = len(evs) - len(kept)
		evs = kept
	}
	// 0666 less the umask, as every result file: os.CreateTemp's 0600 hides the
	// timeline from the colleagues a shared results directory is for, and a
	// fixed 0644 would ignore a umask that keeps the group out (or lets it write).
	f, err := results.CreateTemp(filepath.Dir(path), ".timeline-")
	if err != nil {
		return fmt.Errorf("timeline: %w", err)
	}
	defer os.Remove(f.Name())
	if err := encodeTimeline(f, append(meta, evs...), dropped); err != nil {
		f.Close()
		return fmt.Errorf("timeline %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("timeline %s: %w", path, err)
	}
	return os.Rename(f.Name(), path)
}

// timelineHead and timelineTail enclose timeline.json's events.
func timelineHead(dropped int) string {
	return `{"displayTimeUnit":"ms","otherData":{"source":"torch.profiler","dropped_events":` + strconv.Itoa(dropped) + `},"traceEvents":[`
}

const timelineTail = "\n]}\n"

// encodeTimeline writes the trace object, one event a line.
func encodeTimeline(w io.Writer, evs []timelineEvent, dropped int) error {
	var b bytes.Buffer
	b.WriteString(timelineHead(dropped))
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
		b.Write(mustJSON(e))
		if b.Len() > 1<<20 {
			if _, err := w.Write(b.Bytes()); err != nil {
				return err
			}
			b.Reset()
		}
	}
	b.WriteString(timelineTail)
	_, err := w.Write(b.Bytes())
	return err
}

// mustJSON encodes what cannot fail to encode (plain structs and maps).
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(errors.New("timeline: " + err.Error()))
	}
	return b
}
