package harness

import (
	"bytes"
	"context"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// closeWithin closes p and fails the test if that takes longer than a generous
// bound: the bug it guards against is close never returning.
func closeWithin(t *testing.T, p progress) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		p.close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("close did not return: the overall bar never completes")
	}
}

func outcome(name string, bs int, status results.Status) Outcome {
	return Outcome{Config: runConfig(name, bs), Status: status, Wall: time.Second}
}

// An interrupted sweep ends short of its total; the bars must still close (mpb
// ignores SetTotal on a bar built with a total, so Wait hung forever), and the bar
// stays at the count reached rather than claiming the sweep complete.
func TestBarsCloseWhenInterrupted(t *testing.T) {
	out := &syncBuffer{b: &bytes.Buffer{}}
	b := newBars(out, "sw", 5, nil)
	b.finished(outcome("sw", 1, results.StatusOK))
	b.finished(outcome("sw", 2, results.StatusCanceled))
	closeWithin(t, b)
	assert.Contains(t, out.string(), "2/5 runs")
	assert.Contains(t, out.string(), "stopped")
	assert.NotContains(t, out.string(), "2/2 runs")
}

// A max_fit search adds runs as it goes; the bar must count them instead of
// drawing itself full at the first total.
func TestBarsCountRunsAddedBySearch(t *testing.T) {
	out := &syncBuffer{b: &bytes.Buffer{}}
	b := newBars(out, "sw", 2, nil)
	b.finished(outcome("sw", 1, results.StatusOK))
	b.finished(outcome("sw", 2, results.StatusOK))
	b.addTotal(1)
	b.addTotal(1)
	b.finished(outcome("sw", 3, results.StatusOK))
	b.finished(outcome("sw", 4, results.StatusOOM))
	closeWithin(t, b)
	assert.Contains(t, out.string(), "4/4 runs")
	assert.Contains(t, out.string(), "[4/4] ")
}

// While bars draw, OnConsole's writer prints above them; once they are gone it
// is taken back (nil), so that later notices go to stderr directly again.
func TestBarsLendAndTakeBackTheConsole(t *testing.T) {
	out := &syncBuffer{b: &bytes.Buffer{}}
	var mu sync.Mutex
	var calls []io.Writer
	b := newBars(out, "sw", 1, func(w io.Writer) {
		mu.Lock()
		calls = append(calls, w)
		mu.Unlock()
	})
	mu.Lock()
	require.Len(t, calls, 1)
	w := calls[0]
	mu.Unlock()
	require.NotNil(t, w)
	_, err := io.WriteString(w, "interrupting: a notice\n")
	require.NoError(t, err)
	b.finished(outcome("sw", 1, results.StatusOK))
	closeWithin(t, b)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls, 2)
	assert.Nil(t, calls[1])
	assert.Contains(t, out.string(), "interrupting: a notice")
}

// The ETA counts only runs that ran: runs skipped as done take no time.
func TestBarsETA(t *testing.T) {
	b := &bars{total: 4}
	assert.Empty(t, b.eta(decor.Statistics{}), "no estimate before a run was measured")
	b.done, b.measured = 1, 0 // one run skipped as done
	assert.Empty(t, b.eta(decor.Statistics{}))
	b.done, b.measured, b.measuredWall = 2, 1, 10*time.Second
	assert.Equal(t, " ETA 20s", b.eta(decor.Statistics{}))
	b.stopped = true
	assert.Equal(t, " stopped", b.eta(decor.Statistics{}))
}

func (s *syncBuffer) string() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A run's error line is the run's own words (a script's exception): the progress
// line shows its escape sequences as text, never sends them to the terminal.
func TestProgressEscapesWhatRunsSay(t *testing.T) {
	hostile := "RuntimeError: \x1b]0;owned\x07\x1b[2J\x1b]8;;http://x\x1b\\click\u202eexe.txt"
	be := &fake{name: "fake", run: func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, _ func(backends.Event)) (results.Result, error) {
		return results.Result{Status: results.StatusFailed, Error: hostile}, nil
	}}
	opts, out := options(t, be)
	_, err := Run(context.Background(), plan("esc", 1), opts)
	require.NoError(t, err)
	assert.NotContains(t, out.String(), "\x1b")
	assert.NotContains(t, out.String(), "\u202e")
	assert.Contains(t, out.String(), `RuntimeError: \x1b]0;owned\x07\x1b[2J`)
}

// A run waiting for a scheduler says so, and why, in either display.
func TestProgressShowsQueuedRuns(t *testing.T) {
	out := &syncBuffer{b: &bytes.Buffer{}}
	p := &plain{out: out, total: 1}
	p.queued("ws1-x", "ReqNodeNotAvail, UnavailableNodes:node2\x1b[2J")
	assert.Equal(t, "ws1-x queued: ReqNodeNotAvail, UnavailableNodes:node2\\x1b[2J\n", out.string())

	b := newBars(out, "sw", 1, nil)
	rc := runConfig("sw", 1)
	b.started(rc)
	b.queued(rc.ID, "Resources")
	assert.Equal(t, " queued (Resources)", b.reasonNote(rc.ID, 0))
	assert.Empty(t, b.reasonNote(rc.ID, 1), "not once it steps")
	b.finished(outcome("sw", 1, results.StatusOK))
	closeWithin(t, b)
}
