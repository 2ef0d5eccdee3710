package launch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// needSlurm skips without a reachable Slurm, and fails instead in CI, where
// .ci/run starts one (.ci/slurm) and sets FSDPBENCH_REQUIRE_SLURM=1.
func needSlurm(t *testing.T) {
	t.Helper()
	err := CheckSlurm()
	if err == nil {
		var out []byte
		out, err = exec.Command("sinfo", "-h", "-o", "%T").CombinedOutput()
		// plnd: idle, with a pending job's start planned on it (jobs of tests
		// running beside this one).
		if err == nil && !strings.Contains(string(out), "idle") && !strings.Contains(string(out), "mix") &&
			!strings.Contains(string(out), "alloc") && !strings.Contains(string(out), "plnd") {
			err = fmt.Errorf("no node is up: sinfo says %q", strings.TrimSpace(string(out)))
		} else if err != nil {
			err = fmt.Errorf("sinfo: %v: %s", err, out)
		}
	}
	if err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_SLURM") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_SLURM=1 but Slurm is not reachable (%v): run .ci/slurm start", err)
		}
		t.Skipf("no Slurm here (%v); .ci/slurm start brings one up", err)
	}
}

// shellBackend is a JobBackend whose job is one bash command per node.
type shellBackend struct {
	cmd  string
	gpus int
	mu   sync.Mutex
	job  *shellJob
}

func (b *shellBackend) Name() string { return "shell" }
func (b *shellBackend) Describe(context.Context) (backends.Description, error) {
	return backends.Description{Name: "shell", Available: true}, nil
}
func (b *shellBackend) Validate(context.Context, sweeps.RunConfig) error { return nil }
func (b *shellBackend) Run(context.Context, sweeps.RunConfig, backends.RunEnv, func(backends.Event)) (results.Result, error) {
	return results.Result{}, errors.New("shell: runs only as a job")
}

func (b *shellBackend) PrepareJob(_ context.Context, _ sweeps.RunConfig, env backends.RunEnv, _ backends.Placement, attach bool) (backends.Job, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.job = &shellJob{attached: attach, spec: backends.JobSpec{TasksPerNode: 1, GPUsPerNode: b.gpus,
		Argv: []string{"bash", "-c", b.cmd}, Env: []string{"GREETING=hello from the job"}, Dir: env.RunDir}}
	return b.job, nil
}

type shellJob struct {
	spec     backends.JobSpec
	attached bool
	mu       sync.Mutex
	lines    []string
	exitErr  error
}

func (j *shellJob) Spec() backends.JobSpec { return j.spec }
func (j *shellJob) Line(stream string, task int, line string) []backends.Event {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf("%s %d %s", stream, task, line))
	return nil
}
func (j *shellJob) Finish(exitErr error, _ func(string)) results.Result {
	j.exitErr = exitErr
	if exitErr != nil {
		return results.Result{Status: results.StatusFailed, Error: exitErr.Error()}
	}
	return results.Result{Status: results.StatusOK}
}

func (j *shellJob) seen() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]string(nil), j.lines...)
}

func shellRun(t *testing.T, timeout time.Duration) (sweeps.RunConfig, backends.RunEnv) {
	t.Helper()
	rc := sweeps.RunConfig{Sweep: "launch-test", Backend: "shell", Launcher: SlurmName, Hardware: "cpu", Model: "tiny",
		Nodes: 1, GPUsPerNode: 1, WorldSize: 1, Seed: time.Now().UnixNano(), Timeout: sweeps.Duration(timeout),
		LauncherOptions: map[string]any{"poll_interval": "100ms"}}
	rc.AssignID()
	return rc, backends.RunEnv{RunDir: t.TempDir(), Launcher: SlurmName}
}

// TestSlurmJobGetsFakeGPUsAndItsOutputComesBack: a --gres=gpu:2 job runs on the
// CI cluster's fake GPUs with CUDA_VISIBLE_DEVICES set, the job's environment
// and output reach the backend line by line with their task, and the script and
// job id stay in the run directory.
func TestSlurmJobGetsFakeGPUsAndItsOutputComesBack(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{gpus: 2, cmd: `echo "gpus=$CUDA_VISIBLE_DEVICES $GREETING"; echo "to stderr" >&2`}
	rc, env := shellRun(t, time.Minute)
	res, err := NewSlurm().Run(context.Background(), be, rc, env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Contains(t, be.job.seen(), "stdout 0 gpus=0,1 hello from the job")
	assert.Contains(t, be.job.seen(), "stderr 0 to stderr")
	script, err := os.ReadFile(filepath.Join(env.RunDir, ScriptFile))
	require.NoError(t, err)
	assert.Contains(t, string(script), "#SBATCH --gres=gpu:2")
	id, err := os.ReadFile(filepath.Join(env.RunDir, JobIDFile))
	require.NoError(t, err)
	assert.FileExists(t, filepath.Join(env.RunDir, "slurm-"+strings.TrimSpace(string(id))+".out"))
}

// TestSlurmFailedJobGoesToTheBackend: a job that exits non-zero ends FAILED and
// the backend gets the exit code to judge with its own output.
func TestSlurmFailedJobGoesToTheBackend(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `echo "it broke" >&2; exit 3`}
	rc, env := shellRun(t, time.Minute)
	res, err := NewSlurm().Run(context.Background(), be, rc, env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusFailed, res.Status)
	require.Error(t, be.job.exitErr)
	assert.Contains(t, be.job.exitErr.Error(), "exit code 3")
	assert.Contains(t, be.job.seen(), "stderr 0 it broke")
}

// TestSlurmCancelLeavesNoJob: cancelling the run's context scancels its job,
// which is gone from squeue when Run returns; a second run in the same directory
// submits anew (the cancelled job is not re-attached).
func TestSlurmCancelLeavesNoJob(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `echo started; sleep 120`}
	rc, env := shellRun(t, 5*time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for !contains(be.jobLines(), "stdout 0 started") {
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
	}()
	res, err := NewSlurm().Run(ctx, be, rc, env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusCanceled, res.Status)
	id := readID(t, env.RunDir)
	out, _ := exec.Command("squeue", "-h", "-j", id).CombinedOutput()
	assert.NotContains(t, string(out), id, "the job is still in squeue")

	be.cmd = "true"
	res, err = NewSlurm().Run(context.Background(), be, rc, env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status)
	assert.False(t, be.job.attached)
	assert.NotEqual(t, id, readID(t, env.RunDir))
}

// TestSlurmReattachesToARunningJob: a run whose job an earlier launcher left
// running follows that job to its end instead of submitting another.
func TestSlurmReattachesToARunningJob(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `sleep 2; echo done`}
	rc, env := shellRun(t, time.Minute)
	// The first launcher submits and is abandoned, as if its process were killed.
	opts, err := ParseSlurmOptions(rc.LauncherOptions)
	require.NoError(t, err)
	job, err := be.PrepareJob(context.Background(), rc, env, slurmPlacement, false)
	require.NoError(t, err)
	script := filepath.Join(env.RunDir, ScriptFile)
	require.NoError(t, os.WriteFile(script, []byte(opts.Script(rc, "shell", job.Spec(), env.RunDir)), 0o644))
	id, err := submit(script)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(env.RunDir, JobIDFile), []byte(id+"\n"), 0o644))

	res, err := NewSlurm().Run(context.Background(), be, rc, env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.True(t, be.job.attached)
	assert.Equal(t, id, readID(t, env.RunDir))
	assert.Contains(t, be.job.seen(), "stdout 0 done")
}

func (b *shellBackend) jobLines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.job == nil {
		return nil
	}
	return b.job.seen()
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

func readID(t *testing.T, runDir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, JobIDFile))
	require.NoError(t, err)
	return strings.TrimSpace(string(data))
}

func TestParseScontrol(t *testing.T) {
	line := "JobId=7 JobName=fsdpbench-ws2 UserId=root(0) JobState=TIMEOUT Reason=TimeLimit Dependency=(null) " +
		"ExitCode=0:15 RunTime=00:01:02 TimeLimit=00:01:00 NodeList=node[1-2] WorkDir=/shared/r StdOut=/shared/r/slurm-7.out"
	j, err := parseScontrol(line)
	require.NoError(t, err)
	assert.Equal(t, jobInfo{Name: "fsdpbench-ws2", State: "TIMEOUT", Reason: "TimeLimit", TimeLimit: "00:01:00",
		NodeList: "node[1-2]", WorkDir: "/shared/r", ExitCode: 0, Signal: 15}, j)
	assert.True(t, j.terminal())
	_, err = parseScontrol("No jobs")
	assert.Error(t, err)

	s, ok := parseSacct("fsdpbench-ws2|CANCELLED by 0|0:15\n")
	require.True(t, ok)
	assert.Equal(t, "CANCELLED", s.State)
	assert.False(t, jobInfo{State: "PENDING"}.terminal())
}

func TestTailSplitsTasksAndKeepsPartialLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slurm-1.out")
	var sink strings.Builder
	tl := &tail{path: path, stream: "stdout", sink: &sink}
	var got []string
	f := func(stream string, task int, line string) {
		got = append(got, fmt.Sprintf("%s|%d|%s", stream, task, line))
	}
	tl.read(false, f) // no file yet
	require.NoError(t, os.WriteFile(path, []byte("0: FSDPBENCH {}\n 1: x: y\nsrun: error\npart"), 0o644))
	tl.read(false, f)
	assert.Equal(t, []string{"stdout|0|FSDPBENCH {}", "stdout|1|x: y", "stdout|-1|srun: error"}, got)
	fh, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, _ = fh.WriteString("ial")
	require.NoError(t, fh.Close())
	tl.read(true, f)
	assert.Equal(t, "stdout|-1|partial", got[len(got)-1])
	assert.Equal(t, "0: FSDPBENCH {}\n 1: x: y\nsrun: error\npartial\n", sink.String())
}

// TestSlurmQueuedJobSaysWhyAndIsBounded: a job that cannot start (here: held
// until an hour from now, Slurm's reason BeginTime; on a cluster, a down node)
// is reported queued with Slurm's reason, and given up after max_queue: it is
// cancelled, gone from squeue, and the run fails saying why and what to raise.
// It waited silently without limit.
func TestSlurmQueuedJobSaysWhyAndIsBounded(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	be := &shellBackend{cmd: `echo never`}
	rc, env := shellRun(t, time.Minute)
	rc.LauncherOptions["sbatch"] = []any{"--begin=now+3600"}
	rc.LauncherOptions["max_queue"] = "3s"
	var stderr syncBuf
	env.Stderr = &stderr
	var mu sync.Mutex
	var reasons []string
	start := time.Now()
	res, err := NewSlurm().Run(context.Background(), be, rc, env, func(ev backends.Event) {
		if ev.Kind == backends.EventQueued {
			mu.Lock()
			reasons = append(reasons, ev.Reason)
			mu.Unlock()
		}
	})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), time.Minute, "bounded by max_queue")
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "in the queue without starting (reason: BeginTime)")
	assert.Contains(t, res.Error, "launcher_options.max_queue")
	mu.Lock()
	assert.Contains(t, reasons, "BeginTime")
	mu.Unlock()
	assert.Contains(t, stderr.String(), "is queued (reason: BeginTime)")
	id := readID(t, env.RunDir)
	out, _ := exec.Command("squeue", "-h", "-j", id).CombinedOutput()
	assert.NotContains(t, string(out), id, "the job is still in squeue")
}

// syncBuf is a bytes.Buffer safe for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTailBoundsLongLines: a job that writes a 5 MB line (in pieces, as Slurm
// appends) used to be held whole until its newline and handed on whole; it is
// handed cut at contract.MaxLineBytes, saying how long it was, and the lines
// around it arrive as they were.
func TestTailBoundsLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "slurm-2.out")
	var sink strings.Builder
	tl := &tail{path: path, stream: "stdout", sink: &sink}
	var got []string
	f := func(_ string, _ int, line string) { got = append(got, line) }
	fh, err := os.Create(path)
	require.NoError(t, err)
	_, _ = fh.WriteString("before\n0: FSDPBENCH ")
	for range 5 {
		_, _ = fh.WriteString(strings.Repeat("x", 1<<20))
		tl.read(false, f)
		assert.LessOrEqual(t, len(tl.part), contract.MaxLineBytes, "the unfinished line is held bounded")
	}
	_, _ = fh.WriteString("\nafter\n")
	require.NoError(t, fh.Close())
	tl.read(true, f)
	require.Len(t, got, 3)
	assert.Equal(t, "before", got[0])
	assert.Equal(t, "after", got[2])
	n, cut := contract.LineCut(got[1])
	assert.True(t, cut)
	assert.Equal(t, int64(3+len("FSDPBENCH ")+5<<20), n)
	assert.Less(t, len(got[1]), contract.MaxLineBytes+100)
	assert.Less(t, sink.Len(), contract.MaxLineBytes+200)
}
