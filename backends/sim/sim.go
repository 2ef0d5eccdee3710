// Package sim is the analytic model as a backend: it predicts a run's per-rank
// memory (ZeRO's model-state accounting, Korthikanti et al.'s activations, FSDP's
// units in flight) and step time (PaLM's model FLOPs over peak × efficiency, plus
// the communication that compute does not hide, over nccl-tests bus bandwidths)
// from the model shape and a hardware profile. It runs anywhere, instantly, and
// reports its figures as predicted.
package sim

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Name is the backend's name in specs and the registry.
const Name = "sim"

// Backend is the analytic model behind the backends.Backend interface.
type Backend struct{}

// New returns the sim backend.
func New() *Backend { return &Backend{} }

var _ backends.Backend = (*Backend)(nil)

// Name returns "sim".
func (*Backend) Name() string { return Name }

// Describe says the sim supports every axis and runs anywhere.
func (*Backend) Describe(context.Context) (backends.Description, error) {
	return backends.Description{
		Name: Name,
		Summary: "analytic memory and step-time model (ZeRO model states, Korthikanti activations, " +
			"PaLM FLOPs, nccl-tests bus bandwidths); predicts instantly, needs no GPU",
		Available: true,
		Source:    "builtin",
	}, nil
}

// Validate refuses what the model cannot predict or PyTorch cannot run: an unknown
// model or hardware, hybrid_shard on one node, cpu_offload without sharding, bad
// backend_options. Memory that does not fit is not a Validate error: Run reports it
// as infeasible with the predicted and available figures.
func (*Backend) Validate(_ context.Context, rc sweeps.RunConfig) error {
	m, _ := envOptions(rc)
	opts, err := ParseOptions(m)
	if err != nil {
		return err
	}
	if err := rc.CheckCheckpoint(); err != nil {
		return backends.SpecErrorf("sim: %w", err)
	}
	_, err = resolve(rc, opts)
	return err
}

// Run predicts rc and reports the prediction as a Result (Predicted = true): status
// ok with rc.Steps steps at the predicted step time, or infeasible when the run is
// predicted not to fit (or Validate would refuse it). With sleep_per_step it sleeps
// per step (warm-up included) and emits step events, ending early with status
// canceled when ctx is.
func (*Backend) Run(ctx context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	if emit == nil {
		emit = func(backends.Event) {}
	}
	m, envNotes := envOptions(rc)
	opts, err := ParseOptions(m)
	if err != nil {
		return results.Result{}, err
	}
	res := results.Result{
		Predicted:   true,
		WorldSize:   rc.WorldSize,
		Nodes:       rc.Nodes,
		GPUsPerNode: rc.GPUsPerNode,
		Started:     time.Now(),
		Env:         results.Env{Go: runtime.Version()},
	}
	emit(backends.Event{Kind: backends.EventStarted, Time: res.Started})
	var stepTime float64
	finish := func(st results.Status, msg string) (results.Result, error) {
		res.Status, res.Error = st, msg
		// The predicted wall time of the steps reported, not the time slept.
		res.MeasuredWallS = stepTime * float64(len(res.Steps))
		res.Finished = time.Now()
		emit(backends.Event{Kind: backends.EventFinished, Time: res.Finished, Status: st})
		return res, nil
	}

	pred, err := predict(rc, opts)
	if err != nil {
		return finish(results.StatusInfeasible, err.Error())
	}
	pred.Notes = append(pred.Notes, envNotes...)
	fillResult(&res, pred)
	if err := fillCheckpoint(&res, rc, opts, pred); err != nil {
		return finish(results.StatusInfeasible, err.Error())
	}
	stepTime = pred.StepTimeS
	emit(backends.Event{Kind: backends.EventLog, Time: time.Now(), Stream: "stdout", Line: summary(pred)})
	if pred.Verdict != "" && pred.Feasible {
		emit(backends.Event{Kind: backends.EventLog, Time: time.Now(), Stream: "stdout", Line: "sim: near the memory limit: " + pred.Verdict})
	}
	if !pred.Feasible {
		return finish(results.StatusInfeasible, pred.Reason)
	}

	total := rc.WarmupSteps + rc.Steps
	for i := 1; i <= total; i++ {
		if err := pause(ctx, opts.SleepPerStep); err != nil {
			return finish(results.StatusCanceled, fmt.Sprintf("canceled after %d of %d steps: %v", i-1, total, err))
		}
		if i <= rc.WarmupSteps {
			continue
		}
		step := i - rc.WarmupSteps
		res.Steps = append(res.Steps, results.Step{Step: step, StepTimeS: pred.StepTimeS, Tokens: pred.TokensPerStep})
		emit(backends.Event{Kind: backends.EventStep, Time: time.Now(), Step: step,
			StepTimeS: pred.StepTimeS, Tokens: pred.TokensPerStep})
	}
	return finish(results.StatusOK, "")
}

// pause sleeps d, or returns ctx's error as soon as it ends.
func pause(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// fillResult copies the prediction's figures into the result.
func fillResult(res *results.Result, pred Prediction) {
	res.TokensPerStep = pred.TokensPerStep
	res.ModelFlopsPerToken = pred.ModelFlopsPerToken
	res.PeakFlopsPerS = pred.PeakFlopsPerS
	res.PeakMemAllocatedBytes = storedBytes(pred.PeakMemAllocatedBytes)
	res.PeakMemReservedBytes = storedBytes(pred.PeakMemReservedBytes)
	res.PeakDeviceMemBytes = storedBytes(pred.PeakDeviceMemBytes)
	if pred.DeviceMemBytes > 0 {
		res.DeviceMemBytes = results.I64(pred.DeviceMemBytes)
	}
	for k, v := range pred.Breakdown {
		if storedBytes(v) != nil {
			if res.MemBreakdownBytes == nil {
				res.MemBreakdownBytes = map[string]int64{}
			}
			res.MemBreakdownBytes[k] = v
		}
	}
	if cb := pred.CommBytesPerStep; storedBytes(cb.AllGather) != nil && storedBytes(cb.ReduceScatter) != nil && storedBytes(cb.AllReduce) != nil {
		res.CommBytesPerStep = &cb
	}
	res.StepBreakdown = pred.StepBreakdown()
	res.Env.Hardware = pred.Hardware.Name
	res.Env.ModelParams = pred.Shape.Params()
	res.Extra = map[string]any{
		"strategy":          pred.Strategy,
		"compute_s":         pred.ComputeS,
		"comm_s":            pred.CommS,
		"exposed_comm_s":    pred.ExposedCommS,
		"optimizer_s":       pred.OptimizerS,
		"offload_s":         pred.OffloadS,
		"model_state_bytes": pred.ModelStateBytes,
		"host_mem_bytes":    pred.HostMemBytes,
		"mfu":               pred.MFU,
		"assumptions":       pred.Assumptions,
	}
	if len(pred.Notes) > 0 {
		res.Extra["notes"] = pred.Notes
	}
	if pred.Calibration != nil {
		res.Extra["calibration"] = pred.Calibration
	}
	if pred.Verdict != "" {
		res.Extra["verdict"] = pred.Verdict
	}
}

// summary is the prediction in one log line.
func summary(p Prediction) string {
	return fmt.Sprintf("sim: %s on %s, %s: peak %.2f GiB per rank (reserved %.2f, allocated %.2f) of %.1f GiB; step %.4g s (compute %.4g, exposed comm %.4g of %.4g, optimizer %.3g, offload %.3g); %.4g tokens/s, MFU %.2f",
		p.Shape.Name, p.Hardware.Name, p.Strategy, gibs(p.PeakDeviceMemBytes), gibs(p.PeakMemReservedBytes),
		gibs(p.PeakMemAllocatedBytes), gibs(p.DeviceMemBytes), p.StepTimeS, p.ComputeS, p.ExposedCommS, p.CommS,
		p.OptimizerS, p.OffloadS, p.TokensPerS, p.MFU)
}

// storedBytes is a predicted byte figure as the run stores it: absent beyond
// results.MaxMemBytes (1 PiB), which no device holds and the figure check
// refuses. An absurd configuration (a 16M-token sequence at batch 65536) is then
// stored infeasible, as plan shows it, with the predicted size in its reason,
// instead of failed on the figure.
func storedBytes(v int64) *int64 {
	if v > results.MaxMemBytes {
		return nil
	}
	return results.I64(v)
}
