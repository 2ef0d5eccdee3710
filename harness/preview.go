package harness

import (
	"path/filepath"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Planned says what Run would do with one run of a plan.
type Planned struct {
	Config sweeps.RunConfig
	// Action is "run", "rerun", "skip", or "refuse" (the run's directory is a
	// link or not a directory: Run refuses the sweep).
	Action string
	// Why explains the action: "new", "done: ok", "changed since: ok",
	// "was canceled", "--rerun".
	Why string
}

// Preview reports, without running or writing anything, what Run would do with each
// of the plan's runs given what opts.ResultsDir holds (sweep --dry-run). Points a
// search would add later are not known yet and not listed.
func Preview(plan *sweeps.Plan, opts Options) []Planned {
	resultsDir := opts.ResultsDir
	if resultsDir == "" {
		resultsDir = DefaultResultsDir
	}
	dir := &results.SweepDir{Path: filepath.Join(resultsDir, plan.Name)}
	out := make([]Planned, 0, len(plan.Runs))
	for _, rc := range plan.Runs {
		p := Planned{Config: rc, Action: "run", Why: "new"}
		m, err := dir.ReadMetrics(rc.ID)
		lerr := realDir(dir.RunDir(rc.ID))
		_, state, invalid := done(dir, rc)
		switch {
		case lerr != nil:
			p.Action, p.Why = "refuse", lerr.Error()
		case state == doneIngested:
			p.Action, p.Why = "refuse", "its directory holds a run that ingest wrote"
		case opts.Rerun && err == nil:
			p.Action, p.Why = "rerun", "--rerun"
		case invalid != "":
			p.Action, p.Why = "rerun", "its stored result is invalid: "+invalid
		case err != nil:
		case !m.Status.Final():
			p.Action, p.Why = "rerun", "was "+string(m.Status)
		default:
			switch state {
			case doneOK:
				p.Action, p.Why = "skip", "done: "+string(m.Status)
				if m.Status != results.StatusOK {
					p.Why += "; --rerun if the spec or machine changed"
				}
			case doneForeignID:
				p.Action, p.Why = "skip", "done: "+string(m.Status)+"; its files name another run ID and will be relabelled"
			default:
				p.Action, p.Why = "rerun", "changed since: "+string(m.Status)
			}
		}
		out = append(out, p)
	}
	return out
}
