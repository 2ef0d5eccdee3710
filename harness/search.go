package harness

import (
	"context"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// StoppedExhausted is SearchResult.StoppedBy when the axis had no larger value.
const StoppedExhausted = results.SearchExhausted

// task is what one pool slot executes: a plain run, or the runs of one search group,
// which must run in order because each step depends on the previous outcome.
type task struct {
	runs   []sweeps.RunConfig
	search bool
}

// makeTasks gives every plain run its own task and groups the runs of each search
// (same SearchGroup) into one, in plan order.
func makeTasks(runs []sweeps.RunConfig) []task {
	var tasks []task
	group := map[string]int{}
	for _, rc := range runs {
		if rc.Search == "" {
			tasks = append(tasks, task{runs: []sweeps.RunConfig{rc}})
			continue
		}
		key := rc.Search + "\x00" + rc.SearchGroup
		if i, ok := group[key]; ok {
			tasks[i].runs = append(tasks[i].runs, rc)
			continue
		}
		group[key] = len(tasks)
		tasks = append(tasks, task{runs: []sweeps.RunConfig{rc}, search: true})
	}
	return tasks
}

func countNotStarted(tasks []task) int {
	n := 0
	for _, t := range tasks {
		n += len(t.runs)
	}
	return n
}

// runTask executes a task. A search walks sweeps.MaxFit: it doubles the batch
// while runs fit, then bisects between the last fit and the first that did not
// (oom or infeasible), and stops at once on any other outcome (failed, timeout,
// diverged, canceled), which says nothing about memory. Each point goes through
// runOne, so a resumed search finds its finished runs and skips them.
func (s *sweep) runTask(ctx context.Context, t task) ([]Outcome, *SearchResult) {
	if !t.search {
		return []Outcome{s.runOne(ctx, t.runs[0])}, nil
	}
	first := t.runs[0]
	sr := &SearchResult{Group: first.SearchGroup, Axis: first.Search, Tried: []int{}}
	// Points the plan holds are already in the progress total; others are added.
	planned := map[int]sweeps.RunConfig{}
	for _, rc := range t.runs {
		planned[rc.BatchPerDevice] = rc
	}
	var walk sweeps.MaxFit
	var outs []Outcome
	rc := first
	for {
		if ctx.Err() != nil {
			sr.StoppedBy = string(results.StatusCanceled)
			break
		}
		o := s.runOne(ctx, rc)
		outs = append(outs, o)
		v, _ := axisValue(rc, sr.Axis)
		sr.Tried = append(sr.Tried, v)
		fits := o.Status == results.StatusOK
		if !fits && o.Status != results.StatusOOM && o.Status != results.StatusInfeasible {
			// Not recorded as the wall: a failed or canceled run says nothing
			// about memory, so the search knows only its bounds so far.
			sr.StoppedBy = string(o.Status)
			break
		}
		next, ok := walk.Record(rc, fits, string(o.Status))
		if !ok {
			sr.StoppedBy = walk.WallStatus
			if walk.Wall == 0 {
				sr.StoppedBy = StoppedExhausted
			}
			break
		}
		if p, ok := planned[next.BatchPerDevice]; ok {
			next = p
		} else {
			s.progress.addTotal(1)
		}
		rc = next
	}
	sr.MaxFit, sr.MaxFitRun, sr.Wall = walk.Fit, walk.FitID, walk.Wall
	s.manifest.search(*sr)
	return outs, sr
}

// axisValue reads an integer axis of rc by its canonical name.
func axisValue(rc sweeps.RunConfig, axis string) (int, bool) {
	c, err := results.LookupColumn(axis, results.KindAxis)
	if err != nil {
		return 0, false
	}
	v, ok := c.Value(&results.Run{Config: rc}).(int64)
	return int(v), ok
}
