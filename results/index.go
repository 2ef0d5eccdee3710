package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	gojson "github.com/goccy/go-json"
	"github.com/sourcegraph/conc/iter"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// IndexFile is the sweep's run index: one JSON line per finished run, appended as
// each run's metrics.json is written. It only makes Load fast; the run directories
// stay the truth.
//
// A line holds the run's config and metrics and the size and modification time of
// the metrics.json it copies. Load takes a run from the index only when its
// metrics.json still has that size and time, and reads the run directory otherwise,
// so no way of stopping a sweep leaves Load wrong:
//   - killed after metrics.json, before the line: the run is not in the index (or an
//     older line no longer matches), so Load reads its directory;
//   - killed in the middle of a line: the torn line does not parse and is ignored
//     (the next append starts on a new line);
//   - a run rerun, its directory deleted or its metrics.json edited by hand: the
//     stored size/time no longer match, or the directory is gone.
//
// The last line for a run wins. Deleting the file is always safe.
const IndexFile = "index.jsonl"

// indexEntry is one line of the index.
type indexEntry struct {
	ID             string           `json:"id"`
	MetricsSize    int64            `json:"metrics_size"`
	MetricsMtimeNs int64            `json:"metrics_mtime_ns"`
	Config         sweeps.RunConfig `json:"config"`
	Metrics        Metrics          `json:"metrics"`
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
	line, err := json.Marshal(indexEntry{ID: id, MetricsSize: fi.Size(), MetricsMtimeNs: fi.ModTime().UnixNano(),
		Config: rc, Metrics: m})
	if err != nil {
		return err
	}
	line = append(line, '\n')

	indexMu.Lock()
	defer indexMu.Unlock()
	f, err := os.OpenFile(filepath.Join(s.Path, IndexFile), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
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
		// go-json decodes these lines about 3x faster than encoding/json, which is
		// most of Load's time on a large sweep (BenchmarkLoad100k). Only this read
		// uses it: lines are written, and run directories read, by encoding/json, and
		// TestLoadIndexMatchesDirectories checks both give the same runs.
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
// is current, from the run directories otherwise (in parallel either way).
func loadSweep(sd string) ([]Run, error) {
	entries, err := os.ReadDir(filepath.Join(sd, RunsDir))
	if err != nil {
		return nil, fmt.Errorf("results %s: %w", sd, err)
	}
	var names []string
	for _, e := range entries {
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
		if e := index[*name]; e != nil {
			if fi, err := os.Stat(mf); err == nil && fi.Size() == e.MetricsSize && fi.ModTime().UnixNano() == e.MetricsMtimeNs {
				runs[i] = Run{Config: e.Config, Metrics: e.Metrics, Dir: rd}
				found[i] = true
				return
			}
		}
		r := Run{Dir: rd}
		if err := readJSON(mf, &r.Metrics); err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs[i] = err
			}
			return // not finished
		}
		if err := readJSON(filepath.Join(rd, RunArgsFile), &r.Config); err != nil {
			errs[i] = fmt.Errorf("run %s has metrics but no readable config: %w", rd, err)
			return
		}
		runs[i], found[i] = r, true
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
