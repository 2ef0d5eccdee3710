// Package harness runs a sweep's RunConfigs through backends: it schedules them
// (a bounded conc pool), drives each run's lifecycle (run_args.json, logs, Validate,
// repeats under a timeout, metrics.json last), survives backends that fail or panic,
// resumes a killed sweep where it stopped, searches for the largest batch that fits,
// and reports progress. It decides run statuses; it never computes metrics itself.
package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/harness/sampler"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// DefaultResultsDir is where sweeps write when no results directory is given. It is
// never the source package results/ (DESIGN.md).
const DefaultResultsDir = "fsdpbench-results"

// MaxJobs bounds Options.Jobs (sweep --jobs): more runs at once than this measure
// nothing but contention, and each holds goroutines, files and processes.
const MaxJobs = 1024

// DefaultGrace is how long a backend gets to return after its context is cancelled
// before the harness stops waiting for it.
const DefaultGrace = 10 * time.Second

// ProgressMode selects how progress is shown on Options.Out.
type ProgressMode string

// Progress modes.
const (
	// ProgressAuto draws bars when Out is a terminal and prints plain lines otherwise.
	ProgressAuto ProgressMode = ""
	// ProgressBars draws mpb bars: the sweep, and each running run's steps.
	ProgressBars ProgressMode = "bars"
	// ProgressPlain prints one line per finished (or skipped) run.
	ProgressPlain ProgressMode = "plain"
	// ProgressNone prints nothing.
	ProgressNone ProgressMode = "none"
)

// Options configure Run. The zero value works except for Registry.
type Options struct {
	// ResultsDir holds one directory per sweep; default DefaultResultsDir.
	ResultsDir string
	// Jobs is how many runs execute at once; default 1, so that measurements do not
	// disturb each other.
	Jobs int
	// Rerun reruns every run, even those a previous invocation finished.
	Rerun bool
	// Registry is where backends are looked up by name. Required.
	Registry *backends.Registry
	// Out receives progress; nil discards it.
	Out io.Writer
	// Progress selects bars or plain lines; default: bars on a terminal.
	Progress ProgressMode
	// OnConsole, when not nil, is called with a writer that prints lines above the
	// progress bars once they are drawn, and with nil when they are gone. Anything
	// else written to the terminal meanwhile (a Ctrl-C notice on stderr) would tear
	// the bars and be erased by their next redraw; the CLI routes such notices
	// through this writer.
	OnConsole func(io.Writer)
	// Now is the clock for the timestamps in the manifest; default time.Now.
	Now func() time.Time
	// Grace is how long a backend may take to return once its run is cancelled or
	// timed out; after that the run is recorded and the harness moves on.
	// Default DefaultGrace.
	Grace time.Duration
	// Env is recorded in the manifest (fsdpbench version, commit); the Go version
	// and the host are filled in when empty.
	Env results.Env
	// Devices hands out this host's GPUs to backends that need them; default: a
	// local launcher over the devices launch.DetectDevices finds.
	Devices *launch.Local
	// DeviceSource reads each run's GPUs while it runs, whatever the backend, into
	// samples.csv and peak_device_mem_bytes; default: NVML when the driver is
	// there, and no sampling (quietly) when it is not.
	DeviceSource sampler.Source
	// SampleInterval is how often the GPUs are read; default
	// sampler.DefaultInterval. Negative turns sampling off.
	SampleInterval time.Duration
	// WaitLock makes Run wait while another process holds the sweep's results
	// directory (dirlock) instead of refusing at once with who holds it.
	WaitLock bool
	// Annotate, when not nil, may add to a finished run's metrics before they
	// are written: `sweep --predict` stores the analytic model's prediction
	// beside the measurement (in Extra).
	Annotate func(rc sweeps.RunConfig, m *results.Metrics)
	// RepeatOrder is RepeatsInterleaved (the default) or RepeatsSequential: whether
	// a run's repeats are spread over the sweep in rounds or run back to back.
	RepeatOrder string
	// ReverseOddRounds runs every other interleaved round in reverse plan order
	// (A B, then B A): `fsdpbench ab --order abba`, so that neither side always
	// goes first and a linear drift weighs on both alike.
	ReverseOddRounds bool
	// Inputs are the files the sweep was read from (the spec, nccl-tests output):
	// Run refuses to start when the sweep would write over one of them (a spec kept
	// as <results>/<name>/sweep.yaml or manifest.json), see guardInputs.
	Inputs []string
}

// RefusedError is an error that stopped a sweep before any run started: its
// results directory cannot be written, another process holds it, or a run's
// directory is not one fsdpbench may write. The CLI exits 2 on it: nothing ran,
// and running the same command again after fixing the cause is safe.
type RefusedError struct{ Err error }

// Error is the cause's message.
func (e *RefusedError) Error() string { return e.Err.Error() }

// Unwrap returns the cause (a *dirlock.HeldError, a file system error, ...).
func (e *RefusedError) Unwrap() error { return e.Err }

func refused(err error) error { return &RefusedError{Err: err} }

// Outcome is what became of one run.
type Outcome struct {
	Config sweeps.RunConfig
	Status results.Status
	Error  string
	// Skipped is true when a previous invocation had finished the run.
	Skipped bool
	// Wall is how long the run took here (zero when skipped).
	Wall time.Duration
	// Metrics is the run's metrics.json.
	Metrics results.Metrics
}

// SearchResult is the outcome of one max_fit search: the largest value of the
// searched axis that ran (fit), for one point of the other axes. The manifest
// stores it, so it lives in results.
type SearchResult = results.SearchResult

// Summary counts the outcomes of a sweep. Status counts include skipped runs, by
// their stored status; Skipped says how many of them were skipped.
type Summary struct {
	// Dir is the sweep's results directory.
	Dir        string
	Total      int
	OK         int
	OOM        int
	Diverged   int
	Infeasible int
	Failed     int
	Timeout    int
	Canceled   int
	Skipped    int
	// NotStarted counts planned runs that never started because the sweep was
	// interrupted (search points never reached are not counted).
	NotStarted int
	// Runs lists every run's outcome, in plan order, search points after their start.
	Runs []Outcome
	// MaxFit has one entry per search group.
	MaxFit []SearchResult
}

// Failures is how many runs failed or timed out; oom, diverged and infeasible runs
// are results, not failures.
func (s Summary) Failures() int { return s.Failed + s.Timeout }

// Run executes plan and returns what became of its runs. A run that fails, panics
// or times out is recorded and the sweep goes on; the error return is for problems
// with the sweep itself (no registry, an unavailable backend, an unwritable results
// directory). When ctx is cancelled, running runs are cancelled, no new run starts,
// and Run returns the summary so far with ctx's error.
func Run(ctx context.Context, plan *sweeps.Plan, opts Options) (Summary, error) {
	if err := opts.defaults(); err != nil {
		return Summary{}, err
	}
	if plan == nil || plan.Name == "" {
		return Summary{}, errors.New("harness: the plan has no name (the spec's name: names its results directory)")
	}
	// Mistakes in the spec stop the sweep before anything runs or is written.
	if err := Preflight(ctx, plan, opts.Registry); err != nil {
		return Summary{}, err
	}
	if err := launch.Check(plan.Launcher); err != nil {
		return Summary{}, fmt.Errorf("sweep %s: %w", plan.Name, err)
	}
	bes, err := backendsFor(ctx, plan, opts.Registry)
	if err != nil {
		return Summary{}, err
	}
	slurm, err := slurmFor(plan, bes)
	if err != nil {
		return Summary{}, err
	}
	dir, err := results.OpenSweep(filepath.Join(opts.ResultsDir, plan.Name))
	if err != nil {
		return Summary{}, refused(err)
	}
	writeSpec, err := guardInputs(dir.Path, opts.Inputs, plan.Resolved)
	if err != nil {
		return Summary{}, refused(err)
	}
	// One process at a time in a sweep's directory, for the whole sweep: two
	// would run every run twice, measure them against each other, and the one
	// interrupted would overwrite what the other finished.
	lock, err := dirlock.Acquire(ctx, dir.Path, dirlock.Options{Wait: opts.WaitLock, OnWait: func(he *dirlock.HeldError) {
		fmt.Fprintf(opts.Out, "waiting for %s: in use by %s\n", dir.Path, he.Holder)
	}})
	if err != nil {
		if ctx.Err() != nil {
			return Summary{}, ctx.Err()
		}
		return Summary{}, refused(err)
	}
	defer func() { _ = lock.Release() }()
	clearDebris(dir.Path)
	if err := checkRunDirs(dir, plan.Runs); err != nil {
		return Summary{}, refused(err)
	}
	if len(plan.Resolved) > 0 && writeSpec {
		if err := dir.WriteSpec(plan.Resolved); err != nil {
			return Summary{}, refused(err)
		}
	}

	source, closeSource := deviceSource(opts)
	defer closeSource()
	s := &sweep{
		plan:     plan,
		opts:     opts,
		dir:      dir,
		backends: bes,
		manifest: newManifest(dir, plan.Name, opts),
		source:   source,
		slurm:    slurm,
	}
	tasks := makeTasks(plan.Runs)
	if !opts.Rerun {
		noteInvalid(opts.Out, dir, plan.Runs)
	}
	s.progress = newProgress(opts, plan.Name, len(plan.Runs))
	if err := s.manifest.flush(); err != nil {
		s.progress.close()
		return Summary{}, refused(err)
	}

	outcomes := make([][]Outcome, len(tasks))
	searches := make([]*SearchResult, len(tasks))
	var notStarted int
	var nsMu sync.Mutex
	// The runs with repeats to spread go first, in rounds; then the rest (single
	// repeats, searches, Slurm jobs) in plan order through the pool.
	var ilIdx []int
	var ilTasks []task
	for i, t := range tasks {
		if s.interleaved(t) {
			ilIdx = append(ilIdx, i)
			ilTasks = append(ilTasks, t)
		}
	}
	if len(ilTasks) > 0 {
		outs, ns := s.runInterleaved(ctx, ilTasks)
		notStarted += ns
		for k, o := range outs {
			if o != nil {
				outcomes[ilIdx[k]] = []Outcome{*o}
			}
		}
	}
	p := pool.New().WithMaxGoroutines(opts.Jobs).WithContext(ctx)
	for i, t := range tasks {
		if s.interleaved(t) {
			continue
		}
		if ctx.Err() != nil {
			nsMu.Lock()
			for _, u := range tasks[i:] {
				if !s.interleaved(u) {
					notStarted += len(u.runs)
				}
			}
			nsMu.Unlock()
			break
		}
		p.Go(func(ctx context.Context) error {
			// The pool blocks Go until a slot frees, so the context may have been
			// cancelled while this task waited.
			if ctx.Err() != nil {
				nsMu.Lock()
				notStarted += len(t.runs)
				nsMu.Unlock()
				return nil
			}
			outcomes[i], searches[i] = s.runTask(ctx, t)
			if sr := searches[i]; sr != nil && sr.StoppedBy == string(results.StatusCanceled) {
				nsMu.Lock()
				notStarted += max(0, len(t.runs)-len(outcomes[i]))
				nsMu.Unlock()
			}
			return nil
		})
	}
	_ = p.Wait() // tasks record their errors in outcomes
	if slurm != nil && ctx.Err() != nil {
		slurm.CancelAll() // each run cancels its own job; this catches any left
	}
	s.progress.close()

	sum := Summary{Dir: dir.Path, NotStarted: notStarted}
	for i := range tasks {
		for _, o := range outcomes[i] {
			sum.add(o)
		}
		if searches[i] != nil {
			sum.MaxFit = append(sum.MaxFit, *searches[i])
		}
	}
	s.manifest.finish(ctx.Err() == nil)
	if err := s.manifest.flush(); err != nil {
		return sum, err
	}
	if ctx.Err() != nil {
		return sum, ctx.Err()
	}
	return sum, nil
}

// RerunHint is a line for the end of a sweep that skipped runs an earlier
// invocation recorded as not ok (infeasible, oom, diverged): a setup mistake
// since fixed (hardware: h100-sxm on a machine without a GPU) or another machine
// would give another outcome, and only --rerun runs them again. "" when none.
func (s Summary) RerunHint() string {
	counts := map[results.Status]int{}
	var order []string
	n := 0
	for _, o := range s.Runs {
		if !o.Skipped || o.Status == results.StatusOK {
			continue
		}
		if counts[o.Status] == 0 {
			order = append(order, string(o.Status))
		}
		counts[o.Status]++
		n++
	}
	if n == 0 {
		return ""
	}
	parts := make([]string, len(order))
	for i, st := range order {
		parts[i] = fmt.Sprintf("%d %s", counts[results.Status(st)], st)
	}
	runs := "runs"
	if n == 1 {
		runs = "run"
	}
	return fmt.Sprintf("skipped %d %s that an earlier sweep recorded as %s; if the spec or the machine changed since, run them again with --rerun",
		n, runs, strings.Join(parts, ", "))
}

func (s *Summary) add(o Outcome) {
	s.Runs = append(s.Runs, o)
	s.Total++
	if o.Skipped {
		s.Skipped++
	}
	switch o.Status {
	case results.StatusOK:
		s.OK++
	case results.StatusOOM:
		s.OOM++
	case results.StatusDiverged:
		s.Diverged++
	case results.StatusInfeasible:
		s.Infeasible++
	case results.StatusTimeout:
		s.Timeout++
	case results.StatusCanceled:
		s.Canceled++
	default:
		s.Failed++
	}
}

func (o *Options) defaults() error {
	if o.Registry == nil {
		return errors.New("harness: Options.Registry is nil (build one with the backends to use)")
	}
	if o.ResultsDir == "" {
		o.ResultsDir = DefaultResultsDir
	}
	if o.Jobs < 0 || o.Jobs > MaxJobs {
		return fmt.Errorf("harness: Options.Jobs is %d: give 1 to %d runs at once (0 means 1)", o.Jobs, MaxJobs)
	}
	if o.Jobs == 0 {
		o.Jobs = 1
	}
	switch o.RepeatOrder {
	case "":
		o.RepeatOrder = RepeatsInterleaved
	case RepeatsInterleaved, RepeatsSequential:
	default:
		return fmt.Errorf("harness: Options.RepeatOrder is %q: give %s or %s", o.RepeatOrder, RepeatsInterleaved, RepeatsSequential)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	if o.Env.Go == "" {
		o.Env.Go = runtime.Version()
	}
	if len(o.Env.Hosts) == 0 {
		if h, err := os.Hostname(); err == nil {
			o.Env.Hosts = []string{h}
		}
	}
	if o.Devices == nil {
		o.Devices = launch.NewLocal(launch.DetectDevices())
	}
	return nil
}

// deviceSource is where the sweep's GPU samples come from, and how to release it.
// No driver is no failure: the runs then go unsampled, as on a CPU machine.
func deviceSource(opts Options) (sampler.Source, func()) {
	if opts.SampleInterval < 0 {
		return nil, func() {}
	}
	if opts.DeviceSource != nil {
		return opts.DeviceSource, func() {}
	}
	m, err := sampler.OpenNVML()
	if err != nil {
		slog.Debug("harness: no GPU sampling", "reason", err)
		return nil, func() {}
	}
	return m, func() {
		if err := m.Close(); err != nil {
			slog.Debug("harness: closing NVML", "error", err)
		}
	}
}

// backendInfo is a backend and whether its runs need devices from the launcher.
type backendInfo struct {
	backends.Backend
	needsGPU bool
}

// backendsFor looks up every backend the plan uses and refuses to start when one
// cannot run here: every run would fail the same way.
func backendsFor(ctx context.Context, plan *sweeps.Plan, reg *backends.Registry) (map[string]backendInfo, error) {
	names := map[string]bool{}
	for _, rc := range plan.Runs {
		names[backendName(plan, rc)] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	out := map[string]backendInfo{}
	for _, n := range sorted {
		b, err := reg.Get(n)
		if err != nil {
			return nil, fmt.Errorf("sweep %s: %w", plan.Name, err)
		}
		d, err := b.Describe(ctx)
		if err != nil {
			return nil, fmt.Errorf("sweep %s: backend %s: %w", plan.Name, n, err)
		}
		if !d.Available {
			return nil, fmt.Errorf("sweep %s: backend %s is not available on this host: %s", plan.Name, n, d.Reason)
		}
		out[n] = backendInfo{Backend: b, needsGPU: d.NeedsGPU}
	}
	return out, nil
}

// slurmFor returns the Slurm launcher when runs of the plan use it, after
// checking that this host can submit jobs, that their backends can be started as
// jobs, and their launcher_options. A backend that cannot (sim, which starts no
// processes; a plugin) is refused rather than quietly run on this host, which on
// a login node would measure the wrong machine.
func slurmFor(plan *sweeps.Plan, bes map[string]backendInfo) (*launch.Slurm, error) {
	var slurm *launch.Slurm
	for _, rc := range plan.Runs {
		if launcherName(plan, rc) != launch.SlurmName {
			continue
		}
		if slurm == nil {
			if err := launch.CheckSlurm(); err != nil {
				return nil, fmt.Errorf("sweep %s: %w", plan.Name, err)
			}
			slurm = launch.NewSlurm()
		}
		name := backendName(plan, rc)
		if _, ok := bes[name].Backend.(backends.JobBackend); !ok {
			return nil, fmt.Errorf("sweep %s: backend %s cannot run under launcher slurm: it does not describe its runs as processes "+
				"for a job script (gotrain and torchrun do); use launcher: local (--set launcher=local)", plan.Name, name)
		}
		if _, err := launch.ParseSlurmOptions(rc.LauncherOptions); err != nil {
			return nil, fmt.Errorf("sweep %s: %w", plan.Name, err)
		}
	}
	return slurm, nil
}

func backendName(plan *sweeps.Plan, rc sweeps.RunConfig) string {
	if rc.Backend != "" {
		return rc.Backend
	}
	return plan.Backend
}

// invalidListed is how many runs noteInvalid names before "and N more".
const invalidListed = 5

// noteInvalid says, before the progress display starts, which finished runs are
// run again because their stored result is damaged (done), and why: a resume
// otherwise seems to redo finished work without reason. Each run's stderr.log
// says it too.
func noteInvalid(out io.Writer, dir *results.SweepDir, runs []sweeps.RunConfig) {
	n := 0
	for _, rc := range runs {
		if _, _, why := done(dir, rc); why != "" {
			if n < invalidListed {
				fmt.Fprintf(out, "fsdpbench: run %s: its stored result is invalid, so it runs again: %s\n", rc.ID, why)
			}
			n++
		}
	}
	if n > invalidListed {
		fmt.Fprintf(out, "fsdpbench: and %d more runs whose stored results are invalid run again (each run's %s says why)\n", n-invalidListed, results.StderrFile)
	}
}
