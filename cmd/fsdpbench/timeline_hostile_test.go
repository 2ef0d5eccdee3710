package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// simTimelineSpec is one predicted run, whose metrics.json has a breakdown.
const simTimelineSpec = `name: tlh
backend: sim
hardware: h100-sxm
model: llama-1b
seq_len: 1024
steps: 3
warmup_steps: 1
base:
  world_size: 2
  sharding: full_shard
`

// TestReportTimelineNamesWhatIsWrong (issue 39, item 3): report --timeline
// offered any timeline.json "to open in Perfetto" without reading it, and took
// a FIFO, a directory, a link to /dev/zero or a link loop for "the backend
// wrote no timeline.json". Each input of the issue, as written, is now named
// with what is wrong: not offered, exit 2, the breakdown still printed.
func TestReportTimelineNamesWhatIsWrong(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, simTimelineSpec)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "none")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	runs, err := filepath.Glob(filepath.Join(dir, "out", "tlh", results.RunsDir, "*"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run := runs[0]
	tl := filepath.Join(run, results.TimelineFile)

	none := fsdpbench(t, dir, "report", "--timeline", run)
	require.Equal(t, 0, none.code, none.stderr)
	assert.Contains(t, none.stdout, "timeline: none (the run's backend wrote no timeline.json)")
	assert.Contains(t, none.stdout, "source sim")

	text := func(s string) func() { return func() { require.NoError(t, os.WriteFile(tl, []byte(s), 0o644)) } }
	sized := func(n int64) func() {
		return func() {
			f, err := os.Create(tl)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(n)) // sparse
			require.NoError(t, f.Close())
		}
	}
	span := func(ts, dur string) func() {
		return text(`{"traceEvents": [{"name": "step 1", "ph": "X", "ts": ` + ts + `, "dur": ` + dur + `, "pid": 0, "tid": 0}]}`)
	}
	for _, tc := range []struct {
		name string
		make func()
		want string
	}{
		{"not JSON", text("not json at all"), "timeline.json:1:2: not JSON: invalid character 'o' in literal null"},
		{"empty", text(""), "timeline.json is empty"},
		{"100,000 nested [", text(strings.Repeat("[", 100_000)), "timeline.json:1:33: the timeline nests arrays and objects deeper than 32 levels"},
		{"101 MiB", sized(101 << 20), "timeline.json is 101 MiB (105906176 bytes), more than the 50000000 bytes (50 MB) a timeline may have"},
		{"130 MiB", sized(130 << 20), "timeline.json is 130 MiB (136314880 bytes), more than the 50000000 bytes (50 MB) a timeline may have"},
		{"negative duration", span("10", "-5"), `event 0 ("step 1"): dur -5 is not a time in µs from 0 to 1e+17`},
		{"NaN duration", span("10", "NaN"), "not JSON: invalid character 'N' looking for beginning of value"},
		{"[1,2,3]", text("[1,2,3]"), "timeline.json:1:2: event 0 is a number, not an event"},
		{"null", text("null"), "timeline.json:1:1: the file is null, not a Chrome trace"},
		{"FIFO", func() { require.NoError(t, syscall.Mkfifo(tl, 0o644)) }, "timeline.json is a FIFO (named pipe), not a timeline file"},
		{"directory", func() { require.NoError(t, os.Mkdir(tl, 0o755)) }, "timeline.json is a directory, not a timeline file"},
		{"link to /dev/zero", func() { require.NoError(t, os.Symlink("/dev/zero", tl)) }, `timeline.json is a symbolic link to "/dev/zero", a character device, not a timeline file`},
		{"link loop", func() { require.NoError(t, os.Symlink(tl, tl)) }, "timeline.json is a symbolic link that loops (too many levels of symbolic links)"},
	} {
		require.NoError(t, os.RemoveAll(tl))
		tc.make()
		out := fsdpbench(t, dir, "report", "--timeline", run)
		assert.Equal(t, 2, out.code, "%s: %s", tc.name, out.stderr)
		assert.NotContains(t, out.stdout, "open it in", tc.name)
		assert.NotContains(t, out.stdout, "wrote no", tc.name)
		assert.Contains(t, out.stdout, "timeline: not offered: "+tl, tc.name)
		assert.Contains(t, out.stdout, tc.want, tc.name)
		assert.Contains(t, out.stdout, "source sim", "%s: the breakdown is still printed", tc.name)
		assert.Contains(t, out.stderr, "--timeline: the timeline cannot be opened: ", tc.name)
		assert.Contains(t, out.stderr, tc.want, tc.name)
		assert.Contains(t, out.stderr, "rerun the run to record it again", tc.name)
	}

	require.NoError(t, os.RemoveAll(tl))
	text(`{"traceEvents": [{"name": "step 1", "ph": "X", "ts": 0, "dur": 12.5, "pid": 0, "tid": 0}]}`)()
	ok := fsdpbench(t, dir, "report", "--timeline", run)
	require.Equal(t, 0, ok.code, ok.stderr)
	assert.Contains(t, ok.stdout, "timeline: "+tl+" (")
	assert.Contains(t, ok.stdout, "open it in https://ui.perfetto.dev")
}
