package sweeps

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxSearchBatch is the largest batch_per_device a max_fit search tries.
const MaxSearchBatch = 65536

// MaxSearchRuns bounds the runs of one max_fit search: doubling from 1 to
// MaxSearchBatch takes 17 runs and bisecting the last gap at most 16 more.
const MaxSearchRuns = 34

// NextSearchPoint returns the point after rc when a max_fit search only doubles:
// batch_per_device doubled, global_batch re-derived, a new ID and the same
// SearchGroup. It returns false when rc is not a search point or the next value
// would pass MaxSearchBatch. MaxFit walks a whole search (doubling, then bisection).
func NextSearchPoint(rc RunConfig) (RunConfig, bool) {
	if rc.Search != "batch_per_device" || rc.BatchPerDevice < 1 || rc.BatchPerDevice > MaxSearchBatch/2 {
		return rc, false
	}
	return searchPoint(rc, rc.BatchPerDevice*2), true
}

// searchPoint is rc at batch_per_device v, with its global batch, group and ID.
func searchPoint(rc RunConfig, v int) RunConfig {
	next := rc
	next.BatchPerDevice = v
	next.GlobalBatch = next.WorldSize * next.BatchPerDevice * next.GradAccum
	if next.SearchGroup == "" {
		next.SearchGroup = searchGroup(rc)
	}
	next.AssignID()
	return next
}

// MaxFit walks one max_fit search for the largest batch_per_device that fits:
// it doubles from the first point while runs fit, then bisects between the last
// value that fit and the first that did not, so a wall between two powers of two
// (3 fits, 4 does not) is found exactly. Each step is one run; the walk is a fixed
// function of the outcomes, so a resumed search asks for the same runs again and
// finds them done. The zero value is ready; feed it the first point's outcome.
type MaxFit struct {
	// Fit is the largest value that fit so far (0: none); FitID is its run's ID.
	Fit   int
	FitID string
	// Wall is the smallest value that did not fit (0: none yet), WallStatus the
	// status it ended with (oom, infeasible).
	Wall       int
	WallStatus string
	// Runs counts the outcomes recorded.
	Runs int
}

// Record notes rc's outcome (fit: it ran within memory; otherwise status says why
// not) and returns the next point to try, or false when the search is over: the
// gap between Fit and Wall is closed, or no larger value than Fit is allowed.
func (s *MaxFit) Record(rc RunConfig, fit bool, status string) (RunConfig, bool) {
	s.Runs++
	v := rc.BatchPerDevice
	switch {
	case fit && v > s.Fit:
		s.Fit, s.FitID = v, rc.ID
	case !fit && (s.Wall == 0 || v < s.Wall):
		s.Wall, s.WallStatus = v, status
	}
	if rc.Search != "batch_per_device" || s.Runs >= MaxSearchRuns {
		return rc, false
	}
	if s.Wall == 0 {
		// No wall yet: double.
		if s.Fit < 1 || s.Fit > MaxSearchBatch/2 {
			return rc, false
		}
		return searchPoint(rc, s.Fit*2), true
	}
	if s.Wall-s.Fit <= 1 {
		return rc, false
	}
	// The middle of the gap, rounded down: the first failure below 1 ends here.
	return searchPoint(rc, s.Fit+(s.Wall-s.Fit)/2), true
}

// searchGroup names a search: the run's slug without its batch size, plus a hash of
// the training configuration with batch_per_device (and the global batch it
// implies) left out, e.g. "ws8-full_shard-ac0-pre-1f2e3d4c".
func searchGroup(rc RunConfig) string {
	rc.BatchPerDevice, rc.GlobalBatch = 0, 0
	var buf [160]byte
	slug := strings.Replace(string(rc.appendSlug(buf[:0])), "-bs0", "", 1)
	var kb [512]byte
	sum := sha256.Sum256(rc.appendTrainingKey(kb[:0]))
	return slug + "-" + hex.EncodeToString(sum[:4])
}
