package backends

import (
	"fmt"
	"math"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Bounds of the figures a backend, script or plugin reports. Past them a figure
// is a bug in the reporter (a unit mix-up, an uninitialized counter), and the
// derived columns (tokens/s, MFU) would overflow or mislead.
const (
	// MaxStepTimeS is a step of 11.6 days.
	MaxStepTimeS = 1e6
	// MinTimeS is the shortest step or wall time a measurement can hold (1 ns):
	// a shorter one, divided into tokens, overflows throughput to +Inf.
	MinTimeS = 1e-9
	// MinPeakFlopsPerS is the least peak a device reported can have (a MFLOP/s);
	// below it MFU overflows.
	MinPeakFlopsPerS = 1e6
	// MaxWallS is 115 days of measured steps.
	MaxWallS = 1e7
	// MaxBytes is 1 PiB of memory on one rank, or moved by one collective per step.
	MaxBytes = 1 << 50
	// MaxTokens is 2^50 tokens (a million times a large pretraining run's step).
	MaxTokens = 1 << 50
	// MaxFlopsPerToken is 1e18: 6N for a 1.6e17-parameter model.
	MaxFlopsPerToken = 1e18
	// MaxPeakFlopsPerS is 1e18 FLOP/s on one rank, a thousand H100s.
	MaxPeakFlopsPerS = 1e18
)

// CheckFigure says what is wrong with a reported figure: not finite, or outside
// [lo, hi] (lo excluded when open, for a figure that must be positive). field
// names it as its reporter wrote it ("steps[2].step_time_s").
func CheckFigure(field string, v, lo, hi float64, open bool) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%s is %v; it must be a finite number", field, v)
	case open && v <= lo:
		return fmt.Errorf("%s is %v; it must be above %v", field, v, lo)
	case v < lo || v > hi:
		return fmt.Errorf("%s is %v; it must be in [%v, %v]", field, v, lo, hi)
	}
	return nil
}

// CheckTime says what is wrong with a reported duration (a step or wall time in
// seconds): not finite, or outside [MinTimeS, hi].
func CheckTime(field string, v, hi float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < MinTimeS || v > hi {
		return fmt.Errorf("%s is %v; a time must be a number of seconds from %v to %v", field, v, MinTimeS, hi)
	}
	return nil
}

// CheckResult checks a Result that comes from outside this process (a plugin)
// against rc before anything is derived from it: a known status, at most rc's
// measured steps, positive finite step times, and every figure finite and within
// the bounds above. The error names the field; the run fails with it.
func CheckResult(rc sweeps.RunConfig, res results.Result) error {
	if res.Status.Severity() == results.StatusFailed.Severity() && res.Status != results.StatusFailed {
		return fmt.Errorf("status %q is not a run status (ok, oom, diverged, failed, timeout, canceled, infeasible)", res.Status)
	}
	if res.WorldSize != 0 && res.WorldSize != rc.WorldSize {
		return fmt.Errorf("world_size is %d but the run has %d ranks", res.WorldSize, rc.WorldSize)
	}
	if res.Nodes < 0 || res.GPUsPerNode < 0 {
		return fmt.Errorf("nodes %d and gpus_per_node %d must not be negative", res.Nodes, res.GPUsPerNode)
	}
	if rc.Steps > 0 && len(res.Steps) > rc.Steps {
		return fmt.Errorf("steps holds %d steps but the run measures %d", len(res.Steps), rc.Steps)
	}
	if len(res.PerRank) > max(rc.WorldSize, 1) {
		return fmt.Errorf("per_rank holds %d ranks but the run has %d", len(res.PerRank), rc.WorldSize)
	}
	var errs []error
	check := func(field string, v, lo, hi float64, open bool) {
		if err := CheckFigure(field, v, lo, hi, open); err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	bytes := func(field string, v *int64) {
		if v != nil {
			check(field, float64(*v), 0, MaxBytes, false)
		}
	}
	// A time of 0 is unknown; a known one lies between MinTimeS and its maximum.
	duration := func(field string, v, hi float64) {
		if err := CheckTime(field, v, hi); v != 0 && err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	check("tokens_per_step", float64(res.TokensPerStep), 0, MaxTokens, false)
	for i, st := range res.Steps {
		f := fmt.Sprintf("steps[%d].", i)
		if err := CheckTime(f+"step_time_s", st.StepTimeS, MaxStepTimeS); err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
		check(f+"tokens", float64(st.Tokens), 0, MaxTokens, false)
		if st.Loss != nil {
			check(f+"loss", *st.Loss, -math.MaxFloat64, math.MaxFloat64, false)
		}
	}
	duration("measured_wall_s", res.MeasuredWallS, MaxWallS)
	check("model_flops_per_token", res.ModelFlopsPerToken, 0, MaxFlopsPerToken, false)
	if res.PeakFlopsPerS != 0 {
		check("peak_flops_per_s", res.PeakFlopsPerS, MinPeakFlopsPerS, MaxPeakFlopsPerS, false)
	}
	bytes("peak_mem_allocated_bytes", res.PeakMemAllocatedBytes)
	bytes("peak_mem_reserved_bytes", res.PeakMemReservedBytes)
	bytes("peak_device_mem_bytes", res.PeakDeviceMemBytes)
	bytes("peak_rss_bytes", res.PeakRSSBytes)
	bytes("device_mem_bytes", res.DeviceMemBytes)
	for k, v := range res.MemBreakdownBytes {
		bytes("mem_breakdown_bytes."+k, &v)
	}
	if c := res.CommBytesPerStep; c != nil {
		bytes("comm_bytes_per_step.all_gather", &c.AllGather)
		bytes("comm_bytes_per_step.reduce_scatter", &c.ReduceScatter)
		bytes("comm_bytes_per_step.all_reduce", &c.AllReduce)
	}
	for _, t := range []struct {
		field string
		v     *float64
	}{{"checkpoint_save_s", res.CheckpointSaveS}, {"checkpoint_load_s", res.CheckpointLoadS}} {
		if t.v != nil {
			duration(t.field, *t.v, results.MaxCheckpointS)
		}
	}
	bytes("checkpoint_bytes", res.CheckpointBytes)
	bytes("checkpoint_bytes_per_rank", res.CheckpointBytesPerRank)
	for i, r := range res.PerRank {
		f := fmt.Sprintf("per_rank[%d].", i)
		if r.Rank < 0 || r.Rank >= max(rc.WorldSize, 1) {
			return fmt.Errorf("%srank is %d; the run has ranks 0 to %d", f, r.Rank, rc.WorldSize-1)
		}
		duration(f+"measured_wall_s", r.MeasuredWallS, MaxWallS)
		check(f+"tokens", float64(r.Tokens), 0, MaxTokens, false)
		bytes(f+"peak_mem_allocated_bytes", r.PeakMemAllocatedBytes)
		bytes(f+"peak_mem_reserved_bytes", r.PeakMemReservedBytes)
		bytes(f+"peak_device_mem_bytes", r.PeakDeviceMemBytes)
		bytes(f+"peak_rss_bytes", r.PeakRSSBytes)
		bytes(f+"checkpoint_bytes", r.CheckpointBytes)
		if r.LossLast != nil {
			check(f+"loss_last", *r.LossLast, -math.MaxFloat64, math.MaxFloat64, false)
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}
