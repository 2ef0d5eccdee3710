//go:build linux

package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// chaosSpec is a sweep of real gotrain runs (worker processes, TCP collectives)
// slow enough to be hit mid-run: 8 steps of ~300 ms each, so a worker writes
// rarely and cannot count on a broken pipe to notice that its harness died. The
// run timeout bounds what a stopped (SIGSTOP) worker costs a round.
const chaosSpec = `name: chaos
backend: gotrain
hardware: cpu
model: tiny
seq_len: 32
steps: 8
warmup_steps: 1
timeout: 20s
base:
  batch_per_device: 1
  mixed_precision: fp32
grid:
  world_size: [1, 2]
  sharding: [full_shard, shard_grad_op, ddp]
backend_options:
  step_delay: 300ms
`

// chaosEnv is the environment of every process the chaos test starts: a marker that
// the sweep's children inherit (so any survivor can be found in /proc), and a HOME
// and TMPDIR of their own that must stay empty (nothing written outside the results
// directory).
func chaosEnv(marker, home, tmp string) []string {
	env := []string{"FSDPBENCH_CHAOS_MARK=" + marker, "HOME=" + home, "TMPDIR=" + tmp,
		"GORACE=atexit_sleep_ms=0 halt_on_error=1"}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k != "HOME" && k != "TMPDIR" && k != "GORACE" && k != "FSDPBENCH_CHAOS_MARK" {
			env = append(env, kv)
		}
	}
	return env
}

// marked lists the live processes whose environment carries marker (zombies
// excluded: they hold nothing but a pid until reaped).
func marked(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	want := []byte("FSDPBENCH_CHAOS_MARK=" + marker + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			// The state follows the command name in parentheses: "pid (comm) S ...".
			if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestChaosKillStopResume runs a sweep of real gotrain runs under random faults —
// SIGKILL of the harness, SIGKILL or SIGSTOP of a worker, SIGSTOP then SIGCONT of
// the harness — and resumes after each, until the sweep finishes. At the end every
// run is there once, ok, under its own ID, with the losses of an undisturbed sweep
// of the same spec; no process of any round is left; and nothing was written
// outside the results directory. The seed is logged; FSDPBENCH_CHAOS_SEED replays
// a round sequence.
func TestChaosKillStopResume(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test: real worker processes under faults (not in -short)")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("FSDPBENCH_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "FSDPBENCH_CHAOS_SEED")
		seed = v
	}
	t.Logf("chaos seed %d (replay with FSDPBENCH_CHAOS_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))

	root := t.TempDir()
	work, home, tmp := filepath.Join(root, "work"), filepath.Join(root, "home"), filepath.Join(root, "tmp")
	for _, d := range []string{work, home, tmp} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	spec := writeSpec(t, work, chaosSpec)
	marker := fmt.Sprintf("chaos-%d-%d", os.Getpid(), seed)
	env := chaosEnv(marker, home, tmp)
	t.Cleanup(func() {
		for _, pid := range marked(marker) {
			_ = syscall.Kill(pid, syscall.SIGCONT)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})

	plan := expectedRuns(t, spec)
	ids := make([]string, 0, len(plan.Runs))
	for _, rc := range plan.Runs {
		ids = append(ids, rc.ID)
	}
	sweepDir := filepath.Join(work, "fsdpbench-results", "chaos")

	start := func() (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(bin, "sweep", spec, "--progress", "plain")
		cmd.Dir, cmd.Env = work, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		return cmd, &out
	}
	// workers are the marked processes other than the harness itself.
	workers := func(harness int) []int {
		var w []int
		for _, pid := range marked(marker) {
			if pid != harness {
				w = append(w, pid)
			}
		}
		return w
	}
	// gone waits until no process of the test is left, failing after a bound: a
	// worker must die with its harness (parent-death signal), not at its next write.
	gone := func(after string) {
		deadline := time.Now().Add(3 * time.Second)
		for {
			left := marked(marker)
			if len(left) == 0 {
				return
			}
			if time.Now().After(deadline) {
				var desc []string
				for _, pid := range left {
					cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					desc = append(desc, fmt.Sprintf("%d %q", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
				}
				t.Fatalf("after %s, processes still running 3 s later:\n%s", after, strings.Join(desc, "\n"))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	const rounds = 8
	for round := 1; round <= rounds; round++ {
		cmd, out := start()
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		time.Sleep(time.Duration(300+rng.IntN(1500)) * time.Millisecond)

		action := rng.IntN(4)
		var what string
		switch action {
		case 0:
			what = "SIGKILL of the harness"
			_ = cmd.Process.Signal(syscall.SIGKILL)
		case 1, 2:
			sig, name := syscall.SIGKILL, "SIGKILL"
			if action == 2 {
				sig, name = syscall.SIGSTOP, "SIGSTOP"
			}
			if w := workers(cmd.Process.Pid); len(w) > 0 {
				pid := w[rng.IntN(len(w))]
				what = fmt.Sprintf("%s of worker %d, then SIGKILL of the harness", name, pid)
				_ = syscall.Kill(pid, sig)
			} else {
				what = "SIGKILL of the harness (no worker running)"
			}
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
		case 3:
			what = "SIGSTOP then SIGCONT of the harness, then SIGKILL"
			_ = cmd.Process.Signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(200+rng.IntN(800)) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGCONT)
			time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: the harness did not exit after %s\n%s", round, what, out)
		}
		t.Logf("round %d: %s", round, what)
		// A worker left stopped by SIGSTOP is no excuse: it must die with its harness.
		gone(fmt.Sprintf("round %d (%s)", round, what))
	}

	// The last resume runs undisturbed and must finish the sweep.
	cmd, out := start()
	err := cmd.Wait()
	require.NoError(t, err, "the final resume must finish the sweep:\n%s", out)
	gone("the final resume")
	assertResumed(t, sweepDir, ids)

	// Misattribution: every run's directory holds that run's own configuration, and
	// its losses are those of an undisturbed sweep of the same spec (training is
	// deterministic, so a run recorded under another run's ID shows).
	clean := t.TempDir()
	cleanSpec := writeSpec(t, clean, chaosSpec)
	res := fsdpbench(t, clean, "sweep", cleanSpec, "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	cleanDir := &results.SweepDir{Path: filepath.Join(clean, "fsdpbench-results", "chaos")}
	sd := &results.SweepDir{Path: sweepDir}
	for _, rc := range plan.Runs {
		var args struct {
			ID string `json:"id"`
		}
		raw, err := os.ReadFile(filepath.Join(sweepDir, results.RunsDir, rc.ID, results.RunArgsFile))
		require.NoError(t, err, rc.ID)
		require.NoError(t, json.Unmarshal(raw, &args), rc.ID)
		assert.Equal(t, rc.ID, args.ID, "run_args.json of %s names another run", rc.ID)

		got, err := sd.ReadMetrics(rc.ID)
		require.NoError(t, err, rc.ID)
		want, err := cleanDir.ReadMetrics(rc.ID)
		require.NoError(t, err, rc.ID)
		assert.Equal(t, want.WorldSize, got.WorldSize, rc.ID)
		require.NotNil(t, got.LossLast, rc.ID)
		require.NotNil(t, want.LossLast, rc.ID)
		assert.Equal(t, *want.LossLast, *got.LossLast, "%s: the loss of another run, or of a damaged one", rc.ID)

		// steps.csv holds each measured step once: no rows of an earlier attempt.
		f, err := os.Open(filepath.Join(sweepDir, results.RunsDir, rc.ID, results.StepsFile))
		require.NoError(t, err, rc.ID)
		rows, err := csv.NewReader(f).ReadAll()
		_ = f.Close()
		require.NoError(t, err, rc.ID)
		seen := map[string]bool{}
		for _, row := range rows[1:] {
			assert.False(t, seen[row[0]], "%s: step %s recorded twice", rc.ID, row[0])
			seen[row[0]] = true
		}
	}

	// Nothing outside the results directory: the working directory holds the spec
	// and the results, HOME and TMPDIR stay empty.
	ents, err := os.ReadDir(work)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"spec.yaml", "fsdpbench-results"}, names, "files outside the results directory")
	for _, d := range []string{home, tmp} {
		left, err := os.ReadDir(d)
		require.NoError(t, err)
		assert.Empty(t, left, "%s must stay empty", d)
	}
}
