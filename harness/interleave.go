package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/harness/sampler"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// Repeat orders (Options.RepeatOrder, sweep --repeat-order).
const (
	// RepeatsInterleaved runs the sweep in rounds: repeat 1 of every run, then
	// repeat 2 of every run, and so on. A disturbed minute on a shared machine
	// then touches one sample of many runs rather than every sample of one, so
	// it widens their confidence intervals instead of shifting one run's median.
	// The default.
	RepeatsInterleaved = "interleaved"
	// RepeatsSequential runs each run's repeats back to back (before the
	// interleaved order existed, the only one).
	RepeatsSequential = "sequential"
)

// RepeatOrders lists the allowed Options.RepeatOrder values.
var RepeatOrders = []string{RepeatsInterleaved, RepeatsSequential}

// RepeatsDir is the folder of a run's directory where the interleaved order
// keeps each finished repeat (repeat-<r>.json) until the run's last repeat is in
// and metrics.json is written: a sweep killed between two rounds resumes each run
// at its next repeat, neither losing nor duplicating any.
const RepeatsDir = "repeats"

// repeatRecord is one finished repeat as RepeatsDir stores it.
type repeatRecord struct {
	Result  results.Result   `json:"result"`
	Samples []sampler.Sample `json:"samples,omitempty"`
	Started time.Time        `json:"started"`
	WallS   float64          `json:"wall_s"`
}

// interleaved reports whether rc takes part in the interleaved rounds: runs of
// a max_fit search run in order (each point depends on the last) and Slurm jobs
// run whole (a job per repeat would queue per repeat), so both keep their
// repeats back to back.
func (s *sweep) interleaved(t task) bool {
	if s.opts.RepeatOrder == RepeatsSequential || t.search {
		return false
	}
	rc := t.runs[0]
	return launcherName(s.plan, rc) != launch.SlurmName && rc.Repeats > 1
}

// ilRun is the state of one run in the interleaved rounds.
type ilRun struct {
	rc      sweeps.RunConfig
	invalid string
	// reps are the finished repeats, loaded from RepeatsDir on a resume.
	reps []repeatRecord
	// prepared: this invocation has validated the run and opened its files.
	prepared bool
	// resumed: reps came from an earlier invocation (the logs are appended to).
	resumed bool
	// out is the run's outcome once it has one.
	out *Outcome
	// touched: a repeat of the run ran in this invocation (or it resumed one).
	touched bool
}

// complete reports whether r has all its repeats: its count, or, with
// automatic repeats, an interval within the width asked for.
func (r *ilRun) complete() bool {
	return len(r.reps) >= max(r.rc.Repeats, 1) || results.EnoughRepeats(r.rc, r.results())
}

// results are the results of r's finished repeats.
func (r *ilRun) results() []results.Result {
	out := make([]results.Result, len(r.reps))
	for i, rec := range r.reps {
		out[i] = rec.Result
	}
	return out
}

// spent is the time the run's repeats took so far: its timeout covers them all,
// in whatever order they ran.
func (r *ilRun) spent() time.Duration {
	var d float64
	for _, rep := range r.reps {
		d += rep.WallS
	}
	return time.Duration(d * float64(time.Second))
}

// runInterleaved runs the runs of tasks (each one plain run) in rounds, one
// repeat of every unfinished run per round, in plan order, at most Jobs at once;
// a round starts when the last has ended. It returns each task's outcome (nil
// for a run the sweep never reached) and how many runs did not start.
func (s *sweep) runInterleaved(ctx context.Context, tasks []task) ([]*Outcome, int) {
	runs := make([]*ilRun, len(tasks))
	for i, t := range tasks {
		rc := t.runs[0]
		if ctx.Err() != nil {
			break
		}
		o, handled, invalid := s.precheck(rc)
		if handled {
			runs[i] = &ilRun{rc: rc, out: &o}
			continue
		}
		runs[i] = &ilRun{rc: rc, invalid: invalid}
		if !s.opts.Rerun {
			runs[i].reps = loadRepeats(s.dir, rc)
		}
		runs[i].resumed = len(runs[i].reps) > 0
	}
	for ctx.Err() == nil {
		var round []*ilRun
		next := -1
		for _, r := range runs {
			if r == nil || r.out != nil {
				continue
			}
			if next < 0 || len(r.reps) < next {
				next = len(r.reps)
			}
		}
		if next < 0 {
			break // every run has its outcome
		}
		for _, r := range runs {
			if r != nil && r.out == nil && len(r.reps) == next {
				round = append(round, r)
			}
		}
		rounds := 0
		for _, r := range runs {
			if r != nil && r.out == nil {
				rounds = max(rounds, r.rc.Repeats)
			}
		}
		s.progress.round(next, rounds, len(round))
		if s.opts.ReverseOddRounds && next%2 == 1 {
			slices.Reverse(round)
		}
		p := pool.New().WithMaxGoroutines(s.opts.Jobs).WithContext(ctx)
		for _, r := range round {
			p.Go(func(ctx context.Context) error {
				if ctx.Err() != nil {
					return nil
				}
				s.step(ctx, r)
				return nil
			})
		}
		_ = p.Wait()
	}
	outs := make([]*Outcome, len(tasks))
	notStarted := 0
	for i, r := range runs {
		switch {
		case r == nil:
			notStarted++
		case r.out != nil:
			outs[i] = r.out
		case !r.touched && len(r.reps) == 0:
			notStarted++
		default:
			// Interrupted between its repeats: recorded as canceled, not final,
			// and its finished repeats stay in RepeatsDir for the resume.
			o := s.conclude(r, results.StatusCanceled, "interrupted; running the sweep again runs its remaining repeats")
			outs[i] = &o
		}
	}
	return outs, notStarted
}

// step runs the next repeat of r (preparing r first if this invocation has not
// yet), stores it, and concludes r when it was its last or not ok.
func (s *sweep) step(ctx context.Context, r *ilRun) {
	rc := r.rc
	runDir := s.dir.RunDir(rc.ID)
	r.touched = true
	if !r.prepared {
		if err := s.prepareInterleaved(r); err != nil {
			o := s.conclude(r, results.StatusFailed, err.Error())
			r.out = &o
			return
		}
	}
	logs, err := openRunLogs(runDir)
	if err != nil {
		o := s.conclude(r, results.StatusFailed, err.Error())
		r.out = &o
		return
	}
	defer logs.close()
	be, job := s.backendOf(rc)
	// The run's timeout covers all its repeats, as in the sequential order:
	// each repeat gets what the earlier ones left.
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if rc.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, max(time.Duration(rc.Timeout)-r.spent(), 0))
	}
	defer cancel()
	verdict := func(res results.Result, err error) (results.Status, string) {
		return classify(ctx, runCtx, rc, res, err, logs)
	}
	if !r.prepared {
		r.prepared = true
		if r.invalid != "" {
			logs.line("stderr", "fsdpbench: the stored result was invalid, so the run ran again: "+r.invalid)
		}
		if st, msg, res, ok := s.prelude(ctx, runCtx, rc, be, job, verdict); !ok {
			s.endInterleaved(r, logs, st, msg, res)
			return
		}
	}
	if r.complete() {
		// Killed after its last repeat was kept and before metrics.json.
		s.endInterleaved(r, logs, results.StatusOK, "", nil)
		return
	}
	if err := runCtx.Err(); err != nil {
		st, msg := verdict(results.Result{}, err)
		s.endInterleaved(r, logs, st, msg, nil)
		return
	}
	rep := len(r.reps)
	s.progress.startedRepeat(rc, rep)
	devices, release, st, msg, ok := s.acquire(runCtx, rc, be, job, verdict)
	if !ok {
		s.endInterleaved(r, logs, st, msg, nil)
		return
	}
	started := s.opts.Now()
	res, smp := s.repeatOnce(runCtx, rc, be, job, devices, rep, runDir, logs, verdict)
	release()
	rec := repeatRecord{Result: res, Samples: smp, Started: started, WallS: s.opts.Now().Sub(started).Seconds()}
	if res.Status != results.StatusOK {
		// A repeat that is not ok ends the run, as in the sequential order; its
		// result is recorded in metrics.json, not kept for a resume.
		s.endInterleaved(r, logs, res.Status, res.Error, []results.Result{res})
		return
	}
	if err := storeRepeat(runDir, rep, rec); err != nil {
		s.endInterleaved(r, logs, results.StatusFailed, err.Error(), nil)
		return
	}
	r.reps = append(r.reps, rec)
	if r.complete() {
		s.endInterleaved(r, logs, results.StatusOK, "", nil)
		return
	}
	s.progress.repeatDone(rc.ID)
}

// endInterleaved logs why a run ended (when not ok) and concludes it with its
// stored repeats and extra (the repeat that ended it).
func (s *sweep) endInterleaved(r *ilRun, logs *runLogs, st results.Status, msg string, extra []results.Result) {
	if msg != "" && st != results.StatusOK {
		logs.line("stderr", "fsdpbench: run "+string(st)+": "+msg)
	}
	o := s.concludeWith(r, st, msg, extra)
	r.out = &o
}

func (s *sweep) conclude(r *ilRun, st results.Status, msg string) Outcome {
	return s.concludeWith(r, st, msg, nil)
}

// concludeWith writes r's outputs from its repeats (finish: samples.csv,
// steps.csv, ranks/, metrics.json) and records its outcome. A final status
// removes RepeatsDir, after metrics.json: killed in between, the run is done
// and the folder is left over, harmless.
func (s *sweep) concludeWith(r *ilRun, st results.Status, msg string, extra []results.Result) Outcome {
	rc := r.rc
	runDir := s.dir.RunDir(rc.ID)
	var reps []results.Result
	var samples []sampler.Sample
	var wall time.Duration
	started := s.opts.Now()
	for i, rec := range r.reps {
		reps = append(reps, rec.Result)
		samples = append(samples, rec.Samples...)
		if i == 0 {
			started = rec.Started
		}
	}
	wall = r.spent()
	reps = append(reps, extra...)
	if len(samples) > 0 {
		if err := sampler.WriteFile(filepath.Join(runDir, results.SamplesFile), samples); err != nil {
			appendLog(filepath.Join(runDir, results.StderrFile), "fsdpbench: GPU sampling: "+err.Error())
		}
	}
	o := s.finish(rc, st, msg, reps)
	o.Wall = wall
	if o.Status.Final() {
		_ = os.RemoveAll(filepath.Join(runDir, RepeatsDir))
	}
	s.manifest.record(results.ManifestEntry{ID: rc.ID, Status: o.Status, Error: o.Error, Started: started, Finished: s.opts.Now()})
	s.progress.finished(o)
	return o
}

// prepareInterleaved readies r's directory for its next repeat: a run resumed
// from RepeatsDir keeps its repeats and logs and loses only what its conclusion
// writes again; any other starts afresh (clearRun, run_args.json, empty logs).
func (s *sweep) prepareInterleaved(r *ilRun) error {
	runDir := s.dir.RunDir(r.rc.ID)
	if r.resumed {
		for _, name := range []string{results.MetricsFile, results.StepsFile, results.SamplesFile, results.RanksDir} {
			if err := os.RemoveAll(filepath.Join(runDir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("clear the previous attempt of %s: %w", runDir, err)
			}
		}
		appendLog(filepath.Join(runDir, results.StderrFile),
			fmt.Sprintf("fsdpbench: resumed after repeat %d of %d (the earlier ones are kept in %s)", len(r.reps), r.rc.Repeats, RepeatsDir))
		return nil
	}
	if err := clearRun(runDir, false); err != nil {
		return err
	}
	if err := s.dir.WriteRunArgs(r.rc); err != nil {
		return fmt.Errorf("write %s: %v", results.RunArgsFile, err)
	}
	for _, name := range []string{results.StdoutFile, results.StderrFile} {
		f, err := os.Create(filepath.Join(runDir, name))
		if err != nil {
			return err
		}
		f.Close()
	}
	return nil
}

// openRunLogs opens a run's logs for one more repeat, appending. The head kept
// is what the whole log has left of LogHeadBytes, and the tail is bounded so the
// file stays within MaxLogBytes over all its repeats.
func openRunLogs(runDir string) (*runLogs, error) {
	open := func(name string) (*cappedLog, error) {
		path := filepath.Join(runDir, name)
		if st, err := os.Lstat(path); err == nil && !st.Mode().IsRegular() {
			return nil, fmt.Errorf("%s is not a regular file; remove it, then run the sweep again", path)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
		if err != nil {
			return nil, err
		}
		size := 0
		if st, err := f.Stat(); err == nil {
			size = int(min(st.Size(), int64(MaxLogBytes)))
		}
		head := max(LogHeadBytes-size, 0)
		return newCappedLog(f, head, max(MaxLogBytes-size-head, 0)), nil
	}
	out, err := open(results.StdoutFile)
	if err != nil {
		return nil, err
	}
	errLog, err := open(results.StderrFile)
	if err != nil {
		out.Close()
		return nil, err
	}
	return &runLogs{stdout: out, stderr: errLog}, nil
}

var repeatFile = regexp.MustCompile(`^repeat-([0-9]+)\.json$`)

func repeatPath(runDir string, r int) string {
	return filepath.Join(runDir, RepeatsDir, "repeat-"+strconv.Itoa(r)+".json")
}

// storeRepeat writes repeat r atomically: it exists whole or not at all.
func storeRepeat(runDir string, r int, rec repeatRecord) error {
	if err := os.MkdirAll(filepath.Join(runDir, RepeatsDir), 0o777); err != nil {
		return fmt.Errorf("keep repeat %d: %w", r+1, err)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("keep repeat %d: %w", r+1, err)
	}
	return results.WriteFileAtomic(repeatPath(runDir, r), b)
}

// loadRepeats reads the repeats an interrupted invocation finished of rc: the
// files repeat-0.json, repeat-1.json, ... up to the first missing or damaged one
// (what follows a gap is redone), and only when run_args.json shows the same
// configuration and the run has no final result. Anything else gives none, and
// the run starts afresh.
func loadRepeats(dir *results.SweepDir, rc sweeps.RunConfig) []repeatRecord {
	stored, err := dir.ReadRunArgs(rc.ID)
	if err != nil || stored.Fingerprint() != rc.Fingerprint() || stored.ID != rc.ID {
		return nil
	}
	runDir := dir.RunDir(rc.ID)
	entries, err := os.ReadDir(filepath.Join(runDir, RepeatsDir))
	if err != nil {
		return nil
	}
	have := map[int]bool{}
	for _, e := range entries {
		if m := repeatFile.FindStringSubmatch(e.Name()); m != nil && e.Type().IsRegular() {
			if n, err := strconv.Atoi(m[1]); err == nil && n < sweeps.MaxRepeats {
				have[n] = true
			}
		}
	}
	var out []repeatRecord
	for r := 0; have[r] && r < max(rc.Repeats, 1); r++ {
		b, err := input.ReadJSON(repeatPath(runDir, r), input.Metrics)
		if err != nil {
			break
		}
		var rec repeatRecord
		if err := json.Unmarshal(b, &rec); err != nil || rec.Result.Status != results.StatusOK ||
			rec.WallS < 0 || rec.WallS > time.Duration(sweeps.MaxTimeout).Seconds() {
			break
		}
		out = append(out, rec)
	}
	return out
}
