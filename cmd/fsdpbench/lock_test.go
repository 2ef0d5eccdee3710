//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/harness/dirlock"
	"github.com/fsdpbench/fsdpbench/results"
)

// lockSpec is slowSpec at 250 ms a step: six runs of about 1.5 s, 9 s in all,
// long enough for a second process to meet the first at work on a loaded machine.
var lockSpec = strings.Replace(slowSpec, "sleep_per_step: 30ms", "sleep_per_step: 250ms", 1)

// startCmd starts the binary in dir with args, without waiting for it.
func startCmd(t *testing.T, dir string, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := command(dir, args...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stderr
}

func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	return ee.ExitCode()
}

// ranOK counts the runs a sweep's plain progress says it ran (not skipped) ok.
func ranOK(stderr string) int {
	n := 0
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "[") && strings.Contains(line, " ok ") {
			n++
		}
	}
	return n
}

// TestSecondSweepIsRefusedWhileTheFirstRuns: two real `fsdpbench sweep` of one
// spec into one directory. The second exits 2 at once naming the first (pid,
// host), runs nothing and writes nothing; the first runs every run once.
func TestSecondSweepIsRefusedWhileTheFirstRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, lockSpec)
	sweepDir := filepath.Join(dir, "fsdpbench-results", "slow")
	first, firstErr := startCmd(t, dir, "sweep", spec, "--progress", "plain")
	waitFor(t, "the first sweep at work", func() bool {
		started, _ := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", results.RunArgsFile))
		return len(started) > 0
	})

	begin := time.Now()
	second := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	assert.Less(t, time.Since(begin), 10*time.Second, "refused at once, not after waiting")
	require.Equal(t, ExitUsage, second.code, second.stderr)
	host, _ := os.Hostname()
	assert.Contains(t, second.stderr, fmt.Sprintf("is in use by pid %d on host %s", first.Process.Pid, host))
	assert.Contains(t, second.stderr, "sweep "+spec)
	assert.Contains(t, second.stderr, "--wait")
	assert.Empty(t, second.stdout, "no table: nothing ran")

	require.NoError(t, first.Wait(), firstErr.String())
	assert.Equal(t, 6, ranOK(firstErr.String()), "each run ran once:\n%s", firstErr.String())
	var ids []string
	for _, rc := range expectedRuns(t, spec).Runs {
		ids = append(ids, rc.ID)
	}
	assertResumed(t, sweepDir, ids)
}

// TestWaitingSweepsRunAfterTheFirst: with --wait a second sweep waits for the
// first and then finds every run done; a third, interrupted while it waits, exits
// 130 and rewrites nothing, so no finished run's metrics.json is ever replaced.
func TestWaitingSweepsRunAfterTheFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, lockSpec)
	sweepDir := filepath.Join(dir, "fsdpbench-results", "slow")
	first, firstErr := startCmd(t, dir, "sweep", spec, "--progress", "plain")
	waitFor(t, "the first sweep at work", func() bool { return len(finished(t, sweepDir)) > 0 })

	second, secondErr := startCmd(t, dir, "sweep", spec, "--progress", "plain", "--wait")
	third, thirdErr := startCmd(t, dir, "sweep", spec, "--progress", "plain", "--wait", "--rerun")
	waitFor(t, "both to wait", func() bool {
		return strings.Contains(secondErr.String(), "waiting for "+filepath.Join("fsdpbench-results", "slow")) &&
			strings.Contains(thirdErr.String(), "waiting for ")
	})
	assert.Contains(t, secondErr.String(), fmt.Sprintf("in use by pid %d", first.Process.Pid))
	require.NoError(t, third.Process.Signal(syscall.SIGINT))
	assert.Equal(t, ExitInterrupted, exitCode(t, third.Wait()), thirdErr.String())
	assert.Contains(t, thirdErr.String(), "interrupted before any run started")

	require.NoError(t, first.Wait(), firstErr.String())
	done := finished(t, sweepDir)
	require.Len(t, done, 6)
	require.NoError(t, second.Wait(), secondErr.String())
	assert.Contains(t, secondErr.String(), "6 runs: 6 ok (6 skipped: done before)")
	assert.Zero(t, ranOK(secondErr.String()))
	assert.Equal(t, done, finished(t, sweepDir), "no metrics.json was rewritten")
}

// TestKilledSweepHoldsNoLock: kill -9 of a gotrain sweep while its workers run
// leaves the lock free at once, even while the orphaned workers live (they must
// not inherit it), and the same command resumes and finishes every run.
func TestKilledSweepHoldsNoLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: killed
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 40
warmup_steps: 1
timeout: 2m
base: {mixed_precision: fp32, batch_per_device: 1, world_size: 2}
grid:
  sharding: [full_shard, ddp]
backend_options: {step_delay: 50ms}
`)
	sweepDir := filepath.Join(dir, "fsdpbench-results", "killed")
	sweep, _ := startCmd(t, dir, "sweep", spec, "--progress", "plain")
	var pidFile string
	waitFor(t, "workers at work", func() bool {
		m, _ := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", "workers.pid"))
		if len(m) > 0 {
			pidFile = m[0]
		}
		return len(m) > 0
	})
	require.NoError(t, sweep.Process.Signal(syscall.SIGKILL))
	_ = sweep.Wait()

	l, err := dirlock.Acquire(context.Background(), sweepDir, dirlock.Options{})
	require.NoError(t, err, "a killed sweep's lock must not outlive it, whatever its workers do")
	require.NoError(t, l.Release())
	// The orphans are process cleanup's to stop; here they only must not disturb the resume.
	if b, err := os.ReadFile(pidFile); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	var ids []string
	for _, rc := range expectedRuns(t, spec).Runs {
		ids = append(ids, rc.ID)
	}
	assertResumed(t, sweepDir, ids)
}

// TestSweepRefusesBadSetupsWithExit2: out-of-range flags and a results directory
// that cannot be written exit 2 before anything runs.
func TestSweepRefusesBadSetupsWithExit2(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, lockSpec)
	notDir := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--jobs", "-5"}, "--jobs -5: give 1 to 1024"},
		{[]string{"--jobs", "0"}, "--jobs 0: give 1 to 1024"},
		{[]string{"--jobs", "100000"}, "--jobs 100000: give 1 to 1024"},
		{[]string{"--results", filepath.Join(notDir, "results")}, "--results " + filepath.Join(notDir, "results") + ": " + notDir + " is a file, not a directory"},
	}
	for _, tt := range tests {
		res := fsdpbench(t, dir, append([]string{"sweep", spec, "--progress", "plain"}, tt.args...)...)
		assert.Equal(t, ExitUsage, res.code, "%v: %s", tt.args, res.stderr)
		assert.Contains(t, res.stderr, tt.want, tt.args)
		assert.NoDirExists(t, filepath.Join(dir, "fsdpbench-results", "slow", results.RunsDir), "%v: nothing ran", tt.args)
	}
}

// TestSpecWarningsArePrinted: an exclude that matches nothing is legal and
// probably a mistake: sweep, sweep --dry-run and plan say so on stderr, with its
// position.
func TestSpecWarningsArePrinted(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, lockSpec+"exclude:\n  - {batch_per_device: 3}\n")
	want := fmt.Sprintf("%s:%d:5: this exclude entry matches no grid point", spec, strings.Count(lockSpec, "\n")+2)
	for _, args := range [][]string{{"plan", spec}, {"sweep", spec, "--dry-run"}, {"sweep", spec, "--progress", "none", "--set", "backend_options.sleep_per_step=0s"}} {
		res := fsdpbench(t, dir, args...)
		require.Equal(t, 0, res.code, "%v: %s", args, res.stderr)
		assert.Contains(t, res.stderr, "warning: "+want, args)
		assert.NotContains(t, res.stdout, "warning", "warnings go to stderr")
	}
}

// TestSweepRefusesWhatTheHostCannotHold: a gotrain run of 100,000 CPU workers,
// which plan calls infeasible for the host's RAM, is recorded infeasible by sweep
// without starting a worker.
func TestSweepRefusesWhatTheHostCannotHold(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: huge
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 2
warmup_steps: 0
base: {mixed_precision: fp32, batch_per_device: 1}
grid:
  world_size: [100000]
`)
	plan := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, plan.code, plan.stderr)
	assert.Contains(t, plan.stdout, "100000 ranks on the host")

	begin := time.Now()
	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	assert.Less(t, time.Since(begin), 30*time.Second)
	require.Equal(t, 0, res.code, "infeasible is a result:\n%s", res.stderr)
	assert.Contains(t, res.stderr, "1 runs: 0 ok, 1 infeasible")
	runDirs, err := filepath.Glob(filepath.Join(dir, "fsdpbench-results", "huge", results.RunsDir, "*"))
	require.NoError(t, err)
	require.Len(t, runDirs, 1)
	m, err := (&results.SweepDir{Path: filepath.Dir(filepath.Dir(runDirs[0]))}).ReadMetrics(filepath.Base(runDirs[0]))
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, m.Status)
	assert.Contains(t, m.Error, "does not fit this host")
	assert.NoFileExists(t, filepath.Join(runDirs[0], "workers.pid"), "no worker was started")
}

// TestIngestIntoARunningSweepIsRefused: ingest takes the same lock as sweep.
func TestIngestIntoARunningSweepIsRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, lockSpec)
	sweepDir := filepath.Join(dir, "fsdpbench-results", "slow")
	past := filepath.Join(dir, "past", "run1")
	require.NoError(t, os.MkdirAll(past, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(past, "metrics.json"),
		[]byte(`{"wall_time_s": 2, "approx_tokens_per_rank": 1000, "world_size": 1, "fsdp": false, "bf16": true}`), 0o644))
	first, firstErr := startCmd(t, dir, "sweep", spec, "--progress", "plain")
	waitFor(t, "the sweep at work", func() bool {
		started, _ := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", results.RunArgsFile))
		return len(started) > 0
	})
	res := fsdpbench(t, dir, "ingest", "past", "--name", "slow")
	require.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, fmt.Sprintf("in use by pid %d", first.Process.Pid))
	require.NoError(t, first.Wait(), firstErr.String())

	// Once the sweep is done, ingest still refuses to replace its tree.
	res = fsdpbench(t, dir, "ingest", "past", "--name", "slow")
	require.Equal(t, ExitUsage, res.code, res.stderr)
	assert.Contains(t, res.stderr, "measured by a sweep rather than ingested")
	spec2, err := os.ReadFile(filepath.Join(sweepDir, results.SpecFile))
	require.NoError(t, err)
	assert.True(t, bytes.Contains(spec2, []byte("name: slow")))
	assert.Len(t, finished(t, sweepDir), 6)
}
