package results

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestSummarizeMachine: a run's machine state is the median repeat's, so one
// disturbed repeat of six moves it no more than it moves the median throughput;
// the worst repeat stays visible in other_cpu_share_max.
func TestSummarizeMachine(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	var repeats []Result
	for i, share := range []float64{0.01, 0.02, 0.5, 0.03, 0.02, 0.01} {
		r := fixtureResult(rc)
		r.Env.Machine = &Machine{Repeats: 1, CPUs: 2, Load1: F64(0.5), OtherCPUShare: F64(share), GPUOtherProcesses: &[]int{i % 3}[0]}
		if i == 2 {
			r.Env.Machine.GPUThrottle = []string{"hw_thermal"}
		}
		repeats = append(repeats, r)
	}
	m := Normalize(rc, repeats)
	x := m.Env.Machine
	require.NotNil(t, x)
	assert.Equal(t, 6, x.Repeats)
	assert.InDelta(t, 0.02, *x.OtherCPUShare, 1e-12, "the median repeat's share")
	assert.InDelta(t, 0.5, *x.OtherCPUShareMax, 1e-12)
	assert.Equal(t, 2, *x.GPUOtherProcesses, "the most seen at once")
	assert.Equal(t, []string{"hw_thermal"}, x.GPUThrottle)
	assert.Nil(t, x.CPUMHz, "unknown stays unknown")
	// Each repeat's own state, in order, for ab's pair-by-pair comparison.
	require.Len(t, x.PerRepeat, 6)
	assert.InDelta(t, 0.5, *x.PerRepeat[2].OtherCPUShare, 1e-12)
	assert.Equal(t, []string{"hw_thermal"}, x.PerRepeat[2].GPUThrottle)
	assert.InDelta(t, 0.01, *x.PerRepeat[5].OtherCPUShare, 1e-12)
	require.NoError(t, CheckMetrics(&rc, &m))

	none := Normalize(rc, []Result{fixtureResult(rc)})
	assert.Nil(t, none.Env.Machine, "no repeat read the machine: no state, not a zero one")
}

// TestCheckMachineBounds: a machine state read from a file is bounded where it
// enters, like every figure of metrics.json.
func TestCheckMachineBounds(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	for field, edit := range map[string]func(*Machine){
		"env.machine.other_cpu_share":     func(x *Machine) { x.OtherCPUShare = F64(1.5) },
		"env.machine.load1":               func(x *Machine) { x.Load1 = F64(-1) },
		"env.machine.cpu_mhz":             func(x *Machine) { x.CPUMHz = F64(2e9) },
		"env.machine.gpu_sm_clock_mhz":    func(x *Machine) { x.GPUSMClockMHz = F64(math.NaN()) },
		"env.machine.gpu_throttled_share": func(x *Machine) { x.GPUThrottledShare = F64(-0.1) },
		"env.machine.gpu_other_processes": func(x *Machine) { x.GPUOtherProcesses = &[]int{-1}[0] },
		"env.machine.cpus":                func(x *Machine) { x.CPUs = -2 },
		"env.machine.gpu_throttle[0]":     func(x *Machine) { x.GPUThrottle = []string{"\x1b[31mred"} },
		"env.machine.gpu_throttle":        func(x *Machine) { x.GPUThrottle = make([]string, 17) },
		"env.machine.per_repeat[1].other_cpu_share": func(x *Machine) {
			x.PerRepeat = []Machine{{OtherCPUShare: F64(0.1)}, {OtherCPUShare: F64(2)}}
		},
		"env.machine.per_repeat":               func(x *Machine) { x.PerRepeat = make([]Machine, MaxRepeats+1) },
		"env.machine.per_repeat[0].per_repeat": func(x *Machine) { x.PerRepeat = []Machine{{PerRepeat: []Machine{{}}}} },
	} {
		m := Normalize(rc, []Result{fixtureResult(rc)})
		m.Env.Machine = &Machine{}
		edit(m.Env.Machine)
		err := CheckMetrics(&rc, &m)
		require.Error(t, err, field)
		var ie *InvalidRunError
		require.ErrorAs(t, err, &ie)
		assert.Equal(t, field, ie.Field)
		assert.NotContains(t, err.Error(), "\x1b", "file text is escaped")
	}
}

// TestMachineDiff: the thresholds that make two machine states materially
// different, and that unknowns decide nothing.
func TestMachineDiff(t *testing.T) {
	quiet := &Machine{CPUs: 2, Load1: F64(0.4), OtherCPUShare: F64(0.02), CPUMHz: F64(2400), GPUOtherProcesses: &[]int{0}[0],
		GPUSMClockMHz: F64(1980), GPUThrottledShare: F64(0)}
	cp := func(edit func(*Machine)) *Machine {
		x := *quiet
		edit(&x)
		return &x
	}
	assert.Empty(t, MachineDiff(quiet, quiet))
	assert.Empty(t, MachineDiff(nil, quiet), "a baseline from an older fsdpbench decides nothing")
	assert.Empty(t, MachineDiff(quiet, &Machine{}), "unknown figures decide nothing")
	assert.Empty(t, MachineDiff(quiet, cp(func(x *Machine) { x.OtherCPUShare = F64(0.11) })), "98% free against 89%: 9% less, within 10%")
	assert.Empty(t, MachineDiff(quiet, cp(func(x *Machine) { x.Load1 = F64(2.4) })),
		"the load average is only read where the other processes' share is unknown")
	for want, edit := range map[string]func(*Machine){
		"other processes used 2% of the CPU in the baseline, 50% now, leaving 49% less of it free now": func(x *Machine) { x.OtherCPUShare = F64(0.5) },
		"load average 0.40 on 2 CPUs in the baseline, 2.40 on 2 now":                                   func(x *Machine) { x.Load1, x.OtherCPUShare = F64(2.4), nil },
		"CPU clock 2400 MHz in the baseline, 1200 MHz now":                                             func(x *Machine) { x.CPUMHz = F64(1200) },
		"GPU SM clock 1980 MHz in the baseline, 1410 MHz now":                                          func(x *Machine) { x.GPUSMClockMHz = F64(1410) },
		"GPU clocks held down in 0% of the readings":                                                   func(x *Machine) { x.GPUThrottledShare = F64(0.6) },
		"0 other processes on the GPU in the baseline, 1 now":                                          func(x *Machine) { x.GPUOtherProcesses = &[]int{1}[0] },
	} {
		got := MachineDiff(quiet, cp(edit))
		assert.True(t, strings.Contains(got, want), "got %q, want %q", got, want)
	}
}

// TestMachineDiffFreeCPURelative: other processes' CPU share is judged by how much
// less of the CPU it leaves free, relative to the freer side, not in absolute
// points: on a loaded host 60% taken against 65% taken leaves the benchmark 12.5%
// less (material), on a quiet one 2% against 8% leaves it 6% less (not).
func TestMachineDiffFreeCPURelative(t *testing.T) {
	state := func(other float64) *Machine { return &Machine{CPUs: 2, OtherCPUShare: F64(other)} }
	for _, c := range []struct {
		base, cur float64
		want      string
		lean      int
	}{
		{0.60, 0.65, "other processes used 60% of the CPU in the baseline, 65% now, leaving 13% less of it free now", 1},
		{0.65, 0.60, "other processes used 65% of the CPU in the baseline, 60% now, leaving 13% less of it free in the baseline", -1},
		{0.02, 0.08, "", 0},
		{0.08, 0.02, "", 0},
		{0.60, 0.63, "", 0}, // 40% free against 37%: 7.5% less
		{1, 1, "", 0},       // nothing free on either side: no ratio
		{0.95, 1, "other processes used 95% of the CPU in the baseline, 100% now, leaving 100% less of it free now", 1},
	} {
		why, lean := machineLean(state(c.base), state(c.cur), nightSides)
		assert.Equal(t, c.want, why, "%v taken in the baseline, %v now", c.base, c.cur)
		assert.Equal(t, c.lean, lean, "%v taken in the baseline, %v now", c.base, c.cur)
	}
}
