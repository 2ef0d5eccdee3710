package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// readABChange reads metric's change at the single point of an ab result.
func readABChange(t *testing.T, dir, metric string) (results.ABResult, *results.ABChange) {
	t.Helper()
	ab, err := results.ReadAB(dir)
	require.NoError(t, err)
	require.Len(t, ab.Points, 1)
	c := ab.Points[0].Change(metric)
	require.NotNil(t, c, "no %s in %s", metric, dir)
	return ab, c
}

// TestABFindsTheSimsKnownChange: the sim predicts each run exactly, so the
// change from batch 4 to batch 8 is known from a plain sweep of the two points;
// ab finds it, with its sign, inside its interval, and gate --ab judges it.
func TestABFindsTheSimsKnownChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: known
backend: sim
hardware: h100-sxm
model: gpt2-124m
seq_len: 1024
steps: 5
base:
  world_size: 1
  sharding: ddp
  batch_per_device: 4
`)
	res := fsdpbench(t, dir, "sweep", spec, "--set", "batch_per_device=4,8", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	runs, err := results.Load(filepath.Join(dir, "fsdpbench-results", "known"))
	require.NoError(t, err)
	require.Len(t, runs, 2)
	col, err := results.LookupColumn(results.SampleTokensPerSPerRank)
	require.NoError(t, err)
	tps := map[int]float64{}
	for _, r := range runs {
		tps[r.Config.BatchPerDevice] = col.Value(&r).(float64)
	}
	known := tps[8]/tps[4] - 1
	require.Greater(t, known, 0.0)

	res = fsdpbench(t, dir, "ab", spec, "--a", "batch_per_device=4", "--b", "batch_per_device=8", "--pairs", "6", "--progress", "plain")
	require.Equal(t, 0, res.code, res.stderr)
	abDir := filepath.Join(dir, "fsdpbench-results", "known-ab")
	ab, c := readABChange(t, abDir, results.SampleTokensPerSPerRank)
	assert.Equal(t, "abba", ab.Order)
	assert.Len(t, c.Changes, 6)
	assert.True(t, c.Backed)
	assert.InDelta(t, known, c.Median, 1e-9)
	assert.LessOrEqual(t, c.Lo, known+1e-12)
	assert.GreaterOrEqual(t, c.Hi, known-1e-12)
	assert.Contains(t, res.stdout, "B vs A (95% CI)")

	// A rise beyond the change fails; a drop rule on a gain passes.
	limit := strconv.FormatFloat(100*known/2, 'f', -1, 64) + "%"
	g := fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "tokens_per_s_per_rank:+"+limit)
	assert.Equal(t, 1, g.code, g.stdout+g.stderr)
	g = fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "tokens_per_s_per_rank:-5%")
	assert.Equal(t, 0, g.code, g.stdout+g.stderr)
	assert.Contains(t, g.stdout, "PASS")
	// --ab is the whole input.
	g = fsdpbench(t, dir, "gate", "--ab", abDir, "--current", abDir)
	assert.Equal(t, 2, g.code)
}

// TestABOnGotrain measures real trainers on this (shared, noisy) machine: gonum
// against OpenBLAS (several times slower on this model) is found slower, with
// an interval below 0 that holds the change of the two sides' medians; two
// identical option sets give an interval that holds 0, at 99%: on a shared
// machine whose load comes in bursts a 95% interval misses 0 more often than
// one time in twenty (2 of 9 trials here at a load average of 9 to 13 on 2
// cores), too often for a test. Kept to 10 pairs of short runs.
func TestABOnGotrain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: blas
backend: gotrain
hardware: cpu
model: tiny
seq_len: 128
steps: 20
warmup_steps: 1
timeout: 2m
base:
  world_size: 1
  sharding: ddp
  batch_per_device: 4
  mixed_precision: fp32
`)
	abDir := filepath.Join(dir, "fsdpbench-results", "blas-ab")

	t.Run("identical", func(t *testing.T) {
		res := fsdpbench(t, dir, "ab", spec, "--a", "backend_options.blas=gonum", "--b", "backend_options.blas=gonum", "--pairs", "10", "--confidence", "0.99", "--progress", "none")
		require.Equal(t, 0, res.code, res.stderr)
		ab, c := readABChange(t, abDir, results.SampleTokensPerSPerRank)
		require.True(t, c.Backed)
		// Every repeat of both sides read the machine (ab's repeats go through
		// the harness's repeatOnce), and ab.json pairs them.
		p := ab.Points[0]
		require.NotNil(t, p.AMachine)
		require.NotNil(t, p.BMachine)
		require.Len(t, p.Pairs, 10)
		for i, pr := range p.Pairs {
			assert.Positive(t, pr.A.CPUs, "pair %d: A's machine state", i+1)
			assert.NotNil(t, pr.B.OtherCPUShare, "pair %d: B's machine state", i+1)
			assert.Equal(t, results.MachineDiff(&pr.A, &pr.B) != "", pr.MachineDiff != "", "pair %d", i+1)
		}
		assert.LessOrEqual(t, c.Lo, 0.0, "identical sets: %+v", c)
		assert.GreaterOrEqual(t, c.Hi, 0.0, "identical sets: %+v", c)
		g := fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "tokens_per_s_per_rank:-5%")
		assert.NotEqual(t, 1, g.code, "identical code never fails the gate: %s", g.stdout)
		// The default rules (issue 37 item 5): the memory gotrain measures is
		// paired and decided, the memory it does not (reserved: no caching
		// allocator) is a skipped rule with its reason, never "inconclusive:
		// measure again"; only throughput may be too noisy to tell here.
		g = fsdpbench(t, dir, "gate", "--ab", abDir)
		assert.Contains(t, []int{ExitOK, ExitInconclusive}, g.code, "identical code: %s%s", g.stdout, g.stderr)
		assert.Regexp(t, `(?m)^pass +ws1-bs4-ddp-ac0-pre-fp32 +peak_mem_allocated_bytes:\+3% `, g.stdout)
		assert.Contains(t, g.stdout, "skipped rule peak_mem_reserved_bytes:+3%: no point of the A/B result has per-repeat peak_mem_reserved_bytes")
		assert.NotContains(t, g.stdout, "no per-repeat")
	})

	t.Run("gonum is slower", func(t *testing.T) {
		res := fsdpbench(t, dir, "ab", spec, "--a", "backend_options.blas=openblas", "--b", "backend_options.blas=gonum", "--pairs", "10", "--progress", "none")
		ab, err := results.ReadAB(abDir)
		if res.code != 0 && err == nil && len(ab.Points) == 1 && ab.Points[0].AStatus != results.StatusOK &&
			strings.Contains(ab.Points[0].AError, "OpenBLAS") {
			if os.Getenv("FSDPBENCH_REQUIRE_OPENBLAS") == "1" {
				t.Fatalf("OpenBLAS does not load (%s), and FSDPBENCH_REQUIRE_OPENBLAS=1", ab.Points[0].AError)
			}
			t.Skipf("OpenBLAS does not load here: %s (set FSDPBENCH_REQUIRE_OPENBLAS=1 to fail instead)", ab.Points[0].AError)
		}
		require.Equal(t, 0, res.code, res.stderr)
		_, c := readABChange(t, abDir, results.SampleTokensPerSPerRank)
		require.True(t, c.Backed)
		assert.Less(t, c.Median, 0.0, "gonum is slower: %+v", c)
		ofMedians := c.BMedian/c.AMedian - 1
		assert.LessOrEqual(t, c.Lo, ofMedians, "%+v", c)
		assert.GreaterOrEqual(t, c.Hi, ofMedians, "%+v", c)
		// A slowdown is never passed. It fails, or, on a machine busy enough
		// that the pairs straddle the limit or too many ran A and B under
		// different states, is inconclusive (the gate's verdicts are
		// unit-tested on fixed pairs in results). Only a conclusive verdict
		// needs the interval below zero: under load (CI once measured
		// [-39.5%, +10.1%] around a median of -29.6%, six of ten pairs under
		// different machine states) the test must not fail on noise the gate
		// itself calls unresolved.
		g := fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "tokens_per_s_per_rank:-5%")
		switch g.code {
		case ExitFailed:
			assert.Less(t, c.Hi, 0.0, "a failing verdict rests on an interval below zero: %+v", c)
		case ExitInconclusive:
			t.Logf("inconclusive on this busy machine (%s): %s", loadAverage(), g.stdout)
		default:
			t.Errorf("gonum is slower: gate --ab exit %d, want 1 (or 3 under load): %s", g.code, g.stdout)
		}
	})
}

// loadAverage is /proc/loadavg's first three figures, for a test's log.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(b))
	return "load average " + strings.Join(f[:min(3, len(f))], " ")
}

// TestABUsageErrors: each mistake exits 2 before anything runs, saying what to
// give instead.
func TestABUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, "name: u\nbackend: sim\nhardware: h100-sxm\nmodel: gpt2-124m\nseq_len: 1024\nsteps: 2\nbase: {world_size: 1, sharding: ddp, batch_per_device: 4}\n")
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"ab", spec}, "give what differs: --a KEY=VALUE"},
		{[]string{"ab", spec, "--b", "batch_per_device=8", "--pairs", "3"}, "--pairs 3: give 6 to 1000"},
		{[]string{"ab", spec, "--b", "batch_per_device=8", "--order", "aabb"}, `--order "aabb": use abba or abab`},
		{[]string{"ab", spec, "--b", "batch_per_device=8", "--confidence", "1"}, "--confidence 1: give a level from 0.5 to 0.999"},
		{[]string{"ab", spec, "--b", "batch_per_device=8", "--confidence", "0.99", "--pairs", "7"}, "--pairs 7: a 99% confidence interval needs at least 8 pairs"},
		{[]string{"ab", spec, "--b", "batch_per_device=8,16"}, "A has 1 runs and B 2"},
		{[]string{"ab", spec, "--b", "sharding=full_shrad"}, "variant B"},
		{[]string{"sweep", spec, "--repeat-order", "random"}, `--repeat-order "random": use interleaved or sequential`},
	} {
		res := fsdpbench(t, dir, tt.args...)
		assert.Equal(t, 2, res.code, "%v: %s", tt.args, res.stderr)
		assert.Contains(t, res.stderr, tt.want, tt.args)
	}
	_, err := os.Stat(filepath.Join(dir, "fsdpbench-results"))
	assert.True(t, os.IsNotExist(err), "nothing ran")
}
