package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// gateTrialSpec is issue 29's nightly sweep: gotrain's tiny model at world sizes 1
// and 2, 6 repeats each, on OpenBLAS (night 2's slowdown swaps in gonum's GEMMs,
// about half the throughput; backend_options set outside the grid keep the run
// IDs, so the nights match).
const gateTrialSpec = `name: gate-trial
backend: gotrain
hardware: cpu
model: tiny
seq_len: 64
steps: 30
warmup_steps: 3
repeats: 6
backend_options: {blas: openblas}
base: {batch_per_device: 2, mixed_precision: fp32}
grid:
  world_size: [1, 2]
  sharding: [ddp, full_shard]
`

// TestGateTrials is issue 29's verification, too slow for CI's default run (about
// a minute a trial): FSDPBENCH_GATE_TRIALS=20 runs 20 trials, each a baseline night
// and three second nights gated against it:
//
//   - identical code while a CPU hog this test starts runs on one core for part of
//     the night: the gate must never exit 1 (0 or 3 only);
//   - a real slowdown (blas: gonum) on a quiet machine: exit 1 in at least 19 of 20;
//   - the same slowdown under the hog: exit 1 or 3, never 0.
//
// On a shared machine "quiet" is not available: the counts are logged either way
// (FSDPBENCH_GATE_TRIALS_QUIET=0 leaves the quiet criterion unasserted).
//
//	FSDPBENCH_GATE_TRIALS=20 go test ./cmd/fsdpbench -run TestGateTrials -v -timeout 2h
func TestGateTrials(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FSDPBENCH_GATE_TRIALS"))
	if n <= 0 {
		t.Skip("set FSDPBENCH_GATE_TRIALS=N to run N trials (about a minute each)")
	}
	n = min(n, 1000)
	dir := t.TempDir()
	spec := filepath.Join(dir, "trial.yaml")
	require.NoError(t, os.WriteFile(spec, []byte(gateTrialSpec), 0o644))

	sweep := func(out string, hog *hogPlan, extra ...string) {
		t.Helper()
		if hog != nil {
			stop := hog.start(t)
			defer stop()
		}
		r := fsdpbench(t, dir, append([]string{"sweep", spec, "--results", out, "--progress", "none"}, extra...)...)
		require.Equal(t, ExitOK, r.code, "sweep: %s", r.stderr)
	}
	gate := func(base, cur string) (int, string) {
		t.Helper()
		r := fsdpbench(t, dir, "gate", "--baseline", filepath.Join(base, "gate-trial"), "--current", filepath.Join(cur, "gate-trial"),
			"--rule", "tokens_per_s_per_rank:-5%", "--format", "json")
		require.Contains(t, []int{ExitOK, ExitFailed, ExitInconclusive}, r.code, "gate: %s", r.stderr)
		var rep results.GateReport
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stderr)
		return r.code, summarize(&rep)
	}

	type scenario struct {
		name  string
		hog   bool
		extra []string
	}
	scenarios := []scenario{
		{"identical+hog", true, nil},
		{"gonum quiet", false, []string{"--set", "backend_options.blas=gonum"}},
		{"gonum+hog", true, []string{"--set", "backend_options.blas=gonum"}},
	}
	// FSDPBENCH_GATE_TRIALS_ONLY="gonum quiet" runs one scenario (its criterion
	// alone), e.g. on a machine quiet for a short while only.
	if only := os.Getenv("FSDPBENCH_GATE_TRIALS_ONLY"); only != "" {
		scenarios = slices.DeleteFunc(scenarios, func(s scenario) bool { return s.name != only })
		require.NotEmpty(t, scenarios, "FSDPBENCH_GATE_TRIALS_ONLY=%q names no scenario", only)
	}
	codes := map[string]map[int]int{}
	for _, s := range scenarios {
		codes[s.name] = map[int]int{}
	}
	rng := rand.New(rand.NewPCG(29, 29))
	for i := range n {
		base := filepath.Join(dir, fmt.Sprintf("t%d-base", i))
		start := time.Now()
		sweep(base, nil)
		night := time.Since(start)
		for j, s := range scenarios {
			cur := filepath.Join(dir, fmt.Sprintf("t%d-s%d", i, j))
			var hog *hogPlan
			if s.hog {
				// For part of the night: from a random point in its first half, for
				// half a baseline night.
				hog = &hogPlan{delay: time.Duration(rng.Float64() * float64(night) / 2), length: night / 2}
			}
			sweep(cur, hog, s.extra...)
			code, why := gate(base, cur)
			codes[s.name][code]++
			t.Logf("trial %2d %-14s exit %d  %s", i+1, s.name, code, why)
			require.NoError(t, os.RemoveAll(cur))
		}
		require.NoError(t, os.RemoveAll(base))
	}
	for _, s := range scenarios {
		c := codes[s.name]
		t.Logf("%-14s over %d trials: exit 0 ×%d, exit 1 ×%d, exit 3 ×%d", s.name, n, c[0], c[1], c[3])
	}
	assert.Zero(t, codes["identical+hog"][ExitFailed], "identical code never fails the gate")
	assert.Zero(t, codes["gonum+hog"][ExitOK], "a real slowdown under the hog never passes")
	if _, ran := codes["gonum quiet"]; ran && os.Getenv("FSDPBENCH_GATE_TRIALS_QUIET") != "0" {
		assert.GreaterOrEqual(t, float64(codes["gonum quiet"][ExitFailed]), 0.95*float64(n), "a real slowdown on a quiet machine fails the gate")
	}
}

// summarize counts a gate report's checks by outcome, inconclusive ones by why.
func summarize(g *results.GateReport) string {
	count := map[string]int{}
	for _, c := range g.Checks {
		k := string(c.Outcome)
		if c.Outcome == results.OutcomeInconclusive {
			switch {
			case strings.Contains(c.Reason, "machine states"):
				k += "(machine)"
			default:
				k += "(noise)"
			}
		}
		count[k]++
	}
	var parts []string
	for _, k := range []string{"pass", "fail", "inconclusive(noise)", "inconclusive(machine)", "skip"} {
		if count[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// hogPlan is a CPU hog on one core: after delay, for length.
type hogPlan struct{ delay, length time.Duration }

// start begins the plan in the background; the returned func ends the hog.
func (h *hogPlan) start(t *testing.T) func() {
	t.Helper()
	done := make(chan struct{})
	var cmd *exec.Cmd
	ready := make(chan struct{})
	go func() {
		defer close(ready)
		select {
		case <-done:
			return
		case <-time.After(h.delay):
		}
		args := []string{"-test.run=^TestHelperHog$"}
		name := os.Args[0]
		if p, err := exec.LookPath("taskset"); err == nil {
			// One core, as a stray process on a runner would take.
			args = append([]string{"-c", "0", name}, args...)
			name = p
		}
		cmd = exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "FSDPBENCH_HOG_S="+strconv.FormatFloat(h.length.Seconds(), 'f', 3, 64))
		if err := cmd.Start(); err != nil {
			t.Errorf("start the hog: %v", err)
			cmd = nil
		}
	}()
	return func() {
		close(done)
		<-ready
		if cmd != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
}

// TestHelperHog is TestGateTrials' CPU hog: it spins for FSDPBENCH_HOG_S seconds.
func TestHelperHog(t *testing.T) {
	s, err := strconv.ParseFloat(os.Getenv("FSDPBENCH_HOG_S"), 64)
	if err != nil {
		t.Skip("a helper process")
	}
	end := time.Now().Add(time.Duration(s * float64(time.Second)))
	x := 0
	for time.Now().Before(end) {
		x++
	}
	_ = x
}
