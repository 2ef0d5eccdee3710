package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strconv"
	"syscall"

	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// TimelineFile is the run's timeline in Chrome Trace Event format (what
// Perfetto and chrome://tracing open), in the run's directory: every rank a
// process, its computation and communication threads (or streams), the
// measured steps only. Every backend that writes one uses this name and sets
// Result.TimelinePath to it, so `report --timeline` finds it whatever wrote it.
const TimelineFile = "timeline.json"

// MaxTimelineBytes bounds a timeline file (50 MB): a writer keeps fewer events
// rather than more bytes, and says so in the file's metadata (otherData).
const MaxTimelineBytes = 50_000_000

// MaxTimelineDepth bounds how deep a timeline's arrays and objects nest: the
// trace, its traceEvents, an event, its args and what a profiler's args hold
// (shapes: lists of lists) come to 6; a file nested deeper is no timeline, and
// a decoder must not recurse through 100,000 '['.
const MaxTimelineDepth = 32

// MaxTimelineUS bounds a timeline event's ts and dur in µs (1e17 µs is some
// three thousand years): Kineto's timestamps are µs since the epoch (1.8e15).
const MaxTimelineUS = 1e17

// timelineLimits are a timeline's bounds as a reader applies them.
var timelineLimits = input.Limits{What: "timeline", MaxBytes: MaxTimelineBytes, MaxDepth: MaxTimelineDepth, UniqueKeys: true}

// ErrNoTimeline is CheckTimeline's error when the run's directory holds no
// timeline at all: the backend wrote none (errors.Is(err, fs.ErrNotExist) too).
var ErrNoTimeline = fmt.Errorf("no %s: %w", TimelineFile, fs.ErrNotExist)

// TimelineInfo is what CheckTimeline read of a timeline.
type TimelineInfo struct {
	// Bytes is the file's size.
	Bytes int64
	// Events counts its trace events (metadata included).
	Events int
}

// CheckTimeline reads the timeline at path as `report --timeline` offers it to
// Perfetto, and says what is wrong with it, if anything: it must be a regular
// file (a FIFO, a directory, a device, a link that loops or leads nowhere is
// named as such, never opened in a way that blocks), at most MaxTimelineBytes
// (the size is checked before a byte is read), JSON nested at most
// MaxTimelineDepth deep with no key given twice in an object, and a Chrome trace
// (an object with a "traceEvents" list, or a list of events) of at least one
// event, each an object with a "ph" whose ts and dur, where given (a complete
// event, ph "X", gives both), are finite and from 0 to MaxTimelineUS. A file
// that fails is not offered: Perfetto would show nothing, or a wrong timeline.
// A path that names nothing gives ErrNoTimeline. Errors name path, with
// line:col where a place in the file is at fault.
func CheckTimeline(path string) (TimelineInfo, error) {
	var info TimelineInfo
	lst, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return info, ErrNoTimeline
	}
	if err != nil {
		return info, fmt.Errorf("%s: %w", path, bareErr(err))
	}
	// Stat follows a link without opening what it leads to (a FIFO would block
	// an open without O_NONBLOCK; /dev/zero never ends).
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return info, fmt.Errorf("%s is a symbolic link that loops (too many levels of symbolic links), not a timeline", path)
	case errors.Is(err, fs.ErrNotExist) && lst.Mode()&fs.ModeSymlink != 0:
		to, _ := os.Readlink(path)
		return info, fmt.Errorf("%s is a symbolic link to %s, which does not exist", path, strconv.Quote(to))
	case err != nil:
		return info, fmt.Errorf("%s: %w", path, bareErr(err))
	}
	if !st.Mode().IsRegular() {
		what := input.DescribeMode(st.Mode())
		if lst.Mode()&fs.ModeSymlink != 0 {
			to, _ := os.Readlink(path)
			what = "a symbolic link to " + strconv.Quote(to) + ", " + what
		}
		return info, fmt.Errorf("%s is %s, not a timeline file", path, what)
	}
	info.Bytes = st.Size()
	switch {
	case st.Size() == 0:
		return info, fmt.Errorf("%s is empty: the writer stopped before it wrote anything", path)
	case st.Size() > MaxTimelineBytes:
		return info, fmt.Errorf("%s is %s (%d bytes), more than the %d bytes (50 MB) a timeline may have: no backend writes one this large", path,
			FormatBytes(float64(st.Size())), st.Size(), MaxTimelineBytes)
	}
	// ReadJSON opens with O_NONBLOCK and checks again that it is a regular file
	// within the bound (it may have changed since), then the nesting and the keys.
	data, err := input.ReadJSON(path, timelineLimits)
	if err != nil {
		return info, err
	}
	n, err := checkTrace(path, data)
	info.Events = n
	return info, err
}

// checkTrace reads data as a Chrome trace event by event (bounded nesting is
// CheckJSON's, done) and returns how many events it holds.
func checkTrace(path string, data []byte) (int, error) {
	at := func(off int64, format string, a ...any) error {
		line, col := lineCol(data, off)
		return fmt.Errorf("%s:%d:%d: %s", path, line, col, fmt.Sprintf(format, a...))
	}
	syntax := func(err error, dec *json.Decoder) error {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			// A Decoder's offsets count from where its buffer starts; a scan
			// of the whole file (into a RawMessage: nothing is built) gives the
			// place in the file.
			var whole json.RawMessage
			if errors.As(json.Unmarshal(data, &whole), &se) {
				err = se
			}
			return at(se.Offset-1, "not JSON: %v", err)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return at(int64(len(data)), "the file ends in the middle of the trace: it was cut")
		}
		return at(dec.InputOffset(), "%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return 0, syntax(err, dec)
	}
	events := -1
	switch tok {
	case json.Delim('['):
		n, err := checkEvents(dec, data, at, syntax)
		if err != nil {
			return n, err
		}
		events = n
	case json.Delim('{'):
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return 0, syntax(err, dec)
			}
			if k != "traceEvents" {
				var skip json.RawMessage
				if err := dec.Decode(&skip); err != nil {
					return 0, syntax(err, dec)
				}
				continue
			}
			off := dec.InputOffset()
			t, err := dec.Token()
			if err != nil {
				return 0, syntax(err, dec)
			}
			if t != json.Delim('[') {
				return 0, at(valueAt(data, off), "traceEvents is %s, not a list of events", jsonKind(t))
			}
			n, err := checkEvents(dec, data, at, syntax)
			if err != nil {
				return n, err
			}
			events = n
		}
		if _, err := dec.Token(); err != nil { // '}'
			return 0, syntax(err, dec)
		}
		if events < 0 {
			return 0, fmt.Errorf("%s: the object has no traceEvents: a Chrome trace is {\"traceEvents\": [events]} or a list of events", path)
		}
	default:
		return 0, at(0, "the file is %s, not a Chrome trace (an object with traceEvents, or a list of events)", jsonKind(tok))
	}
	off := dec.InputOffset()
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return events, at(valueAt(data, off), "more follows the trace: a timeline is one JSON value")
	}
	if events == 0 {
		return 0, fmt.Errorf("%s holds no events: there is nothing to show", path)
	}
	return events, nil
}

// timelineEventWire is what checkEvents reads of an event; the rest is the
// viewer's business.
type timelineEventWire struct {
	Name json.RawMessage `json:"name"`
	Ph   json.RawMessage `json:"ph"`
	Ts   json.RawMessage `json:"ts"`
	Dur  json.RawMessage `json:"dur"`
}

// checkEvents reads the events of a list whose '[' was read, up to its ']'.
func checkEvents(dec *json.Decoder, data []byte, at func(int64, string, ...any) error, syntax func(error, *json.Decoder) error) (int, error) {
	n := 0
	for ; dec.More(); n++ {
		// The whole file is in data: the event's first byte says whether it is
		// an object before it is decoded, in one pass.
		off := valueAt(data, dec.InputOffset())
		if off < int64(len(data)) && data[off] != '{' {
			return n, at(off, "event %d is %s, not an event (an object with ph, ts, ...)", n, rawKind(data[off:off+1]))
		}
		var e timelineEventWire
		if err := dec.Decode(&e); err != nil {
			var se *json.SyntaxError
			if errors.As(err, &se) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
				return n, syntax(err, dec)
			}
			return n, at(off, "event %d: %v", n, err)
		}
		name := ""
		if len(e.Name) > 0 {
			var s string
			if json.Unmarshal(e.Name, &s) == nil {
				name = " (" + strconv.Quote(input.Clip(s, 60)) + ")"
			}
		}
		var ph string
		if len(e.Ph) == 0 || json.Unmarshal(e.Ph, &ph) != nil || ph == "" {
			return n, at(off, "event %d%s has no ph (its phase: \"X\" a complete event, \"M\" metadata, ...)", n, name)
		}
		for _, f := range []struct {
			key string
			raw json.RawMessage
		}{{"ts", e.Ts}, {"dur", e.Dur}} {
			if len(f.raw) == 0 || string(f.raw) == "null" {
				if ph == "X" {
					return n, at(off, "event %d%s is a complete event (ph \"X\") without %s", n, name, f.key)
				}
				continue
			}
			v, err := strconv.ParseFloat(string(f.raw), 64)
			if f.raw[0] == '"' || err != nil && !errors.Is(err, strconv.ErrRange) {
				return n, at(off, "event %d%s: %s is %s, not a number of µs", n, name, f.key, rawKind(f.raw))
			}
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxTimelineUS {
				return n, at(off, "event %d%s: %s %s is not a time in µs from 0 to %g", n, name, f.key, input.Clip(string(f.raw), 40), MaxTimelineUS)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return n, syntax(err, dec)
	}
	return n, nil
}

// valueAt is the offset of the value that follows off, past whitespace and
// the separators a decoder's offset leaves before it.
func valueAt(data []byte, off int64) int64 {
	for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n,:"), data[off]) >= 0 {
		off++
	}
	return off
}

// jsonKind names a token as JSON calls it.
func jsonKind(tok json.Token) string {
	switch t := tok.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(t)
	case json.Number, float64:
		return "a number"
	case string:
		return "a string"
	case json.Delim:
		if t == '{' {
			return "an object"
		}
		return "a list"
	}
	return fmt.Sprint(tok)
}

// rawKind names a raw JSON value's kind.
func rawKind(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '[':
		return "a list"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return string(raw)
	}
	return "a number"
}

// CreateTemp creates a new file in dir, named prefix and a random number, for a
// writer to fill and rename over its result (timeline.json): mode 0666 less the
// umask, as every result file, where os.CreateTemp's 0600 ignores the umask and
// would leave the file unreadable to the colleagues a shared (NFS, Slurm)
// results directory is for.
func CreateTemp(dir, prefix string) (*os.File, error) {
	return createTemp(dir, prefix)
}
