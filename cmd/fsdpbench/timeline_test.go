package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

const timelineSpec = `name: tl
backend: gotrain
model: tiny
seq_len: 16
steps: 3
warmup_steps: 1
base:
  mixed_precision: fp32
  sharding: full_shard
  backward_prefetch: backward_pre
  forward_prefetch: true
  world_size: 2
`

// TestReportTimeline runs a gotrain sweep of two ranks and prints its
// timeline with `report --timeline RUN`: the timeline's path, and a row for
// the run and each rank whose figures add up (compute + exposed + other =
// step, as metrics.json holds them). A directory that is not a run's, and a
// DIR beside --timeline, are usage errors that say what to give.
func TestReportTimeline(t *testing.T) {
	dir := t.TempDir()
	spec := writeSpec(t, dir, timelineSpec)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	runs, err := filepath.Glob(filepath.Join(dir, "out", "tl", results.RunsDir, "*"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run := runs[0]

	out := fsdpbench(t, dir, "report", "--timeline", run)
	require.Equal(t, 0, out.code, "%s\n%s", out.stdout, out.stderr)
	assert.Contains(t, out.stdout, "timeline: "+filepath.Join(run, results.TimelineFile))
	assert.Contains(t, out.stdout, "source gotrain")
	for _, rank := range []string{"run", "0", "1"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^`+rank+` +\S+ \S?s +\S+ \S?s \(\d+%\)`), out.stdout, "a row for %s", rank)
	}
	assert.Contains(t, out.stdout, "exposed comm")
	_, err = os.Stat(filepath.Join(run, results.TimelineFile))
	require.NoError(t, err)

	bad := fsdpbench(t, dir, "report", "--timeline", filepath.Join(dir, "out"))
	assert.Equal(t, 2, bad.code)
	assert.Contains(t, bad.stderr, "give a run's directory")
	both := fsdpbench(t, dir, "report", "--timeline", run, "out")
	assert.Equal(t, 2, both.code)
	assert.True(t, strings.Contains(both.stderr, "give no DIR"), both.stderr)
}
