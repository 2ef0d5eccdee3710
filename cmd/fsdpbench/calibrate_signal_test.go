//go:build unix

package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeCalibrationRuns stores n distinct measured gotrain runs on h100-sxm
// (world size, micro-batch, accumulation and sharding vary), with throughputs a
// few percent apart, as a sweep would: what calibrate fits.
func writeCalibrationRuns(t *testing.T, dir string, n int) string {
	t.Helper()
	sd, err := results.OpenSweep(dir)
	require.NoError(t, err)
	shardings := []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard}
	for i := range n {
		ws := 1 << (i % 4)
		bs, ga := 1+(i/12)%5, 1+(i/60)%2
		rc, _ := gateRun(ws, shardings[(i/4)%3], nil)
		rc.BatchPerDevice, rc.GradAccum, rc.GlobalBatch = bs, ga, bs*ga*ws
		rc.AssignID()
		m := results.Normalize(rc, []results.Result{calResult(rc, bs*ga, i)})
		require.NoError(t, sd.WriteRunArgs(rc))
		require.NoError(t, sd.WriteMetrics(rc.ID, m))
	}
	return dir
}

// calResult is a run's report with a wall time that grows with its work.
func calResult(rc sweeps.RunConfig, work, i int) results.Result {
	res := results.Result{Status: results.StatusOK, WorldSize: rc.WorldSize, Nodes: 1, GPUsPerNode: rc.WorldSize,
		TokensPerStep: rc.TokensPerStep(), MeasuredWallS: 0.4 * float64(work) * (1 + 0.03*float64(i%7)),
		ModelFlopsPerToken: 1.2e9, PeakFlopsPerS: 989e12}
	for s := 0; s < rc.Steps; s++ {
		res.Steps = append(res.Steps, results.Step{Step: s, StepTimeS: 0.1 * float64(work), Tokens: rc.TokensPerStep()})
	}
	return res
}

// TestCalibrateShowsProgressAndStopsAtTheFirstSignal: a fit of many runs printed
// nothing for minutes, and SIGTERM was ignored until it ended. Now it reports
// progress on stderr and the first SIGTERM ends it at once (exit 130), writing
// nothing.
func TestCalibrateShowsProgressAndStopsAtTheFirstSignal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runs := writeCalibrationRuns(t, filepath.Join(dir, "runs"), 98)
	out := filepath.Join(dir, "cal.json")
	cmd := command(dir, "calibrate", runs, "-o", out)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	deadline := time.After(2 * time.Minute)
	progress := false
	for !progress {
		select {
		case l, ok := <-lines:
			if !ok {
				_ = cmd.Wait()
				t.Fatalf("calibrate ended before it reported progress:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			progress = strings.Contains(l, "fits done")
		case <-deadline:
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("no progress line in 2 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
	sent := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("calibrate kept computing 20 s after SIGTERM")
	}
	for l := range lines {
		seen = append(seen, l)
	}
	t.Logf("stopped %v after SIGTERM", time.Since(sent))
	assert.Equal(t, ExitInterrupted, cmd.ProcessState.ExitCode(), strings.Join(seen, "\n"))
	assert.Contains(t, strings.Join(seen, "\n"), "interrupted; nothing was written")
	_, err = os.Stat(out)
	assert.True(t, os.IsNotExist(err), "no calibration file: %v", err)
}
