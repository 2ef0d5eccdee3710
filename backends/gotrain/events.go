package gotrain

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// stepEvent reads a worker's stdout line. ok is true for a measured step's event;
// err is set for an FSDPBENCH line that is broken (its JSON, or a figure out of
// bounds), which fails the run: the workers are ours, so it is a bug to report,
// not a line to skip.
func stepEvent(line string) (we workerEvent, ok bool, err error) {
	ev, isEvent := strings.CutPrefix(line, EventPrefix)
	if !isEvent {
		return we, false, nil
	}
	if err := contract.LineTooLong("worker event", line); err != nil {
		return we, false, err
	}
	if err := json.Unmarshal([]byte(ev), &we); err != nil {
		return we, false, fmt.Errorf("%s: %v: %q", contract.JSONPos("event", []byte(ev), err), err, line)
	}
	if we.Event != "step" || we.Warmup {
		return we, false, nil
	}
	switch {
	case math.IsNaN(we.Loss) || math.IsInf(we.Loss, 0):
		err = fmt.Errorf("loss is %v", we.Loss)
	case we.Step < 1:
		err = fmt.Errorf("step is %d", we.Step)
	default:
		if err = backends.CheckTime("step_time_s", we.StepTimeS, backends.MaxStepTimeS); err == nil {
			err = backends.CheckFigure("tokens", float64(we.Tokens), 0, backends.MaxTokens, false)
		}
	}
	if err != nil {
		return we, false, fmt.Errorf("%v: %q", err, line)
	}
	return we, true, nil
}

// divergedError is the run's error when rank's worker stopped on a loss that is not
// finite: its own line says where ("diverged: the loss is NaN at measured step 3 of
// 5 ..."), which tail (its last stderr lines) holds.
func divergedError(rank int, tail string) string {
	for _, line := range strings.Split(tail, "\n") {
		if i := strings.Index(line, "diverged: "); i >= 0 {
			return line[i:] + fmt.Sprintf(" (rank %d)", rank)
		}
	}
	return fmt.Sprintf("diverged: rank %d's loss became NaN or infinite", rank)
}

// maxLaunchesPerStep bounds RankFile.KernelLaunchesPerStep: a billion launches of
// a few microseconds each would be a step of an hour.
const maxLaunchesPerStep = 1e9

// gatherPaths are the values of RankFile.Gathers.
var gatherPaths = []string{fsdp.GathersNone, fsdp.GathersZeroCopy, fsdp.GathersShared, fsdp.GathersCopy}

// breakdownSources are the values of a rank's StepBreakdown.Source: the host's
// clock (the cpu device) or the cuda device's timing events.
var breakdownSources = []string{"gotrain", "cuda-events"}

// readRankFile reads and checks one worker's report: its JSON with positions, and
// every figure within bounds.
func readRankFile(path string, r int, rc sweeps.RunConfig) (RankFile, error) {
	steps := rc.Steps
	var f RankFile
	data, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return f, fmt.Errorf("gotrain: rank %d exited cleanly but its report is missing or unreadable: %w", r, err)
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return f, fmt.Errorf("gotrain: rank %d's report %s: %v", r, contract.JSONPos(path, data, err), err)
	}
	bad := func(err error) error { return fmt.Errorf("gotrain: rank %d's report %s: %w", r, path, err) }
	switch {
	case f.Rank != r:
		return f, bad(fmt.Errorf("rank is %d", f.Rank))
	case len(f.StepTimesS) != steps || len(f.Losses) != steps:
		return f, bad(fmt.Errorf("%d step times and %d losses for %d measured steps", len(f.StepTimesS), len(f.Losses), steps))
	case f.Gathers != "" && !slices.Contains(gatherPaths, f.Gathers):
		return f, bad(fmt.Errorf("gathers is %q, not one of %v", input.Clip(f.Gathers, 64), gatherPaths))
	}
	check := func(field string, v, hi float64, positive bool) error {
		return backends.CheckFigure(field, v, 0, hi, positive)
	}
	for i := range steps {
		if err := backends.CheckTime(fmt.Sprintf("step_times_s[%d]", i), f.StepTimesS[i], backends.MaxStepTimeS); err != nil {
			return f, bad(err)
		}
		if l := f.Losses[i]; math.IsNaN(l) || math.IsInf(l, 0) {
			return f, bad(fmt.Errorf("losses[%d] is %v", i, l))
		}
	}
	for _, c := range []struct {
		field string
		v, hi float64
	}{{"tokens", float64(f.Tokens), backends.MaxTokens},
		{"peak_mem_allocated_bytes", float64(f.PeakMemAllocatedBytes), backends.MaxBytes},
		{"peak_rss_bytes", float64(f.PeakRSSBytes), backends.MaxBytes},
		{"comm_bytes_per_step.all_gather", float64(f.CommBytesPerStep.AllGather), backends.MaxBytes},
		{"comm_bytes_per_step.reduce_scatter", float64(f.CommBytesPerStep.ReduceScatter), backends.MaxBytes},
		{"comm_bytes_per_step.all_reduce", float64(f.CommBytesPerStep.AllReduce), backends.MaxBytes},
		{"comm_bytes_per_step.inter_node", float64(ptrOr(f.CommBytesPerStep.InterNode)), backends.MaxBytes},
		{"kernel_launches_per_step", float64(f.KernelLaunchesPerStep), maxLaunchesPerStep}} {
		if err := check(c.field, c.v, c.hi, false); err != nil {
			return f, bad(err)
		}
	}
	if err := backends.CheckTime("measured_wall_s", f.MeasuredWallS, backends.MaxWallS); err != nil {
		return f, bad(err)
	}
	if err := checkCheckpointReport(f.Checkpoint, rc); err != nil {
		return f, bad(err)
	}
	if b := f.StepBreakdown; b != nil {
		if field, msg := b.Check(); field != "" {
			return f, bad(fmt.Errorf("step_breakdown.%s: %s", field, msg))
		}
		if !slices.Contains(breakdownSources, b.Source) {
			return f, bad(fmt.Errorf("step_breakdown.source is %q, not one of %v", input.Clip(b.Source, 64), breakdownSources))
		}
	}
	for k, v := range f.PeakBytes {
		if err := check("peak_bytes."+k, float64(v), backends.MaxBytes, false); err != nil {
			return f, bad(err)
		}
	}
	return f, nil
}
