package sampler

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/results"
)

// procRoot is where the kernel's process and CPU figures are read (a test points it
// at a fake tree).
var procRoot = "/proc"

// cpufreqGlob finds the CPUs' current frequency files (kHz).
var cpufreqGlob = "/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"

// MachineWatch reads what the host does while one repeat runs (issue 29): the CPU
// time of every process outside fsdpbench's own process tree, the load average and
// the CPU clock. WatchMachine reads the counters when the repeat starts, Stop when
// it ends; nothing runs in between, so a repeat costs two scans of /proc (a few
// milliseconds on a host with a thousand processes).
type MachineWatch struct {
	ok         bool
	total0     uint64 // jiffies of every CPU, /proc/stat
	busy0      uint64 // of them, not idle or waiting for I/O
	own0       uint64 // fsdpbench's process tree's CPU time, jiffies
	self       int
	cpus       int
	statReader func() (total, busy uint64, cpus int, ok bool)
}

// WatchMachine starts watching the host for one repeat. Where /proc is not there
// (not Linux) the watch reads what it can, and Stop leaves the rest unknown.
func WatchMachine() *MachineWatch {
	w := &MachineWatch{self: os.Getpid()}
	w.statReader = readProcStat
	var okTree bool
	w.total0, w.busy0, w.cpus, w.ok = w.statReader()
	w.own0, okTree = treeCPU(w.self)
	w.ok = w.ok && okTree
	return w
}

// Stop reads the counters again and returns the repeat's machine state: nil when
// nothing could be read.
func (w *MachineWatch) Stop() *results.Machine {
	if w == nil {
		return nil
	}
	m := &results.Machine{Repeats: 1}
	known := false
	if total1, busy1, cpus, ok := w.statReader(); ok && w.ok {
		own1, okTree := treeCPU(w.self)
		m.CPUs = cpus
		if okTree && total1 > w.total0 && busy1 >= w.busy0 && own1 >= w.own0 {
			// The counters tick at different moments: clamp the small mismatch.
			other := float64(busy1-w.busy0) - float64(own1-w.own0)
			m.OtherCPUShare = results.F64(math.Min(1, math.Max(0, other/float64(total1-w.total0))))
		}
		known = true
	}
	if l, ok := readLoad1(); ok {
		m.Load1 = results.F64(l)
		known = true
	}
	if mhz, ok := readCPUMHz(); ok {
		m.CPUMHz = results.F64(mhz)
		known = true
	}
	if !known {
		return nil
	}
	return m
}

// readProcStat reads /proc/stat's first line: every CPU's jiffies, and those spent
// neither idle nor waiting for I/O; cpus counts the per-CPU lines (the CPUs online).
func readProcStat() (total, busy uint64, cpus int, ok bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return 0, 0, 0, false
	}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			cpus++
			continue
		}
		if i != 0 || len(f) < 5 {
			return 0, 0, 0, false
		}
		// user nice system idle iowait irq softirq steal (guest and guest_nice are
		// already in user and nice).
		for j := 1; j < len(f) && j <= 8; j++ {
			v, err := strconv.ParseUint(f[j], 10, 64)
			if err != nil {
				return 0, 0, 0, false
			}
			total += v
			if j != 4 && j != 5 {
				busy += v
			}
		}
	}
	return total, busy, cpus, total > 0
}

// procStat is what the harness reads of /proc/PID/stat.
type procStat struct {
	ppid int
	cpu  uint64 // utime + stime + cutime + cstime, jiffies
}

// readProcStatOf reads /proc/PID/stat. The command name, in parentheses, may hold
// spaces and parentheses itself: the fields start after its last ")".
func readProcStatOf(pid string) (procStat, bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, pid, "stat"))
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(data[i+1:]))
	// f[0] is the state (field 3); ppid is field 4, utime..cstime fields 14 to 17.
	if len(f) < 15 {
		return procStat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return procStat{}, false
	}
	var cpu uint64
	for _, s := range f[11:15] {
		v, err := strconv.ParseInt(s, 10, 64) // cutime and cstime are signed in the kernel
		if err != nil {
			return procStat{}, false
		}
		if v > 0 {
			cpu += uint64(v)
		}
	}
	return procStat{ppid: ppid, cpu: cpu}, true
}

// processes reads every process's parent and CPU time.
func processes() (map[int]procStat, bool) {
	ents, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, false
	}
	out := make(map[int]procStat, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if st, ok := readProcStatOf(e.Name()); ok { // a process that ended meanwhile is gone
			out[pid] = st
		}
	}
	return out, true
}

// treeCPU is the CPU time of root and every live descendant (their own and their
// waited-for children's): fsdpbench's process tree. A descendant that ended and was
// waited for moved its time into its parent's, so the sum only grows.
func treeCPU(root int) (uint64, bool) {
	ps, ok := processes()
	if !ok {
		return 0, false
	}
	if _, ok := ps[root]; !ok {
		return 0, false
	}
	var sum uint64
	for pid, st := range ps {
		if descends(ps, pid, root) {
			sum += st.cpu
		}
	}
	return sum, true
}

// descends reports whether pid is root or below it in ps.
func descends(ps map[int]procStat, pid, root int) bool {
	for range 4096 { // no process tree is deeper; a loop in a damaged /proc ends too
		if pid == root {
			return true
		}
		st, ok := ps[pid]
		if !ok || pid <= 1 {
			return false
		}
		pid = st.ppid
	}
	return false
}

// ownPIDs tells, for process IDs the GPU driver reports, whether each is
// fsdpbench's (root or a descendant); ok is false when one of them is not in this
// /proc (another PID namespace: a container sees the host's IDs), since then no
// process can be told apart. It follows each process's parents up (a few reads of
// /proc/PID/stat each), not the whole process table: the NVML sampler calls it for
// every reading of every device.
func ownPIDs(pids []uint32, root int) (own []bool, ok bool) {
	own = make([]bool, len(pids))
	for i, p := range pids {
		pid := int(p)
		if _, in := readProcStatOf(strconv.Itoa(pid)); !in {
			return nil, false
		}
		for range 4096 { // no process tree is deeper; a loop in a damaged /proc ends too
			if pid == root {
				own[i] = true
				break
			}
			st, in := readProcStatOf(strconv.Itoa(pid))
			if !in || pid <= 1 {
				break
			}
			pid = st.ppid
		}
	}
	return own, true
}

// readLoad1 reads the 1-minute load average.
func readLoad1() (float64, bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, "loadavg"))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || math.IsNaN(v) || v < 0 || v > 1e7 {
		return 0, false
	}
	return v, true
}

// readCPUMHz is the mean current frequency of the CPUs that expose one (cpufreq
// gives kHz); false where none does, as in many VMs.
func readCPUMHz() (float64, bool) {
	files, _ := filepath.Glob(cpufreqGlob)
	var sum float64
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		khz, err := strconv.ParseFloat(strings.TrimSpace(string(data)), 64)
		if err != nil || !(khz > 0 && khz < 1e9) {
			continue
		}
		sum += khz / 1000
		n++
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}
