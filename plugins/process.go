package plugins

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// killTree SIGKILLs the process group pid leads and every descendant of pid, found
// through /proc before anything is killed (a descendant that started a process group
// of its own is out of reach of the group kill, and once its parent dies it can no
// longer be traced to pid). Where /proc is missing only the group is killed.
func killTree(pid int) {
	if pid <= 0 {
		return
	}
	desc := descendants(pid)
	for _, d := range desc {
		_ = syscall.Kill(d, syscall.SIGKILL)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// descendants lists the processes below pid (children, their children, ...).
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := parentOf(p); ok && pp > 0 {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// parentOf reads the parent pid from /proc/<pid>/stat, whose second field (the
// command name, in parentheses) may itself hold spaces and parentheses. A zombie
// has no parent here: it is dead, whether or not anyone reaps it.
func parentOf(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 || fields[0] == "Z" {
		return 0, false
	}
	pp, err := strconv.Atoi(fields[1])
	return pp, err == nil
}

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
