package contract

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A run's reaper is this same executable, started by RunGroup in place of the
// run's command: it makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), starts
// the command, and ends every process the command left behind. A subreaper
// inherits the orphans of its descendants, so a logger or tracker that daemonized
// (double fork and setsid, out of the run's process group) stays below the reaper,
// where it can be found and killed, instead of escaping to init.
//
// The alternatives were weaker here: the harness itself as the subreaper would
// inherit the orphans of every concurrent run with nothing to tell whose they are
// (and would have to reap zombies without stealing os/exec's); a cgroup per run is
// exact but needs a delegated cgroup v2 subtree, which a plain user, a container or
// a Slurm step rarely has. The reaper needs nothing but Linux >= 3.4.
const (
	reaperEnv  = "FSDPBENCH_RUN_REAPER" // its value is the kill grace, a Go duration
	reaperArg0 = "fsdpbench-run-reaper"
)

// init turns the process into a run's reaper when RunGroup started it as one
// (argv[0] and the environment both say so): every binary that links this package
// (fsdpbench, plugins, test binaries) can serve as its own reaper, so nothing has
// to be installed beside it.
func init() {
	grace, ok := os.LookupEnv(reaperEnv)
	if !ok || len(os.Args) < 3 || os.Args[0] != reaperArg0 {
		return
	}
	os.Exit(reap(grace, os.Args[1], os.Args[2:]))
}

// ReaperCmd rewrites cmd so that a run reaper of this executable starts cmd's
// program (see the top of this file), with grace between its SIGTERM and SIGKILL
// to what the program leaves. For callers that start the process themselves
// (plugins: go-plugin starts it) rather than through RunGroup: cmd.Process is then
// the reaper, which exits as the program did once nothing is left below it.
func ReaperCmd(cmd *exec.Cmd, grace time.Duration) { reaperCmd(cmd, grace) }

// reaperCmd rewrites cmd so that a reaper starts its program.
func reaperCmd(cmd *exec.Cmd, grace time.Duration) {
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}
	cmd.Env = append(withoutReaperEnv(env), reaperEnv+"="+grace.String())
	cmd.Args = append([]string{reaperArg0, cmd.Path}, cmd.Args...)
	// The kernel resolves /proc/self/exe in the forked child, which is still this
	// program; it works even when the binary was replaced or deleted since.
	cmd.Path = "/proc/self/exe"
}

func withoutReaperEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, reaperEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// reap runs path with argv under this process as a subreaper and returns the exit
// code to leave with (or dies of the command's signal). When the command exits,
// whatever it left gets SIGTERM, and SIGKILL after grace; SIGTERM, SIGINT or SIGHUP
// to the reaper (its parent-death signal is SIGTERM) does the same to the command
// and everything below it. The reaper exits once nothing is left below it, so its
// exit also means the run's pipes are closed.
func reap(graceText, path string, argv []string) int {
	runtime.LockOSThread() // the command's parent-death signal follows this thread
	grace, err := time.ParseDuration(graceText)
	if err != nil || grace <= 0 {
		grace = 3 * time.Second
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fsdpbench run reaper: "+format+"\n", a...)
		return 127
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("cannot become a child subreaper: %v", err)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	child, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   withoutReaperEnv(os.Environ()),
		Files: []uintptr{0, 1, 2},
		// SIGTERM lets a launcher such as torchrun stop its own children should the
		// reaper itself be killed outright.
		Sys: &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM},
	})
	if err != nil {
		return fail("starting %s: %v", path, err)
	}
	self := os.Getpid()
	var (
		status   syscall.WaitStatus
		mainDone bool
		stopping bool
		killAt   <-chan time.Time
	)
	// endAll asks everything below the reaper to stop, and arms the SIGKILL.
	endAll := func() {
		SignalAll(Descendants(self), syscall.SIGTERM)
		if killAt == nil {
			killAt = time.After(grace)
		}
	}
	tick := time.NewTicker(100 * time.Millisecond) // a lost SIGCHLD costs at most this
	defer tick.Stop()
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if err == syscall.ECHILD && mainDone {
				return exitLike(status)
			}
			if err != nil || pid <= 0 {
				break
			}
			if pid == child {
				mainDone, status = true, ws
				if len(Descendants(self)) > 0 {
					endAll()
				}
			}
		}
		select {
		case <-chld:
		case <-tick.C:
		case <-sigs:
			if !stopping {
				stopping = true
				endAll()
			}
		case <-killAt:
			SignalAll(Descendants(self), syscall.SIGKILL)
			// Anything forked meanwhile gets the same, on the next tick.
			killAt = tick.C
		}
	}
}

// exitLike returns the code to exit with for the command's wait status; a command
// killed by a signal makes the reaper die of the same signal, so that the caller
// sees what it would have seen without the reaper.
func exitLike(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		sig := ws.Signal()
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // a signal that does not kill (it is ignored) falls through
		return 128 + int(sig)
	}
	return ws.ExitStatus()
}
