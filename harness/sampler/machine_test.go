package sampler

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// spin keeps one CPU busy for d.
func spin(d time.Duration) {
	end := time.Now().Add(d)
	x := 0
	for time.Now().Before(end) {
		x++
	}
	_ = x
}

// TestWatchMachineOwnWork: CPU time fsdpbench's own tree spends (here a child
// process, as a backend's ranks are) counts as its own; a process outside the tree
// does not. Real processes, this host's /proc. (The shares themselves depend on
// what else the shared host runs, so the test checks the tree's CPU time.)
func TestWatchMachineOwnWork(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	self := os.Getpid()
	const tick = 0.01 // USER_HZ is 100 on Linux
	own0, ok := treeCPU(self)
	require.True(t, ok)
	w := WatchMachine()
	child := exec.Command(os.Args[0], "-test.run=^TestHelperSpin$")
	child.Env = append(os.Environ(), "FSDPBENCH_SPIN=1")
	require.NoError(t, child.Run())
	m := w.Stop()
	own1, ok := treeCPU(self)
	require.True(t, ok)
	childCPU := (child.ProcessState.UserTime() + child.ProcessState.SystemTime()).Seconds()
	require.Greater(t, childCPU, 0.05, "the child spun")
	assert.GreaterOrEqual(t, float64(own1-own0)*tick, childCPU-2*tick, "a child's CPU time is the tree's")
	require.NotNil(t, m)
	require.NotNil(t, m.OtherCPUShare)
	require.NotNil(t, m.Load1)
	assert.Equal(t, 1, m.Repeats)
	assert.Positive(t, m.CPUs)
	assert.True(t, *m.OtherCPUShare >= 0 && *m.OtherCPUShare <= 1)

	// A busy process that is not ours: started by setsid through a shell that
	// exits at once, so that init, not this test, adopts it.
	pidFile := filepath.Join(t.TempDir(), "pid")
	cmd := exec.Command("sh", "-c", `setsid sh -c 'echo $$ > `+pidFile+`; exec "$0" -test.run="^TestHelperSpin$"' "$0" &`, os.Args[0])
	cmd.Env = append(os.Environ(), "FSDPBENCH_SPIN=1")
	own0, _ = treeCPU(self)
	require.NoError(t, cmd.Run())
	time.Sleep(800 * time.Millisecond)
	data, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	st, ok := readProcStatOf(strings.TrimSpace(string(data)))
	require.True(t, ok, "the adopted spinner still runs")
	own1, _ = treeCPU(self)
	require.Positive(t, st.cpu, "the adopted process spun")
	assert.Less(t, own1-own0, st.cpu, "a process outside the tree is not ours")
	t.Logf("adopted spinner %d ticks, our tree %d ticks meanwhile", st.cpu, own1-own0)
}

// TestHelperSpin is the busy process of TestWatchMachineOwnWork.
func TestHelperSpin(t *testing.T) {
	if os.Getenv("FSDPBENCH_SPIN") == "" {
		t.Skip("a helper process")
	}
	spin(time.Second)
}

// TestProcStatParsing: /proc/PID/stat's command name may hold spaces and
// parentheses; /proc/stat sums user to steal, busy without idle and iowait.
func TestProcStatParsing(t *testing.T) {
	root := t.TempDir()
	oldProc, oldFreq := procRoot, cpufreqGlob
	procRoot = root
	t.Cleanup(func() { procRoot, cpufreqGlob = oldProc, oldFreq })
	write := func(rel, text string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	write("stat", "cpu  100 10 50 800 40 0 0 0 7 0\ncpu0 50 5 25 400 20 0 0 0 0 0\ncpu1 50 5 25 400 20 0 0 0 0 0\nintr 1\n")
	// pid 10 (us) -> 11 (our rank, a name with ") (" in it) ; 12 is someone else's.
	write("10/stat", "10 (fsdpbench) S 1 10 10 0 -1 0 0 0 0 0 3 2 0 0 20 0 1 0\n")
	write("11/stat", "11 (a) (b c) R 10 10 10 0 -1 0 0 0 0 0 30 20 4 1 20 0 1 0\n")
	write("12/stat", "12 (hog) R 1 12 12 0 -1 0 0 0 0 0 500 0 0 0 20 0 1 0\n")
	write("loadavg", "1.50 0.80 0.40 2/300 12\n")
	total, busy, cpus, ok := readProcStat()
	require.True(t, ok)
	assert.Equal(t, uint64(1000), total)
	assert.Equal(t, uint64(160), busy)
	assert.Equal(t, 2, cpus)
	sum, ok := treeCPU(10)
	require.True(t, ok)
	assert.Equal(t, uint64(3+2+30+20+4+1), sum)
	own, ok := ownPIDs([]uint32{11, 12}, 10)
	require.True(t, ok)
	assert.Equal(t, []bool{true, false}, own)
	_, ok = ownPIDs([]uint32{99}, 10)
	assert.False(t, ok, "a PID this /proc does not show: no attribution")
	l, ok := readLoad1()
	require.True(t, ok)
	assert.InDelta(t, 1.5, l, 1e-12)

	// The watch over that fake host: 100 more busy jiffies, 20 of them ours.
	w := &MachineWatch{self: 10, statReader: readProcStat}
	w.total0, w.busy0, w.cpus, w.ok = readProcStat()
	w.own0, _ = treeCPU(10)
	write("stat", "cpu  200 10 50 900 40 0 0 0 7 0\ncpu0 50 5 25 400 20 0 0 0 0 0\ncpu1 50 5 25 400 20 0 0 0 0 0\n")
	write("11/stat", "11 (a) (b c) R 10 10 10 0 -1 0 0 0 0 0 50 20 4 1 20 0 1 0\n")
	m := w.Stop()
	require.NotNil(t, m.OtherCPUShare)
	assert.InDelta(t, 80.0/200, *m.OtherCPUShare, 1e-12)

	// No /proc: nothing known, no state.
	procRoot = filepath.Join(root, "absent")
	cpufreqGlob = filepath.Join(root, "absent", "*")
	assert.Nil(t, WatchMachine().Stop())
}

// BenchmarkWatchMachine is the harness's cost per repeat: a watch started and
// stopped (two scans of /proc).
func BenchmarkWatchMachine(b *testing.B) {
	for b.Loop() {
		WatchMachine().Stop()
	}
}
