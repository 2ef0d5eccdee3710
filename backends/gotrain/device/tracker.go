package device

import (
	"fmt"
	"sync"
)

// Stats is a snapshot of a device's memory accounting, in bytes.
type Stats struct {
	// Current and Peak are per category, indexed by Category.
	Current [NumCategories]int64 `json:"current_bytes"`
	Peak    [NumCategories]int64 `json:"peak_bytes"`
	// Total is the bytes held now; PeakTotal the most held at any one time, which is
	// at most (and usually less than) the sum of the per-category peaks.
	Total     int64 `json:"total_bytes"`
	PeakTotal int64 `json:"peak_total_bytes"`
	// AtPeak is Current at the moment Total last reached PeakTotal: what was live
	// together at the peak, which the per-category Peak cannot tell (the sim
	// models that moment, and tests compare it category by category).
	AtPeak [NumCategories]int64 `json:"at_peak_bytes"`
	// Limit is the byte limit allocations fail over; 0 means none.
	Limit int64 `json:"limit_bytes,omitempty"`
}

// Tracker does the byte accounting of a device, for every implementation to share:
// a device calls Reserve before it allocates and Release when it frees. It is safe
// for concurrent use.
type Tracker struct {
	mu sync.Mutex
	s  Stats
}

// NewTracker returns a tracker that refuses to go over limit bytes (0: no limit).
func NewTracker(limit int64) *Tracker {
	return &Tracker{s: Stats{Limit: limit}}
}

// Reserve charges bytes to cat, or returns an error wrapping ErrOutOfMemory and
// charges nothing when that would go over the limit.
func (t *Tracker) Reserve(bytes int64, cat Category) error {
	if !cat.Valid() {
		return fmt.Errorf("allocate %d bytes: unknown %v", bytes, cat)
	}
	if bytes < 0 {
		return fmt.Errorf("allocate %d bytes of %v: negative size", bytes, cat)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.s.Limit > 0 && t.s.Total+bytes > t.s.Limit {
		return fmt.Errorf("allocate %d bytes of %v with %d of %d bytes in use (%v): %w",
			bytes, cat, t.s.Total, t.s.Limit, t.breakdown(), ErrOutOfMemory)
	}
	t.s.Current[cat] += bytes
	t.s.Total += bytes
	t.s.Peak[cat] = max(t.s.Peak[cat], t.s.Current[cat])
	if t.s.Total > t.s.PeakTotal {
		t.s.PeakTotal, t.s.AtPeak = t.s.Total, t.s.Current
	}
	return nil
}

// Release returns bytes charged to cat by Reserve.
func (t *Tracker) Release(bytes int64, cat Category) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !cat.Valid() || bytes < 0 || bytes > t.s.Current[cat] {
		panic(fmt.Sprintf("device: release of %d bytes of %v with %d held: accounting out of balance",
			bytes, cat, t.s.Current[cat]))
	}
	t.s.Current[cat] -= bytes
	t.s.Total -= bytes
}

// Stats returns a snapshot.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.s
}

// ResetPeak sets every peak to the current figure.
func (t *Tracker) ResetPeak() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.s.Peak = t.s.Current
	t.s.PeakTotal, t.s.AtPeak = t.s.Total, t.s.Current
}

// breakdown lists the non-zero categories held, for OOM messages.
func (t *Tracker) breakdown() string {
	out := ""
	for c := range NumCategories {
		if t.s.Current[c] == 0 {
			continue
		}
		if out != "" {
			out += ", "
		}
		out += fmt.Sprintf("%v %d", c, t.s.Current[c])
	}
	if out == "" {
		return "nothing held"
	}
	return out
}
