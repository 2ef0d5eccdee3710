//go:build unix

package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/harness"
	"github.com/fsdpbench/fsdpbench/results"
)

// interleaveSpec: three runs of four repeats, each repeat some 150 ms (sim's
// sleep_per_step), so a kill lands between rounds.
const interleaveSpec = `name: rounds
backend: sim
hardware: h100-sxm
model: llama3-8b
seq_len: 1024
steps: 5
warmup_steps: 1
repeats: 4
timeout: 1m
grid:
  world_size: [8]
  batch_per_device: [1, 2, 4]
backend_options:
  sleep_per_step: 30ms
`

// keptRepeats counts each run's kept repeats (runs/<id>/repeats/repeat-*.json).
func keptRepeats(t *testing.T, sweepDir string, ids []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		m, err := filepath.Glob(filepath.Join(sweepDir, results.RunsDir, id, harness.RepeatsDir, "repeat-*.json"))
		require.NoError(t, err)
		out[id] = len(m)
	}
	return out
}

// TestKilledMidInterleaveResumes: SIGKILL of a real sweep between its rounds
// (some runs one repeat ahead of others, none finished), then the same command:
// every run ends ok with all its repeats, each repeat measured once (its steps
// once in steps.csv, the resumed sweep running only the repeats not kept), and
// the manifest lists each run once.
func TestKilledMidInterleaveResumes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, interleaveSpec)
	plan := expectedRuns(t, spec)
	var ids []string
	for _, rc := range plan.Runs {
		ids = append(ids, rc.ID)
	}
	sweepDir := filepath.Join(dir, "fsdpbench-results", "rounds")

	cmd, _ := startSweep(t, dir, spec)
	// Into round 2 (4 repeats kept of 12), far from the end.
	waitFor(t, "round 2", func() bool {
		n := 0
		for _, k := range keptRepeats(t, sweepDir, ids) {
			n += k
		}
		return n >= 4
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed := time.Now()
	kept := keptRepeats(t, sweepDir, ids)
	lo, hi, total := 4, 0, 0
	for _, k := range kept {
		lo, hi, total = min(lo, k), max(hi, k), total+k
	}
	require.Empty(t, finished(t, sweepDir), "the kill came too late: a run finished")
	require.Less(t, total, 12, "the kill came too late to test anything")
	// Interleaved: the runs are at most one repeat apart (back to back, the
	// first would hold 4 before the second had any).
	assert.LessOrEqual(t, hi-lo, 1, "repeats kept per run at the kill: %v", kept)

	res := fsdpbench(t, dir, "sweep", spec, "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	assertResumed(t, sweepDir, ids)
	sd := &results.SweepDir{Path: sweepDir}
	for _, id := range ids {
		m, err := sd.ReadMetrics(id)
		require.NoError(t, err)
		assert.Equal(t, 4, m.Repeats, id)
		b, err := os.ReadFile(filepath.Join(sweepDir, results.RunsDir, id, results.StepsFile))
		require.NoError(t, err)
		assert.Equal(t, 1+4*5, strings.Count(string(b), "\n"), "%s: steps.csv holds each repeat's 5 steps once", id)
		_, err = os.Stat(filepath.Join(sweepDir, results.RunsDir, id, harness.RepeatsDir))
		assert.True(t, os.IsNotExist(err), "%s: the kept repeats go once the run is done", id)
		log, err := os.ReadFile(filepath.Join(sweepDir, results.RunsDir, id, results.StderrFile))
		require.NoError(t, err)
		if kept[id] > 0 {
			assert.Contains(t, string(log), "resumed after repeat", id)
			// Its first repeat is the one measured before the kill, not redone.
			assert.True(t, m.Started.Before(killed), "%s: started %s, after the kill", id, m.Started)
		} else {
			assert.True(t, m.Started.After(killed), id)
		}
	}
}
