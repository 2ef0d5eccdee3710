package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/harness/sampler"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// sweep is the state one Run call shares between its tasks.
type sweep struct {
	plan     *sweeps.Plan
	opts     Options
	dir      *results.SweepDir
	backends map[string]backendInfo
	manifest *manifest
	progress progress
	// source reads the runs' GPUs; nil when there is nothing to sample.
	source sampler.Source
	// slurm submits the runs whose launcher is slurm; nil when there are none.
	slurm *launch.Slurm
}

// runOne skips rc when a previous invocation finished it, and executes it otherwise.
func (s *sweep) runOne(ctx context.Context, rc sweeps.RunConfig) Outcome {
	if !s.opts.Rerun {
		if m, ok := done(s.dir, rc); ok {
			o := Outcome{Config: rc, Status: m.Status, Error: m.Error, Skipped: true, Metrics: m}
			s.manifest.recordSkipped(results.ManifestEntry{ID: rc.ID, Status: m.Status, Error: m.Error, Started: m.Started, Finished: m.Finished})
			s.progress.finished(o)
			return o
		}
	}
	s.progress.started(rc)
	started := s.opts.Now()
	o := s.execute(ctx, rc)
	o.Wall = s.opts.Now().Sub(started)
	s.manifest.record(results.ManifestEntry{ID: rc.ID, Status: o.Status, Error: o.Error, Started: started, Finished: s.opts.Now()})
	s.progress.finished(o)
	return o
}

// done reports whether rc's stored run is finished for good and was run with the
// same configuration; anything unreadable means "not done" and the run is redone.
func done(dir *results.SweepDir, rc sweeps.RunConfig) (results.Metrics, bool) {
	m, err := dir.ReadMetrics(rc.ID)
	if err != nil || !m.Status.Final() {
		return results.Metrics{}, false
	}
	stored, err := dir.ReadRunArgs(rc.ID)
	if err != nil || stored.Fingerprint() != rc.Fingerprint() {
		return results.Metrics{}, false
	}
	return m, true
}

// execute runs rc's lifecycle: run_args.json first, the logs, Validate, the repeats,
// then steps.csv, ranks/ and metrics.json last (its presence marks completion).
func (s *sweep) execute(ctx context.Context, rc sweeps.RunConfig) Outcome {
	runDir := s.dir.RunDir(rc.ID)
	o := Outcome{Config: rc}
	// A previous attempt's metrics.json must go before run_args.json is rewritten:
	// if this attempt is killed, the pair would otherwise pass for a finished run.
	if err := clearRun(runDir); err != nil {
		o.Status, o.Error = results.StatusFailed, err.Error()
		return o
	}
	if err := s.dir.WriteRunArgs(rc); err != nil {
		o.Status, o.Error = results.StatusFailed, fmt.Sprintf("write %s: %v", results.RunArgsFile, err)
		return o
	}
	stdout, err := os.Create(filepath.Join(runDir, results.StdoutFile))
	if err != nil {
		o.Status, o.Error = results.StatusFailed, err.Error()
		return o
	}
	defer stdout.Close()
	stderr, err := os.Create(filepath.Join(runDir, results.StderrFile))
	if err != nil {
		o.Status, o.Error = results.StatusFailed, err.Error()
		return o
	}
	defer stderr.Close()
	logs := &runLogs{stdout: stdout, stderr: stderr}

	status, msg, repeats := s.attempt(ctx, rc, runDir, logs)
	if msg != "" && status != results.StatusOK {
		logs.line("stderr", "fsdpbench: run "+string(status)+": "+msg)
	}

	// Once the backend has returned, the outputs are written even if the sweep is
	// being interrupted: they take milliseconds and make the record complete.
	var last results.Result
	if len(repeats) > 0 {
		last = repeats[len(repeats)-1]
	}
	var werr error
	if err := writeSteps(filepath.Join(runDir, results.StepsFile), repeats); err != nil {
		werr = err
	}
	if err := writeRanks(filepath.Join(runDir, results.RanksDir), last.PerRank); err != nil && werr == nil {
		werr = err
	}
	if werr != nil && status.Final() {
		status, msg = results.StatusFailed, werr.Error()
	}
	m := results.Normalize(rc, repeats)
	m.RunID, m.Status, m.Error = rc.ID, status, msg
	if err := s.dir.WriteMetrics(rc.ID, m); err != nil {
		// Without metrics.json the run reads as unfinished and a resume redoes it.
		status, msg = results.StatusFailed, fmt.Sprintf("write %s: %v", results.MetricsFile, err)
	}
	o.Status, o.Error, o.Metrics = status, msg, m
	return o
}

// attempt validates rc and runs its repeats, stopping at the first that is not ok.
// It returns the run's status and every repeat's result with the harness's verdict.
func (s *sweep) attempt(ctx context.Context, rc sweeps.RunConfig, runDir string, logs *runLogs) (results.Status, string, []results.Result) {
	be := s.backends[backendName(s.plan, rc)]
	if be.Backend == nil {
		// backendsFor looked every backend of the plan up; search points keep theirs.
		return results.StatusFailed, fmt.Sprintf("no backend %q for run %s", backendName(s.plan, rc), rc.ID), nil
	}
	// Under Slurm the run's timeout is its job's time limit, so that time in the
	// queue does not count; the job runs on the cluster's GPUs, not this host's.
	var job backends.JobBackend
	if launcherName(s.plan, rc) == launch.SlurmName {
		job, _ = be.Backend.(backends.JobBackend) // slurmFor checked every backend
	}
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if rc.Timeout > 0 && job == nil {
		runCtx, cancel = context.WithTimeout(ctx, time.Duration(rc.Timeout))
	}
	defer cancel()
	verdict := func(res results.Result, err error) (results.Status, string) {
		return classify(ctx, runCtx, rc, res, err, logs)
	}

	_, err := s.guard(runCtx, func() (results.Result, error) {
		return results.Result{}, be.Validate(runCtx, rc)
	})
	if err != nil {
		var pe *panicError
		if ctx.Err() != nil || runCtx.Err() != nil || errors.As(err, &pe) || errors.Is(err, errAbandoned) {
			st, msg := verdict(results.Result{}, err)
			return st, msg, nil
		}
		return results.StatusInfeasible, err.Error(), []results.Result{{Status: results.StatusInfeasible, Error: err.Error(), WorldSize: rc.WorldSize}}
	}

	var devices []int
	if be.needsGPU && job == nil {
		devs, release, err := s.opts.Devices.Acquire(runCtx, rc.GPUsPerNode)
		if err != nil {
			st, msg := verdict(results.Result{}, err)
			return st, msg, nil
		}
		defer release()
		devices = devs
	}

	emit := func(ev backends.Event) {
		switch ev.Kind {
		case backends.EventStep:
			s.progress.step(rc.ID)
		case backends.EventLog:
			logs.line(ev.Stream, ev.Line)
		}
	}
	var out []results.Result
	var samples []sampler.Sample
	for r := range max(rc.Repeats, 1) {
		env := backends.RunEnv{
			RunDir:   runDir,
			Repeat:   r,
			Launcher: launcherName(s.plan, rc),
			Devices:  devices,
			Stdout:   logs.writer("stdout"),
			Stderr:   logs.writer("stderr"),
		}
		// The harness samples the run's GPUs itself, so every backend gets
		// samples.csv and an NVML peak (a no-op without a driver). The file is
		// rewritten after each repeat, so a run that dies later keeps what was read.
		source := s.source
		if job != nil {
			source = nil
		}
		smp := sampler.Start(runCtx, source, sampler.Devices(source, devices, rc.Hardware), s.opts.SampleInterval)
		res, err := s.guard(runCtx, func() (results.Result, error) {
			if job != nil {
				return s.slurm.Run(runCtx, job, rc, env, emit)
			}
			return be.Run(runCtx, rc, env, emit)
		})
		if rep := smp.Stop(); rep.Apply(&res, r) {
			samples = append(samples, rep.Samples...)
			if err := sampler.WriteFile(filepath.Join(runDir, results.SamplesFile), samples); err != nil {
				logs.line("stderr", "fsdpbench: GPU sampling: "+err.Error())
			}
			if rep.Err != nil {
				logs.line("stderr", fmt.Sprintf("fsdpbench: GPU sampling: %d readings failed, the first: %v", rep.Failed, rep.Err))
			}
		}
		st, msg := verdict(res, err)
		res.Status, res.Error = st, msg
		out = append(out, res)
		if st != results.StatusOK {
			return st, msg, out
		}
	}
	return results.StatusOK, "", out
}

// classify turns what a backend returned into the run's status. The harness, not the
// backend, knows why a context ended: the sweep was interrupted (canceled, not final,
// so a resume reruns it) or the run's own timeout expired.
func classify(sweepCtx, runCtx context.Context, rc sweeps.RunConfig, res results.Result, err error, logs *runLogs) (results.Status, string) {
	var pe *panicError
	if errors.As(err, &pe) {
		logs.line("stderr", fmt.Sprintf("fsdpbench: backend panicked: %v\n%s", pe.value, pe.stack))
		return results.StatusFailed, fmt.Sprintf("backend panicked: %v (stack in %s)", pe.value, results.StderrFile)
	}
	switch {
	case err == nil && res.Status.Final():
		// A result the backend reached (ok, oom, infeasible) stands even if the
		// sweep was interrupted meanwhile.
		return res.Status, res.Error
	case sweepCtx.Err() != nil:
		return results.StatusCanceled, "interrupted; running the sweep again reruns this run"
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		msg := fmt.Sprintf("timed out after %s (raise timeout: in the spec, or --set timeout=...)", time.Duration(rc.Timeout))
		// A backend that saw why (a rank stopped or hung) says so after it.
		if res.Status == results.StatusTimeout && res.Error != "" && res.Error != runCtx.Err().Error() {
			msg += "; " + res.Error
		}
		return results.StatusTimeout, msg
	case err != nil:
		return results.StatusFailed, err.Error()
	case res.Status == "":
		return results.StatusFailed, "the backend reported no status (a bug in the backend)"
	}
	return res.Status, res.Error
}

// errAbandoned marks a backend that did not return after its context ended.
var errAbandoned = errors.New("the backend did not return after its run was cancelled")

type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("panic: %v", p.value) }

// guard calls f, turning a panic into an error, and stops waiting for it Grace after
// ctx ends: a backend that ignores cancellation must not hang the sweep.
func (s *sweep) guard(ctx context.Context, f func() (results.Result, error)) (results.Result, error) {
	type ret struct {
		res results.Result
		err error
	}
	ch := make(chan ret, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				ch <- ret{err: &panicError{value: p, stack: debug.Stack()}}
			}
		}()
		r, err := f()
		ch <- ret{r, err}
	}()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-ctx.Done():
	}
	t := time.NewTimer(s.opts.Grace)
	defer t.Stop()
	select {
	case r := <-ch:
		return r.res, r.err
	case <-t.C:
		return results.Result{}, fmt.Errorf("%w within %s; it must stop its processes when its context ends", errAbandoned, s.opts.Grace)
	}
}

func launcherName(plan *sweeps.Plan, rc sweeps.RunConfig) string {
	if rc.Launcher != "" {
		return rc.Launcher
	}
	if plan.Launcher != "" {
		return plan.Launcher
	}
	return "local"
}

// clearRun removes what a previous attempt of the run left, keeping the directory.
func clearRun(runDir string) error {
	for _, name := range []string{results.MetricsFile, results.StepsFile, results.SamplesFile, results.RanksDir} {
		if err := os.RemoveAll(filepath.Join(runDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clear the previous attempt of %s: %w", runDir, err)
		}
	}
	return nil
}

// runLogs serializes the writes of a run's ranks and events into its log files.
type runLogs struct {
	mu     sync.Mutex
	stdout io.Writer
	stderr io.Writer
}

func (l *runLogs) line(stream, line string) {
	w := l.writer(stream)
	if !strings.HasSuffix(line, "\n") {
		line += "\n"
	}
	_, _ = io.WriteString(w, line) // a log that cannot be written must not fail the run
}

func (l *runLogs) writer(stream string) io.Writer {
	if stream == "stderr" {
		return lockedWriter{&l.mu, l.stderr}
	}
	return lockedWriter{&l.mu, l.stdout}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
