//go:build unix

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/harness/launch"
	"github.com/fsdpbench/fsdpbench/results"
)

// needSlurm skips without a reachable Slurm, and fails instead in CI, where
// .ci/run starts one on localhost (.ci/slurm start) and sets
// FSDPBENCH_REQUIRE_SLURM=1.
func needSlurm(t *testing.T) {
	t.Helper()
	err := launch.CheckSlurm()
	if err == nil {
		var out []byte
		out, err = exec.Command("sinfo", "-h", "-o", "%T").CombinedOutput()
		if err != nil {
			err = fmt.Errorf("sinfo: %v: %s", err, out)
		} else if !regexp.MustCompile(`idle|mix|alloc|plnd`).Match(out) {
			err = fmt.Errorf("no node is up: sinfo says %q", strings.TrimSpace(string(out)))
		}
	}
	if err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_SLURM") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_SLURM=1 but Slurm is not reachable (%v): run .ci/slurm start", err)
		}
		t.Skipf("no Slurm here (%v); .ci/slurm start brings one up", err)
	}
}

// gotrainSweep is a gotrain CPU sweep at world size 2, two strategies. Each
// test gives its own seed, so that its runs' IDs (and job names) are its own.
func gotrainSweep(name, launcher string, seed, steps int, delay, timeout string) string {
	return fmt.Sprintf(`name: %s
backend: gotrain
launcher: %s
launcher_options: {poll_interval: 200ms}
hardware: cpu
model: tiny
seq_len: 32
steps: %d
warmup_steps: 1
timeout: %s
seed: %d
base: {mixed_precision: fp32, batch_per_device: 1}
grid:
  world_size: [2]
  sharding: [full_shard, ddp]
backend_options: {step_delay: %s}
`, name, launcher, steps, timeout, seed, delay)
}

// sameTables checks that two sweeps' results agree run by run: the report
// table of statuses and losses, and the exact figures in the CSV.
func sameTables(t *testing.T, local, slurm string, lossTol float64) {
	t.Helper()
	report := func(dir string) string {
		res := fsdpbench(t, repoRoot, "report", dir, "--metric", "status,loss_first,loss_last")
		require.Equal(t, 0, res.code, res.stderr)
		return res.stdout
	}
	assert.Equal(t, report(local), report(slurm), "the report tables differ")
	_, lrows := csvRows(t, local)
	_, srows := csvRows(t, slurm)
	require.Len(t, srows, len(lrows))
	for i := range lrows {
		l, s := lrows[i], srows[i]
		assert.Equal(t, l["id"], s["id"])
		assert.Equal(t, "ok", s["status"], s["id"])
		assert.Equal(t, "local", l["launcher"])
		for _, col := range []string{"loss_first", "loss_last", "world_size", "global_batch"} {
			lv, err := strconv.ParseFloat(l[col], 64)
			require.NoError(t, err, "%s %s=%q", l["id"], col, l[col])
			sv, err := strconv.ParseFloat(s[col], 64)
			require.NoError(t, err, "%s %s=%q", s["id"], col, s[col])
			assert.InDelta(t, lv, sv, lossTol, "%s: %s", s["id"], col)
		}
	}
}

// slurmJobs lists the jobs Slurm still knows (queued, running, or ended within
// MinJobAge) whose working directory is under dir: job id -> run directory.
func slurmJobs(t *testing.T, dir string) map[string]string {
	t.Helper()
	out, err := exec.Command("scontrol", "show", "job", "-o").CombinedOutput()
	if err != nil && strings.Contains(string(out), "No jobs") {
		return nil
	}
	require.NoError(t, err, string(out))
	jobs := map[string]string{}
	re := regexp.MustCompile(`^JobId=([0-9]+) .* WorkDir=(\S+)`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := re.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[2], dir) {
			jobs[m[1]] = m[2]
		}
	}
	return jobs
}

// queued lists the jobs squeue shows (pending, running, completing) under dir.
func queued(t *testing.T, dir string) []string {
	t.Helper()
	out, err := exec.Command("squeue", "-h", "-o", "%i %T %Z").CombinedOutput()
	require.NoError(t, err, string(out))
	var jobs []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 3 && strings.HasPrefix(f[2], dir) {
			jobs = append(jobs, line)
		}
	}
	return jobs
}

// cancelJobsUnder scancels whatever a failed test left queued under dir.
func cancelJobsUnder(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, line := range queued(t, dir) {
			_ = exec.Command("scancel", strings.Fields(line)[0]).Run()
		}
	})
}

// jobRunning reports whether a run of the sweep has a job whose rank 0 has
// printed a step: the job is past the queue and training.
func jobRunning(sweepDir string) bool {
	outs, _ := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", "slurm-*.out"))
	for _, o := range outs {
		if b, err := os.ReadFile(o); err == nil && strings.Contains(string(b), "FSDPBENCH ") {
			return true
		}
	}
	return false
}

func TestSlurmGotrainSweepMatchesLocal(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	for _, l := range []string{"local", "slurm"} {
		spec := filepath.Join(dir, l+".yaml")
		require.NoError(t, os.WriteFile(spec, []byte(gotrainSweep("gt-"+l, l, 11, 3, "0s", "2m")), 0o644))
		res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
		require.Equal(t, 0, res.code, "launcher %s:\n%s\n%s", l, res.stdout, res.stderr)
		assert.Contains(t, res.stderr, "2 runs: 2 ok")
	}
	sweeps := filepath.Join(dir, "fsdpbench-results")
	sameTables(t, filepath.Join(sweeps, "gt-local"), filepath.Join(sweeps, "gt-slurm"), 0)
	assert.Len(t, slurmJobs(t, sweeps), 2, "one job per run")
}

func TestSlurmTorchrunSweepMatchesLocal(t *testing.T) {
	needSlurm(t)
	needTorch(t)
	t.Parallel()
	out := t.TempDir()
	cancelJobsUnder(t, out)
	for _, l := range []string{"local", "slurm"} {
		res := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/torchrun-ddp-cpu.yaml", "--progress", "plain",
			"--set", "activation_checkpointing=false", "--set", "launcher="+l,
			"--set", "launcher_options.poll_interval=200ms", "--results", filepath.Join(out, l))
		require.Equal(t, 0, res.code, "launcher %s:\n%s\n%s", l, res.stdout, res.stderr)
		assert.Contains(t, res.stderr, "2 runs: 2 ok")
	}
	// DDP on gloo sums in a fixed order, so the losses agree to float32 rounding.
	sameTables(t, filepath.Join(out, "local", "torchrun-ddp-cpu"), filepath.Join(out, "slurm", "torchrun-ddp-cpu"), 1e-6)
	for id, runDir := range slurmJobs(t, out) {
		script, err := os.ReadFile(filepath.Join(runDir, launch.ScriptFile))
		require.NoError(t, err, id)
		assert.Contains(t, string(script), "#SBATCH --ntasks-per-node=1", "one torchrun per node")
		assert.Contains(t, string(script), "torch.distributed.run")
	}
}

// TestSlurmTimeLimitEndsTimeout: a job that outlives its time limit (the spec's
// timeout, 1 minute, Slurm's smallest) is ended by Slurm and recorded timeout.
func TestSlurmTimeLimitEndsTimeout(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	spec := writeSpec(t, dir, gotrainSweep("limit", "slurm", 12, 1000, "500ms", "1m"))
	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain", "--set", "sharding=ddp")
	require.Equal(t, 1, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "1 runs: 0 ok, 1 timeout")
	sweepDir := filepath.Join(dir, "fsdpbench-results", "limit")
	entries, err := os.ReadDir(filepath.Join(sweepDir, results.RunsDir))
	require.NoError(t, err)
	require.Len(t, entries, 1)
	m, err := (&results.SweepDir{Path: sweepDir}).ReadMetrics(entries[0].Name())
	require.NoError(t, err)
	assert.Equal(t, results.StatusTimeout, m.Status)
	assert.Contains(t, m.Error, "reached its time limit")
	assert.Empty(t, queued(t, dir))
}

// TestSlurmInterruptLeavesNoJob: Ctrl-C in the middle of a sweep cancels the
// running run's job; when fsdpbench has exited, squeue shows none of the sweep's.
func TestSlurmInterruptLeavesNoJob(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	spec := writeSpec(t, dir, gotrainSweep("interrupt", "slurm", 13, 100, "200ms", "5m"))
	sweepDir := filepath.Join(dir, "fsdpbench-results", "interrupt")
	cmd, stderr := startSweep(t, dir, spec)
	waitFor(t, "a running job", func() bool { return jobRunning(sweepDir) })
	require.NotEmpty(t, queued(t, dir))
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, ExitInterrupted, ee.ExitCode(), stderr.String())
	assert.Empty(t, queued(t, dir), "jobs left in squeue")
	assert.Len(t, slurmJobs(t, dir), 1, "the second run was never submitted")
}

// TestSlurmKillThenResumeReattaches: fsdpbench killed (SIGKILL: nothing cancels
// its job) and started again follows the job that is still running instead of
// submitting the run twice: one job per run in all.
func TestSlurmKillThenResumeReattaches(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	spec := writeSpec(t, dir, gotrainSweep("resume", "slurm", 14, 25, "200ms", "5m"))
	sweepDir := filepath.Join(dir, "fsdpbench-results", "resume")
	cmd, _ := startSweep(t, dir, spec)
	waitFor(t, "a running job", func() bool { return jobRunning(sweepDir) })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	before := slurmJobs(t, dir)
	require.Len(t, before, 1)
	require.Len(t, queued(t, dir), 1, "the killed sweep's job goes on")

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "2 runs: 2 ok")
	var ids []string
	for _, rc := range expectedRuns(t, spec).Runs {
		ids = append(ids, rc.ID)
	}
	assertResumed(t, sweepDir, ids)

	after := slurmJobs(t, dir)
	assert.Len(t, after, len(ids), "one job per run, none submitted twice: %v", after)
	for id, runDir := range before {
		assert.Equal(t, runDir, after[id], "the first job is still the run's")
		log, err := os.ReadFile(filepath.Join(runDir, results.StderrFile))
		require.NoError(t, err)
		assert.Contains(t, string(log), "re-attached to Slurm job "+id)
	}
	waitFor(t, "the sweep's jobs to leave squeue", func() bool { return len(queued(t, dir)) == 0 })
}

// TestSlurmJobThatEndsWhileTheSweepIsDeadIsCollected: fsdpbench killed while its
// run's job runs; the job finishes while no fsdpbench follows it; the resumed
// sweep collects that job's result instead of submitting the run again (one job
// per run, as scontrol shows), and the run is ok with the job's own figures.
func TestSlurmJobThatEndsWhileTheSweepIsDeadIsCollected(t *testing.T) {
	needSlurm(t)
	t.Parallel()
	dir := t.TempDir()
	cancelJobsUnder(t, dir)
	spec := writeSpec(t, dir, gotrainSweep("collect", "slurm", 15, 40, "100ms", "5m"))
	sweepDir := filepath.Join(dir, "fsdpbench-results", "collect")
	cmd, _ := startSweep(t, dir, spec)
	waitFor(t, "a running job", func() bool { return jobRunning(sweepDir) })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	before := slurmJobs(t, dir)
	require.Len(t, before, 1)
	waitFor(t, "the orphaned job to end", func() bool { return len(queued(t, dir)) == 0 })

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stderr, "2 runs: 2 ok")
	var ids []string
	for _, rc := range expectedRuns(t, spec).Runs {
		ids = append(ids, rc.ID)
	}
	assertResumed(t, sweepDir, ids)
	after := slurmJobs(t, dir)
	assert.Len(t, after, len(ids), "one job per run, the ended one not submitted again: %v", after)
	sd := &results.SweepDir{Path: sweepDir}
	for id, runDir := range before {
		assert.Equal(t, runDir, after[id])
		log, err := os.ReadFile(filepath.Join(runDir, results.StderrFile))
		require.NoError(t, err)
		assert.Contains(t, string(log), "collecting Slurm job "+id)
		m, err := sd.ReadMetrics(filepath.Base(runDir))
		require.NoError(t, err)
		assert.Equal(t, results.StatusOK, m.Status)
		assert.Equal(t, id, m.Extra["slurm_job_id"])
		assert.Equal(t, 40, m.StepsMeasured, "the job's steps were read back from its output")
		require.NotNil(t, m.LossLast)
	}

	// Resuming a finished sweep submits nothing.
	res = fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Len(t, slurmJobs(t, dir), len(ids))
}
