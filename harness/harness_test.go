package harness

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// fake is a backend whose behaviour each test scripts per run.
type fake struct {
	name     string
	needsGPU bool
	validate func(rc sweeps.RunConfig) error
	run      func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error)

	mu   sync.Mutex
	ran  []string // run IDs, one per Run call
	envs []backends.RunEnv
}

func (f *fake) Name() string { return f.name }

func (f *fake) Describe(context.Context) (backends.Description, error) {
	return backends.Description{Name: f.name, Available: true, NeedsGPU: f.needsGPU}, nil
}

func (f *fake) Validate(_ context.Context, rc sweeps.RunConfig) error {
	if f.validate != nil {
		return f.validate(rc)
	}
	return nil
}

func (f *fake) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	f.mu.Lock()
	f.ran = append(f.ran, rc.ID)
	f.envs = append(f.envs, env)
	f.mu.Unlock()
	if f.run != nil {
		return f.run(ctx, rc, env, emit)
	}
	return okResult(rc, emit), nil
}

func (f *fake) runs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.ran)
}

// okResult reports rc's steps, each taking 10 ms, as a backend that ran would.
func okResult(rc sweeps.RunConfig, emit func(backends.Event)) results.Result {
	res := results.Result{Status: results.StatusOK, WorldSize: rc.WorldSize, TokensPerStep: rc.TokensPerStep()}
	for i := range rc.Steps {
		loss := 10.0 / float64(i+1)
		st := results.Step{Step: i, Loss: &loss, StepTimeS: 0.01, Tokens: rc.TokensPerStep()}
		res.Steps = append(res.Steps, st)
		emit(backends.Event{Kind: backends.EventStep, Step: i, Loss: &loss, StepTimeS: st.StepTimeS, Tokens: st.Tokens})
	}
	for r := range rc.WorldSize {
		res.PerRank = append(res.PerRank, results.RankResult{Rank: r, Tokens: rc.TokensPerStep() * int64(rc.Steps) / int64(rc.WorldSize)})
	}
	res.MeasuredWallS = 0.01 * float64(rc.Steps)
	return res
}

// blockUntilDone is a backend run that only ends when its context does.
func blockUntilDone(ctx context.Context, _ sweeps.RunConfig, _ backends.RunEnv, _ func(backends.Event)) (results.Result, error) {
	<-ctx.Done()
	return results.Result{Status: results.StatusCanceled}, ctx.Err()
}

// plan builds a plan of n runs that differ by batch_per_device (1..n).
func plan(name string, n int) *sweeps.Plan {
	p := &sweeps.Plan{Name: name, Backend: "fake", Launcher: "local", Resolved: []byte("name: " + name + "\n")}
	for i := range n {
		p.Runs = append(p.Runs, runConfig(name, i+1))
	}
	return p
}

func runConfig(sweep string, bs int) sweeps.RunConfig {
	rc := sweeps.RunConfig{
		Sweep: sweep, Backend: "fake", Launcher: "local", Hardware: "cpu", Model: "tiny",
		SeqLen: 16, Steps: 3, WarmupSteps: 1, Repeats: 1, Timeout: sweeps.Duration(time.Minute),
		Nodes: 1, GPUsPerNode: 2, WorldSize: 2, BatchPerDevice: bs, GradAccum: 1, GlobalBatch: 2 * bs,
		Sharding: sweeps.FullShard, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16,
		WrapPolicy: "transformer",
	}
	rc.AssignID()
	return rc
}

func options(t *testing.T, be backends.Backend) (Options, *bytes.Buffer) {
	t.Helper()
	reg := &backends.Registry{}
	require.NoError(t, reg.Register(be))
	var out bytes.Buffer
	return Options{
		ResultsDir: t.TempDir(),
		Registry:   reg,
		Out:        &syncBuffer{b: &out},
		Progress:   ProgressPlain,
		Grace:      2 * time.Second,
		Devices:    launch.NewLocal(0),
	}, &out
}

type syncBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func readMetrics(t *testing.T, dir, id string) results.Metrics {
	t.Helper()
	m, err := (&results.SweepDir{Path: dir}).ReadMetrics(id)
	require.NoError(t, err, "metrics.json of %s", id)
	return m
}

// readManifest reads manifest.json the way every reader does, through results, so
// the searches' outcomes written by the harness must round-trip there.
func readManifest(t *testing.T, dir string) results.Manifest {
	t.Helper()
	m, err := (&results.SweepDir{Path: dir}).ReadManifest()
	require.NoError(t, err)
	return m
}

func TestRunWritesTheResultsTree(t *testing.T) {
	be := &fake{name: "fake"}
	opts, out := options(t, be)
	p := plan("tree", 3)

	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)

	assert.Equal(t, 3, sum.Total)
	assert.Equal(t, 3, sum.OK)
	assert.Zero(t, sum.Failures())
	dir := filepath.Join(opts.ResultsDir, "tree")
	assert.Equal(t, dir, sum.Dir)
	spec, err := os.ReadFile(filepath.Join(dir, results.SpecFile))
	require.NoError(t, err)
	assert.Equal(t, p.Resolved, spec)

	for _, rc := range p.Runs {
		rd := filepath.Join(dir, results.RunsDir, rc.ID)
		for _, f := range []string{results.RunArgsFile, results.MetricsFile, results.StdoutFile, results.StderrFile, results.StepsFile, "ranks/rank-0.json", "ranks/rank-1.json"} {
			assert.FileExists(t, filepath.Join(rd, f))
		}
		stored, err := (&results.SweepDir{Path: dir}).ReadRunArgs(rc.ID)
		require.NoError(t, err)
		assert.Equal(t, rc.Fingerprint(), stored.Fingerprint())
		m := readMetrics(t, dir, rc.ID)
		assert.Equal(t, results.StatusOK, m.Status)
		assert.Equal(t, rc.ID, m.RunID)

		f, err := os.Open(filepath.Join(rd, results.StepsFile))
		require.NoError(t, err)
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		require.NoError(t, err)
		require.Len(t, rows, rc.Steps+1)
		assert.Equal(t, []string{"step", "loss", "step_time_s", "tokens"}, rows[0])
		assert.Equal(t, []string{"0", "10", "0.01", fmt.Sprint(rc.TokensPerStep())}, rows[1])
	}

	man := readManifest(t, dir)
	assert.Equal(t, "tree", man.Sweep)
	require.Len(t, man.Runs, 3)
	for _, e := range man.Runs {
		assert.Equal(t, results.StatusOK, e.Status)
		assert.False(t, e.Started.IsZero())
	}
	assert.False(t, man.Finished.IsZero())
	assert.NotEmpty(t, man.Env.Go)

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	// okResult's steps take 0.01 s each: tokens/s per rank = tokens per step / 0.01 / ranks.
	first := p.Runs[0]
	wantRate := float64(first.TokensPerStep()) / 0.01 / float64(first.WorldSize)
	assert.Regexp(t, fmt.Sprintf(`^\[1/3\] %s ok \d+\.\d s tokens/s/rank=%.4g$`, first.ID, wantRate), lines[0])
	assert.True(t, strings.HasPrefix(lines[2], "[3/3] "))
}

func TestRunStatuses(t *testing.T) {
	errBoom := errors.New("could not start: boom")
	tests := []struct {
		name      string
		validate  func(sweeps.RunConfig) error
		run       func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error)
		timeout   time.Duration
		status    results.Status
		errSubstr string
		stderr    string // in stderr.log
	}{
		{
			name:      "validate refuses: infeasible with the reason",
			validate:  func(sweeps.RunConfig) error { return errors.New("hybrid_shard needs 2 nodes") },
			status:    results.StatusInfeasible,
			errSubstr: "hybrid_shard needs 2 nodes",
		},
		{
			name: "backend error: failed with the error",
			run: func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
				return results.Result{}, errBoom
			},
			status:    results.StatusFailed,
			errSubstr: "boom",
		},
		{
			name: "backend panics: failed, stack in stderr.log",
			run: func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
				panic("index out of range in the fake")
			},
			status:    results.StatusFailed,
			errSubstr: "backend panicked: index out of range in the fake",
			stderr:    "harness_test.go",
		},
		{
			name: "validate panics: failed",
			validate: func(sweeps.RunConfig) error {
				panic("nil map in validate")
			},
			status:    results.StatusFailed,
			errSubstr: "nil map in validate",
		},
		{
			name:      "run exceeds its timeout: timeout",
			run:       blockUntilDone,
			timeout:   50 * time.Millisecond,
			status:    results.StatusTimeout,
			errSubstr: "timed out after 50ms",
		},
		{
			name: "backend ignores its context: timeout once the grace period ends",
			run: func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
				time.Sleep(time.Second)
				return results.Result{Status: results.StatusOK}, nil
			},
			timeout:   20 * time.Millisecond,
			status:    results.StatusTimeout,
			errSubstr: "timed out",
		},
		{
			name: "out of memory is a result",
			run: func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
				return results.Result{Status: results.StatusOOM, Error: "CUDA out of memory"}, nil
			},
			status:    results.StatusOOM,
			errSubstr: "CUDA out of memory",
		},
		{
			name: "no status reported: failed",
			run: func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
				return results.Result{}, nil
			},
			status:    results.StatusFailed,
			errSubstr: "no status",
		},
		{
			name: "log events and env writers reach the logs",
			run: func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				fmt.Fprintln(env.Stderr, "from the env writer")
				emit(backends.Event{Kind: backends.EventLog, Stream: "stderr", Line: "from a log event"})
				return okResult(rc, emit), nil
			},
			status: results.StatusOK,
			stderr: "from the env writer\nfrom a log event\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &fake{name: "fake", validate: tt.validate, run: tt.run}
			opts, _ := options(t, be)
			opts.Grace = 100 * time.Millisecond
			p := plan("statuses", 2)
			if tt.timeout > 0 {
				p.Runs[0].Timeout = sweeps.Duration(tt.timeout)
			}
			// The second run always succeeds: one bad run must not stop the sweep.
			second := p.Runs[1].ID
			if tt.validate != nil {
				inner := tt.validate
				be.validate = func(rc sweeps.RunConfig) error {
					if rc.ID == second {
						return nil
					}
					return inner(rc)
				}
			}
			if tt.run != nil {
				be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
					if rc.ID == second {
						return okResult(rc, emit), nil
					}
					return tt.run(ctx, rc, env, emit)
				}
			}

			sum, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			require.Len(t, sum.Runs, 2)
			got := sum.Runs[0]
			assert.Equal(t, tt.status, got.Status)
			assert.Contains(t, got.Error, tt.errSubstr)
			assert.Equal(t, results.StatusOK, sum.Runs[1].Status)

			dir := filepath.Join(opts.ResultsDir, "statuses")
			m := readMetrics(t, dir, p.Runs[0].ID)
			assert.Equal(t, tt.status, m.Status)
			assert.Contains(t, m.Error, tt.errSubstr)
			if tt.stderr != "" {
				b, err := os.ReadFile(filepath.Join(dir, results.RunsDir, p.Runs[0].ID, results.StderrFile))
				require.NoError(t, err)
				assert.Contains(t, string(b), tt.stderr)
			}
			man := readManifest(t, dir)
			require.Len(t, man.Runs, 2)
			assert.Equal(t, tt.status, man.Runs[0].Status)
		})
	}
}

func TestRunRepeats(t *testing.T) {
	tests := []struct {
		name    string
		oomAt   int // repeat index that runs out of memory; -1 never
		calls   int
		status  results.Status
		repeats int
	}{
		{name: "all repeats run", oomAt: -1, calls: 3, status: results.StatusOK, repeats: 3},
		{name: "a bad repeat ends the run", oomAt: 1, calls: 2, status: results.StatusOOM, repeats: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &fake{name: "fake"}
			be.run = func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				if env.Repeat == tt.oomAt {
					return results.Result{Status: results.StatusOOM}, nil
				}
				return okResult(rc, emit), nil
			}
			opts, _ := options(t, be)
			p := plan("repeats", 1)
			p.Runs[0].Repeats = 3
			sum, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			assert.Len(t, be.runs(), tt.calls)
			assert.Equal(t, tt.status, sum.Runs[0].Status)
			for i, env := range be.envs {
				assert.Equal(t, i, env.Repeat)
			}
			rows := readSteps(t, filepath.Join(opts.ResultsDir, "repeats", results.RunsDir, p.Runs[0].ID, results.StepsFile))
			assert.Len(t, rows, 1+p.Runs[0].Steps*(tt.calls-boolInt(tt.oomAt >= 0)))
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func readSteps(t *testing.T, path string) [][]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

func TestResume(t *testing.T) {
	be := &fake{name: "fake"}
	be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		switch rc.BatchPerDevice {
		case 2:
			return results.Result{Status: results.StatusOOM}, nil
		case 3:
			return results.Result{}, errors.New("flaky")
		}
		return okResult(rc, emit), nil
	}
	opts, out := options(t, be)
	p := plan("resume", 4)
	dir := filepath.Join(opts.ResultsDir, "resume")

	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	require.Len(t, be.runs(), 4)
	mtime := func(id string) time.Time {
		st, err := os.Stat(filepath.Join(dir, results.RunsDir, id, results.MetricsFile))
		require.NoError(t, err)
		return st.ModTime()
	}
	before := map[string]time.Time{}
	for _, rc := range p.Runs {
		before[rc.ID] = mtime(rc.ID)
	}

	// Again: ok and oom are final and skipped; the failed run is redone.
	out.Reset()
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, []string{p.Runs[2].ID}, be.runs()[4:])
	assert.Equal(t, 3, sum.Skipped)
	assert.Equal(t, 4, sum.Total)
	assert.Equal(t, 2, sum.OK)
	assert.Equal(t, 1, sum.OOM)
	assert.Equal(t, 1, sum.Failed)
	assert.Contains(t, out.String(), p.Runs[0].ID+" skipped (done: ok)")
	assert.Contains(t, out.String(), p.Runs[1].ID+" skipped (done: oom)")
	for _, i := range []int{0, 1, 3} {
		assert.Equal(t, before[p.Runs[i].ID], mtime(p.Runs[i].ID), "run %d was rewritten", i)
	}
	man := readManifest(t, dir)
	require.Len(t, man.Runs, 4, "each run once")

	// A changed measurement length changes the fingerprint: those runs are redone.
	p.Runs[0].Steps = 5
	_, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{p.Runs[0].ID, p.Runs[2].ID}, be.runs()[5:])

	// --rerun redoes everything.
	opts.Rerun = true
	sum, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Len(t, be.runs(), 7+4)
	assert.Zero(t, sum.Skipped)
}

func TestResumeIgnoresStaleMetrics(t *testing.T) {
	// A previous attempt finished ok with other options, and this attempt was killed
	// after writing its run_args.json: the old metrics.json must not count as done.
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("stale", 1)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)

	p.Runs[0].BackendOptions = map[string]any{"x": 1}
	be.run = blockUntilDone
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = Run(ctx, p, opts)
	require.ErrorIs(t, err, context.Canceled)

	dir := filepath.Join(opts.ResultsDir, "stale")
	m := readMetrics(t, dir, p.Runs[0].ID)
	assert.Equal(t, results.StatusCanceled, m.Status)
	assert.False(t, m.Status.Final())

	be.run = nil
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Zero(t, sum.Skipped)
	assert.Equal(t, 1, sum.OK)
}

func TestCancel(t *testing.T) {
	started := make(chan string, 10)
	be := &fake{name: "fake"}
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		if rc.BatchPerDevice == 1 {
			return okResult(rc, emit), nil
		}
		started <- rc.ID
		return blockUntilDone(ctx, rc, env, emit)
	}
	opts, _ := options(t, be)
	opts.Jobs = 2
	p := plan("cancel", 6)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-started
		<-started
		cancel()
	}()

	begin := time.Now()
	sum, err := Run(ctx, p, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(begin), opts.Grace, "Run must return promptly once cancelled")
	assert.Equal(t, 1, sum.OK)
	assert.Equal(t, 2, sum.Canceled)
	assert.Equal(t, 3, sum.NotStarted)
	assert.Len(t, be.runs(), 3, "no run starts after the cancel")

	dir := filepath.Join(opts.ResultsDir, "cancel")
	for _, o := range sum.Runs {
		if o.Status == results.StatusCanceled {
			assert.False(t, readMetrics(t, dir, o.Config.ID).Status.Final())
		}
	}

	// Resume finishes the sweep: the ok run is skipped, the rest run once each.
	be.run = nil
	sum, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 6, sum.OK)
	assert.Equal(t, 1, sum.Skipped)
	assert.Len(t, be.runs(), 3+5)
	man := readManifest(t, dir)
	ids := map[string]int{}
	for _, e := range man.Runs {
		ids[e.ID]++
		assert.Equal(t, results.StatusOK, e.Status)
	}
	assert.Len(t, ids, 6)
	for id, n := range ids {
		assert.Equal(t, 1, n, id)
	}
}

func TestResultReachedWhileInterruptedStands(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	be := &fake{name: "fake"}
	be.run = func(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
		cancel() // Ctrl-C just as the backend finds the memory wall
		return results.Result{Status: results.StatusOOM, Error: "out of memory"}, nil
	}
	opts, _ := options(t, be)
	sum, err := Run(ctx, plan("wall", 2), opts)
	require.ErrorIs(t, err, context.Canceled)
	require.Len(t, sum.Runs, 1)
	assert.Equal(t, results.StatusOOM, sum.Runs[0].Status)
	assert.Equal(t, 1, sum.NotStarted)
}

func TestCancelBeforeStart(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sum, err := Run(ctx, plan("early", 3), opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, be.runs())
	assert.Equal(t, 3, sum.NotStarted)
	assert.Zero(t, sum.Total)
}

func TestSearchFindsTheLargestBatchThatFits(t *testing.T) {
	tests := []struct {
		name      string
		limit     int // largest batch that fits; larger ones run out of memory
		validate  int // batches above this are refused by Validate (0 = none)
		failAbove int // batches above this fail (0 = none)
		maxFit    int
		tried     []int
		stoppedBy string
	}{
		// Doubling to the first failure, then bisection between 8 and 16.
		{name: "memory wall", limit: 12, maxFit: 12, tried: []int{1, 2, 4, 8, 16, 12, 14, 13}, stoppedBy: "oom"},
		{name: "wall between powers of two", limit: 5, maxFit: 5, tried: []int{1, 2, 4, 8, 6, 5}, stoppedBy: "oom"},
		{name: "wall at a power of two", limit: 8, maxFit: 8, tried: []int{1, 2, 4, 8, 16, 12, 10, 9}, stoppedBy: "oom"},
		{name: "refused by validate", limit: 1 << 20, validate: 4, maxFit: 4, tried: []int{1, 2, 4, 8, 6, 5}, stoppedBy: "infeasible"},
		{name: "nothing fits", limit: 0, maxFit: 0, tried: []int{1}, stoppedBy: "oom"},
		// A failure says nothing about memory: the search stops there.
		{name: "failure stops", limit: 5, failAbove: 4, maxFit: 4, tried: []int{1, 2, 4, 8}, stoppedBy: "failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &fake{name: "fake"}
			be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				if tt.failAbove > 0 && rc.BatchPerDevice > tt.failAbove {
					return results.Result{Status: results.StatusFailed, Error: "segfault"}, nil
				}
				if rc.BatchPerDevice > tt.limit {
					return results.Result{Status: results.StatusOOM, Error: "out of memory"}, nil
				}
				return okResult(rc, emit), nil
			}
			if tt.validate > 0 {
				be.validate = func(rc sweeps.RunConfig) error {
					if rc.BatchPerDevice > tt.validate {
						return errors.New("predicted peak above device memory")
					}
					return nil
				}
			}
			opts, out := options(t, be)
			p := &sweeps.Plan{Name: "search", Backend: "fake", Search: "batch_per_device"}
			for _, sh := range []string{sweeps.FullShard, sweeps.NoShard} {
				rc := runConfig("search", 1)
				rc.Sharding = sh
				rc.Search, rc.SearchGroup = "batch_per_device", "ws2-"+sh
				rc.AssignID()
				p.Runs = append(p.Runs, rc)
			}
			// A plain point beside the searches.
			p.Runs = append(p.Runs, runConfig("search", 3))

			sum, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			require.Len(t, sum.MaxFit, 2)
			for i, sr := range sum.MaxFit {
				assert.Equal(t, p.Runs[i].SearchGroup, sr.Group)
				assert.Equal(t, "batch_per_device", sr.Axis)
				assert.Equal(t, tt.maxFit, sr.MaxFit)
				assert.Equal(t, tt.tried, sr.Tried)
				assert.Equal(t, tt.stoppedBy, sr.StoppedBy)
			}
			assert.Equal(t, 2*len(tt.tried)+1, sum.Total)
			if tt.failAbove == 0 {
				assert.Zero(t, sum.Failures())
			}
			// Every point the search added is in the progress total.
			want := fmt.Sprintf("[%d/%d] ", sum.Total, sum.Total)
			assert.Contains(t, out.String(), want)

			man := readManifest(t, filepath.Join(opts.ResultsDir, "search"))
			assert.Equal(t, sum.MaxFit, man.Search)
			assert.Len(t, man.Runs, sum.Total)

			// Resumed, the search walks the stored points again without running them
			// (a failed run is not finished: it runs again, once per search).
			n := len(be.runs())
			sum2, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			again := sum.Failures()
			assert.Len(t, be.runs(), n+again)
			assert.Equal(t, sum.MaxFit, sum2.MaxFit)
			assert.Equal(t, sum.Total-again, sum2.Skipped)
		})
	}
}

func TestJobsRunConcurrently(t *testing.T) {
	var running, peak atomic.Int32
	be := &fake{name: "fake", needsGPU: true}
	be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(30 * time.Millisecond)
		running.Add(-1)
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	opts.Jobs = 2
	opts.Devices = launch.NewLocal(4)
	sum, err := Run(context.Background(), plan("jobs", 6), opts)
	require.NoError(t, err)
	assert.Equal(t, 6, sum.OK)
	assert.Equal(t, int32(2), peak.Load())
	for _, env := range be.envs {
		assert.Len(t, env.Devices, 2, "gpus_per_node devices for a backend that needs GPUs")
	}
}

func TestProgressBars(t *testing.T) {
	be := &fake{name: "fake"}
	opts, out := options(t, be)
	opts.Progress = ProgressBars
	sum, err := Run(context.Background(), plan("bars", 2), opts)
	require.NoError(t, err)
	assert.Equal(t, 2, sum.OK)
	assert.Regexp(t, regexp.MustCompile(`\[2/2\] ws2-bs2-\S+ ok`), out.String())
}

func TestRunRefusesBadSetups(t *testing.T) {
	unavailable := &describeOverride{fake: &fake{name: "fake"}, desc: backends.Description{Name: "fake", Reason: "install torch"}}
	tests := []struct {
		name    string
		be      backends.Backend
		mutate  func(*sweeps.Plan, *Options)
		wantErr string
	}{
		{name: "no registry", be: &fake{name: "fake"}, mutate: func(_ *sweeps.Plan, o *Options) { o.Registry = nil }, wantErr: "Registry is nil"},
		{name: "unknown backend", be: &fake{name: "fake"}, mutate: func(p *sweeps.Plan, _ *Options) { p.Runs[0].Backend = "nope" }, wantErr: `unknown backend "nope"`},
		{name: "unavailable backend", be: unavailable, wantErr: "not available on this host: install torch"},
		{name: "slurm launcher", be: &fake{name: "fake"}, mutate: func(p *sweeps.Plan, _ *Options) {
			// Refused either way: without Slurm's commands here, or because the fake backend cannot be a job.
			p.Launcher, p.Runs[0].Launcher = "slurm", "slurm"
		}, wantErr: "launcher slurm"},
		{name: "no name", be: &fake{name: "fake"}, mutate: func(p *sweeps.Plan, _ *Options) { p.Name = "" }, wantErr: "no name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts, _ := options(t, tt.be)
			p := plan("bad", 1)
			if tt.mutate != nil {
				tt.mutate(p, &opts)
			}
			_, err := Run(context.Background(), p, opts)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

type describeOverride struct {
	*fake
	desc backends.Description
}

func (d *describeOverride) Describe(context.Context) (backends.Description, error) {
	return d.desc, nil
}
