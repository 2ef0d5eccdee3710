//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// startSweep starts `fsdpbench sweep spec` in dir without waiting for it.
func startSweep(t *testing.T, dir, spec string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := command(dir, "sweep", spec, "--progress", "plain")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stderr
}

// assertResumed checks that after the resumed sweep every run of the spec has
// exactly one metrics.json with status ok, and the manifest lists each run once.
func assertResumed(t *testing.T, sweepDir string, ids []string) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(sweepDir, results.RunsDir))
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	assert.ElementsMatch(t, ids, dirs, "one directory per run, none extra")
	sd := &results.SweepDir{Path: sweepDir}
	for _, id := range ids {
		m, err := sd.ReadMetrics(id)
		require.NoError(t, err, id)
		assert.Equal(t, results.StatusOK, m.Status, id)
	}
	man, err := sd.ReadManifest()
	require.NoError(t, err)
	var listed []string
	for _, e := range man.Runs {
		listed = append(listed, e.ID)
		assert.Equal(t, results.StatusOK, e.Status, e.ID)
	}
	assert.ElementsMatch(t, ids, listed, "the manifest lists each run once")
}

func TestKillThenResumeLosesAndRepeatsNoRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, slowSpec)
	plan := expectedRuns(t, spec)
	var ids []string
	for _, rc := range plan.Runs {
		ids = append(ids, rc.ID)
	}
	sweepDir := filepath.Join(dir, "fsdpbench-results", "slow")

	cmd, _ := startSweep(t, dir, spec)
	waitFor(t, "two finished runs", func() bool { return len(finished(t, sweepDir)) >= 2 })
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	before := finished(t, sweepDir)
	require.Less(t, len(before), len(ids), "the kill came too late to test anything")

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	assertResumed(t, sweepDir, ids)

	after := finished(t, sweepDir)
	for id, mtime := range before {
		assert.Equal(t, mtime, after[id], "%s finished before the kill and was run again", id)
		assert.Contains(t, res.stderr, id+" skipped (done: ok)")
	}
	ran := 0
	for _, line := range strings.Split(res.stderr, "\n") {
		if strings.Contains(line, " ok ") && strings.HasPrefix(line, "[") {
			ran++
		}
	}
	assert.Equal(t, len(ids)-len(before), ran, "each unfinished run ran exactly once")
}

func TestInterruptThenResume(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, slowSpec)
	plan := expectedRuns(t, spec)
	var ids []string
	for _, rc := range plan.Runs {
		ids = append(ids, rc.ID)
	}
	sweepDir := filepath.Join(dir, "fsdpbench-results", "slow")

	cmd, stderr := startSweep(t, dir, spec)
	waitFor(t, "a finished run and one in flight", func() bool {
		done := finished(t, sweepDir)
		if len(done) == 0 {
			return false
		}
		started, _ := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, "*", results.RunArgsFile))
		return len(started) > len(done)
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, ExitInterrupted, ee.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "interrupting: stopping cleanly")

	// The run in flight was cancelled and is not final; nothing after it started.
	sd := &results.SweepDir{Path: sweepDir}
	final, canceled := 0, 0
	for _, id := range ids {
		m, err := sd.ReadMetrics(id)
		if err != nil {
			continue
		}
		if m.Status.Final() {
			final++
		} else {
			assert.Equal(t, results.StatusCanceled, m.Status, id)
			canceled++
		}
	}
	assert.Equal(t, 1, canceled, stderr.String())
	require.Less(t, final, len(ids))
	b, err := os.ReadFile(filepath.Join(sweepDir, results.ManifestFile))
	require.NoError(t, err)
	assert.True(t, json.Valid(b))

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	assertResumed(t, sweepDir, ids)
	assert.Equal(t, final, strings.Count(res.stderr, "skipped (done: ok)"))
}

func TestOnInterruptCancelsThenForces(t *testing.T) {
	for _, first := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(first.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			forced := make(chan struct{})
			var stderr syncBuffer
			stop := onInterrupt(cancel, &stderr, func() { close(forced) })
			defer stop()

			require.NoError(t, syscall.Kill(os.Getpid(), first))
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
				t.Fatalf("the first %v did not cancel the context", first)
			}
			assert.Contains(t, stderr.String(), "press Ctrl-C again to force")

			require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
			select {
			case <-forced:
			case <-time.After(5 * time.Second):
				t.Fatal("the second signal did not force the exit")
			}
		})
	}
}

// TestWorkerStopsCleanlyOnSIGHUP sends SIGHUP to a real `fsdpbench worker` that
// waits for its rendezvous: it exits on its own, saying why, instead of dying of
// the signal.
func TestWorkerStopsCleanlyOnSIGHUP(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rc := sweeps.RunConfig{Backend: "gotrain", Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 3, Nodes: 1, GPUsPerNode: 2,
		WorldSize: 2, BatchPerDevice: 1, GradAccum: 1, GlobalBatch: 2, Sharding: sweeps.FullShard, MixedPrecision: sweeps.FP32}
	data, err := json.Marshal(rc)
	require.NoError(t, err)
	cfg := filepath.Join(dir, "run.json")
	require.NoError(t, os.WriteFile(cfg, data, 0o644))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close()) // nobody serves the rendezvous: rank 1 waits
	cmd := command(dir, "worker")
	cmd.Env = append(cmd.Env, "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
		"MASTER_PORT="+strconv.Itoa(port), "FSDPBENCH_RUN_CONFIG="+cfg)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	time.Sleep(time.Second)
	require.NoError(t, cmd.Process.Signal(syscall.SIGHUP))
	err = cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stderr.String())
	ws := ee.Sys().(syscall.WaitStatus)
	assert.False(t, ws.Signaled(), "the worker died of the signal: %v; stderr:\n%s", err, stderr.String())
	assert.Equal(t, 1, ee.ExitCode())
	assert.Contains(t, stderr.String(), "stopped by signal hangup")
	assert.NotContains(t, stderr.String(), "press Ctrl-C again")
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
