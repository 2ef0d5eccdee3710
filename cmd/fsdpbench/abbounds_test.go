package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// editABFile rewrites dir's ab.json through edit, on its JSON as decoded.
func editABFile(t *testing.T, dir string, edit func(doc map[string]any)) string {
	t.Helper()
	path := filepath.Join(dir, results.ABFile)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	edit(doc)
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	return path
}

// TestGateABRefusesEditedABFile (issue 39 items 2 and 9): gate --ab on an
// ab.json edited past what ab writes is a usage error naming the file and the
// field, never a verdict: a million changes in one metric once passed "over
// 1000000 pairs", a change of 1e308 gave [-4.8%, +Inf%]. An ab.json with
// "points": [] is named as empty, not blamed on the rule given.
func TestGateABRefusesEditedABFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	changes := []float64{0.01, 0, -0.01, 0.02, 0, 0.01}
	metric := func(doc map[string]any) map[string]any {
		return doc["points"].([]any)[0].(map[string]any)["metrics"].([]any)[0].(map[string]any)
	}
	for _, tt := range []struct {
		name, says string
		edit       func(doc map[string]any)
	}{
		{"a million changes", "points[0].metrics[0].changes: tokens_per_s_per_rank: 1000000 pairs' changes and 0 dropped pairs, more than the 1000 pairs ab measures at most", func(doc map[string]any) {
			xs := make([]any, 1_000_000)
			for i := range xs {
				xs[i] = 0.0
			}
			metric(doc)["changes"] = xs
		}},
		{"a change of 1e308", "points[0].metrics[0].changes[5]: tokens_per_s_per_rank: 1e+308 is not a pair's change", func(doc map[string]any) {
			metric(doc)["changes"].([]any)[5] = 1e308
		}},
		{"a point twice", "points[1]: point ws1-bs4-ddp is listed twice", func(doc map[string]any) {
			doc["points"] = append(doc["points"].([]any), doc["points"].([]any)[0])
		}},
		{"order xyz", `order: "xyz" is not an order ab runs (abba, abab)`, func(doc map[string]any) { doc["order"] = "xyz" }},
		{"2 machine states for 6 changes", "points[0].pairs: holds 2 pairs' machine states for 6 pairs' changes", func(doc map[string]any) {
			p := doc["points"].([]any)[0].(map[string]any)
			p["pairs"] = p["pairs"].([]any)[:2]
		}},
		{"no point", "points: is empty: the file holds no point to judge a change at", func(doc map[string]any) { doc["points"] = []any{} }},
	} {
		sub := writeABResult(t, filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")), changes,
			[]float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, []float64{0.1, 0.1, 0.1, 0.1, 0.1, 0.1})
		path := editABFile(t, sub, tt.edit)
		g := fsdpbench(t, dir, "gate", "--ab", path, "--rule", "tokens_per_s_per_rank:-5%")
		assert.Equal(t, ExitUsage, g.code, "%s: %s%s", tt.name, g.stdout, g.stderr)
		assert.Contains(t, g.stderr, path+": "+tt.says, tt.name)
		assert.NotContains(t, g.stdout, "PASS", tt.name)
		assert.NotContains(t, g.stderr, "no rule", tt.name)
		assert.Less(t, len(g.stderr), 1000, tt.name)
	}
}

// TestReportRefusesMachineStatesPastTheRun (issue 39 item 2): a metrics.json
// whose env.machine does not agree with itself or with the run's repeats is an
// invalid run, named by file and field: other_cpu_share_max below
// other_cpu_share, 100,000 per-repeat states for a 6-repeat run.
func TestReportRefusesMachineStatesPastTheRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, "name: m\nbackend: sim\nhardware: h100-sxm\nmodel: llama3-8b\nrepeats: 6\nbase: {world_size: 8, batch_per_device: 1, sharding: full_shard}\n")
	r := fsdpbench(t, dir, "sweep", spec, "--progress", "none")
	require.Equal(t, ExitOK, r.code, r.stderr)
	found, err := filepath.Glob(filepath.Join(dir, "fsdpbench-results", "m", "runs", "*", "metrics.json"))
	require.NoError(t, err)
	require.Len(t, found, 1)
	orig, err := os.ReadFile(found[0])
	require.NoError(t, err)
	for _, tt := range []struct {
		machine map[string]any
		says    string
	}{
		{map[string]any{"repeats": 6, "cpus": 2, "other_cpu_share": 0.2, "other_cpu_share_max": 0.1},
			"invalid run: env.machine.other_cpu_share_max 0.1 is below other_cpu_share 0.2"},
		{map[string]any{"repeats": 6, "per_repeat": make([]map[string]any, 100_000)},
			"invalid run: env.machine.per_repeat holds 100000 states for a run of 6 repeats"},
		{map[string]any{"repeats": 999, "per_repeat": make([]map[string]any, 6)},
			"invalid run: env.machine.repeats 999 is not between 0 and 6 for a run of 6 repeats"},
	} {
		var doc map[string]any
		require.NoError(t, json.Unmarshal(orig, &doc))
		doc["env"].(map[string]any)["machine"] = tt.machine
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(found[0], b, 0o644))
		r := fsdpbench(t, dir, "report", filepath.Join(dir, "fsdpbench-results", "m"))
		assert.Equal(t, ExitUsage, r.code, r.stdout)
		assert.Contains(t, r.stderr, found[0]+" (run ")
		assert.Contains(t, r.stderr, tt.says)
	}
}
