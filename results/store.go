package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// File names of the results layout (DESIGN.md).
const (
	SpecFile     = "sweep.yaml"
	ManifestFile = "manifest.json"
	RunsDir      = "runs"
	RunArgsFile  = "run_args.json"
	MetricsFile  = "metrics.json"
	RanksDir     = "ranks"
	StepsFile    = "steps.csv"
	SamplesFile  = "samples.csv" // device samples over time, when sampled
	StdoutFile   = "stdout.log"
	StderrFile   = "stderr.log"
)

// Run is one stored run: its config and its normalized metrics.
type Run struct {
	Config  sweeps.RunConfig
	Metrics Metrics
	// Derived holds the figures that compare the run with the others loaded with it
	// (scaling efficiency, memory saving); Load fills it, see Derive.
	Derived Derived
	// Dir is the run's directory.
	Dir string
}

// Manifest is manifest.json: the sweep's provenance and one entry per run.
type Manifest struct {
	Sweep    string          `json:"sweep"`
	Host     string          `json:"host,omitempty"`
	Env      Env             `json:"env"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished,omitzero"`
	Runs     []ManifestEntry `json:"runs"`
	// Search holds the outcome of each max_fit search of the sweep.
	Search []SearchResult `json:"search,omitempty"`
}

// SearchResult is the outcome of one adaptive search (search: {batch_per_device:
// max_fit}) for one point of the other axes.
type SearchResult struct {
	Group string `json:"group"`
	Axis  string `json:"axis"`
	// MaxFit is the largest value that fit; 0 when none did.
	MaxFit int `json:"max_fit"`
	// MaxFitRun is the ID of the run at MaxFit.
	MaxFitRun string `json:"max_fit_run,omitempty"`
	// Tried lists the values tried, in order.
	Tried []int `json:"tried"`
	// StoppedBy is the status that ended the search (oom, infeasible, failed, ...),
	// or "exhausted" when the axis had no larger value to try.
	StoppedBy string `json:"stopped_by"`
}

// ManifestEntry records one run's status in the manifest.
type ManifestEntry struct {
	ID       string    `json:"id"`
	Status   Status    `json:"status"`
	Error    string    `json:"error,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
}

// SweepDir is the results directory of one sweep: <results-dir>/<sweep>/.
type SweepDir struct {
	Path string
}

// OpenSweep creates (if needed) and returns the sweep directory at path.
func OpenSweep(path string) (*SweepDir, error) {
	if err := os.MkdirAll(filepath.Join(path, RunsDir), 0o755); err != nil {
		return nil, fmt.Errorf("results directory %s: %w", path, err)
	}
	return &SweepDir{Path: path}, nil
}

// RunDir is the directory of the run with the given ID.
func (s *SweepDir) RunDir(id string) string { return filepath.Join(s.Path, RunsDir, id) }

// WriteSpec stores the resolved spec as run (sweep.yaml).
func (s *SweepDir) WriteSpec(yaml []byte) error {
	return WriteFileAtomic(filepath.Join(s.Path, SpecFile), yaml)
}

// WriteManifest stores manifest.json atomically.
func (s *SweepDir) WriteManifest(m Manifest) error {
	return writeJSON(filepath.Join(s.Path, ManifestFile), m)
}

// ReadManifest reads manifest.json.
func (s *SweepDir) ReadManifest() (Manifest, error) {
	var m Manifest
	err := readJSON(filepath.Join(s.Path, ManifestFile), &m)
	return m, err
}

// WriteRunArgs stores the run's full config (run_args.json), creating its directory.
func (s *SweepDir) WriteRunArgs(rc sweeps.RunConfig) error {
	dir := s.RunDir(rc.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, RunArgsFile), rc)
}

// ReadRunArgs reads a stored run's config.
func (s *SweepDir) ReadRunArgs(id string) (sweeps.RunConfig, error) {
	var rc sweeps.RunConfig
	err := readJSON(filepath.Join(s.RunDir(id), RunArgsFile), &rc)
	return rc, err
}

// WriteMetrics stores the run's normalized metrics (metrics.json). Written last, it
// marks the run as finished: a run without metrics.json did not finish. It then
// appends the run to the sweep's index (IndexFile) with the config in
// run_args.json; the index is only a cache, so failing to update it is not an error.
func (s *SweepDir) WriteMetrics(id string, m Metrics) error {
	if err := writeJSON(filepath.Join(s.RunDir(id), MetricsFile), m); err != nil {
		return err
	}
	var rc sweeps.RunConfig
	if err := readJSON(filepath.Join(s.RunDir(id), RunArgsFile), &rc); err == nil {
		_ = s.appendIndex(id, rc, m) // Load checks every line against metrics.json anyway
	}
	return nil
}

// WriteRank stores what one rank reported (ranks/rank-<r>.json).
func (s *SweepDir) WriteRank(id string, r RankResult) error {
	dir := filepath.Join(s.RunDir(id), RanksDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return writeJSON(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r.Rank)), r)
}

// WriteSteps stores the run's measured steps (steps.csv, see StepsCSV).
func (s *SweepDir) WriteSteps(id string, steps []Step) error {
	var buf bytes.Buffer
	if err := StepsCSV(&buf, steps); err != nil {
		return fmt.Errorf("run %s: %w", id, err)
	}
	return WriteFileAtomic(filepath.Join(s.RunDir(id), StepsFile), buf.Bytes())
}

// ReadMetrics reads a stored run's metrics; fs.ErrNotExist if it never finished.
func (s *SweepDir) ReadMetrics(id string) (Metrics, error) {
	var m Metrics
	err := readJSON(filepath.Join(s.RunDir(id), MetricsFile), &m)
	return m, err
}

// Load reads every finished run under dir, which is either one sweep's directory or
// a results directory holding several sweeps. Runs are sorted by sweep, then ID, and
// carry their Derived figures (computed over all the runs loaded). It reads the
// sweep's index where it is current and the run directories otherwise (IndexFile).
func Load(dir string) ([]Run, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("results %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("results %s: not a directory (give a results directory or one sweep's directory)", dir)
	}
	var sweepDirs []string
	if _, err := os.Stat(filepath.Join(dir, RunsDir)); err == nil {
		sweepDirs = []string{dir}
	} else {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join(dir, e.Name(), RunsDir)); err == nil {
					sweepDirs = append(sweepDirs, filepath.Join(dir, e.Name()))
				}
			}
		}
	}
	if len(sweepDirs) == 0 {
		return nil, fmt.Errorf("results %s: no sweep found (expected %s/ inside it, as `fsdpbench sweep` writes)", dir, RunsDir)
	}
	var runs []Run
	for _, sd := range sweepDirs {
		rs, err := loadSweep(sd)
		if err != nil {
			return nil, err
		}
		runs = append(runs, rs...)
	}
	sort.SliceStable(runs, func(i, j int) bool {
		if runs[i].Config.Sweep != runs[j].Config.Sweep {
			return runs[i].Config.Sweep < runs[j].Config.Sweep
		}
		return runs[i].Config.ID < runs[j].Config.ID
	})
	Derive(runs)
	return runs, nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return WriteFileAtomic(path, append(b, '\n'))
}

func readJSON(path string, v any) error {
	b, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w (the file is damaged; rerun the sweep with --rerun or delete the run's directory)", path, err)
	}
	return nil
}

// WriteFileAtomic writes data to a temporary file beside path, syncs it and renames
// it over path, so a reader (or a resumed sweep) never sees a half-written file.
func WriteFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, werr)
	}
	return nil
}
