package harness

import (
	"context"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// maxSearchSteps bounds a search whose axis never stops growing (doubling from 1
// reaches 2^30 in 30 steps; no device fits that).
const maxSearchSteps = 30

// StoppedExhausted is SearchResult.StoppedBy when the axis had no larger value.
const StoppedExhausted = "exhausted"

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

// runTask executes a task. A search runs its planned points in order, then asks
// sweeps for the next point while the last one fit, and stops at the first that
// did not (oom, infeasible, failed, ...): that is the memory wall.
func (s *sweep) runTask(ctx context.Context, t task) ([]Outcome, *SearchResult) {
	if !t.search {
		return []Outcome{s.runOne(ctx, t.runs[0])}, nil
	}
	first := t.runs[0]
	sr := &SearchResult{Group: first.SearchGroup, Axis: first.Search, Tried: []int{}}
	var outs []Outcome
	rc := first
	for i := 0; ; i++ {
		if ctx.Err() != nil {
			sr.StoppedBy = string(results.StatusCanceled)
			break
		}
		o := s.runOne(ctx, rc)
		outs = append(outs, o)
		v, _ := axisValue(rc, sr.Axis)
		sr.Tried = append(sr.Tried, v)
		if o.Status != results.StatusOK {
			sr.StoppedBy = string(o.Status)
			break
		}
		if v >= sr.MaxFit {
			sr.MaxFit, sr.MaxFitRun = v, rc.ID
		}
		if i+1 < len(t.runs) {
			rc = t.runs[i+1]
			continue
		}
		next, ok := sweeps.NextSearchPoint(rc)
		if !ok || i+1 >= maxSearchSteps {
			sr.StoppedBy = StoppedExhausted
			break
		}
		if next.ID == "" || next.ID == rc.ID {
			next.AssignID()
		}
		s.progress.addTotal(1)
		rc = next
	}
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
