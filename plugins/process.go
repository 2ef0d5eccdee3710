package plugins

import (
	"bytes"
	"io"
	"strings"
	"sync"
)

// tail keeps the end of a plugin's raw stderr, which is what explains a crash or
// a refused handshake, and the start of a Go panic (its first line says what went
// wrong; the stacks after it can be long). hclog's JSON lines are left out: they
// reach the logs anyway.
type tail struct {
	mu      sync.Mutex
	max     int
	partial []byte
	buf     []byte
	panic   []string
}

// panicLines is how much of a panic is kept: the message and the top frames.
const panicLines = 6

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		line := string(t.partial[:i])
		t.partial = t.partial[i+1:]
		switch {
		case strings.HasPrefix(line, `{"@`):
		case strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: "):
			if t.panic == nil {
				t.panic = []string{line}
			}
		case len(t.panic) > 0 && len(t.panic) < panicLines:
			if strings.TrimSpace(line) != "" {
				t.panic = append(t.panic, strings.TrimSpace(line))
			}
		default:
			t.buf = append(append(t.buf, line...), '\n')
		}
	}
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns the panic if there was one, else the kept text, trimmed, with
// newlines shown as " | " so it fits in one message.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.panic) > 0 {
		return strings.Join(t.panic, " | ")
	}
	s := strings.TrimSpace(string(t.buf) + string(t.partial))
	return strings.ReplaceAll(s, "\n", " | ")
}

// gate passes writes to w until closed, then drops them: go-plugin delivers a
// plugin's stdio asynchronously, and nothing may reach a run's log files after its
// Run has returned (the harness closes them).
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || g.w == nil {
		return len(p), nil
	}
	return g.w.Write(p)
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
