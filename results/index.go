package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	gojson "github.com/goccy/go-json"
	"github.com/sourcegraph/conc/iter"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// IndexFile is the sweep's run index: one JSON line per finished run, appended as
// each run's metrics.json is written. It only makes Load fast; the run directories
// stay the truth.
//
// A line holds the run's config and metrics (and the size and modification time of
// the metrics.json it copies, which older versions compared). Load takes a run from
// the index only when the line's config and metrics, encoded as the store writes
// them, are byte for byte the run's run_args.json and metrics.json, and reads the
// files otherwise, so no way of stopping a sweep, and no stale or forged line,
// leaves Load wrong:
//   - killed after metrics.json, before the line: the run is not in the index (or an
//     older line no longer matches), so Load reads its directory;
//   - killed in the middle of a line: the torn line does not parse and is ignored
//     (the next append starts on a new line);
//   - a run rerun, its directory deleted or a file edited by hand (even keeping its
//     size and time), or a line written by anything else: the line no longer holds
//     what the files hold, or the directory is gone.
//
// The last line for a run wins. Deleting the file is always safe.
const IndexFile = "index.jsonl"

// indexLine is one line of the index, as appendIndex writes it.
type indexLine struct {
	ID             string           `json:"id"`
	MetricsSize    int64            `json:"metrics_size"`
	MetricsMtimeNs int64            `json:"metrics_mtime_ns"`
	Config         sweeps.RunConfig `json:"config"`
	Metrics        Metrics          `json:"metrics"`
}

// indexEntry is one line of the index as read: the config and metrics stay the
// bytes the line holds until they are checked against the run's files (readRun).
type indexEntry struct {
	ID      string          `json:"id"`
	Config  json.RawMessage `json:"config"`
	Metrics json.RawMessage `json:"metrics"`
}

// indexMu serializes appends from the runs of one process; O_APPEND and one write
// per line keep lines whole between processes.
var indexMu sync.Mutex

// appendIndex records the run whose metrics.json was just written, with its config.
func (s *SweepDir) appendIndex(id string, rc sweeps.RunConfig, m Metrics) error {
	fi, err := os.Stat(filepath.Join(s.RunDir(id), MetricsFile))
	if err != nil {
		return err
	}
	line, err := json.Marshal(indexLine{ID: id, MetricsSize: fi.Size(), MetricsMtimeNs: fi.ModTime().UnixNano(),
		Config: rc, Metrics: m})
	if err != nil {
		return err
	}
	line = append(line, '\n')

	indexMu.Lock()
	defer indexMu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.Path, IndexFile), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o666) // the umask decides
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > 0 {
		// A torn last line (a killed writer) must not swallow this one.
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, st.Size()-1); err == nil && last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	_, err = f.Write(line)
	return err
}

// readIndex parses the sweep's index (in parallel; it can hold 100,000s of runs)
// into the last entry per run ID. A missing index is empty; lines that do not parse
// (a torn write) are skipped, which only sends those runs to the slow path.
func readIndex(sweepDir string) (map[string]*indexEntry, error) {
	data, err := input.ReadFile(filepath.Join(sweepDir, IndexFile), input.Export)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("results index: %w (deleting %s is safe: Load then reads the run directories)", err,
			filepath.Join(sweepDir, IndexFile))
	}
	lines := bytes.Split(data, []byte{'\n'})
	entries := make([]*indexEntry, len(lines))
	iter.ForEachIdx(lines, func(i int, line *[]byte) {
		if len(bytes.TrimSpace(*line)) == 0 {
			return
		}
		var e indexEntry
		// go-json decodes these lines about 3x faster than encoding/json (here the
		// line's frame; its config and metrics in readRun, once they match the
		// files). Only the index is read with it: lines are written, and run
		// directories read, by encoding/json, and TestLoadIndexMatchesDirectories
		// checks both give the same runs.
		if gojson.Unmarshal(*line, &e) == nil && e.ID != "" {
			entries[i] = &e
		}
	})
	byID := make(map[string]*indexEntry, len(entries))
	for _, e := range entries {
		if e != nil {
			byID[e.ID] = e
		}
	}
	return byID, nil
}

// loadSweep reads the finished runs of one sweep directory: from the index where it
// is current, from the run directories otherwise (in parallel either way). Every run
// is checked (checkRun): a run that is not valid fails the load, naming its file.
func loadSweep(sd string) ([]Run, error) {
	entries, err := os.ReadDir(filepath.Join(sd, RunsDir))
	if err != nil {
		return nil, fmt.Errorf("results %s: %w", sd, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink != 0 {
			// A link would show another sweep's run (or any directory) under this
			// sweep's name; sweep refuses it too.
			return nil, fmt.Errorf("results %s: is a symbolic link; a run directory must be a real directory of its sweep "+
				"(copy the run there, or remove the link)", filepath.Join(sd, RunsDir, e.Name()))
		}
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	index, err := readIndex(sd)
	if err != nil {
		return nil, err
	}
	runs := make([]Run, len(names))
	found := make([]bool, len(names))
	errs := make([]error, len(names))
	iter.ForEachIdx(names, func(i int, name *string) {
		rd := filepath.Join(sd, RunsDir, *name)
		mf := filepath.Join(rd, MetricsFile)
		r, ok, err := readRun(rd, mf, index[*name])
		if err == nil && ok {
			err = checkRun(*name, rd, &r)
		}
		runs[i], found[i], errs[i] = r, ok, err
	})
	out := runs[:0]
	for i := range runs {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if found[i] {
			runs[i].Config.MigrateID() // a run stored under a legacy ID matches its point
			out = append(out, runs[i])
		}
	}
	return out, nil
}

// readRun reads the run in directory rd: from its index entry e when e holds exactly
// what the run's files hold, from the files otherwise. ok is false for a run that
// did not finish (no metrics.json).
//
// The entry is checked against the files' bytes, not their size and time: its
// config and metrics, encoded as the store writes them, must be the files. So a
// stale or forged line never outranks the files it caches, and a file edited by
// hand is read as it is now. The files are read either way; what the index saves is
// decoding them.
func readRun(rd, mf string, e *indexEntry) (Run, bool, error) {
	r := Run{Dir: rd}
	if e != nil && cached(mf, e.Metrics) && cached(filepath.Join(rd, RunArgsFile), e.Config) &&
		gojson.Unmarshal(e.Metrics, &r.Metrics) == nil && gojson.Unmarshal(e.Config, &r.Config) == nil {
		return r, true, nil
	}
	r = Run{Dir: rd}
	if err := readJSON(mf, &r.Metrics); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return r, false, nil // not finished
		}
		return r, false, err
	}
	if err := readJSON(filepath.Join(rd, RunArgsFile), &r.Config); err != nil {
		return r, false, fmt.Errorf("run %s has metrics but no readable config: %w", rd, err)
	}
	return r, true, nil
}

// cached reports whether the file at path holds the JSON value raw, byte for byte
// but for the indentation: the index line holds json.Marshal's output and the file
// json.MarshalIndent's of the same value. Equal bytes decode to equal values, so the
// line then says what the file says.
func cached(path string, raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	// Non-blocking, a regular file, and no larger than the line: a FIFO or device
	// in a run's place must not hang or flood Load (the files' own reader then
	// says what is wrong with them).
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < int64(len(raw)) || st.Size() > int64(8*len(raw)+4096) {
		return false
	}
	got := make([]byte, st.Size())
	n, err := io.ReadFull(f, got)
	return err == nil && n == len(got) && sameJSON(got, raw)
}

// sameJSON reports whether indented is compact with whitespace added between
// tokens, as json.Indent adds it. It is json.Compact and bytes.Equal in one pass
// without a copy (Compact was a third of Load's time). Whitespace between two parts
// of one literal (`1 2`) is refused: the file would not parse, the line would.
func sameJSON(indented, compact []byte) bool {
	j := 0
	inStr, esc, lit, gap := false, false, false, false
	for _, c := range indented {
		if inStr {
			if j >= len(compact) || compact[j] != c {
				return false
			}
			j++
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			gap = true
			continue
		}
		isLit := c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if gap && lit && isLit {
			return false
		}
		if j >= len(compact) || compact[j] != c {
			return false
		}
		j++
		lit, gap, inStr = isLit, false, c == '"'
	}
	return j == len(compact)
}

// checkRun checks a run read from directory rd (named name): its stored ID is the
// directory's name, its config passes CheckRunArgs and its metrics CheckMetrics.
func checkRun(name, rd string, r *Run) error {
	if r.Config.ID != name {
		return &InvalidRunError{Run: name, Path: filepath.Join(rd, RunArgsFile), Field: "id",
			Msg: fmt.Sprintf("%q is not the name of its directory %q", clip(r.Config.ID), name)}
	}
	if err := CheckRunArgs(&r.Config); err != nil {
		var ie *InvalidRunError
		if errors.As(err, &ie) {
			ie.Path = filepath.Join(rd, RunArgsFile)
		}
		return err
	}
	if err := CheckMetrics(&r.Config, &r.Metrics); err != nil {
		var ie *InvalidRunError
		if errors.As(err, &ie) {
			ie.Path = filepath.Join(rd, MetricsFile)
		}
		return err
	}
	return nil
}
