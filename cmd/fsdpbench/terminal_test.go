//go:build unix

package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ptySweep runs `fsdpbench sweep` on a real pseudo-terminal, as a user's shell
// would: stdout and stderr are the terminal, so progress bars are drawn, and a
// Ctrl-C typed into it reaches the sweep as SIGINT from the line discipline.
type ptySweep struct {
	cmd  *exec.Cmd
	tty  io.Writer
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func startPTYSweep(t *testing.T, args ...string) *ptySweep {
	t.Helper()
	return startPTY(t, 120, append([]string{"sweep"}, args...)...)
}

// startPTY runs fsdpbench with args on a pseudo-terminal cols columns wide.
func startPTY(t *testing.T, cols uint16, args ...string) *ptySweep {
	t.Helper()
	cmd := command(t.TempDir(), args...)
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 40, Cols: cols})
	require.NoError(t, err)
	s := &ptySweep{cmd: cmd, tty: ptmx, done: make(chan error, 1)}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			s.mu.Lock()
			s.out.Write(buf[:n])
			s.mu.Unlock()
			if err != nil { // EIO once the sweep has exited and closed its side
				return
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		<-copied
		s.done <- err
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = ptmx.Close()
	})
	return s
}

func (s *ptySweep) output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

// waitOutput waits until the terminal shows all of want, in order.
func (s *ptySweep) waitOutput(t *testing.T, want ...string) {
	t.Helper()
	waitFor(t, strings.Join(want, " then "), func() bool {
		out := s.output()
		for _, w := range want {
			i := strings.Index(out, w)
			if i < 0 {
				return false
			}
			out = out[i+len(w):]
		}
		return true
	})
}

// wait returns the sweep's exit code and how long it took to exit, failing the
// test if it does not exit within limit.
func (s *ptySweep) wait(t *testing.T, limit time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	select {
	case err := <-s.done:
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		return code, time.Since(start)
	case <-time.After(limit):
		t.Fatalf("the sweep did not exit within %s of Ctrl-C; the terminal shows:\n%s", limit, s.output())
		return 0, 0
	}
}

// ctrlCSpec is a sweep whose first run ends in a few steps of the tiny model and
// whose later runs each take 65,536 micro-batches a step: minutes, even on a fast
// machine. The Ctrl-C tests press Ctrl-C once the first run is done and the second
// is drawing its steps, so what they see does not depend on how fast this machine
// trains (they waited for 1500 steps of cpu-strategies.yaml's first run, which took
// 59.8 s of a 60 s wait under the race detector: issue 36).
const ctrlCSpec = `name: ctrlc
backend: gotrain
hardware: cpu
model: tiny
seq_len: 64
steps: 3
base: {batch_per_device: 1, mixed_precision: fp32, sharding: ddp}
include:
  - {world_size: 1}
  - {world_size: 1, grad_accum: 65536}
  - {world_size: 2, grad_accum: 65536}
`

func writeCtrlCSpec(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ctrlc.yaml")
	require.NoError(t, os.WriteFile(p, []byte(ctrlCSpec), 0o644))
	return p
}

// The first Ctrl-C in a terminal with the default progress bars stops the sweep:
// it exits 130 promptly with the partial table and the resume hint, as
// --progress plain does (it hung forever: mpb's overall bar never completed).
func TestCtrlCInATerminalStopsTheSweep(t *testing.T) {
	t.Parallel()
	s := startPTYSweep(t, writeCtrlCSpec(t), "--results", t.TempDir())
	// One run finished and the next one drawing its steps: bars are up.
	s.waitOutput(t, "[1/3]", "/3 steps")
	require.Contains(t, s.output(), "/3 runs", "the default on a terminal is bars")
	_, err := s.tty.Write([]byte{0x03}) // Ctrl-C, as typed
	require.NoError(t, err)
	// The bound is generous for a loaded CI machine; the figure is logged.
	code, took := s.wait(t, 30*time.Second)
	t.Logf("exited %d in %s after Ctrl-C", code, took)
	out := s.output()
	assert.Equal(t, ExitInterrupted, code, out)
	after := out[strings.LastIndex(out, "[1/3]"):]
	assert.Contains(t, after, "interrupting: stopping cleanly; press Ctrl-C again to force")
	assert.Contains(t, after, "canceled")
	assert.Contains(t, after, "tokens/s/rank", "the partial table")
	assert.Contains(t, after, "not started")
	assert.Contains(t, after, "run the same command again to finish the sweep")
	assert.Contains(t, after, "stopped", "the overall bar says it stopped short")
	counts := regexp.MustCompile(`(\d+)/(\d+) runs`).FindAllStringSubmatch(after, -1)
	require.NotEmpty(t, counts)
	last := counts[len(counts)-1]
	assert.NotEqual(t, last[1], last[2], "the overall bar must not claim the sweep complete: %s", last[0])
}

// A second Ctrl-C forces the exit at once, whatever the sweep is doing.
func TestSecondCtrlCInATerminalExitsAtOnce(t *testing.T) {
	t.Parallel()
	s := startPTYSweep(t, writeCtrlCSpec(t), "--results", t.TempDir())
	s.waitOutput(t, "[1/3]", "/3 steps")
	_, err := s.tty.Write([]byte{0x03})
	require.NoError(t, err)
	s.waitOutput(t, "interrupting:")
	_, err = s.tty.Write([]byte{0x03})
	require.NoError(t, err)
	code, took := s.wait(t, 30*time.Second)
	t.Logf("exited %d in %s after the second Ctrl-C", code, took)
	assert.Equal(t, ExitInterrupted, code, s.output())
}

// Tables fit the terminal they are printed on, with no --width: a pseudo-terminal
// 80 columns wide gets no line wider than 80 from plan, recommend or backends.
func TestTablesFitTheTerminal(t *testing.T) {
	t.Parallel()
	quickstart, err := filepath.Abs(filepath.Join("..", "..", "sweeps", "examples", "quickstart.yaml"))
	require.NoError(t, err)
	for _, args := range [][]string{
		{"plan", quickstart},
		{"recommend", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus-per-node", "8", "--global-batch", "16", "--seq-len", "4096", "--top", "3"},
		{"backends"},
	} {
		s := startPTY(t, 80, args...)
		code, _ := s.wait(t, 60*time.Second)
		out := s.output()
		require.Equal(t, 0, code, out)
		for _, l := range strings.Split(strings.ReplaceAll(out, "\r", ""), "\n") {
			assert.LessOrEqual(t, utf8.RuneCountInString(l), 80, "%v: %q", args, l)
		}
	}
}
