package contract

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// KillTree SIGKILLs every descendant of pid, the process group pid leads, and pid.
// The descendants are found through /proc before anything is killed: one that
// started a process group or session of its own is out of reach of the group kill,
// and once its parent dies it can no longer be traced to pid. Where /proc is
// missing only the group and pid are killed.
func KillTree(pid int) {
	if pid <= 0 {
		return
	}
	SignalAll(Descendants(pid), syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// SignalAll sends sig to every pid.
func SignalAll(pids []int, sig syscall.Signal) {
	for _, p := range pids {
		_ = syscall.Kill(p, sig)
	}
}

// Descendants lists the live processes below pid (children, their children, ...),
// parents before their children. Zombies are left out: they are dead already.
func Descendants(pid int) []int {
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
		if pp, ok := ParentOf(p); ok && pp > 0 {
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

// ParentOf reads the parent pid from /proc/<pid>/stat, whose second field (the
// command name, in parentheses) may itself hold spaces and parentheses. A zombie
// has no parent here: it is dead, whether or not anyone reaps it.
func ParentOf(pid int) (int, bool) {
	st, ok := procStat(pid)
	if !ok || st.state == 'Z' {
		return 0, false
	}
	return st.ppid, true
}

// Stopped reports whether pid is stopped by a signal (SIGSTOP, SIGTSTP, ...) or
// by a tracer: a process that cannot make progress until someone continues it.
func Stopped(pid int) bool {
	st, ok := procStat(pid)
	return ok && (st.state == 'T' || st.state == 't')
}

type stat struct {
	state byte
	ppid  int
}

func procStat(pid int) (stat, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return stat{}, false
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 2 || len(fields[0]) != 1 {
		return stat{}, false
	}
	pp, err := strconv.Atoi(fields[1])
	if err != nil {
		return stat{}, false
	}
	return stat{state: fields[0][0], ppid: pp}, true
}
