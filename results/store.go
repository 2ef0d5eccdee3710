package results

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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
	// MaxFit is the largest value that fit; 0 when none did. It is the
	// search's answer only when the search ended at the wall (Conclusive);
	// otherwise it is the largest value seen to fit before it stopped.
	MaxFit int `json:"max_fit"`
	// MaxFitRun is the ID of the run at MaxFit.
	MaxFitRun string `json:"max_fit_run,omitempty"`
	// Tried lists the values tried, in order.
	Tried []int `json:"tried"`
	// StoppedBy is the status that ended the search (oom, infeasible, failed, ...),
	// or "exhausted" when the axis had no larger value to try.
	StoppedBy string `json:"stopped_by"`
	// Wall is the smallest value that did not fit (oom or infeasible); 0 when
	// none was seen. With MaxFit it bounds the answer of a search that stopped
	// before it was found (canceled, failed, timed out).
	Wall int `json:"wall,omitempty"`
}

// SearchExhausted is SearchResult.StoppedBy when the axis had no larger value.
const SearchExhausted = "exhausted"

// Conclusive says the search found its answer: it ended at the wall (the
// largest value that fit and the smallest that did not are neighbours, or
// nothing fit) or at the axis's end. A search stopped by anything else
// (canceled, failed, timeout, diverged) knows only bounds: MaxFit is then no
// maximum, and "none fits" would be a guess.
func (s SearchResult) Conclusive() bool {
	switch s.StoppedBy {
	case SearchExhausted:
		return true
	case string(StatusOOM), string(StatusInfeasible):
		return s.Wall > 0 && s.Wall-s.MaxFit <= 1
	}
	return false
}

// MaxFitText is the search's answer as tables print it: the value, "none
// fits", or, for a search that did not reach its answer, "unknown (canceled)"
// with what it had learned ("8 fit, 32 did not").
func (s SearchResult) MaxFitText() string {
	if s.Conclusive() {
		if s.MaxFit == 0 {
			return "none fits"
		}
		return fmt.Sprint(s.MaxFit)
	}
	var learned []string
	if s.MaxFit > 0 {
		learned = append(learned, fmt.Sprintf("%d fit", s.MaxFit))
	}
	if s.Wall > 0 {
		learned = append(learned, fmt.Sprintf("%d did not", s.Wall))
	}
	why := s.StoppedBy
	if why == "" {
		why = "stopped"
	}
	if len(learned) == 0 {
		return fmt.Sprintf("unknown (%s before a run told)", why)
	}
	return fmt.Sprintf("unknown (%s): %s", why, strings.Join(learned, ", "))
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
	// 0777 and the umask, as files get 0666 and the umask: a group-writable umask
	// (002) on a shared results directory lets colleagues resume the sweep.
	if err := os.MkdirAll(filepath.Join(path, RunsDir), 0o777); err != nil {
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
	if err := os.MkdirAll(dir, 0o777); err != nil {
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
// marks the run as finished: a run without metrics.json did not finish. Metrics that
// fail CheckMetrics (against the config in run_args.json) are refused, so that no
// writer stores a run that Load would refuse. It then appends the run to the sweep's
// index (IndexFile); the index is only a cache, so failing to update it is not an
// error.
func (s *SweepDir) WriteMetrics(id string, m Metrics) error {
	var rc *sweeps.RunConfig
	var stored sweeps.RunConfig
	if err := readJSON(filepath.Join(s.RunDir(id), RunArgsFile), &stored); err == nil {
		rc = &stored
	}
	if err := CheckMetrics(rc, &m); err != nil {
		var ie *InvalidRunError
		if errors.As(err, &ie) {
			ie.Hint = "the figure came from the backend or the files ingested: fix it there"
		}
		return fmt.Errorf("not storing %s: %w", filepath.Join(s.RunDir(id), MetricsFile), err)
	}
	if err := writeJSON(filepath.Join(s.RunDir(id), MetricsFile), m); err != nil {
		return err
	}
	if rc != nil {
		_ = s.appendIndex(id, *rc, m) // Load checks every line against the files anyway
	}
	return nil
}

// WriteRank stores what one rank reported (ranks/rank-<r>.json).
func (s *SweepDir) WriteRank(id string, r RankResult) error {
	dir := filepath.Join(s.RunDir(id), RanksDir)
	if err := os.MkdirAll(dir, 0o777); err != nil {
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
			sd := filepath.Join(dir, e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				if _, err := os.Stat(filepath.Join(sd, RunsDir)); err == nil {
					// Skipping it would drop its runs without a word; following it would
					// read (and store in a history) a sweep that is not here.
					return nil, fmt.Errorf("results %s: is a symbolic link to a sweep; give the sweep's own directory, or copy the sweep here", sd)
				}
				continue
			}
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join(sd, RunsDir)); err == nil {
					sweepDirs = append(sweepDirs, sd)
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
// The file gets 0666 less the umask, as the logs and any other file do: results on
// a shared (NFS, Slurm) directory must be readable by the colleagues the umask
// allows. Errors name path, never the temporary file.
func WriteFileAtomic(path string, data []byte) error {
	return writeAtomic(path, data, nil)
}

// writeAtomic is WriteFileAtomic; a non-nil perm sets the file's permission bits
// (those of the file it replaces), else 0666 less the umask.
func writeAtomic(path string, data []byte, perm *fs.FileMode) error {
	f, err := createTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, bareErr(err))
	}
	tmp := f.Name()
	var werr error
	if perm != nil {
		werr = f.Chmod(*perm)
	}
	if werr == nil {
		_, werr = f.Write(data)
	}
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
		return fmt.Errorf("write %s: %w", path, bareErr(werr))
	}
	return nil
}

// createTemp is os.CreateTemp with mode 0666, which the kernel masks with the
// umask (os.CreateTemp's 0600 ignores it).
func createTemp(dir, prefix string) (*os.File, error) {
	for range 1000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("no free temporary name in %s", dir)
}

// bareErr drops the path from a *fs.PathError or *os.LinkError, which would name
// the temporary file; the caller names the real one.
func bareErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
