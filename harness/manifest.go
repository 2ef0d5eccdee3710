package harness

import (
	"encoding/json"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// manifest keeps manifest.json current: it is rewritten (atomically, one writer at
// a time) after every run, so a killed sweep leaves an accurate one behind.
type manifest struct {
	mu      sync.Mutex
	path    string
	f       results.Manifest
	index   map[string]int
	touched map[string]bool
	// searched marks the search groups this invocation reported.
	searched map[string]bool
	now      func() time.Time
	err      error
}

// newManifest starts from the manifest a previous invocation left, so that runs it
// finished stay listed while this one has not reached them yet.
func newManifest(dir *results.SweepDir, sweep string, opts Options) *manifest {
	m := &manifest{
		path:     filepath.Join(dir.Path, results.ManifestFile),
		index:    map[string]int{},
		touched:  map[string]bool{},
		searched: map[string]bool{},
		now:      opts.Now,
	}
	if b, err := input.ReadJSON(m.path, input.RunFile); err == nil {
		// A damaged manifest is rebuilt from this invocation's runs.
		_ = json.Unmarshal(b, &m.f)
	}
	m.f.Sweep = sweep
	m.f.Env = opts.Env
	m.f.Host = ""
	if len(opts.Env.Hosts) > 0 {
		m.f.Host = opts.Env.Hosts[0]
	}
	m.f.Started = opts.Now()
	m.f.Finished = time.Time{}
	var kept []results.ManifestEntry
	for _, e := range m.f.Runs {
		if _, dup := m.index[e.ID]; !dup {
			m.index[e.ID] = len(kept)
			kept = append(kept, e)
		}
	}
	m.f.Runs = kept
	return m
}

// record adds or updates one run's entry and rewrites the file.
func (m *manifest) record(e results.ManifestEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i, ok := m.index[e.ID]; ok {
		m.f.Runs[i] = e
	} else {
		m.index[e.ID] = len(m.f.Runs)
		m.f.Runs = append(m.f.Runs, e)
	}
	m.touched[e.ID] = true
	m.writeLocked()
}

// recordSkipped notes a run a previous invocation finished. The file is rewritten
// only when its entry is missing or differs, so resuming a large sweep costs no
// rewrite per skipped run.
func (m *manifest) recordSkipped(e results.ManifestEntry) {
	m.mu.Lock()
	if i, ok := m.index[e.ID]; ok && m.f.Runs[i].Status == e.Status && m.f.Runs[i].Error == e.Error {
		m.touched[e.ID] = true
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.record(e)
}

// search adds or updates one search group's outcome and rewrites the file.
func (m *manifest) search(sr SearchResult) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.searched[sr.Axis+"\x00"+sr.Group] = true
	for i := range m.f.Search {
		if m.f.Search[i].Group == sr.Group && m.f.Search[i].Axis == sr.Axis {
			m.f.Search[i] = sr
			m.writeLocked()
			return
		}
	}
	m.f.Search = append(m.f.Search, sr)
	m.writeLocked()
}

// finish stamps the end time. A sweep that ran to the end drops the entries of runs
// that are no longer in its plan (an edited spec); an interrupted one keeps them.
func (m *manifest) finish(complete bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.f.Finished = m.now()
	if !complete {
		return
	}
	kept := m.f.Runs[:0]
	for _, e := range m.f.Runs {
		if m.touched[e.ID] {
			kept = append(kept, e)
		}
	}
	m.f.Runs = kept
	m.index = map[string]int{}
	for i, e := range m.f.Runs {
		m.index[e.ID] = i
	}
	searches := m.f.Search[:0]
	for _, sr := range m.f.Search {
		if m.searched[sr.Axis+"\x00"+sr.Group] {
			searches = append(searches, sr)
		}
	}
	m.f.Search = searches
}

// flush rewrites the file and returns the first error any write met.
func (m *manifest) flush() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writeLocked()
	return m.err
}

func (m *manifest) writeLocked() {
	if m.f.Runs == nil {
		m.f.Runs = []results.ManifestEntry{}
	}
	b, err := json.MarshalIndent(m.f, "", "  ")
	if err == nil {
		err = results.WriteFileAtomic(m.path, append(b, '\n'))
	}
	if err != nil && m.err == nil {
		m.err = err
	}
}
