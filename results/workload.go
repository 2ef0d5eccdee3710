package results

import (
	"strings"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Runs paired by ID that run different workloads, and runs whose ID changed
// (issue 37 §2). A run ID leaves the backend and the launcher out, so that
// gotrain and torchrun on the built-in model pair up; and results stored
// before sweeps.WorkloadIDChange gave a user's script the ID of the built-in
// model. Compare and gate say, per row, what the paired runs differ in
// (sweeps.Differences), and a gate against a baseline from before the change
// says that a run's ID changed instead of calling it missing.

// differsMark flags a compared figure whose two runs differ in what they
// run; the note under the table says how.
const differsMark = "≠"

// pairDifferences is sweeps.Differences for a pair with both sides.
func pairDifferences(p Pair) []string {
	if p.Baseline == nil || p.Current == nil {
		return nil
	}
	return sweeps.Differences(&p.Baseline.Config, &p.Current.Config)
}

// differsText is the phrase a row's differences read as.
func differsText(d []string) string {
	return "the paired runs differ in " + strings.Join(d, "; ")
}

// renamedPairs finds the baseline runs stored under an ID from before
// sweeps.WorkloadIDChange whose run the current results hold under its new
// ID: by pair index (each side of each such run) the reason their figures are
// not compared, and "old → new" per run.
func renamedPairs(pairs []Pair) (map[int]string, []string) {
	var byOld map[string]int // current-only pairs by the ID their run had before
	for i, p := range pairs {
		if p.Baseline != nil || p.Current == nil {
			continue
		}
		if old, ok := p.Current.Config.OldWorkloadID(); ok {
			if byOld == nil {
				byOld = map[string]int{}
			}
			byOld[old] = i
		}
	}
	if byOld == nil {
		return nil, nil
	}
	notes := map[int]string{}
	var list []string
	for i, p := range pairs {
		if p.Current != nil || !p.Baseline.Config.StoredBeforeWorkloadIDs() {
			continue
		}
		j, ok := byOld[p.Baseline.Config.ID]
		if !ok {
			continue
		}
		oldID, newID := p.Baseline.Config.ID, pairs[j].Current.Config.ID
		why := "run IDs changed in " + sweeps.WorkloadIDChange + " for runs with a user script, command or model file: " +
			clip(oldID) + " is " + clip(newID) + " now; not compared (the old ID cannot tell which script it ran): measure the baseline again with this version"
		notes[i], notes[j] = why, why
		list = append(list, clip(oldID)+" → "+clip(newID))
		delete(byOld, oldID)
	}
	return notes, list
}

// renamedSide is a renamed run's cell: "renamed" for its absent side.
func renamedSide(cell string, st Status) string {
	if st == "" {
		return "renamed"
	}
	return cell
}
