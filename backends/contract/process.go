package contract

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Lines receives a launched script's output, line by line, from one goroutine
// per stream.
type Lines struct {
	// Stdout and Stderr get every line (nil: ignored).
	Stdout, Stderr func(line string)
	// StdoutSink and StderrSink get a copy of the output (the run's log files).
	StdoutSink, StderrSink io.Writer
	// Started is called once the process runs.
	Started func()
}

// RunGroup runs cmd in a process group of its own, hands its output to lines, and
// returns how it exited. When ctx ends, the group gets SIGTERM, then SIGKILL after
// grace; whatever the group left behind when cmd exits is killed too (a rank that
// outlived its launcher). The error is cmd's start error or its exit (as
// cmd.Wait's); the caller tells a cancellation from ctx.Err().
func RunGroup(ctx context.Context, cmd *exec.Cmd, grace time.Duration, lines Lines) (started bool, err error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return false, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return false, err
	}
	if err := cmd.Start(); err != nil {
		return false, err
	}
	if lines.Started != nil {
		lines.Started()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		scan(stdout, lines.StdoutSink, lines.Stdout)
	}()
	go func() {
		defer wg.Done()
		scan(stderr, lines.StderrSink, lines.Stderr)
	}()
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(grace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case <-done:
		}
	}()
	wg.Wait()
	err = cmd.Wait()
	close(done)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return true, err
}

// scan copies r to sink (when set) line by line and hands each line to f.
func scan(r io.Reader, sink io.Writer, f func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if sink != nil {
			_, _ = io.WriteString(sink, line+"\n")
		}
		if f != nil {
			f(line)
		}
	}
	_, _ = io.Copy(io.Discard, r)
}
