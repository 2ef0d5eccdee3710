package results

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Machine is what the machine was doing while a run measured (issue 29): how loaded
// the host was, how much of its CPU other processes took, the CPU clock, and on GPUs
// the other processes on the run's devices, the SM clock and why the driver held the
// clocks down. The harness reads it around every repeat (harness/sampler), whatever
// the backend. A figure that could not be read (not Linux, no cpufreq, no NVML) is
// nil: unknown, never 0.
//
// In Result.Env it is one repeat's; in Metrics.Env a summary over the repeats (the
// median of each figure, the most other GPU processes, every throttle reason seen),
// so one disturbed repeat among many moves it no more than it moves a median figure.
type Machine struct {
	// Repeats is how many repeats the summary covers (1 in a Result).
	Repeats int `json:"repeats,omitempty"`
	// CPUs is how many CPUs the host had online: the scale of Load1 and of
	// OtherCPUShare.
	CPUs int `json:"cpus,omitempty"`
	// Load1 is the host's 1-minute load average (/proc/loadavg) when the repeat
	// ended; it counts the run's own processes too.
	Load1 *float64 `json:"load1,omitempty"`
	// OtherCPUShare is the share of the host's CPU time (every CPU over the repeat's
	// wall time, /proc/stat) that processes outside fsdpbench's own process tree
	// used while the repeat ran, 0 to 1: 0.5 on a 2-CPU host is one CPU kept busy
	// by something else. fsdpbench's tree holds every run of the sweep, so runs the
	// sweep executes at once do not count as other.
	OtherCPUShare *float64 `json:"other_cpu_share,omitempty"`
	// OtherCPUShareMax is the largest repeat's OtherCPUShare (in a summary).
	OtherCPUShareMax *float64 `json:"other_cpu_share_max,omitempty"`
	// CPUMHz is the mean current frequency of the online CPUs
	// (/sys/devices/system/cpu/*/cpufreq/scaling_cur_freq), read when the repeat
	// ended; nil where the kernel exposes no cpufreq (many VMs).
	CPUMHz *float64 `json:"cpu_mhz,omitempty"`
	// GPUOtherProcesses is the most processes seen at once on the run's devices
	// that are not fsdpbench's (NVML); nil when NVML could not tell (no GPU, or
	// process IDs from another PID namespace).
	GPUOtherProcesses *int `json:"gpu_other_processes,omitempty"`
	// GPUSMClockMHz is the median SM clock over the repeat's GPU readings.
	GPUSMClockMHz *float64 `json:"gpu_sm_clock_mhz,omitempty"`
	// GPUThrottledShare is the share of the GPU readings, 0 to 1, in which the
	// driver held the clocks down for a reason that slows a run (power cap,
	// thermal, hardware slowdown, power brake); idle and application-clock settings
	// do not count.
	GPUThrottledShare *float64 `json:"gpu_throttled_share,omitempty"`
	// GPUThrottle names every such reason seen (GPUThrottleReasons' names).
	GPUThrottle []string `json:"gpu_throttle,omitempty"`
	// PerRepeat holds, in a summary of more than one repeat, each repeat's own
	// state, repeat i at index i (an empty one where a repeat had none): what
	// `fsdpbench ab` compares pair by pair, A's repeat i against B's, since a
	// disturbance that hit one side of a pair is invisible in the medians.
	PerRepeat []Machine `json:"per_repeat,omitempty"`
}

// GPUThrottleReasons are the names Machine.GPUThrottle uses: NVML's clock event
// reasons that slow a run.
var GPUThrottleReasons = []string{"sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake"}

// Bounds of a Machine read from a file (checkMachine): far above any real host.
const (
	maxMachineCPUs    = 1 << 20
	maxLoad           = 1e7
	maxClockMHz       = 1e6
	maxGPUProcesses   = 1 << 22
	maxThrottleListed = 16
)

// checkMachine checks a Machine read from metrics.json or ab.json: every figure
// finite and within its bounds, the throttle reasons known names, and the
// figures consistent with each other as SummarizeMachine writes them (issue 39:
// a hand edit is not trusted past what the harness could have written).
// repeats is how many repeats the state can cover (the run's repeats; 1 for
// one repeat's state), or 0 where that is not known: the repeats the summary
// covers and its per-repeat states are at most that many. It returns the field
// and why, or "", "".
func checkMachine(m *Machine, repeats int) (field, msg string) {
	if m == nil {
		return "", ""
	}
	bound := MaxRepeats
	if repeats > 0 {
		bound = min(repeats, MaxRepeats)
	}
	if m.Repeats < 0 || m.Repeats > bound {
		return "repeats", fmt.Sprintf("%d is not between 0 and %d%s", m.Repeats, bound, ofRepeats(repeats))
	}
	if m.CPUs < 0 || m.CPUs > maxMachineCPUs {
		return "cpus", fmt.Sprintf("%d is not between 0 and %d", m.CPUs, maxMachineCPUs)
	}
	for _, f := range []struct {
		name   string
		v      *float64
		lo, hi float64
	}{
		{"load1", m.Load1, 0, maxLoad}, {"other_cpu_share", m.OtherCPUShare, 0, 1}, {"other_cpu_share_max", m.OtherCPUShareMax, 0, 1},
		{"cpu_mhz", m.CPUMHz, 0, maxClockMHz}, {"gpu_sm_clock_mhz", m.GPUSMClockMHz, 0, maxClockMHz},
		{"gpu_throttled_share", m.GPUThrottledShare, 0, 1},
	} {
		if f.v == nil {
			continue
		}
		if err := inRange(*f.v, f.lo, f.hi); err != "" {
			return f.name, err
		}
	}
	if p := m.GPUOtherProcesses; p != nil && (*p < 0 || *p > maxGPUProcesses) {
		return "gpu_other_processes", fmt.Sprintf("%d is not between 0 and %d", *p, maxGPUProcesses)
	}
	if s, mx := m.OtherCPUShare, m.OtherCPUShareMax; s != nil && mx != nil && *mx < *s {
		// The summary's share is the median of the repeats' shares, its max
		// the largest of them: the median cannot exceed it.
		return "other_cpu_share_max", fmt.Sprintf("%g is below other_cpu_share %g: the largest repeat's share is at least their median", *mx, *s)
	}
	if len(m.PerRepeat) > MaxRepeats {
		return "per_repeat", fmt.Sprintf("holds %d repeats, more than %d", len(m.PerRepeat), MaxRepeats)
	}
	known := 0 // per-repeat states that hold anything
	for i := range m.PerRepeat {
		r := &m.PerRepeat[i]
		if len(r.PerRepeat) > 0 {
			return fmt.Sprintf("per_repeat[%d].per_repeat", i), "a repeat's state holds no repeats"
		}
		if f, msg := checkMachine(r, 1); f != "" {
			return fmt.Sprintf("per_repeat[%d].%s", i, f), msg
		}
		if s, mx := r.OtherCPUShare, m.OtherCPUShareMax; s != nil && mx != nil && *s > *mx {
			return fmt.Sprintf("per_repeat[%d].other_cpu_share", i), fmt.Sprintf("%g is above the summary's other_cpu_share_max %g, the largest repeat's share", *s, *mx)
		}
		if !r.empty() {
			known++
		}
	}
	if len(m.PerRepeat) > 0 {
		// SummarizeMachine keeps one state per repeat of the run (an empty one
		// where a repeat read none) and counts in Repeats those that read one.
		if repeats > 0 && len(m.PerRepeat) > repeats {
			return "per_repeat", fmt.Sprintf("holds %d states%s: one per repeat", len(m.PerRepeat), ofRepeats(repeats))
		}
		if m.Repeats > len(m.PerRepeat) || known > m.Repeats {
			return "repeats", fmt.Sprintf("%d does not count the %d per-repeat states (%d of them read): it is how many repeats read the machine", m.Repeats, len(m.PerRepeat), known)
		}
	}
	if len(m.GPUThrottle) > maxThrottleListed {
		return "gpu_throttle", fmt.Sprintf("lists %d reasons; there are %d", len(m.GPUThrottle), len(GPUThrottleReasons))
	}
	for i, r := range m.GPUThrottle {
		if !slices.Contains(GPUThrottleReasons, r) {
			return fmt.Sprintf("gpu_throttle[%d]", i), fmt.Sprintf("%s is not a throttle reason (%s)", clip(r), strings.Join(GPUThrottleReasons, ", "))
		}
	}
	return "", ""
}

// ofRepeats names the repeats a state may cover in checkMachine's messages.
func ofRepeats(repeats int) string {
	switch {
	case repeats == 1:
		return " for one repeat's state"
	case repeats > 1:
		return fmt.Sprintf(" for a run of %d repeats", repeats)
	}
	return ""
}

// empty reports whether m holds nothing: a repeat that read no machine state.
func (m *Machine) empty() bool {
	return m.Repeats == 0 && m.CPUs == 0 && m.Load1 == nil && m.OtherCPUShare == nil && m.OtherCPUShareMax == nil &&
		m.CPUMHz == nil && m.GPUOtherProcesses == nil && m.GPUSMClockMHz == nil && m.GPUThrottledShare == nil &&
		len(m.GPUThrottle) == 0 && len(m.PerRepeat) == 0
}

// SummarizeMachine summarizes the machine states of a run's repeats (Machine); nil
// when no repeat has one.
func SummarizeMachine(repeats []Result) *Machine {
	var ms []*Machine
	for i := range repeats {
		if m := repeats[i].Env.Machine; m != nil {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return nil
	}
	out := &Machine{Repeats: len(ms)}
	if len(repeats) > 1 {
		out.PerRepeat = make([]Machine, len(repeats))
		for i := range repeats {
			if m := repeats[i].Env.Machine; m != nil {
				out.PerRepeat[i] = *m
				out.PerRepeat[i].PerRepeat = nil
			}
		}
	}
	med := func(get func(*Machine) *float64) *float64 {
		var xs []float64
		for _, m := range ms {
			if v := get(m); v != nil {
				xs = append(xs, *v)
			}
		}
		if len(xs) == 0 {
			return nil
		}
		return F64(median(xs))
	}
	out.Load1 = med(func(m *Machine) *float64 { return m.Load1 })
	out.OtherCPUShare = med(func(m *Machine) *float64 { return m.OtherCPUShare })
	out.CPUMHz = med(func(m *Machine) *float64 { return m.CPUMHz })
	out.GPUSMClockMHz = med(func(m *Machine) *float64 { return m.GPUSMClockMHz })
	out.GPUThrottledShare = med(func(m *Machine) *float64 { return m.GPUThrottledShare })
	for _, m := range ms {
		out.CPUs = max(out.CPUs, m.CPUs)
		for _, v := range []*float64{m.OtherCPUShare, m.OtherCPUShareMax} {
			if v != nil && (out.OtherCPUShareMax == nil || *v > *out.OtherCPUShareMax) {
				out.OtherCPUShareMax = F64(*v)
			}
		}
		if p := m.GPUOtherProcesses; p != nil && (out.GPUOtherProcesses == nil || *p > *out.GPUOtherProcesses) {
			n := *p
			out.GPUOtherProcesses = &n
		}
		for _, r := range m.GPUThrottle {
			if !slices.Contains(out.GPUThrottle, r) {
				out.GPUThrottle = append(out.GPUThrottle, r)
			}
		}
	}
	return out
}

// Thresholds of MachineDiff: how far apart two machine states must be to count as
// materially different. They are loose on purpose: the gate turns a difference
// into "inconclusive", and a gate that is always inconclusive is switched off as
// surely as one that cries wolf.
const (
	// MachineFreeCPUShareDiff: the share of the host's CPU left free by other
	// processes (1 - OtherCPUShare) is more than 10% smaller on one side than on
	// the other, relative to the freer side: 40% free against 36% free differ by
	// 10% of what the benchmark could use. Relative, on the free share, because
	// that is what a CPU-bound run's throughput follows: an absolute 10 points
	// between 2% and 12% taken costs the run 10%, but between 60% and 70% taken
	// it costs 25%, and a 5-point difference at 60% already costs ~12%; over 180
	// pairs of identical code whose throughput moved more than 5% on a loaded
	// host, the absolute test caught 73, this one 149. The same 10% as the clock
	// check (MachineClockDiff), since both scale the CPU the run gets.
	MachineFreeCPUShareDiff = 0.10
	// MachineLoadPerCPUDiff: the 1-minute load average per CPU differs by more than
	// 0.5 (half the CPUs' worth of runnable tasks). Only where other processes'
	// CPU share is unknown on a side: the share covers the run's own window
	// exactly, where the load average trails the last minute and counts the run
	// itself, so on a busy shared host it would call every pair of nights different.
	MachineLoadPerCPUDiff = 0.5
	// MachineClockDiff: the CPU or the GPU's SM clock differs by more than 10%.
	MachineClockDiff = 0.10
	// MachineThrottledShareDiff: the share of GPU readings with the clocks held
	// down differs by more than 25 points.
	MachineThrottledShareDiff = 0.25
)

// MachineDiff says how two machine states differ materially (the thresholds
// above), or "" when they do not, or when either is unknown: a figure known on one
// side only (results of an older fsdpbench) decides nothing. Other processes on the
// GPU on one side and none on the other differ materially.
func MachineDiff(base, cur *Machine) string {
	why, _ := machineLean(base, cur, nightSides)
	return why
}

// machineSides name the two sides in machineLean's words: where the first state
// was read, and where the second.
type machineSides struct{ base, cur string }

var (
	// nightSides: the nightly gate's baseline and current results.
	nightSides = machineSides{"in the baseline", "now"}
	// abSides: an A/B pair's A and B.
	abSides = machineSides{"in A", "in B"}
)

// machineLean is MachineDiff with the way the differences lean: +1 when the current
// side ran on a busier or slower machine in every way it differs (more of the CPU
// taken, lower clocks, more throttling, other processes on the GPU), -1 when on a
// quieter or faster one in every way, 0 when the ways disagree or nothing differs.
func machineLean(base, cur *Machine, in machineSides) (string, int) {
	if base == nil || cur == nil {
		return "", 0
	}
	var why []string
	busier, quieter := 0, 0
	lean := func(curWorse bool) {
		if curWorse {
			busier++
		} else {
			quieter++
		}
	}
	if b, c := base.OtherCPUShare, cur.OtherCPUShare; b != nil && c != nil {
		if less, ok := freeCPULess(*b, *c); ok && less > MachineFreeCPUShareDiff {
			busierSide := in.cur
			if *b > *c {
				busierSide = in.base
			}
			why = append(why, fmt.Sprintf("other processes used %.0f%% of the CPU %s, %.0f%% %s, leaving %.0f%% less of it free %s",
				*b*100, in.base, *c*100, in.cur, less*100, busierSide))
			lean(*c > *b)
		}
	}
	if b, c := base.Load1, cur.Load1; b != nil && c != nil && base.CPUs > 0 && cur.CPUs > 0 &&
		(base.OtherCPUShare == nil || cur.OtherCPUShare == nil) &&
		math.Abs(*b/float64(base.CPUs)-*c/float64(cur.CPUs)) > MachineLoadPerCPUDiff {
		why = append(why, fmt.Sprintf("load average %.2f on %d CPUs %s, %.2f on %d %s", *b, base.CPUs, in.base, *c, cur.CPUs, in.cur))
		lean(*c/float64(cur.CPUs) > *b/float64(base.CPUs))
	}
	clock := func(what string, b, c *float64) {
		if b != nil && c != nil && *b > 0 && *c > 0 && math.Abs(*c / *b - 1) > MachineClockDiff {
			why = append(why, fmt.Sprintf("%s %.0f MHz %s, %.0f MHz %s", what, *b, in.base, *c, in.cur))
			lean(*c < *b)
		}
	}
	clock("CPU clock", base.CPUMHz, cur.CPUMHz)
	clock("GPU SM clock", base.GPUSMClockMHz, cur.GPUSMClockMHz)
	if b, c := base.GPUThrottledShare, cur.GPUThrottledShare; b != nil && c != nil && math.Abs(*b-*c) > MachineThrottledShareDiff {
		why = append(why, fmt.Sprintf("GPU clocks held down in %.0f%% of the readings %s, %.0f%% %s", *b*100, in.base, *c*100, in.cur))
		lean(*c > *b)
	}
	if b, c := base.GPUOtherProcesses, cur.GPUOtherProcesses; b != nil && c != nil && (*b == 0) != (*c == 0) {
		why = append(why, fmt.Sprintf("%d other processes on the GPU %s, %d %s", *b, in.base, *c, in.cur))
		lean(*c > *b)
	}
	switch {
	case busier > 0 && quieter == 0:
		return strings.Join(why, "; "), 1
	case quieter > 0 && busier == 0:
		return strings.Join(why, "; "), -1
	}
	return strings.Join(why, "; "), 0
}

// freeCPULess is how much less of the CPU other processes left free on the busier
// of two sides whose other processes took shares a and b, as a fraction of what
// the freer side had (MachineFreeCPUShareDiff); ok is false when neither side had
// any CPU free, where no ratio says anything.
func freeCPULess(a, b float64) (less float64, ok bool) {
	fa, fb := 1-a, 1-b
	freer := max(fa, fb)
	if freer <= 0 {
		return 0, false
	}
	return math.Abs(fa-fb) / freer, true
}
