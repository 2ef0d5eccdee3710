package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/sim"
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
	o, handled, invalid := s.precheck(rc)
	if handled {
		return o
	}
	s.progress.started(rc)
	started := s.opts.Now()
	o = s.execute(ctx, rc, invalid)
	o.Wall = s.opts.Now().Sub(started)
	if launcherName(s.plan, rc) == launch.SlurmName && o.Metrics.Started.After(started) {
		// A job's time in the queue is not its run time: Slurm runs count from
		// when the job started (the backend's Started), not from submission.
		o.Wall = s.opts.Now().Sub(o.Metrics.Started)
	}
	s.manifest.record(results.ManifestEntry{ID: rc.ID, Status: o.Status, Error: o.Error, Started: started, Finished: s.opts.Now()})
	s.progress.finished(o)
	return o
}

// precheck decides what happens to rc before it runs: handled is true when its
// outcome is already known (a link in its directory's place, an ingested run,
// a run an earlier invocation finished) and recorded; otherwise invalid is why
// a stored result could not stand ("" when there was none or on --rerun).
func (s *sweep) precheck(rc sweeps.RunConfig) (o Outcome, handled bool, invalid string) {
	migrateRunDir(s.dir, rc)
	if err := realDir(s.dir.RunDir(rc.ID)); err != nil {
		// A search point reached now: checkRunDirs saw the planned runs before
		// anything started. Nothing is written through the link.
		o := Outcome{Config: rc, Status: results.StatusFailed, Error: err.Error()}
		s.manifest.record(results.ManifestEntry{ID: rc.ID, Status: o.Status, Error: o.Error})
		s.progress.finished(o)
		return o, true, ""
	}
	m, state, invalid := done(s.dir, rc)
	if state == doneIngested {
		// A past run that `fsdpbench ingest` wrote: not this sweep's
		// measurement, so neither skipped as done nor overwritten.
		src, _ := m.Extra[ingestedKey].(string)
		o := Outcome{Config: rc, Status: results.StatusFailed, Error: fmt.Sprintf("%s holds a run ingested from %s, not measured by a sweep; "+
			"a sweep neither counts it as done nor overwrites it: give the sweep another name (name: in the spec), or remove that directory",
			s.dir.RunDir(rc.ID), src)}
		s.manifest.record(results.ManifestEntry{ID: rc.ID, Status: o.Status, Error: o.Error})
		s.progress.finished(o)
		return o, true, ""
	}
	if !s.opts.Rerun {
		if state != notDone {
			if state == doneForeignID {
				m = s.repairID(rc, m)
			}
			o := Outcome{Config: rc, Status: m.Status, Error: m.Error, Skipped: true, Metrics: m}
			s.manifest.recordSkipped(results.ManifestEntry{ID: rc.ID, Status: m.Status, Error: m.Error, Started: m.Started, Finished: m.Finished})
			s.progress.finished(o)
			return o, true, ""
		}
	}
	if s.opts.Rerun {
		invalid = "" // rerun anyway: nothing to explain
	}
	return Outcome{}, false, invalid
}

// doneState is what a previous invocation left of a run.
type doneState int

const (
	// notDone: no final result of this configuration; the run is (re)run.
	notDone doneState = iota
	// doneOK: finished for good with this configuration; the run is skipped.
	doneOK
	// doneForeignID: finished with this configuration, but its run_args.json or
	// metrics.json names another run ID (copied or renamed by hand, or an old
	// ID scheme): the result stands and the files are relabelled.
	doneForeignID
	// doneIngested: the directory holds a past run that ingest wrote.
	doneIngested
)

// ingestedKey is the metrics extra key in which `fsdpbench ingest` names the
// folder a run came from (package ingest): only ingested runs have it.
const ingestedKey = "source_dir"

// migrateRunDir renames a run stored under rc's legacy ID (sweeps.LegacyID,
// before IDs carried 64 bits) to its current ID, so a resumed sweep finds it.
func migrateRunDir(dir *results.SweepDir, rc sweeps.RunConfig) {
	old, cur := dir.RunDir(rc.LegacyID()), dir.RunDir(rc.ID)
	if old == cur {
		return
	}
	if _, err := os.Stat(cur); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if fi, err := os.Lstat(old); err == nil && fi.IsDir() {
		_ = os.Rename(old, cur) // on failure the run is redone under its new ID
	}
}

// done reports whether rc's stored run is finished for good and was run with the
// same configuration; anything unreadable means "not done" and the run is redone.
// The configuration is compared by fingerprint, which leaves the ID out, so a
// run stored under a directory that its files disagree with is still found.
//
// A final result whose files are damaged (metrics.json that does not decode, or
// that fails CheckMetrics or CheckRunArgs, as every later Load would) is not done
// either: skipping it would leave a sweep that report and export refuse until
// --rerun redoes every run. invalid then says why, for the run's log and the
// console; it is "" otherwise.
func done(dir *results.SweepDir, rc sweeps.RunConfig) (m results.Metrics, state doneState, invalid string) {
	m, err := dir.ReadMetrics(rc.ID)
	if errors.Is(err, fs.ErrNotExist) {
		return results.Metrics{}, notDone, ""
	} else if err != nil {
		return results.Metrics{}, notDone, err.Error()
	}
	if _, ok := m.Extra[ingestedKey]; ok {
		return m, doneIngested, ""
	}
	if !m.Status.Final() {
		return results.Metrics{}, notDone, ""
	}
	stored, err := dir.ReadRunArgs(rc.ID)
	if err != nil || stored.Fingerprint() != rc.Fingerprint() {
		return results.Metrics{}, notDone, ""
	}
	// Checked against rc, the configuration this run has now (stored's ID may
	// be another's, which doneForeignID relabels).
	if err := results.CheckRunArgs(&stored); err != nil {
		return results.Metrics{}, notDone, invalidField(results.RunArgsFile, err)
	}
	checked := m
	checked.RunID = rc.ID
	if err := results.CheckMetrics(&rc, &checked); err != nil {
		return results.Metrics{}, notDone, invalidField(results.MetricsFile, err)
	}
	if stored.ID != rc.ID || stored.Sweep != rc.Sweep || (m.RunID != "" && m.RunID != rc.ID) {
		return m, doneForeignID, ""
	}
	return m, doneOK, ""
}

// invalidField says which field of file err found invalid and why, without the
// advice to rerun that the error carries for a reader: the sweep reruns it.
func invalidField(file string, err error) string {
	var ie *results.InvalidRunError
	if errors.As(err, &ie) {
		return fmt.Sprintf("%s: %s %s", file, ie.Field, ie.Msg)
	}
	return fmt.Sprintf("%s: %v", file, err)
}

// repairID rewrites the run_args.json and metrics.json of a finished run whose
// files name another run, so that report, compare and gate show it under its
// own ID. metrics.json is rewritten too (even when its run_id was right) so that
// the index's cached line, keyed by its size and time, is replaced as well. When
// the files cannot be written the run is reported as it is, and the next
// invocation tries again.
func (s *sweep) repairID(rc sweeps.RunConfig, m results.Metrics) results.Metrics {
	stored, _ := s.dir.ReadRunArgs(rc.ID)
	was := stored.ID
	if was == rc.ID {
		was = m.RunID
	}
	m.RunID = rc.ID
	err := s.dir.WriteRunArgs(rc)
	if err == nil {
		err = s.dir.WriteMetrics(rc.ID, m)
	}
	note := fmt.Sprintf("fsdpbench: %s: its files named run %q; relabelled %s (the configuration matches)", rc.ID, was, rc.ID)
	if err != nil {
		note = fmt.Sprintf("fsdpbench: %s: its files name run %q and could not be relabelled: %v", rc.ID, was, err)
	}
	appendLog(filepath.Join(s.dir.RunDir(rc.ID), results.StderrFile), note)
	return m
}

// appendLog adds one line to a run's log file, best effort: a log line must not
// change what becomes of a run.
func appendLog(path, line string) {
	if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
		return // a link planted in the log's place is not written through
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = io.WriteString(f, line+"\n")
}

// realDir refuses a run directory that is a symbolic link (or anything but a
// directory): writing through it would put results outside the results
// directory, and report and gate do not follow it, so a run stored there would
// count as done for the sweep and be missing everywhere else.
func realDir(path string) error {
	st, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case st.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(path)
		return fmt.Errorf("%s is a symbolic link (to %s), not a run directory: fsdpbench writes only inside the results directory "+
			"and report and gate do not follow links; replace it by a copy (cp -rL) or remove it, then run the sweep again", path, target)
	case !st.IsDir():
		what := "file"
		if !st.Mode().IsRegular() {
			what = "special file (" + st.Mode().Type().String() + ")"
		}
		return fmt.Errorf("%s is a %s, not a run directory; move it away, then run the sweep again", path, what)
	}
	return nil
}

// checkRunDirs refuses the sweep before anything runs when a planned run's
// directory is not a plain directory (realDir). It reads runs/ once rather than
// each of (up to a million) run directories.
func checkRunDirs(dir *results.SweepDir, runs []sweeps.RunConfig) error {
	entries, err := os.ReadDir(filepath.Join(dir.Path, results.RunsDir))
	if err != nil {
		return fmt.Errorf("results directory %s: %w", dir.Path, err)
	}
	odd := map[string]bool{}
	for _, e := range entries {
		if !e.IsDir() {
			odd[e.Name()] = true
		}
	}
	if len(odd) == 0 {
		return nil
	}
	for _, rc := range runs {
		if odd[rc.ID] {
			if err := realDir(dir.RunDir(rc.ID)); err != nil {
				return fmt.Errorf("sweep %s: %w", rc.Sweep, err)
			}
		}
	}
	return nil
}

// execute runs rc's lifecycle: run_args.json first, the logs, Validate, the repeats,
// then steps.csv, ranks/ and metrics.json last (its presence marks completion).
//
// invalid, when not "", is why the stored result could not stand (done): it is
// the first line of the new stderr.log, so the log says why the run ran again.
func (s *sweep) execute(ctx context.Context, rc sweeps.RunConfig, invalid string) Outcome {
	runDir := s.dir.RunDir(rc.ID)
	o := Outcome{Config: rc}
	keepJob := false
	if s.slurm != nil && launcherName(s.plan, rc) == launch.SlurmName {
		// The job whose result the previous attempt recorded is never collected
		// again; one that ended (or still runs) unrecorded is, and keeps its files.
		if prev, err := s.dir.ReadMetrics(rc.ID); err == nil {
			id, _ := prev.Extra[launch.ExtraJobID].(string)
			s.slurm.Recorded(id)
		}
		keepJob = s.slurm.Pending(rc, runDir)
	} else {
		// Run here now: a job an earlier slurm attempt left must never be taken
		// for this attempt's if the spec goes back to launcher: slurm.
		_ = os.Remove(filepath.Join(runDir, launch.JobIDFile))
	}
	// A previous attempt's metrics.json must go before run_args.json is rewritten:
	// if this attempt is killed, the pair would otherwise pass for a finished run.
	if err := clearRun(runDir, keepJob); err != nil {
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
	stderr, err := os.Create(filepath.Join(runDir, results.StderrFile))
	if err != nil {
		stdout.Close()
		o.Status, o.Error = results.StatusFailed, err.Error()
		return o
	}
	// Each log is capped (MaxLogBytes: its head and its tail); closing writes
	// the tail, and drops whatever an abandoned backend writes after.
	logs := &runLogs{stdout: newCappedLog(stdout, LogHeadBytes, LogTailBytes), stderr: newCappedLog(stderr, LogHeadBytes, LogTailBytes)}
	defer logs.close()
	if invalid != "" {
		logs.line("stderr", "fsdpbench: the stored result was invalid, so the run ran again: "+invalid)
	}

	status, msg, repeats := s.attempt(ctx, rc, runDir, logs)
	if msg != "" && status != results.StatusOK {
		logs.line("stderr", "fsdpbench: run "+string(status)+": "+msg)
	}

	return s.finish(rc, status, msg, repeats)
}

// finish writes a run's outputs from its repeats (steps.csv, ranks/ and
// metrics.json last) and returns its outcome. Once the backend has returned, the
// outputs are written even if the sweep is being interrupted: they take
// milliseconds and make the record complete.
func (s *sweep) finish(rc sweeps.RunConfig, status results.Status, msg string, repeats []results.Result) Outcome {
	runDir := s.dir.RunDir(rc.ID)
	o := Outcome{Config: rc}
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
	if status == results.StatusOK {
		results.NoteRepeatsAuto(rc, repeats, &m)
	}
	m = results.Checked(rc, m) // a figure no run can have fails the run, naming the field
	status, msg = m.Status, m.Error
	if s.opts.Annotate != nil {
		s.opts.Annotate(rc, &m)
	}
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
	be, job := s.backendOf(rc)
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if rc.Timeout > 0 && job == nil {
		runCtx, cancel = context.WithTimeout(ctx, time.Duration(rc.Timeout))
	}
	defer cancel()
	verdict := func(res results.Result, err error) (results.Status, string) {
		return classify(ctx, runCtx, rc, res, err, logs)
	}
	if st, msg, res, ok := s.prelude(ctx, runCtx, rc, be, job, verdict); !ok {
		return st, msg, res
	}
	devices, release, st, msg, ok := s.acquire(runCtx, rc, be, job, verdict)
	if !ok {
		return st, msg, nil
	}
	defer release()

	var out []results.Result
	var samples []sampler.Sample
	for r := range max(rc.Repeats, 1) {
		// A backend that returns at once whatever its context says must not keep
		// an interrupted run going through its remaining repeats.
		if err := runCtx.Err(); err != nil {
			st, msg := verdict(results.Result{}, err)
			return st, msg, out
		}
		res, smp := s.repeatOnce(runCtx, rc, be, job, devices, r, runDir, logs, verdict)
		if smp != nil {
			samples = append(samples, smp...)
			if err := sampler.WriteFile(filepath.Join(runDir, results.SamplesFile), samples); err != nil {
				logs.line("stderr", "fsdpbench: GPU sampling: "+err.Error())
			}
		}
		out = append(out, res)
		if res.Status != results.StatusOK {
			return res.Status, res.Error, out
		}
		if results.EnoughRepeats(rc, out) {
			break // repeats: {ci: ...} reached its width
		}
	}
	return results.StatusOK, "", out
}

// backendOf is rc's backend, and the same as a JobBackend when rc runs under
// Slurm (nil otherwise): there the run's timeout is its job's time limit, so
// that time in the queue does not count, and the job runs on the cluster's
// GPUs, not this host's.
func (s *sweep) backendOf(rc sweeps.RunConfig) (backendInfo, backends.JobBackend) {
	be := s.backends[backendName(s.plan, rc)]
	var job backends.JobBackend
	if be.Backend != nil && launcherName(s.plan, rc) == launch.SlurmName {
		job, _ = be.Backend.(backends.JobBackend) // slurmFor checked every backend
	}
	return be, job
}

// prelude validates rc and checks that it fits this host before its first
// repeat. ok is false when the run ends here, with its status, message and the
// results to record.
func (s *sweep) prelude(ctx, runCtx context.Context, rc sweeps.RunConfig, be backendInfo, job backends.JobBackend,
	verdict func(results.Result, error) (results.Status, string)) (results.Status, string, []results.Result, bool) {
	if be.Backend == nil {
		// backendsFor looked every backend of the plan up; search points keep theirs.
		return results.StatusFailed, fmt.Sprintf("no backend %q for run %s", backendName(s.plan, rc), rc.ID), nil, false
	}
	_, err := s.guard(runCtx, func() (results.Result, error) {
		return results.Result{}, be.Validate(runCtx, rc)
	})
	if err != nil {
		var pe *panicError
		if ctx.Err() != nil || runCtx.Err() != nil || errors.As(err, &pe) || errors.Is(err, errAbandoned) {
			st, msg := verdict(results.Result{}, err)
			return st, msg, nil, false
		}
		if backends.IsSpecError(err) {
			// A mistake in the spec (Preflight missed it: a search point) is no
			// verdict on the run: failed, so a resume after the fix runs it.
			return results.StatusFailed, err.Error(), nil, false
		}
		return results.StatusInfeasible, err.Error(), []results.Result{{Status: results.StatusInfeasible, Error: err.Error(), WorldSize: rc.WorldSize}}, false
	}
	if job == nil {
		if reason := HostCapacity(s.plan, rc); reason != "" {
			return results.StatusInfeasible, reason, []results.Result{{Status: results.StatusInfeasible, Error: reason, WorldSize: rc.WorldSize}}, false
		}
	}
	if be.needsGPU && job == nil {
		// More GPUs than the host has is known before anything starts: a
		// refusal with its reason, as the host's RAM is (HostCapacity).
		if have := s.opts.Devices.Devices(); rc.GPUsPerNode > have {
			reason := fmt.Sprintf("does not fit this host: the run needs %d GPUs per node and this host has %d (CUDA_VISIBLE_DEVICES or /dev/nvidia*); lower gpus_per_node, or use launcher: slurm", rc.GPUsPerNode, have)
			return results.StatusInfeasible, reason, []results.Result{{Status: results.StatusInfeasible, Error: reason, WorldSize: rc.WorldSize}}, false
		}
	}
	return "", "", nil, true
}

// acquire takes the GPUs rc runs on from this host's launcher (none for a run
// that needs none or runs under Slurm); release gives them back.
func (s *sweep) acquire(runCtx context.Context, rc sweeps.RunConfig, be backendInfo, job backends.JobBackend,
	verdict func(results.Result, error) (results.Status, string)) (devices []int, release func(), st results.Status, msg string, ok bool) {
	if !be.needsGPU || job != nil {
		return nil, func() {}, "", "", true
	}
	devs, release, err := s.opts.Devices.Acquire(runCtx, rc.GPUsPerNode)
	if err != nil {
		st, msg := verdict(results.Result{}, err)
		return nil, nil, st, msg, false
	}
	return devs, release, "", "", true
}

// repeatOnce runs repeat r of rc and returns its result with the harness's
// verdict (Status, Error) and the GPU samples read meanwhile (nil when none).
// The harness samples the run's GPUs itself, so every backend gets samples.csv
// and an NVML peak (a no-op without a driver).
func (s *sweep) repeatOnce(runCtx context.Context, rc sweeps.RunConfig, be backendInfo, job backends.JobBackend, devices []int, r int,
	runDir string, logs *runLogs, verdict func(results.Result, error) (results.Status, string)) (results.Result, []sampler.Sample) {
	emit := func(ev backends.Event) {
		switch ev.Kind {
		case backends.EventStep:
			s.progress.step(rc.ID)
		case backends.EventQueued:
			s.progress.queued(rc.ID, ev.Reason)
		case backends.EventLog:
			logs.line(ev.Stream, ev.Line)
		}
	}
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
	// What else this host did meanwhile (issue 29): a gate told that the two
	// sides ran under different loads says so instead of guessing. A Slurm job
	// runs elsewhere, so this host's state says nothing about it.
	var watch *sampler.MachineWatch
	if job == nil {
		watch = sampler.WatchMachine()
	}
	res, err := s.guard(runCtx, func() (results.Result, error) {
		if job != nil {
			return s.slurm.Run(runCtx, job, rc, env, emit)
		}
		return be.Run(runCtx, rc, env, emit)
	})
	res.Env.GivenEnv, res.Env.InheritedEnv = rc.Env, inheritedEnv(os.Environ(), rc.Env)
	// A prediction (sim) measured nothing the machine could disturb.
	res.Env.Machine = nil
	if m := watch.Stop(); m != nil && !res.Predicted {
		res.Env.Machine = m
	}
	var samples []sampler.Sample
	if rep := smp.Stop(); rep.Apply(&res, r) {
		samples = rep.Samples
		if samples == nil {
			samples = []sampler.Sample{}
		}
		if rep.Err != nil {
			logs.line("stderr", fmt.Sprintf("fsdpbench: GPU sampling: %d readings failed, the first: %v", rep.Failed, rep.Err))
		}
	}
	st, msg := verdict(res, err)
	res.Status, res.Error = st, msg
	return res, samples
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

// HostCapacity says why rc cannot run on this host, or "": the check `fsdpbench
// plan` shows and `fsdpbench sweep` makes before a run starts, for runs of the
// local launcher whose ranks share this host's RAM (hardware cpu). A run that
// cannot fit is not started: 100,000 workers, or ranks that together need more
// memory than the host has, would take the machine down rather than end in a
// measured out-of-memory. Ranks beyond the bound on gpus_per_node
// (sweeps.MaxGPUsPerNode) on one host are refused before any prediction: a spec
// of world_size alone puts them all on one node, and the model refuses to
// predict such a node (no prediction must not mean "fits" here). Otherwise the
// analytic model decides. GPU runs are left to find their memory wall themselves
// (and the harness refuses more GPUs than the host has); Slurm runs are placed
// on the cluster's nodes. No prediction (a model sim does not know) refuses
// nothing.
func HostCapacity(plan *sweeps.Plan, rc sweeps.RunConfig) string {
	return HostCapacityBy(plan, rc, sim.Predict)
}

// builtinGPU holds, by name, whether a built-in hardware profile is a GPU's:
// they do not change, and looking one up copies it (plan asks for each of a
// million runs). Profile files and auto are looked up each time.
var builtinGPU sync.Map

// HostCapacityBy is HostCapacity with the prediction made by predict, which
// must answer as sim.Predict does (plan's sim.Memo, which predicts the runs
// of a large grid that share a prediction once).
func HostCapacityBy(plan *sweeps.Plan, rc sweeps.RunConfig, predict func(sweeps.RunConfig) (sim.Prediction, error)) string {
	if launcherName(plan, rc) == launch.SlurmName {
		return ""
	}
	if gpu, known := builtinGPU.Load(rc.Hardware); known && gpu.(bool) {
		return ""
	}
	hw, err := hardware.Lookup(rc.Hardware)
	if rc.Hardware == hardware.Auto {
		hw, _ = hardware.Detect()
		err = nil
	}
	if err == nil && rc.Hardware != hardware.Auto && !hardware.IsFile(rc.Hardware) {
		builtinGPU.Store(rc.Hardware, hw.IsGPU)
	}
	if err != nil || hw.IsGPU {
		return ""
	}
	if rc.GPUsPerNode > sweeps.MaxGPUsPerNode {
		return fmt.Sprintf("does not fit this host: %d ranks on the host, more than the %d one host may run (the bound on gpus_per_node); use fewer ranks, or spread them over nodes (nodes, launcher: slurm)",
			rc.GPUsPerNode, sweeps.MaxGPUsPerNode)
	}
	pred, err := predict(rc)
	if err != nil || pred.Feasible || pred.Hardware.IsGPU {
		return ""
	}
	return "does not fit this host: " + pred.Reason + " (the prediction `fsdpbench plan` shows)"
}

// clearRun removes what a previous attempt of the run left, keeping the directory.
// The logs go too: os.Create would follow a link planted in their place. So does
// any other link in the directory (a backend writing a file of its own would
// follow it out of the results directory), and the temporary files of writes a
// kill interrupted. With keepJob, a Slurm job of that attempt is to be
// re-attached or collected, and what its ranks write (ranks/) stays.
func clearRun(runDir string, keepJob bool) error {
	names := []string{results.MetricsFile, results.StepsFile, results.SamplesFile, results.StdoutFile, results.StderrFile, RepeatsDir}
	if !keepJob {
		names = append(names, results.RanksDir)
	}
	if entries, err := os.ReadDir(runDir); err == nil {
		for _, e := range entries {
			if e.Type()&fs.ModeSymlink != 0 || debris.MatchString(e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	for _, name := range names {
		if err := os.RemoveAll(filepath.Join(runDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clear the previous attempt of %s: %w", runDir, err)
		}
	}
	return nil
}

// debris matches the temporary files of results.WriteFileAtomic
// (".<name>.tmp<digits>"), which a writer killed between create and rename leaves.
var debris = regexp.MustCompile(`^\..+\.tmp[0-9]+$`)

// clearDebris removes the temporary files that killed writers left in the sweep's
// directory (manifest.json's, sweep.yaml's). Only the lock's holder may: another
// process's write in progress would look the same.
func clearDebris(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() && debris.MatchString(e.Name()) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// runLogs serializes the writes of a run's ranks and events into its log files.
type runLogs struct {
	mu     sync.Mutex
	stdout io.WriteCloser
	stderr io.WriteCloser
}

// close writes out and closes both logs; later writes are dropped.
func (l *runLogs) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = l.stdout.Close()
	_ = l.stderr.Close()
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
