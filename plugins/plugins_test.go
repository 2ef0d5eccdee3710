package plugins_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/plugins"
	"github.com/fsdpbench/fsdpbench/plugins/sdk/plugintest"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// hostEnv makes the test binary a host that runs a plugin until it is killed.
const hostEnv = "PLUGINS_TEST_HOST_DIR"

// bins holds the plugin binaries the tests build: the exec example, and the
// fixture under each of its names (plugins/testdata/fixture).
var bins string

// fakeTrainer is the command the exec plugin runs in the tests.
var fakeTrainer string

func TestMain(m *testing.M) {
	if dir := os.Getenv(hostEnv); dir != "" {
		// The host of TestPluginProcessesDieWithTheirHost: a run of the hang
		// fixture, until this process is killed.
		bins = os.Getenv(hostEnv + "_BINS")
		_, err := plugins.New("hang", bin("hang"), plugins.Options{}).Run(context.Background(), simRC(3, ""), backends.RunEnv{RunDir: dir}, nil)
		fmt.Fprintln(os.Stderr, "host: Run returned:", err)
		os.Exit(1)
	}
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "fsdpbench-plugins")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bins = dir
		if err := buildPlugins(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if fakeTrainer, err = filepath.Abs("testdata/fake-trainer.sh"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// buildPlugins builds the exec example and the fixture into dir, the fixture
// hard-linked under the names that pick its behaviours.
func buildPlugins(dir string) error {
	for pkg, out := range map[string]string{"./examples/exec": plugins.Prefix + "exec", "./testdata/fixture": "fixture"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, out), pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building %s: %w", pkg, err)
		}
	}
	for _, mode := range []string{"simx", "crash", "hang", "garbage", "v2", "liar", "daemon", "slow", "huge", "swarm"} {
		if err := os.Link(filepath.Join(dir, "fixture"), filepath.Join(dir, plugins.Prefix+mode)); err != nil {
			return err
		}
	}
	return os.Remove(filepath.Join(dir, "fixture"))
}

func bin(name string) string { return filepath.Join(bins, plugins.Prefix+name) }

// simRC is a small sim run; sleep_per_step makes it last.
func simRC(steps int, sleep string) sweeps.RunConfig {
	rc := sweeps.Defaults()
	rc.Backend, rc.Hardware, rc.Model, rc.SeqLen = "simx", "h100-sxm", "tiny", 64
	rc.WorldSize, rc.Nodes, rc.GPUsPerNode, rc.BatchPerDevice, rc.GradAccum = 2, 1, 2, 1, 1
	rc.GlobalBatch = 2
	rc.Steps, rc.WarmupSteps = steps, 1
	if sleep != "" {
		rc.BackendOptions = map[string]any{"sleep_per_step": sleep}
	}
	rc.AssignID()
	return rc
}

// execRC runs command through the exec plugin.
func execRC(command ...any) sweeps.RunConfig {
	rc := simRC(3, "")
	rc.Backend, rc.Hardware = "exec", "cpu"
	rc.BackendOptions = map[string]any{"command": command}
	rc.AssignID()
	return rc
}

func TestConformanceOfGoodPlugins(t *testing.T) {
	t.Parallel()
	t.Run("exec", func(t *testing.T) {
		t.Parallel()
		plugintest.Check(t, bin("exec"), plugintest.Config{
			Run:    execRC(fakeTrainer, "{world_size}", "{steps}"),
			Bad:    execRC(fakeTrainer, "{no_such_axis}"),
			Cancel: execRC("sleep", "60"),
		})
	})
	t.Run("sim served as a plugin", func(t *testing.T) {
		t.Parallel()
		bad := simRC(3, "")
		bad.Sharding = sweeps.HybridShard // on one node: sim refuses it
		plugintest.Check(t, bin("simx"), plugintest.Config{Run: simRC(3, ""), Bad: bad, Cancel: simRC(100, "1s")})
	})
}

func TestConformanceFailsBrokenPluginsWithReasons(t *testing.T) {
	t.Parallel()
	simx, err := plugins.FileSHA256(bin("simx"))
	require.NoError(t, err)
	wrongSum := make([]byte, 32)
	bad := simRC(3, "")
	bad.Sharding = sweeps.HybridShard
	for _, tc := range []struct {
		name, bin string
		checksum  []byte
		want      map[string]string // check -> what its reason says
	}{
		{name: "crash", bin: "crash", want: map[string]string{
			"run":    "died during run (exit status 2); its stderr ends with: panic: fixture: crashing in the middle of the run",
			"cancel": "died during run (exit status 2)",
		}},
		{name: "hang", bin: "hang", want: map[string]string{
			"run":    "did not finish within 2s",
			"cancel": "left 1 process(es) running past the grace period",
		}},
		{name: "wrong handshake version", bin: "v2", want: map[string]string{
			"describe": "incompatible API version with plugin. Plugin version: 2, Client versions: [1]",
		}},
		{name: "garbage before the handshake", bin: "garbage", want: map[string]string{
			"describe": "Unrecognized remote plugin message: Loading model weights... done (a plugin must print nothing on stdout",
		}},
		{name: "checksum mismatch", bin: "simx", checksum: wrongSum, want: map[string]string{
			"describe": "refused: its sha256 is " + simx + " but the expected checksum is 0000",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			failures := plugintest.Run(context.Background(), bin(tc.bin), plugintest.Config{
				Run: simRC(3, ""), Bad: bad, Cancel: simRC(100, "1s"),
				Checksum: tc.checksum, Timeout: 2 * time.Second, CancelWithin: 8 * time.Second,
			})
			got := map[string]string{}
			for _, f := range failures {
				got[f.Check] += f.Reason + "\n"
			}
			for check, want := range tc.want {
				assert.Contains(t, got[check], want, "check %s; all failures: %v", check, failures)
			}
			assert.Len(t, got, len(tc.want), "failures: %v", failures)
		})
	}
}

// dead reports whether pid has exited (a zombie nobody reaped counts as dead).
func dead(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(data), ')')
	return i >= 0 && strings.HasPrefix(string(data[i+1:]), " Z")
}

func childPID(t *testing.T, runDir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(runDir, "child.pid"))
	require.NoError(t, err, "the fixture writes its child's pid before crashing or hanging")
	pid, err := strconv.Atoi(string(data))
	require.NoError(t, err)
	return pid
}

func TestACrashingPluginFailsTheRunAndTakesItsChildren(t *testing.T) {
	t.Parallel()
	b := plugins.New("crash", bin("crash"), plugins.Options{})
	var stderr strings.Builder
	env := backends.RunEnv{RunDir: t.TempDir(), Stdout: &strings.Builder{}, Stderr: &syncWriter{w: &stderr}}
	var steps int
	_, err := b.Run(context.Background(), simRC(3, ""), env, func(ev backends.Event) {
		if ev.Kind == backends.EventStep {
			steps++
		}
	})
	require.Error(t, err)
	assert.Regexp(t, `^plugin crash \(.*fsdpbench-backend-crash\) died during run \(exit status 2\); its stderr ends with: panic: fixture: crashing`, err.Error())
	assert.Equal(t, 1, steps, "events sent before the crash arrive")
	assert.True(t, dead(childPID(t, env.RunDir)), "the plugin's child must be killed")
	assert.Contains(t, stderr.String(), "[ERROR] plugin.crash", "the panic reaches the run's stderr through hclog")
}

func TestAHangingPluginIsKilledWhenItsRunTimesOut(t *testing.T) {
	t.Parallel()
	b := plugins.New("hang", bin("hang"), plugins.Options{KillGrace: 300 * time.Millisecond})
	env := backends.RunEnv{RunDir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	begin := time.Now()
	_, err := b.Run(ctx, simRC(3, ""), env, nil)
	took := time.Since(begin)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 4*time.Second, "Run must return soon after its deadline")
	assert.True(t, dead(childPID(t, env.RunDir)), "the plugin's child must be killed")
}

// readPIDFile waits for a pid file the fixture writes.
func readPIDFile(t *testing.T, path string) int {
	t.Helper()
	var pid int
	require.Eventually(t, func() bool {
		data, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(data)))
		return err == nil
	}, 20*time.Second, 10*time.Millisecond, "no %s", path)
	return pid
}

// TestADaemonLeftByAPluginDiesWithItsRun: a plugin whose run leaves a daemon in a
// session of its own, orphaned and holding its stdout, still finishes its run
// normally, and the daemon is gone when Run returns.
func TestADaemonLeftByAPluginDiesWithItsRun(t *testing.T) {
	t.Parallel()
	env := backends.RunEnv{RunDir: t.TempDir(), Stdout: &syncWriter{w: &strings.Builder{}}}
	begin := time.Now()
	res, err := plugins.New("daemon", bin("daemon"), plugins.Options{}).Run(context.Background(), simRC(3, ""), env, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Less(t, time.Since(begin), 15*time.Second)
	daemon := readPIDFile(t, filepath.Join(env.RunDir, "daemon.pid"))
	assert.Eventually(t, func() bool { return dead(daemon) }, 5*time.Second, 20*time.Millisecond, "the daemon (pid %d) outlived its run", daemon)
	_ = syscall.Kill(daemon, syscall.SIGKILL)
}

// TestAHungPluginIsListedUnavailable: a plugin that never answers Describe is
// described as unavailable, with the reason, within the call timeout; Validate
// gives up as soon.
func TestAHungPluginIsListedUnavailable(t *testing.T) {
	t.Parallel()
	b := plugins.New("slow", bin("slow"), plugins.Options{CallTimeout: time.Second, KillGrace: 300 * time.Millisecond})
	begin := time.Now()
	d, err := b.Describe(context.Background())
	require.NoError(t, err)
	assert.False(t, d.Available)
	assert.Regexp(t, `^plugin slow \(.*fsdpbench-backend-slow\) did not answer describe within 1s, so it was killed; fix the plugin or remove it from the plugin path$`, d.Reason)
	assert.Less(t, time.Since(begin), 10*time.Second)
	begin = time.Now()
	assert.NoError(t, b.Validate(context.Background(), simRC(3, "")), "a plugin that cannot be asked leaves the verdict to Run")
	assert.Less(t, time.Since(begin), 10*time.Second)
}

// TestPluginProcessesDieWithTheirHost kills the process that runs a plugin with
// SIGKILL: the plugin and the child it started must die with it.
func TestPluginProcessesDieWithTheirHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostEnv+"="+dir, hostEnv+"_BINS="+bins)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill() })
	plugin := readPIDFile(t, filepath.Join(dir, "plugin.pid"))
	child := readPIDFile(t, filepath.Join(dir, "child.pid"))
	require.NoError(t, host.Process.Signal(syscall.SIGKILL))
	_ = host.Wait()
	assert.Eventually(t, func() bool { return dead(plugin) && dead(child) }, 10*time.Second, 20*time.Millisecond,
		"the plugin (pid %d) or its child (pid %d) outlived fsdpbench", plugin, child)
	_ = syscall.Kill(child, syscall.SIGKILL)
	_ = syscall.Kill(plugin, syscall.SIGKILL)
}

func TestRunCarriesEventsLogsAndTheResult(t *testing.T) {
	t.Parallel()
	var stdout, stderr strings.Builder
	env := backends.RunEnv{RunDir: t.TempDir(), Stdout: &syncWriter{w: &stdout}, Stderr: &syncWriter{w: &stderr}}
	rc := execRC(fakeTrainer, "{world_size}", "{steps}")
	var kinds []backends.EventKind
	res, err := plugins.New("exec", bin("exec"), plugins.Options{}).Run(context.Background(), rc, env, func(ev backends.Event) {
		kinds = append(kinds, ev.Kind)
	})
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Equal(t, []backends.EventKind{"started", "step", "step", "step", "finished"}, kinds)
	require.Len(t, res.Steps, 3)
	assert.InDelta(t, 0.01, res.Steps[0].StepTimeS, 1e-12)
	assert.Len(t, res.PerRank, 2)
	assert.Contains(t, stdout.String(), `FSDPBENCH {"step": 3`)
	assert.Equal(t, "fake: done\n", stderr.String())
}

func TestDiscoverTakesTheFirstOnThePath(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	write := func(dir, name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), mode))
		return p
	}
	x := write(a, plugins.Prefix+"x", 0o755)
	write(b, plugins.Prefix+"x", 0o755)
	y := write(b, plugins.Prefix+"y", 0o755)
	z := write(b, plugins.Prefix+"z", 0o644)
	write(b, "fsdpbench-backend-", 0o755)
	write(b, "README", 0o755)
	got := plugins.Discover([]string{a, filepath.Join(a, "missing"), b})
	assert.Equal(t, []plugins.Found{
		{Name: "x", Path: x},
		{Name: "y", Path: y},
		{Name: "z", Path: z, Problem: z + " is not executable; chmod +x it"},
	}, got)
}

func TestTheLockFilePinsWhatMayRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	plug := filepath.Join(dir, plugins.Prefix+"simx")
	data, err := os.ReadFile(bin("simx"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(plug, data, 0o755))
	lockPath := filepath.Join(t.TempDir(), "plugins.lock")
	describe := func() backends.Description {
		bs := plugins.Load([]string{dir}, lockPath, nil, plugins.Options{})
		require.Len(t, bs, 1)
		d, err := bs[0].Describe(context.Background())
		require.NoError(t, err)
		assert.Equal(t, "simx", d.Name)
		assert.Equal(t, plug, d.Source)
		return d
	}

	d := describe()
	assert.False(t, d.Available)
	assert.Contains(t, d.Reason, "not pinned: there is no lock file at "+lockPath)
	// Validate says so as a spec error: the sweep stops (exit 2) before anything runs.
	validate := func() error {
		return plugins.Load([]string{dir}, lockPath, nil, plugins.Options{})[0].Validate(context.Background(), simRC(3, ""))
	}
	err = validate()
	assert.True(t, backends.IsSpecError(err), "%v", err)
	assert.ErrorContains(t, err, "plugin simx ("+plug+") may not run: not pinned")

	lock, err := plugins.Pin(plugins.Discover([]string{dir}))
	require.NoError(t, err)
	require.NoError(t, plugins.WriteLock(lockPath, lock))
	d = describe()
	assert.True(t, d.Available, d.Reason)

	read, err := plugins.ReadLock(lockPath)
	require.NoError(t, err)
	assert.Equal(t, lock, read)

	// The binary changes after it was pinned: go-plugin's SecureConfig refuses it.
	require.NoError(t, os.WriteFile(plug, append(data, 0), 0o755))
	d = describe()
	assert.False(t, d.Available)
	assert.Regexp(t, `plugin simx \(.*\): refused: its sha256 is [0-9a-f]{64} but `+lockPath+` pins [0-9a-f]{64}; if you rebuilt or replaced it on purpose, run `+"`fsdpbench plugins lock`", d.Reason)
	err = validate()
	assert.True(t, backends.IsSpecError(err), "%v", err)
	assert.ErrorContains(t, err, "refused: its sha256 is")
	rc := simRC(3, "")
	_, err = plugins.Load([]string{dir}, lockPath, nil, plugins.Options{})[0].Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
	assert.ErrorContains(t, err, "refused: its sha256 is")

	// Pinned at another path.
	lock.Plugins[0].Path = "/elsewhere/" + plugins.Prefix + "simx"
	require.NoError(t, plugins.WriteLock(lockPath, lock))
	assert.Contains(t, describe().Reason, lockPath+" pins plugin simx to /elsewhere/")

	require.NoError(t, os.WriteFile(lockPath, []byte("{\n not json"), 0o644))
	assert.Contains(t, describe().Reason, "the lock file is unreadable ("+lockPath+":2:2: invalid character 'n'")

	// Names of built-in backends are not taken by plugins.
	assert.Empty(t, plugins.Load([]string{dir}, lockPath, func(n string) bool { return n == "simx" }, plugins.Options{}))
}

// TestValidateTellsSpecErrorsFromInfeasibleRuns: a plugin's refusal crosses the
// wire as what it is, a mistake in the spec (exit 2 before anything runs) or a
// configuration the backend cannot run (an infeasible run).
func TestValidateTellsSpecErrorsFromInfeasibleRuns(t *testing.T) {
	t.Parallel()
	misspelt := simRC(3, "")
	misspelt.BackendOptions = map[string]any{"efficency": 0.5}
	nan := simRC(3, "")
	nan.BackendOptions = map[string]any{"efficiency": "NaN"}
	hybrid := simRC(3, "")
	hybrid.Sharding = sweeps.HybridShard
	for _, tc := range []struct {
		name, bin string
		rc        sweeps.RunConfig
		spec      bool
		want      string
	}{
		{"misspelt option", "simx", misspelt, true, `backend_options.efficency: the sim backend has no such option (did you mean "efficiency"?)`},
		{"NaN option", "simx", nan, true, "backend_options.efficiency: must be a finite number"},
		{"infeasible", "simx", hybrid, false, "hybrid_shard"},
		{"bad template", "exec", execRC(fakeTrainer, "{no_such_axis}"), true, "no_such_axis"},
		{"unknown exec option", "exec", func() sweeps.RunConfig {
			rc := execRC(fakeTrainer)
			rc.BackendOptions["comand"] = "x"
			return rc
		}(), true, `unknown backend_options key "comand"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := plugins.New(tc.bin, bin(tc.bin), plugins.Options{}).Validate(context.Background(), tc.rc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, tc.spec, backends.IsSpecError(err), "%v", err)
		})
	}
}

// TestAResultThatCannotBeRightFailsTheRun: a plugin's result is checked where it
// enters, and a run whose plugin lies fails with the field named; such results
// used to be stored (status "banana" as a run, 300,000 steps of a 3-step run that inflated throughput 100,000 times).
func TestAResultThatCannotBeRightFailsTheRun(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ws   int
		want string
	}{
		{1, `status "banana" is not a run status`},
		{2, "steps holds 300000 steps but the run measures 3"},
		{4, "steps[1].step_time_s is -"},
		{8, "peak_mem_reserved_bytes is -1; it must be in [0, "},
	} {
		t.Run(fmt.Sprint(tc.ws), func(t *testing.T) {
			t.Parallel()
			rc := simRC(3, "")
			rc.WorldSize, rc.GPUsPerNode, rc.GlobalBatch = tc.ws, tc.ws, tc.ws
			rc.Backend = "liar"
			res, err := plugins.New("liar", bin("liar"), plugins.Options{}).Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
			require.NoError(t, err)
			assert.Equal(t, results.StatusFailed, res.Status)
			assert.Contains(t, res.Error, "plugin liar ("+bin("liar")+") returned a result that cannot be right: "+tc.want)
			assert.Empty(t, res.Steps)
			assert.Nil(t, res.PeakMemReservedBytes)
		})
	}
	// The same plugin's honest runs pass.
	rc := simRC(3, "")
	// (Two nodes of 8: one h100-sxm node holds 8 GPUs.)
	rc.WorldSize, rc.Nodes, rc.GPUsPerNode, rc.GlobalBatch = 16, 2, 8, 16
	res, err := plugins.New("liar", bin("liar"), plugins.Options{}).Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
}

// TestExecSaysWhyWhenTheCommandDoesNot: a command that exits "infeasible" (3) or
// "out of memory" (4) without a word still gets a reason: a final status
// without one used to be stored with an empty error.
func TestExecSaysWhyWhenTheCommandDoesNot(t *testing.T) {
	t.Parallel()
	for code, status := range map[string]results.Status{"3": results.StatusInfeasible, "4": results.StatusOOM} {
		res, err := plugins.New("exec", bin("exec"), plugins.Options{}).Run(context.Background(), execRC("sh", "-c", "exit "+code),
			backends.RunEnv{RunDir: t.TempDir()}, nil)
		require.NoError(t, err)
		assert.Equal(t, status, res.Status)
		assert.Equal(t, "exec: sh exited with code "+code+" and printed no reason on stderr", res.Error)
	}
}

// syncWriter serializes writes from the host's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// BenchmarkRunOverhead runs the same sim run in-process and through the plugin
// (a fresh process per call, as the host runs plugins): the difference is what a
// plugin costs per run.
func BenchmarkRunOverhead(b *testing.B) {
	rc := simRC(20, "")
	env := backends.RunEnv{RunDir: b.TempDir()}
	for _, tc := range []struct {
		name string
		be   backends.Backend
	}{
		{"in-process", sim.New()},
		{"plugin", plugins.New("simx", bin("simx"), plugins.Options{})},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				res, err := tc.be.Run(context.Background(), rc, env, nil)
				if err != nil || res.Status != results.StatusOK {
					b.Fatalf("%v %s %s", err, res.Status, res.Error)
				}
			}
		})
	}
}

// TestDaemonSwarmsDieWithTheirRuns: a plugin built with the SDK whose every run
// starts 50 daemons (setsid, orphaned at once). Under the SDK's own subreaper one
// was left alive (parent 1) in 2 of 8 sweeps, and all 50 outlived their run by
// 1.5-3 s; under the run reaper torchrun uses (contract.RunGroup's) none may be
// alive when Run returns, run after run.
func TestDaemonSwarmsDieWithTheirRuns(t *testing.T) {
	t.Parallel()
	b := plugins.New("swarm", bin("swarm"), plugins.Options{})
	for i := range 6 {
		env := backends.RunEnv{RunDir: t.TempDir()}
		res, err := b.Run(context.Background(), simRC(2, ""), env, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		data, err := os.ReadFile(filepath.Join(env.RunDir, "swarm.pids"))
		require.NoError(t, err)
		var alive []int
		pids := strings.Fields(string(data))
		require.Len(t, pids, 50, "run %d: the fixture started its daemons", i)
		for _, f := range pids {
			pid, err := strconv.Atoi(f)
			require.NoError(t, err)
			if !dead(pid) {
				alive = append(alive, pid)
			}
		}
		for _, pid := range alive {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		assert.Empty(t, alive, "run %d: daemons alive when Run returned", i)
	}
}

// TestOversizedRepliesAreRefused: a plugin whose Describe returns a 64 MB summary
// made `fsdpbench backends` die out of memory (5.1 GB); it is listed unavailable,
// the reason naming the plugin and the bound. A 100 KB refusal is cut to
// MaxTextBytes, saying how long it was.
func TestOversizedRepliesAreRefused(t *testing.T) {
	t.Parallel()
	b := plugins.New("huge", bin("huge"), plugins.Options{})
	d, err := b.Describe(context.Background())
	require.NoError(t, err)
	assert.False(t, d.Available)
	assert.Regexp(t, `^plugin huge \(.*fsdpbench-backend-huge\): describe failed, so the plugin was killed: its describe reply is larger than the 1048576 bytes a reply may have`, d.Reason)
	assert.Less(t, len(d.Reason), 2000)
	err = b.Validate(context.Background(), simRC(3, ""))
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 4200)
	assert.Regexp(t, `^(no )+n?o?… \(cut: 102399 bytes in all\)$`, err.Error())
}

// TestPluginRunGetsTheSpecEnv: a plugin's run (here the exec plugin's command)
// gets the spec's environment variables.
func TestPluginRunGetsTheSpecEnv(t *testing.T) {
	t.Parallel()
	rc := execRC("sh", "-c", `echo "probe=[$ENVAXES_PROBE]" >&2; exit 3`)
	rc.Env = map[string]string{"ENVAXES_PROBE": "a b$HOME"}
	res, err := plugins.New("exec", bin("exec"), plugins.Options{}).Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "probe=[a b$HOME]")
}
