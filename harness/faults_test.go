//go:build unix

package harness

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestSecondSweepInTheSameDirectoryIsRefused: while one Run writes a sweep's
// directory, a second Run of it is refused at once, naming the holder, and
// writes nothing; with WaitLock it runs once the first is done, skipping what
// the first finished. (cmd/fsdpbench's lock tests do the same with two real
// processes.)
func TestSecondSweepInTheSameDirectoryIsRefused(t *testing.T) {
	release := make(chan struct{})
	var inRun atomic.Int32
	be := &fake{name: "fake"}
	be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		inRun.Add(1)
		<-release
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	p := plan("locked", 2)
	first := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), p, opts)
		first <- err
	}()
	require.Eventually(t, func() bool { return inRun.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

	dir := filepath.Join(opts.ResultsDir, "locked")
	metricsBefore, _ := filepath.Glob(filepath.Join(dir, results.RunsDir, "*", results.MetricsFile))
	begin := time.Now()
	_, err := Run(context.Background(), p, opts)
	require.Error(t, err)
	assert.Less(t, time.Since(begin), 2*time.Second, "refused at once")
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	assert.True(t, dirlock.IsHeld(err))
	host, _ := os.Hostname()
	assert.Contains(t, err.Error(), "is in use by pid "+strconv.Itoa(os.Getpid())+" on host "+host)
	assert.Equal(t, int32(1), inRun.Load(), "the refused sweep ran nothing")
	metricsAfter, _ := filepath.Glob(filepath.Join(dir, results.RunsDir, "*", results.MetricsFile))
	assert.Equal(t, metricsBefore, metricsAfter)

	// --wait: the second sweep starts when the first ends and finds nothing to do.
	waited := make(chan Summary, 1)
	waitOpts := opts
	var waitOut lockedBuf
	waitOpts.Out, waitOpts.WaitLock = &waitOut, true
	go func() {
		sum, err := Run(context.Background(), p, waitOpts)
		assert.NoError(t, err)
		waited <- sum
	}()
	require.Eventually(t, func() bool { return strings.Contains(waitOut.String(), "waiting for "+dir) }, 10*time.Second, 10*time.Millisecond)
	close(release)
	require.NoError(t, <-first)
	sum := <-waited
	assert.Equal(t, 2, sum.Skipped, "the waiting sweep reran nothing")
	assert.Len(t, be.runs(), 2)
}

// lockedBuf is a strings.Builder safe for the progress writer and the test.
type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRepeatsStopWhenInterrupted: a backend that returns at once whatever its
// context says (as a plugin may) must not carry an interrupted run through the
// rest of its repeats.
func TestRepeatsStopWhenInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int64
	be := &fake{name: "fake"}
	be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, _ func(backends.Event)) (results.Result, error) {
		if calls.Add(1) == 3 {
			cancel() // Ctrl-C during the third repeat
		}
		return results.Result{Status: results.StatusOK, WorldSize: rc.WorldSize}, nil
	}
	opts, _ := options(t, be)
	p := plan("repeats", 1)
	p.Runs[0].Repeats = 100_000_000
	p.Runs[0].AssignID()

	begin := time.Now()
	sum, err := Run(ctx, p, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(begin), 5*time.Second)
	assert.Equal(t, int64(3), calls.Load(), "no repeat starts after the interrupt")
	require.Len(t, sum.Runs, 1)
	assert.Equal(t, results.StatusCanceled, sum.Runs[0].Status)
}

// TestRunThatDoesNotFitTheHostIsNotStarted: sweep applies plan's host-capacity
// check; a run of 100,000 CPU ranks is recorded infeasible with the reason and its
// backend is never called. The plan comes from a spec inside the spec's bounds:
// world_size 100000 alone puts every rank on one node (gpus_per_node 100000, above
// what the model predicts for, which must not read as "fits"), and a run of ranks
// that together need more RAM than the host has is refused by the prediction.
func TestRunThatDoesNotFitTheHostIsNotStarted(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p, err := sweeps.Parse([]byte(`name: huge
backend: fake
hardware: cpu
model: tiny
seq_len: 16
steps: 3
warmup_steps: 1
base: {mixed_precision: fp32}
grid:
  world_size: [2, 100000, 1024]
  batch_per_device: [1, 4096]
exclude:
  - {world_size: 2, batch_per_device: 4096}
  - {world_size: 100000, batch_per_device: 4096}
  - {world_size: 1024, batch_per_device: 1}
`), "huge.yaml", sweeps.Options{})
	require.NoError(t, err, "the spec is inside the spec's bounds")
	require.Len(t, p.Runs, 3)
	small, big, heavy := p.Runs[0], p.Runs[1], p.Runs[2]
	require.Equal(t, 100_000, big.GPUsPerNode)

	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, []string{small.ID}, be.runs(), "the runs that do not fit never reached the backend")
	assert.Equal(t, 2, sum.Infeasible)
	m := readMetrics(t, filepath.Join(opts.ResultsDir, "huge"), big.ID)
	assert.Equal(t, results.StatusInfeasible, m.Status)
	assert.Contains(t, m.Error, "does not fit this host")
	assert.Contains(t, m.Error, "100000 ranks")
	m = readMetrics(t, filepath.Join(opts.ResultsDir, "huge"), heavy.ID)
	assert.Equal(t, results.StatusInfeasible, m.Status)
	assert.Contains(t, m.Error, "does not fit this host")
	assert.Contains(t, m.Error, "1024 ranks on the host")
}

// TestRunNeedingMoreGPUsThanTheHostHasIsInfeasible: a GPU run that asks for
// more GPUs per node than this host has is refused before it starts, with the
// reason, as infeasible (it was failed, which fails the sweep).
func TestRunNeedingMoreGPUsThanTheHostHasIsInfeasible(t *testing.T) {
	be := &fake{name: "fake", needsGPU: true}
	opts, _ := options(t, be)
	opts.Devices = launch.NewLocal(1)
	p := plan("gpus", 1) // 2 GPUs per node
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Infeasible)
	assert.Zero(t, sum.Failures())
	assert.Empty(t, be.runs())
	assert.Contains(t, sum.Runs[0].Error, "needs 2 GPUs per node and this host has 1")
}

// TestSymlinkedRunDirectoryIsRefused: a run directory that is a link (to a run
// elsewhere) does not count as done, nothing is written through it, and the sweep
// is refused before anything runs, naming the path.
func TestSymlinkedRunDirectoryIsRefused(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("linked", 2)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	dir := filepath.Join(opts.ResultsDir, "linked")

	// The finished run moves out and a link takes its place.
	elsewhere := filepath.Join(t.TempDir(), "moved")
	runDir := filepath.Join(dir, results.RunsDir, p.Runs[1].ID)
	require.NoError(t, os.Rename(runDir, elsewhere))
	require.NoError(t, os.Symlink(elsewhere, runDir))
	before, err := os.ReadFile(filepath.Join(elsewhere, results.MetricsFile))
	require.NoError(t, err)

	for _, rerun := range []bool{false, true} {
		opts.Rerun = rerun
		_, err = Run(context.Background(), p, opts)
		var re *RefusedError
		require.ErrorAs(t, err, &re, "rerun=%v", rerun)
		assert.Contains(t, err.Error(), runDir+" is a symbolic link (to "+elsewhere+")")
		assert.Len(t, be.runs(), 2, "nothing ran")
		after, err := os.ReadFile(filepath.Join(elsewhere, results.MetricsFile))
		require.NoError(t, err)
		assert.Equal(t, before, after, "nothing was written through the link")
	}
	// A plain file where a run directory belongs is refused the same way.
	require.NoError(t, os.Remove(runDir))
	require.NoError(t, os.WriteFile(runDir, []byte("x"), 0o644))
	_, err = Run(context.Background(), p, opts)
	require.ErrorContains(t, err, runDir+" is a file, not a run directory")
	require.NoError(t, os.Remove(runDir))
	require.NoError(t, os.Symlink(elsewhere, runDir))

	planned := Preview(p, Options{ResultsDir: opts.ResultsDir})
	assert.Equal(t, "skip", planned[0].Action)
	assert.Equal(t, "refuse", planned[1].Action, "--dry-run says so too")
	assert.Contains(t, planned[1].Why, "symbolic link")
}

// TestForeignRunIDIsRelabelled: a finished run whose run_args.json (or
// metrics.json) names another run is not shown under that foreign ID after a
// resume: its files are relabelled (same configuration) and it is not rerun.
func TestForeignRunIDIsRelabelled(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("foreign", 2)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	dir := filepath.Join(opts.ResultsDir, "foreign")
	sd := &results.SweepDir{Path: dir}

	// Run 1's files say they are run 0 (a copied directory, a hand edit).
	victim := p.Runs[1]
	rc := victim
	rc.ID = p.Runs[0].ID
	argsPath := filepath.Join(sd.RunDir(victim.ID), results.RunArgsFile)
	b, err := os.ReadFile(argsPath)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(argsPath, []byte(strings.Replace(string(b), victim.ID, p.Runs[0].ID, 1)), 0o644))
	m := readMetrics(t, dir, victim.ID)
	m.RunID = p.Runs[0].ID
	require.NoError(t, sd.WriteMetrics(victim.ID, m))
	stored, err := sd.ReadRunArgs(victim.ID)
	require.NoError(t, err)
	require.Equal(t, p.Runs[0].ID, stored.ID, "the test planted a foreign ID")

	assert.Contains(t, Preview(p, opts)[1].Why, "relabelled")
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 2, sum.Skipped, "a relabelled run is not rerun")
	assert.Len(t, be.runs(), 2)
	stored, err = sd.ReadRunArgs(victim.ID)
	require.NoError(t, err)
	assert.Equal(t, victim.ID, stored.ID)
	assert.Equal(t, victim.ID, readMetrics(t, dir, victim.ID).RunID)
	log, err := os.ReadFile(filepath.Join(sd.RunDir(victim.ID), results.StderrFile))
	require.NoError(t, err)
	assert.Contains(t, string(log), "relabelled "+victim.ID)

	runs, err := results.Load(dir)
	require.NoError(t, err)
	var ids []string
	for _, r := range runs {
		ids = append(ids, r.Config.ID)
	}
	assert.ElementsMatch(t, []string{p.Runs[0].ID, victim.ID}, ids, "each run under its own ID")

	// A foreign configuration, not only a foreign label, is rerun.
	other := p.Runs[0]
	other.Steps = 7
	require.NoError(t, sd.WriteRunArgs(func() sweeps.RunConfig { c := other; c.ID = victim.ID; return c }()))
	_, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, victim.ID, be.runs()[2])
}

// TestUnwritableResultsDirIsRefused: a results directory that cannot be written
// stops the sweep before any run starts, as a RefusedError (exit 2).
func TestUnwritableResultsDirIsRefused(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	notDir := filepath.Join(opts.ResultsDir, "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	opts.ResultsDir = notDir
	_, err := Run(context.Background(), plan("nowhere", 1), opts)
	var re *RefusedError
	require.ErrorAs(t, err, &re)
	assert.Contains(t, err.Error(), notDir)
	assert.Empty(t, be.runs())
}

// TestLinkedLogIsNotFollowed: a log file replaced by a link to a file outside the
// results directory is not written through when the run is redone.
func TestLinkedLogIsNotFollowed(t *testing.T) {
	be := &fake{name: "fake"}
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		emit(backends.Event{Kind: backends.EventLog, Stream: "stdout", Line: "hello"})
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	p := plan("logs", 1)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	outside := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(outside, []byte("keep me\n"), 0o644))
	log := filepath.Join(opts.ResultsDir, "logs", results.RunsDir, p.Runs[0].ID, results.StdoutFile)
	require.NoError(t, os.Remove(log))
	require.NoError(t, os.Symlink(outside, log))

	opts.Rerun = true
	_, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep me\n", string(b))
	st, err := os.Lstat(log)
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular())
}

// TestResultsFollowTheUmask: every file of the results tree is 0666 less the
// umask, like the logs, and every directory 0777 less it, so that colleagues on a
// shared results directory (umask 002) can read the results and resume the sweep.
func TestResultsFollowTheUmask(t *testing.T) {
	old := syscall.Umask(0o002)
	defer syscall.Umask(old)
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("perms", 1)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	files, dirs := 0, 0
	require.NoError(t, filepath.Walk(filepath.Join(opts.ResultsDir, "perms"), func(path string, info os.FileInfo, err error) error {
		require.NoError(t, err)
		switch {
		case info.Mode().IsRegular():
			files++
			assert.Equal(t, os.FileMode(0o664), info.Mode().Perm(), path)
		case info.IsDir():
			dirs++
			assert.Equal(t, os.FileMode(0o775), info.Mode().Perm(), path)
		}
		return nil
	}))
	assert.GreaterOrEqual(t, files, 7, "sweep.yaml, manifest.json, the lock, run_args.json, metrics.json, steps.csv, logs, ranks")
	assert.Equal(t, 4, dirs, "the sweep, runs/, the run, ranks/")
}

func TestJobsOutOfRangeIsRefused(t *testing.T) {
	for _, jobs := range []int{-5, MaxJobs + 1} {
		be := &fake{name: "fake"}
		opts, _ := options(t, be)
		opts.Jobs = jobs
		_, err := Run(context.Background(), plan("jobs", 1), opts)
		require.Error(t, err, jobs)
		assert.Contains(t, err.Error(), "Options.Jobs")
		assert.Empty(t, be.runs())
	}
}

// TestKilledWritersDebrisAndPlantedLinksAreCleared: the temporary files of writes
// a kill interrupted are removed when the sweep runs again, and a link planted in
// a run directory is removed before the run's backend writes its own files there.
func TestKilledWritersDebrisAndPlantedLinksAreCleared(t *testing.T) {
	be := &fake{name: "fake"}
	be.run = func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		if err := os.WriteFile(filepath.Join(env.RunDir, "note.txt"), []byte("the backend's own file\n"), 0o644); err != nil {
			return results.Result{}, err
		}
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	p := plan("debris", 1)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	dir := filepath.Join(opts.ResultsDir, "debris")
	runDir := filepath.Join(dir, results.RunsDir, p.Runs[0].ID)

	outside := filepath.Join(t.TempDir(), "precious")
	require.NoError(t, os.WriteFile(outside, []byte("keep me\n"), 0o644))
	require.NoError(t, os.Remove(filepath.Join(runDir, "note.txt")))
	require.NoError(t, os.Symlink(outside, filepath.Join(runDir, "note.txt")))
	for _, f := range []string{filepath.Join(dir, ".manifest.json.tmp1234"), filepath.Join(runDir, ".metrics.json.tmp99")} {
		require.NoError(t, os.WriteFile(f, []byte("half"), 0o644))
	}

	opts.Rerun = true
	_, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	b, err := os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "keep me\n", string(b), "nothing was written through the link")
	st, err := os.Lstat(filepath.Join(runDir, "note.txt"))
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular())
	assert.NoFileExists(t, filepath.Join(dir, ".manifest.json.tmp1234"))
	assert.NoFileExists(t, filepath.Join(runDir, ".metrics.json.tmp99"))
	assert.FileExists(t, filepath.Join(dir, dirlock.File), "the lock file is no debris")
}

// TestIngestedRunIsNeitherDoneNorOverwritten: a sweep whose directory holds a run
// that ingest wrote (same ID: ingested with this sweep's spec) does not count the
// past run as its own measurement, and does not overwrite it, with or without
// --rerun.
func TestIngestedRunIsNeitherDoneNorOverwritten(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("past", 2)
	sd, err := results.OpenSweep(filepath.Join(opts.ResultsDir, "past"))
	require.NoError(t, err)
	past := p.Runs[1]
	require.NoError(t, sd.WriteRunArgs(past))
	require.NoError(t, sd.WriteMetrics(past.ID, results.Metrics{RunID: past.ID, Status: results.StatusOK, WorldSize: past.WorldSize,
		Extra: map[string]any{"source_dir": "/old/results/training/run7"}}))
	before, err := os.ReadFile(filepath.Join(sd.RunDir(past.ID), results.MetricsFile))
	require.NoError(t, err)

	for _, rerun := range []bool{false, true} {
		opts.Rerun = rerun
		sum, err := Run(context.Background(), p, opts)
		require.NoError(t, err)
		assert.Equal(t, 1, sum.Failed, "rerun=%v", rerun)
		assert.NotContains(t, be.runs(), past.ID)
		require.Len(t, sum.Runs, 2)
		assert.Contains(t, sum.Runs[1].Error, "holds a run ingested from /old/results/training/run7")
		after, err := os.ReadFile(filepath.Join(sd.RunDir(past.ID), results.MetricsFile))
		require.NoError(t, err)
		assert.Equal(t, before, after)
	}
	assert.Equal(t, "refuse", Preview(p, opts)[1].Action)
}

// TestFIFOManifestDoesNotHangTheResume: a FIFO planted as manifest.json is
// replaced, not read (reading it would block forever).
func TestFIFOManifestDoesNotHangTheResume(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("fifo", 1)
	sd, err := results.OpenSweep(filepath.Join(opts.ResultsDir, "fifo"))
	require.NoError(t, err)
	require.NoError(t, syscall.Mkfifo(filepath.Join(sd.Path, results.ManifestFile), 0o644))
	done := make(chan error, 1)
	go func() {
		_, err := Run(context.Background(), p, opts)
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the sweep hangs on a FIFO manifest.json")
	}
	assert.Len(t, readManifest(t, sd.Path).Runs, 1)
}

// TestLocalAttemptForgetsAnEarlierSlurmJob: a run done again on the local
// launcher drops the slurm_job_id an earlier Slurm attempt left, so that going
// back to launcher: slurm never collects that old job as the new attempt's.
func TestLocalAttemptForgetsAnEarlierSlurmJob(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("switch", 1)
	runDir := filepath.Join(opts.ResultsDir, "switch", results.RunsDir, p.Runs[0].ID)
	require.NoError(t, os.MkdirAll(runDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(runDir, launch.JobIDFile), []byte("77\n"), 0o644))
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.NoFileExists(t, filepath.Join(runDir, launch.JobIDFile))
}
