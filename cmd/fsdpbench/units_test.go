package main

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestCPUMemoryReadsInMiB runs the CPU example (the Go trainer, a few MiB per
// rank) and reads its memory everywhere a user would, as the spec's own
// comment suggests: the sweep's progress lines and table, the pivot report,
// a gate and plan show MiB, never 0.00 GiB, and the default table has a
// memory column although a CPU has no allocator reserve.
func TestCPUMemoryReadsInMiB(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec, err := filepath.Abs(filepath.Join("..", "..", "sweeps", "examples", "cpu-strategies.yaml"))
	require.NoError(t, err)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "plain", "--wide")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	out := res.stdout + res.stderr
	assert.Regexp(t, `ok .* peak_allocated=[0-9.]+ MiB`, out, "the progress line")
	assert.Contains(t, res.stdout, "peak allocated (MiB)", "the default table shows the memory measured")
	assert.NotContains(t, out, "0.00 ")

	sweepDir := filepath.Join("out", "cpu-strategies")
	res = fsdpbench(t, dir, "report", sweepDir, "--rows", "world_size", "--cols", "sharding", "--metric", "peak_mem_allocated_bytes")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Regexp(t, `^peak allocated \(MiB\)\n`, res.stdout)
	assert.NotContains(t, res.stdout, "0.00")

	base := filepath.Join(dir, "base")
	require.NoError(t, os.CopyFS(base, os.DirFS(filepath.Join(dir, sweepDir))))
	res = fsdpbench(t, dir, "gate", "--baseline", base, "--current", sweepDir, "--rule", "peak_mem_allocated_bytes:+3%")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Regexp(t, `[0-9.]+ MiB +│ +[0-9.]+ MiB +│ pass`, res.stdout)
	assert.NotContains(t, res.stdout, "0.00 GiB")

	res = fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, "peak reserved MiB")
	assert.NotContains(t, res.stdout, " 0.0 ")
}

// tableLines are the lines of out drawn as a table (box-drawing rules).
func tableLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "│") || strings.HasPrefix(l, "┌") || strings.HasPrefix(l, "└") || strings.HasPrefix(l, "├") {
			lines = append(lines, l)
		}
	}
	return lines
}

// TestPlanRecommendBackendsFitWidth: plan, recommend and backends fit their
// tables to --width as report does (saying what they left out), and print
// them whole under --wide; plan shows tokens/s per rank as the sweep's own
// table does, the total only under --wide.
func TestPlanRecommendBackendsFitWidth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := quickstartSpec(t)
	for _, args := range [][]string{
		{"plan", spec},
		{"recommend", "--model", "llama3-8b", "--hardware", "h100-sxm", "--global-batch", "16", "--seq-len", "8192", "--budget-gib", "60"},
		{"backends"},
	} {
		res := fsdpbench(t, dir, append(args, "--width", "80")...)
		require.Equal(t, 0, res.code, "%v: %s", args, res.stderr)
		lines := tableLines(res.stdout)
		require.NotEmpty(t, lines, "%v", args)
		assert.LessOrEqual(t, widest(strings.Join(lines, "\n")), 80, "%v:\n%s", args, res.stdout)
		assert.Contains(t, res.stdout, "not shown: ", "%v", args)
		assert.Contains(t, res.stdout, "--wide", "%v", args)
		wide := fsdpbench(t, dir, append(args, "--wide")...)
		require.Equal(t, 0, wide.code, "%v: %s", args, wide.stderr)
		assert.NotContains(t, wide.stdout, "--wide shows", "%v", args)
		assert.Greater(t, widest(strings.Join(tableLines(wide.stdout), "\n")), 80, "%v", args)
	}

	// Plan's per-rank figure is the sim's own tokens_per_s_per_rank.
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	res = fsdpbench(t, dir, "export", filepath.Join("out", "quickstart"), "--format", "csv", "-o", "q.csv")
	require.Equal(t, 0, res.code, res.stderr)
	f, err := os.Open(filepath.Join(dir, "q.csv"))
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	col := map[string]int{}
	for j, h := range recs[0] {
		col[h] = j
	}
	perRank := map[string]float64{}
	for _, rec := range recs[1:] {
		v, err := strconv.ParseFloat(rec[col["tokens_per_s_per_rank"]], 64)
		require.NoError(t, err)
		perRank[rec[col["id"]]] = v
	}
	for _, wide := range []bool{false, true} {
		args := []string{"plan", spec}
		if wide {
			args = append(args, "--wide")
		}
		res = fsdpbench(t, dir, args...)
		require.Equal(t, 0, res.code, res.stderr)
		lines := tableLines(res.stdout)
		header := strings.Split(lines[1], "│")
		at, total := -1, -1
		for j, h := range header {
			switch strings.TrimSpace(h) {
			case "tokens/s/rank":
				at = j
			case "tokens/s":
				total = j
			}
		}
		require.Positive(t, at, lines[1])
		assert.Equal(t, wide, total > 0, "the total only under --wide: %s", lines[1])
		seen := 0
		for _, l := range lines[3 : len(lines)-1] {
			cells := strings.Split(l, "│")
			id := strings.TrimSpace(cells[1])
			want, ok := perRank[id]
			require.True(t, ok, "plan's run %s is the sweep's", id)
			got, err := strconv.ParseFloat(strings.TrimSpace(cells[at]), 64)
			require.NoError(t, err)
			assert.InDelta(t, want, got, 0.5, id)
			seen++
		}
		assert.Equal(t, len(perRank), seen)
	}
}

// TestIngestPrintsDerivedMappings: a value ingest derives from a formula (the
// Trainer's replicas) is printed with the whole formula, not cut at its first
// parenthesis ("… ÷ -> grad_accum=1").
func TestIngestPrintsDerivedMappings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := filepath.Join(dir, "past", "trainer")
	require.NoError(t, os.MkdirAll(run, 0o755))
	// 48 samples/s × 100 s ÷ (300 steps × 2 samples) = 8 replicas.
	require.NoError(t, os.WriteFile(filepath.Join(run, "train_results.json"),
		[]byte(`{"train_runtime": 100.0, "train_samples_per_second": 48.0, "train_tokens_per_second": 4000.0}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(run, "trainer_state.json"),
		[]byte(`{"train_batch_size": 2, "global_step": 300, "max_steps": 300, "log_history": [{"loss": 2.5, "step": 10}, {"loss": 1.5, "step": 300}]}`), 0o644))
	res := fsdpbench(t, dir, "ingest", "past", "--set", "world_size=8", "--set", "model=tiny", "--results", "out")
	require.Equal(t, 0, res.code, "%s\n%s", res.stdout, res.stderr)
	assert.Contains(t, res.stdout, "train_samples_per_second × train_runtime ÷ (max_steps × train_batch_size) = 8 ÷ world_size -> grad_accum=1")
	assert.NotContains(t, res.stdout, "÷ ->")
}

// TestPredictedVsMeasuredMemoryUnit: the predicted-vs-measured table (recommend
// --measure, sweep's predictions) shows an H100's memory in GiB, not 7.373e+04 MiB.
func TestPredictedVsMeasuredMemoryUnit(t *testing.T) {
	tps := 5000.0
	r := results.Run{Config: sweeps.RunConfig{ID: "ws8-bs2-full_shard-ac0-pre-0123456789abcdef"},
		Metrics: results.Metrics{Status: results.StatusOK, TokensPerSPerRank: &tps, PeakMemReservedBytes: results.I64(70 << 30),
			Extra: map[string]any{results.ExtraPrediction: results.Prediction{TokensPerSPerRank: 5200, PeakMemReservedBytes: 72 << 30, Feasible: true}}}}
	var buf bytes.Buffer
	require.NoError(t, writePredictedVsMeasured(&buf, []results.Run{r}))
	assert.Contains(t, buf.String(), "pred peak GiB")
	assert.Regexp(t, `│ +72\.0 │ +70\.0 │ +\+2\.9% │`, buf.String())
	assert.NotContains(t, buf.String(), "e+0")
}
