package gotrain

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// The run's timeline (issue 27). Each worker keeps the intervals of its
// measured steps (fsdp.Trainer.KeepTimeline, at most timelineEventsPerRank)
// and writes them to ranks/timeline-<r>.json (rankTimeline); the backend reads
// each, bounded, and merges them into results.TimelineFile in Chrome Trace
// Event format: a process per rank, a thread per lane (compute, the
// all-gathers, the reductions) and one for the steps themselves, complete
// ("X") events in microseconds. The ranks' clocks are the host's wall clock, so
// ranks line up within a node; across nodes they are as close as the nodes'
// clocks are.

// timelineEventBytes is what one event takes in timeline.json, about, so that
// the workers keep no more events than the file can hold.
const timelineEventBytes = 160

// timelineEventsPerRank is the events a worker keeps: the file's bound shared
// by the ranks.
func timelineEventsPerRank(worldSize int) int {
	return results.MaxTimelineBytes / timelineEventBytes / max(worldSize, 1)
}

// rankTimeline is ranks/timeline-<r>.json: one worker's kept steps and events.
// Times are microseconds from OriginUnixNS, the first kept step's start.
type rankTimeline struct {
	Rank         int             `json:"rank"`
	Host         string          `json:"host,omitempty"`
	Source       string          `json:"source"`
	OriginUnixNS int64           `json:"origin_unix_ns"`
	Steps        []timelineStep  `json:"steps"`
	Events       []timelineEvent `json:"events"`
	// Dropped is the intervals the worker left out for the cap.
	Dropped int `json:"dropped,omitempty"`
}

type timelineStep struct {
	Step    int     `json:"step"`
	StartUS float64 `json:"start_us"`
	DurUS   float64 `json:"dur_us"`
}

type timelineEvent struct {
	Step  int     `json:"step"`
	Name  string  `json:"name"`
	Cat   string  `json:"cat"`
	Lane  int     `json:"lane"`
	TsUS  float64 `json:"ts_us"`
	DurUS float64 `json:"dur_us"`
}

func rankTimelinePath(runDir string, r int) string {
	return filepath.Join(runDir, "ranks", "timeline-"+strconv.Itoa(r)+".json")
}

// newRankTimeline turns a trainer's kept steps into what the worker writes.
func newRankTimeline(rank int, host, source string, steps []fsdp.TimelineStep, events []fsdp.TimelineEvent, dropped int) rankTimeline {
	tl := rankTimeline{Rank: rank, Host: host, Source: source, Dropped: dropped,
		Steps: make([]timelineStep, 0, len(steps)), Events: make([]timelineEvent, 0, len(events))}
	if len(steps) == 0 {
		return tl
	}
	origin := steps[0].Start
	tl.OriginUnixNS = origin.UnixNano()
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	starts := map[int]float64{}
	for _, s := range steps {
		// Round trips the monotonic clock (Sub), as the intervals do.
		starts[s.Step] = us(s.Start.Sub(origin))
		tl.Steps = append(tl.Steps, timelineStep{Step: s.Step, StartUS: starts[s.Step], DurUS: us(s.Dur)})
	}
	for _, e := range events {
		tl.Events = append(tl.Events, timelineEvent{Step: e.Step, Name: e.Name, Cat: e.Cat, Lane: int(e.Lane),
			TsUS: starts[e.Step] + us(e.Start), DurUS: us(e.Dur)})
	}
	return tl
}

// writeRankTimeline writes a worker's timeline next to its report.
func writeRankTimeline(runDir string, tl rankTimeline) error {
	b, err := json.Marshal(tl)
	if err != nil {
		return err
	}
	return os.WriteFile(rankTimelinePath(runDir, tl.Rank), b, 0o644)
}

// timelineCats are the events' categories.
var timelineCats = []string{"compute", "all-gather", "reduce-scatter", "all-reduce"}

// maxTimelineNameLen bounds an event's name ("wait reduce-scatter layers.123").
const maxTimelineNameLen = 128

// readRankTimeline reads and bounds one worker's timeline: its size, its
// count of events, and every figure.
func readRankTimeline(runDir string, r, worldSize int) (rankTimeline, error) {
	var tl rankTimeline
	path := rankTimelinePath(runDir, r)
	data, err := input.ReadJSON(path, input.Limits{What: "rank timeline", MaxBytes: results.MaxTimelineBytes, MaxDepth: 8})
	if err != nil {
		return tl, fmt.Errorf("gotrain: rank %d's timeline: %w", r, err)
	}
	if err := json.Unmarshal(data, &tl); err != nil {
		return tl, fmt.Errorf("gotrain: rank %d's timeline %s: %v", r, contract.JSONPos(path, data, err), err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("gotrain: rank %d's timeline %s: %s", r, path, fmt.Sprintf(format, args...))
	}
	maxUS := backends.MaxWallS * 1e6
	switch {
	case tl.Rank != r:
		return tl, bad("rank is %d", tl.Rank)
	case len(tl.Events) > timelineEventsPerRank(worldSize):
		return tl, bad("%d events, more than the %d a rank keeps", len(tl.Events), timelineEventsPerRank(worldSize))
	case tl.Dropped < 0 || tl.Dropped > math.MaxInt32:
		return tl, bad("dropped is %d", tl.Dropped)
	case len(tl.Host) > 256 || len(tl.Source) > 64:
		return tl, bad("host or source longer than a name")
	}
	inRange := func(what string, v float64) error {
		if math.IsNaN(v) || v < 0 || v > maxUS {
			return bad("%s is %v, not between 0 and %g µs", what, v, maxUS)
		}
		return nil
	}
	for i, s := range tl.Steps {
		if s.Step < 1 {
			return tl, bad("steps[%d].step is %d", i, s.Step)
		}
		if err := inRange(fmt.Sprintf("steps[%d].start_us", i), s.StartUS); err != nil {
			return tl, err
		}
		if err := inRange(fmt.Sprintf("steps[%d].dur_us", i), s.DurUS); err != nil {
			return tl, err
		}
	}
	for i, e := range tl.Events {
		switch {
		case e.Step < 1:
			return tl, bad("events[%d].step is %d", i, e.Step)
		case e.Lane < int(fsdp.LaneCompute) || e.Lane > int(fsdp.LaneReduce):
			return tl, bad("events[%d].lane is %d", i, e.Lane)
		case !slices.Contains(timelineCats, e.Cat):
			return tl, bad("events[%d].cat is %q, not one of %v", i, input.Clip(e.Cat, 64), timelineCats)
		case len(e.Name) == 0 || len(e.Name) > maxTimelineNameLen:
			return tl, bad("events[%d].name is %d bytes long", i, len(e.Name))
		}
		if err := inRange(fmt.Sprintf("events[%d].ts_us", i), e.TsUS); err != nil {
			return tl, err
		}
		if err := inRange(fmt.Sprintf("events[%d].dur_us", i), e.DurUS); err != nil {
			return tl, err
		}
	}
	return tl, nil
}

// traceEvent is one Chrome Trace Event ("X" complete events and "M" metadata).
type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Pid  int            `json:"pid"`
	Tid  int            `json:"tid"`
	Ts   *float64       `json:"ts,omitempty"`
	Dur  *float64       `json:"dur,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// laneNames name the timeline's threads, by device kind (streams or goroutines).
func laneNames(source string) map[int]string {
	if source == "cuda-events" {
		return map[int]string{0: "steps", int(fsdp.LaneCompute): "compute stream",
			int(fsdp.LaneGather): "comm stream: all-gather", int(fsdp.LaneReduce): "comm stream: reductions"}
	}
	return map[int]string{0: "steps", int(fsdp.LaneCompute): "compute (trainer goroutine; waits on collectives)",
		int(fsdp.LaneGather): "comm: all-gather (prefetch goroutine)", int(fsdp.LaneReduce): "comm: reductions"}
}

// writeTimeline merges the ranks' timelines into path in Chrome Trace Event
// format, at most maxBytes (results.MaxTimelineBytes): each rank gets an equal share of
// the bytes, and events past a rank's share are left out and counted in
// otherData (truncated, events_left_out), as are those its worker dropped.
func writeTimeline(path string, ranks []rankTimeline, maxBytes int64) error {
	// 0666 less the umask, as every result file (os.CreateTemp's 0600 would
	// keep the timeline from the colleagues a shared results directory is for).
	tmp, err := results.CreateTemp(filepath.Dir(path), ".timeline-")
	if err != nil {
		return fmt.Errorf("gotrain: write the timeline: %w", err)
	}
	defer os.Remove(tmp.Name())
	cw := &countingWriter{w: bufio.NewWriterSize(tmp, 1<<16)}
	// Reserve for the metadata events (a few hundred bytes a rank), an event
	// past each rank's share, and the closing otherData.
	reserve := int64(64<<10 + 2048*len(ranks))
	share := (maxBytes - reserve) / int64(max(len(ranks), 1))
	first := true
	put := func(e traceEvent) error {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if !first {
			cw.write([]byte(",\n"))
		}
		first = false
		cw.write(b)
		return nil
	}
	f64 := func(v float64) *float64 { return &v }
	cw.write([]byte(`{"traceEvents":[` + "\n"))
	var origin int64
	for i, tl := range ranks {
		if i == 0 || (tl.OriginUnixNS != 0 && tl.OriginUnixNS < origin) {
			origin = tl.OriginUnixNS
		}
	}
	kept, left, source := 0, 0, ""
	for _, tl := range ranks {
		source = tl.Source
		name := "rank " + strconv.Itoa(tl.Rank)
		if tl.Host != "" {
			name += " (" + tl.Host + ")"
		}
		if err := put(traceEvent{Name: "process_name", Ph: "M", Pid: tl.Rank, Args: map[string]any{"name": name}}); err != nil {
			return err
		}
		if err := put(traceEvent{Name: "process_sort_index", Ph: "M", Pid: tl.Rank, Args: map[string]any{"sort_index": tl.Rank}}); err != nil {
			return err
		}
		for tid, n := range laneNames(tl.Source) {
			if err := put(traceEvent{Name: "thread_name", Ph: "M", Pid: tl.Rank, Tid: tid, Args: map[string]any{"name": n}}); err != nil {
				return err
			}
		}
	}
	for _, tl := range ranks {
		shift := float64(tl.OriginUnixNS-origin) / 1e3
		start := cw.n
		left += tl.Dropped
		n := 0
		for _, s := range tl.Steps {
			if cw.n-start > share {
				left += len(tl.Steps) - n
				break
			}
			n++
			if err := put(traceEvent{Name: "step " + strconv.Itoa(s.Step), Cat: "step", Ph: "X", Pid: tl.Rank, Tid: 0,
				Ts: f64(s.StartUS + shift), Dur: f64(s.DurUS), Args: map[string]any{"step": s.Step}}); err != nil {
				return err
			}
		}
		for i, e := range tl.Events {
			if cw.n-start > share {
				left += len(tl.Events) - i
				break
			}
			kept++
			if err := put(traceEvent{Name: e.Name, Cat: e.Cat, Ph: "X", Pid: tl.Rank, Tid: e.Lane,
				Ts: f64(e.TsUS + shift), Dur: f64(e.DurUS), Args: map[string]any{"step": e.Step}}); err != nil {
				return err
			}
		}
	}
	other, err := json.Marshal(map[string]any{
		"engine":          Name,
		"source":          source,
		"steps":           "the measured steps only (warm-up left out)",
		"clock":           "each rank's wall clock, microseconds from the earliest rank's first measured step",
		"events":          kept,
		"events_left_out": left,
		"truncated":       left > 0,
		"max_bytes":       maxBytes,
	})
	if err != nil {
		return err
	}
	cw.write([]byte("\n],\n" + `"displayTimeUnit":"ms",` + "\n" + `"otherData":`))
	cw.write(other)
	cw.write([]byte("}\n"))
	if cw.err == nil {
		cw.err = cw.w.Flush()
	}
	if cw.err == nil {
		cw.err = tmp.Close()
	} else {
		tmp.Close()
	}
	if cw.err != nil {
		return fmt.Errorf("gotrain: write the timeline: %w", cw.err)
	}
	if cw.n > maxBytes {
		return fmt.Errorf("gotrain: the timeline came to %d bytes, over its bound of %d (a bug: the ranks' shares should keep it under)", cw.n, maxBytes)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("gotrain: write the timeline: %w", err)
	}
	return nil
}

// countingWriter counts what it writes and keeps the first error.
type countingWriter struct {
	w   *bufio.Writer
	n   int64
	err error
}

func (c *countingWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.err = err
}

// collectTimeline merges the ranks' timelines into the run directory's
// results.TimelineFile and points the result at it.
func collectTimeline(res *results.Result, runDir string, worldSize int) error {
	ranks := make([]rankTimeline, worldSize)
	for r := range ranks {
		tl, err := readRankTimeline(runDir, r, worldSize)
		if err != nil {
			return err
		}
		ranks[r] = tl
	}
	if err := writeTimeline(filepath.Join(runDir, results.TimelineFile), ranks, results.MaxTimelineBytes); err != nil {
		return err
	}
	res.TimelinePath = results.TimelineFile
	return nil
}
