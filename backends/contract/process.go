package contract

import (
	"context"
	"io"
	"os"
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

// reaperMargin is how long RunGroup waits past the grace for the reaper to end
// the run's processes before it kills what it can reach itself.
const reaperMargin = 2 * time.Second

// RunGroup runs cmd under a reaper of its own (see reaper.go), in a process group
// of its own, hands its output to lines, and returns how it exited. Every process
// cmd started is gone when RunGroup returns, daemonized ones included: when cmd
// exits, what it left behind gets SIGTERM, then SIGKILL after grace, so an orphan
// holding the output pipes cannot keep the run waiting. When ctx ends, cmd and
// everything below it get SIGTERM, then SIGKILL after grace. Should this process
// die, the reaper gets SIGTERM and does the same. The error is the start error or
// cmd's exit (as cmd.Wait's, with cmd's own exit code or signal); the caller tells
// a cancellation from ctx.Err().
func RunGroup(ctx context.Context, cmd *exec.Cmd, grace time.Duration, lines Lines) (started bool, err error) {
	if cmd.Err != nil {
		return false, cmd.Err // exec.Command did not find the program
	}
	reaperCmd(cmd, grace)
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGTERM
	// Pipes of our own rather than cmd.StdoutPipe: cmd.Wait then returns when the
	// process exits, whoever still holds the pipes, and the readers can be cut off.
	outR, outW, err := os.Pipe()
	if err != nil {
		return false, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return false, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	release, err := Tie(cmd.Start)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return false, err
	}
	defer release()
	if lines.Started != nil {
		lines.Started()
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() {
		defer readers.Done()
		scan(outR, lines.StdoutSink, lines.Stdout)
	}()
	go func() {
		defer readers.Done()
		scan(errR, lines.StderrSink, lines.Stderr)
	}()
	pid := cmd.Process.Pid
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = syscall.Kill(pid, syscall.SIGTERM) // the reaper passes it on
			select {
			case <-exited:
			case <-time.After(grace + reaperMargin):
				KillTree(pid)
			}
		case <-exited:
		}
	}()
	err = cmd.Wait()
	close(exited)
	// The reaper exits after everything below it, so the pipes are closed by now;
	// should it have been killed, cut off what still holds them.
	readDone := make(chan struct{})
	go func() {
		readers.Wait()
		close(readDone)
	}()
	select {
	case <-readDone:
	case <-time.After(reaperMargin):
		KillTree(pid)
		outR.Close()
		errR.Close()
		<-readDone
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	outR.Close()
	errR.Close()
	return true, err
}

// scan copies r to sink (when set) line by line and hands each line to f, each
// bounded by MaxLineBytes (ScanLines): a longer line no longer ends the reading,
// leaving every later step line unread.
func scan(r io.Reader, sink io.Writer, f func(string)) {
	_ = ScanLines(r, func(line string) {
		if sink != nil {
			_, _ = io.WriteString(sink, line+"\n")
		}
		if f != nil {
			f(line)
		}
	})
	_, _ = io.Copy(io.Discard, r)
}
