package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestRunLogsAreCapped: a run that prints without end (here 100 MB on stdout,
// numbered lines) used to leave a log as large; now stdout.log keeps its first
// LogHeadBytes and last LogTailBytes with one line between saying how much was
// cut, and the run's result is unaffected.
func TestRunLogsAreCapped(t *testing.T) {
	const total = 100 << 20
	be := &fake{name: "fake"}
	be.run = func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		var b strings.Builder
		pad := strings.Repeat("y", 1000)
		for i, written := 0, 0; written < total; i++ {
			fmt.Fprintf(&b, "line %09d %s\n", i, pad)
			if b.Len() > 1<<20 {
				_, _ = env.Stdout.Write([]byte(b.String()))
				written += b.Len()
				b.Reset()
			}
		}
		fmt.Fprintln(env.Stdout, "the last line")
		fmt.Fprintln(env.Stderr, "a short stderr")
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	p := plan("chatty", 1)
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.OK)
	runDir := filepath.Join(opts.ResultsDir, "chatty", results.RunsDir, p.Runs[0].ID)
	log, err := os.ReadFile(filepath.Join(runDir, results.StdoutFile))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(log), MaxLogBytes+200)
	assert.Greater(t, len(log), MaxLogBytes-(2<<10))
	s := string(log)
	assert.True(t, strings.HasPrefix(s, "line 000000000 "), "the head is kept")
	assert.True(t, strings.HasSuffix(s, "\nthe last line\n"), "the tail is kept")
	i := strings.Index(s, "\n[fsdpbench: ")
	require.Positive(t, i, "a note says what was cut")
	note := s[i+1 : i+1+strings.IndexByte(s[i+1:], '\n')]
	assert.Regexp(t, `^\[fsdpbench: [0-9.]+ MB cut here; a log keeps its first 24 MiB and last 8 MiB\]$`, note)
	after := s[i+2+len(note):]
	assert.Regexp(t, `^line [0-9]{9} y`, after, "the tail starts at a line's start")
	stderr, err := os.ReadFile(filepath.Join(runDir, results.StderrFile))
	require.NoError(t, err)
	assert.Equal(t, "a short stderr\n", string(stderr), "a short log is left whole")
}
