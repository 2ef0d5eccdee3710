package contract

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostEnv makes the test binary a host that runs the daemonizing fixture under
// RunGroup until it is killed (TestRunGroupProcessesDieWithTheirHost).
const hostEnv = "CONTRACT_TEST_HOST_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(hostEnv); dir != "" {
		_, err := RunGroup(context.Background(), exec.Command("testdata/daemonize.py", dir, "hang"), 2*time.Second, Lines{})
		fmt.Fprintln(os.Stderr, "host: RunGroup returned:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// readPID waits for dir/name, written by the fixture.
func readPID(t *testing.T, dir, name string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "the fixture never wrote %s", name)
	return pid
}

// gone reports whether pid has exited (a zombie counts: it is dead).
func gone(pid int) bool {
	st, ok := procStat(pid)
	return !ok || st.state == 'Z'
}

type lockedLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *lockedLines) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *lockedLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// TestRunGroupEndsWhatTheCommandLeft runs a command that leaves a daemon holding
// its stdout and stderr (double fork and setsid, out of the process group): the
// command's exit ends the run within the grace, with its exit code, and the daemon
// is gone; a cancelled run ends the command and the daemon too.
func TestRunGroupEndsWhatTheCommandLeft(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		then   string
		cancel bool
		code   int
	}{
		{name: "command exits 0", then: "0"},
		{name: "command exits 3", then: "3", code: 3},
		{name: "run cancelled", then: "hang", cancel: true, code: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() {
					readPID(t, dir, "main.pid")
					cancel()
				}()
			}
			var out lockedLines
			grace := time.Second
			begin := time.Now()
			started, err := RunGroup(ctx, exec.Command("testdata/daemonize.py", dir, tc.then), grace, Lines{Stdout: out.add})
			took := time.Since(begin)
			require.True(t, started, "%v", err)
			var ee *exec.ExitError
			switch {
			case tc.code == 0:
				require.NoError(t, err)
			case tc.code > 0:
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, tc.code, ee.ExitCode(), "the command's own exit code comes through the reaper")
			default:
				require.ErrorAs(t, err, &ee)
				ws := ee.Sys().(syscall.WaitStatus)
				assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGTERM, "the command died of the SIGTERM it was sent: %v", err)
			}
			assert.Less(t, took, 10*time.Second, "an orphan holding the pipes must not hold the run")
			// Two processes write the pipe, so only the text is certain, not its lines.
			all := strings.Join(out.all(), "\n")
			assert.Contains(t, all, "main: daemon started")
			assert.Contains(t, all, "daemon: running", "what the daemon printed reaches the run's log")
			daemon := readPID(t, dir, "daemon.pid")
			assert.True(t, gone(daemon), "the daemon (pid %d) outlived its run", daemon)
			assert.True(t, gone(readPID(t, dir, "main.pid")))
		})
	}
}

// TestRunGroupProcessesDieWithTheirHost kills the process that called RunGroup
// with SIGKILL: the command and the daemon it left must die with it.
func TestRunGroupProcessesDieWithTheirHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostEnv+"="+dir)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill() })
	daemon, main := readPID(t, dir, "daemon.pid"), readPID(t, dir, "main.pid")
	require.False(t, gone(daemon))
	require.NoError(t, host.Process.Signal(syscall.SIGKILL))
	_ = host.Wait()
	assert.Eventually(t, func() bool { return gone(daemon) && gone(main) }, 10*time.Second, 20*time.Millisecond,
		"the command (pid %d) and its daemon (pid %d) outlived the process that ran them", main, daemon)
	if !gone(daemon) {
		_ = syscall.Kill(daemon, syscall.SIGKILL)
	}
	if !gone(main) {
		_ = syscall.Kill(main, syscall.SIGKILL)
	}
}

func TestRunGroupReportsAMissingProgram(t *testing.T) {
	t.Parallel()
	started, err := RunGroup(context.Background(), exec.Command("no-such-program-fsdpbench"), time.Second, Lines{})
	assert.False(t, started)
	assert.True(t, errors.Is(err, exec.ErrNotFound), "%v", err)
}

func TestTieKeepsItsThreadUntilReleased(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// The caller locks its thread and leaves it, which makes the runtime end that
	// thread: had the child been forked from it, it would get its parent-death
	// signal now, with its parent alive.
	var release func()
	var err error
	for release == nil && err == nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			if syscall.Gettid() == os.Getpid() {
				// The runtime never ends the main thread; try another.
				runtime.UnlockOSThread()
				return
			}
			release, err = Tie(cmd.Start)
		}()
		<-done
	}
	require.NoError(t, err)
	defer release()
	defer cmd.Process.Kill()
	time.Sleep(200 * time.Millisecond)
	assert.False(t, gone(cmd.Process.Pid), "the child got its parent-death signal while its parent lives")
	_, err = Tie(func() error { return errors.New("no") })
	assert.EqualError(t, err, "no")
}

// BenchmarkRunGroup is what RunGroup costs a command that does nothing (`true`):
// the reaper's start and exit on top of the command's.
func BenchmarkRunGroup(b *testing.B) {
	for b.Loop() {
		if _, err := RunGroup(context.Background(), exec.Command("true"), time.Second, Lines{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlainRun is the same command without RunGroup, for comparison.
func BenchmarkPlainRun(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}
