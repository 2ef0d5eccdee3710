package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// gateRun is one run of a "nightly" sweep as a backend would report it: tokens/s per
// rank of about 2,560, 10 GiB reserved at world size 2; edit changes the report.
func gateRun(ws int, sharding string, edit func(*results.Result)) (sweeps.RunConfig, results.Metrics) {
	rc := sweeps.Defaults()
	rc.Sweep, rc.Backend, rc.Hardware, rc.Model = "nightly", "gotrain", "h100-sxm", "tiny"
	rc.SeqLen, rc.Steps, rc.Repeats = 128, 4, 1
	rc.Nodes, rc.GPUsPerNode, rc.WorldSize, rc.BatchPerDevice, rc.GradAccum = 1, ws, ws, 2, 1
	rc.GlobalBatch, rc.Sharding = 2*ws, sharding
	rc.AssignID()
	res := results.Result{Status: results.StatusOK, WorldSize: ws, Nodes: 1, GPUsPerNode: ws,
		TokensPerStep: rc.TokensPerStep(), MeasuredWallS: 0.4, ModelFlopsPerToken: 1.2e9, PeakFlopsPerS: 989e12,
		PeakMemReservedBytes: results.I64(int64(20<<30) / int64(ws))}
	for s := 0; s < rc.Steps; s++ {
		res.Steps = append(res.Steps, results.Step{Step: s, StepTimeS: 0.1, Tokens: rc.TokensPerStep()})
	}
	if edit != nil {
		edit(&res)
	}
	return rc, results.Normalize(rc, []results.Result{res})
}

type gateSpec struct {
	ws       int
	sharding string
	edit     func(*results.Result)
}

// writeGateTree stores the runs as `fsdpbench sweep` would, under dir.
func writeGateTree(t *testing.T, dir string, specs []gateSpec) string {
	t.Helper()
	sd, err := results.OpenSweep(dir)
	require.NoError(t, err)
	for _, s := range specs {
		rc, m := gateRun(s.ws, s.sharding, s.edit)
		require.NoError(t, sd.WriteRunArgs(rc))
		require.NoError(t, sd.WriteMetrics(rc.ID, m))
	}
	return dir
}

var (
	baseSpecs = []gateSpec{{1, sweeps.FullShard, nil}, {2, sweeps.FullShard, nil}, {2, sweeps.NoShard, nil}, {4, sweeps.FullShard, nil}}
	// 10% slower, 2% more memory, out of memory, ws4 missing.
	curSpecs = []gateSpec{
		{1, sweeps.FullShard, func(r *results.Result) { r.MeasuredWallS /= 0.9 }},
		{2, sweeps.FullShard, func(r *results.Result) { r.PeakMemReservedBytes = results.I64(*r.PeakMemReservedBytes * 102 / 100) }},
		{2, sweeps.NoShard, func(r *results.Result) {
			*r = results.Result{Status: results.StatusOOM, Error: "CUDA out of memory", WorldSize: 2}
		}},
	}
	okSpecs = []gateSpec{{1, sweeps.FullShard, nil}, {2, sweeps.FullShard, nil}, {2, sweeps.NoShard, nil}, {4, sweeps.FullShard, nil}}
)

// cli runs the command line in-process through run, as main does.
func cli(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, &stdout, &stderr)
	return result{stdout.String(), stderr.String(), code}
}

func TestGateExitCodes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), baseSpecs)
	cur := writeGateTree(t, filepath.Join(dir, "cur"), curSpecs)
	junit, md := filepath.Join(dir, "gate.xml"), filepath.Join(dir, "gate.md")

	r := cli(t, "gate", "--baseline", base, "--current", cur, "--rule", "tokens_per_s_per_rank:-5%",
		"--rule", "peak_mem_reserved_bytes:+3%", "--junit", junit, "--markdown", md, "--allow-missing")
	assert.Equal(t, ExitFailed, r.code, r.stderr)
	assert.Contains(t, r.stdout, "gate FAILED: 3 of 8 checks failed, in 2 of 4 runs")
	assert.Contains(t, r.stdout, "-10.0%, beyond the -5% limit")
	assert.Contains(t, r.stdout, "+2.0%, within the +3% limit")
	assert.Contains(t, r.stdout, "was ok, now oom: CUDA out of memory")
	assert.Contains(t, r.stdout, "ws4-bs2-full_shard-ac0-pre")
	assert.Contains(t, r.stdout, "not statistically backed")

	x, err := os.ReadFile(junit)
	require.NoError(t, err)
	var suites struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
		Skipped  int `xml:"skipped,attr"`
		Suites   []struct {
			Cases []struct {
				Name      string    `xml:"name,attr"`
				ClassName string    `xml:"classname,attr"`
				Failure   *struct{} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	require.NoError(t, xml.Unmarshal(x, &suites))
	assert.Equal(t, 8, suites.Tests)
	assert.Equal(t, 3, suites.Failures)
	assert.Equal(t, 2, suites.Skipped, "the missing run's two rules")
	require.Len(t, suites.Suites, 1)
	require.Len(t, suites.Suites[0].Cases, 8)
	m, err := os.ReadFile(md)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(m), "### ❌ fsdpbench gate FAILED"))

	// Passing, with the default rules.
	same := writeGateTree(t, filepath.Join(dir, "same"), okSpecs)
	r = cli(t, "gate", "--baseline", base, "--current", same, "--format", "json")
	assert.Equal(t, ExitOK, r.code, r.stderr)
	var rep results.GateReport
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	assert.True(t, rep.Passed)
	assert.Len(t, rep.Rules, len(results.DefaultRules))
	assert.Contains(t, r.stderr, "gate passed")

	// By default the missing run fails (--fail-missing is the default, still accepted).
	for _, flags := range [][]string{nil, {"--fail-missing"}} {
		r = cli(t, append([]string{"gate", "--baseline", base, "--current", cur, "--rule", "peak_mem_reserved_bytes:+3%"}, flags...)...)
		assert.Equal(t, ExitFailed, r.code)
		assert.Contains(t, r.stdout, "│ FAIL    │ missing: in the baseline, not in the current results")
	}

	// An exported JSON file works as either side.
	exported := filepath.Join(dir, "base.json")
	r = cli(t, "export", base, "--format", "json", "-o", exported)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r = cli(t, "gate", "--baseline", exported, "--current", same, "--format", "markdown")
	assert.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "### ✅ fsdpbench gate passed")
}

func TestGateUsageErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), baseSpecs)
	rules := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rules, []byte("rules:\n  - tokens_per_s_per_rank:-5%\n  - mfu>>0.3\n"), 0o644))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no current", []string{"gate", "--baseline", base}, "--current is required"},
		{"no baseline", []string{"gate", "--current", base}, "give --baseline"},
		{"bad rule", []string{"gate", "--baseline", base, "--current", base, "--rule", "tokens_per_s:5%"}, "needs a direction"},
		{"unknown metric", []string{"gate", "--baseline", base, "--current", base, "--rule", "tokens:-5%"}, "unknown metric or derived \"tokens\""},
		{"rules file", []string{"gate", "--baseline", base, "--current", base, "--rules", rules}, rules + ":3:5: rule \"mfu>>0.3\""},
		{"no results", []string{"gate", "--baseline", filepath.Join(dir, "nope"), "--current", base}, "--baseline: results"},
		{"format", []string{"gate", "--baseline", base, "--current", base, "--format", "xml"}, "--format \"xml\""},
		{"history needs a directory", []string{"gate", "--history", dir, "--current", filepath.Join(dir, "x.json")}, "must be a results directory"},
		{"compare args", []string{"compare", base}, "accepts 2 arg"},
		{"compare metric", []string{"compare", base, base, "--metric", "status"}, "is text"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cli(t, tt.args...)
			assert.Equal(t, ExitUsage, r.code, r.stdout)
			assert.Contains(t, r.stderr, tt.want)
		})
	}
}

func TestGateHistory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hist := filepath.Join(dir, "history")
	night1 := writeGateTree(t, filepath.Join(dir, "n1"), baseSpecs)
	night2 := writeGateTree(t, filepath.Join(dir, "n2"), curSpecs)
	night3 := writeGateTree(t, filepath.Join(dir, "n3"), okSpecs)

	r := cli(t, "gate", "--history", hist, "--current", night1, "--commit", "aaaa1111", "--date", "2026-03-01")
	require.Equal(t, ExitOK, r.code, r.stderr+r.stdout)
	assert.Contains(t, r.stdout, "none (first night of")
	assert.Contains(t, r.stderr, "stored night "+filepath.Join(hist, "2026-03-01-aaaa1111"))

	r = cli(t, "gate", "--history", hist, "--current", night2, "--commit", "bbbb2222", "--date", "2026-03-02")
	require.Equal(t, ExitFailed, r.code, r.stderr+r.stdout)
	assert.Contains(t, r.stdout, "baseline 2026-03-01-aaaa1111")
	assert.Contains(t, r.stderr, "failed: the next night keeps the last passing baseline")

	r = cli(t, "gate", "--history", hist, "--current", night3, "--commit", "cccc3333", "--date", "2026-03-03")
	require.Equal(t, ExitOK, r.code, r.stderr+r.stdout)
	assert.Contains(t, r.stdout, "baseline 2026-03-01-aaaa1111", "the failed night is not a baseline")

	nights, err := results.Nights(hist)
	require.NoError(t, err)
	require.Len(t, nights, 3)
	assert.Equal(t, []bool{true, false, true}, []bool{nights[0].Passed, nights[1].Passed, nights[2].Passed})
	last, err := results.LastPassingNight(hist)
	require.NoError(t, err)
	assert.Equal(t, "2026-03-03-cccc3333", last.Name)
	runs, err := results.Load(last.Dir)
	require.NoError(t, err)
	assert.Len(t, runs, len(okSpecs), "the night holds the results tree")

	// The same night again is stored beside it, never over it (issue 37).
	r = cli(t, "gate", "--history", hist, "--current", night3, "--commit", "cccc3333", "--date", "2026-03-03")
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stderr, "stored night "+filepath.Join(hist, "2026-03-03-cccc3333-2"))
	nights, err = results.Nights(hist)
	require.NoError(t, err)
	assert.Len(t, nights, 4)
}

func TestCompareCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), baseSpecs)
	cur := writeGateTree(t, filepath.Join(dir, "cur"), curSpecs)
	r := cli(t, "compare", base, cur)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.Contains(t, r.stdout, "tokens/s/rank")
	assert.Contains(t, r.stdout, "-10.00% ¹")
	assert.Contains(t, r.stdout, "geomean")
	assert.Contains(t, r.stdout, "was ok, now oom")
	assert.Contains(t, r.stdout, "not statistically backed")

	r = cli(t, "compare", base, cur, "--format", "json", "--metric", "peak_mem_reserved_bytes")
	require.Equal(t, ExitOK, r.code, r.stderr)
	var cmp results.Comparison
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &cmp))
	assert.Equal(t, []string{"peak_mem_reserved_bytes"}, cmp.Metrics)
	assert.Len(t, cmp.Rows, 4)
}

func TestPlotCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), baseSpecs)
	cur := writeGateTree(t, filepath.Join(dir, "cur"), curSpecs)
	out := filepath.Join(dir, "plots")
	r := cli(t, "plot", base, "--out", out, "--baseline", cur)
	require.Equal(t, ExitOK, r.code, r.stderr)
	for _, name := range []string{"scaling", "memory", "regression"} {
		for _, ext := range []string{".png", ".svg"} {
			assert.FileExists(t, filepath.Join(out, name+ext))
			assert.Contains(t, r.stdout, filepath.Join(out, name+ext))
		}
	}
	r = cli(t, "plot", base, "--history", filepath.Join(dir, "none"))
	assert.Equal(t, ExitUsage, r.code)
	assert.Contains(t, r.stderr, "no nights stored")
}

func TestExampleCIRules(t *testing.T) {
	rules, err := results.LoadRules(filepath.Join("..", "..", "examples", "ci", "rules.yaml"))
	require.NoError(t, err, "examples/ci/nightly.yml gates with this file")
	assert.NotEmpty(t, rules)
	wf, err := os.ReadFile(filepath.Join("..", "..", "examples", "ci", "nightly.yml"))
	require.NoError(t, err)
	for _, want := range []string{"fsdpbench gate --history", "--junit gate.xml", "GITHUB_STEP_SUMMARY", "fsdpbench plot", "--format csv"} {
		assert.Contains(t, string(wf), want)
	}
}
