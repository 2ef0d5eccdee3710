package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// planSeeds is a sim grid of 2 × 2 × 2 × seeds points: past planTableMax with
// 150 seeds, so plan streams it, predicting each point the sim reads once.
func planSeeds(seeds int, extra string) string {
	vals := make([]string, seeds)
	for i := range vals {
		vals[i] = strconv.Itoa(i)
	}
	return `name: seeds
backend: sim
hardware: h100-sxm
model: llama3-8b
` + extra + `grid:
  world_size: [1, 8]
  batch_per_device: [1, 16]
  sharding: [full_shard, ddp]
  seed: [` + strings.Join(vals, ", ") + `]
`
}

// TestLargePlanSummaryCountsEveryRun: the summary of a streamed plan (issue 39
// item 16: one pass, one prediction per point the sim reads) counts every
// run once, by each axis, and its feasible runs are those of the one-row-per-
// run table (--wide) of the same spec.
func TestLargePlanSummaryCountsEveryRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, planSeeds(150, ""))
	res := fsdpbench(t, dir, "plan", spec)
	require.Equal(t, 0, res.code, res.stderr)
	m := regexp.MustCompile(`seeds: 1200 runs, (\d+) feasible, (\d+) infeasible`).FindStringSubmatch(res.stdout)
	require.NotNil(t, m, res.stdout)
	assert.Regexp(t, `│ seed\s+│ 149\s+│\s+8 │`, res.stdout)
	assert.Regexp(t, `│ sharding\s+│ ddp\s+│\s+600 │`, res.stdout)

	wide := fsdpbench(t, dir, "plan", spec, "--wide")
	require.Equal(t, 0, wide.code, wide.stderr)
	assert.Equal(t, m[1], fmt.Sprint(strings.Count(wide.stdout, "│ feasible")), "feasible runs in the table")
	assert.Equal(t, m[2], fmt.Sprint(strings.Count(wide.stdout, "│ infeasible")), "infeasible runs in the table")
}

// TestLargePlanSpecErrorNamesAllRuns: the preflight a streamed plan runs run
// by run reports a spec error as before, counting every run it hits.
func TestLargePlanSpecErrorNamesAllRuns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, planSeeds(150, "backend_options: {efficency: 0.3}\n"))
	res := fsdpbench(t, dir, "plan", spec)
	assert.Equal(t, 2, res.code, res.stderr)
	assert.Contains(t, res.stderr, "efficency")
	assert.Contains(t, res.stderr, "(all 1200 runs)")
	assert.Empty(t, res.stdout)
}
