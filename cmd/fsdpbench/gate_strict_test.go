package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// slower is issue 13's regression: throughput per rank 54% lower.
func slower(r *results.Result) { r.MeasuredWallS /= 0.46 }

// writeSweepAs stores the runs like writeGateTree, under the sweep name given.
func writeSweepAs(t *testing.T, dir, sweep string, specs []gateSpec) string {
	t.Helper()
	sd, err := results.OpenSweep(dir)
	require.NoError(t, err)
	for _, s := range specs {
		rc, m := gateRun(s.ws, s.sharding, s.edit)
		rc.Sweep = sweep
		require.NoError(t, sd.WriteRunArgs(rc))
		require.NoError(t, sd.WriteMetrics(rc.ID, m))
	}
	return dir
}

// allSpecs is okSpecs with edit applied to every run.
func allSpecs(edit func(*results.Result)) []gateSpec {
	out := make([]gateSpec, len(okSpecs))
	for i, s := range okSpecs {
		out[i] = gateSpec{s.ws, s.sharding, edit}
	}
	return out
}

// TestGateFailsWhenItMust is issue 13's list of currents against which `gate`
// passed (exit 0): each must now fail (exit 1) and say why.
func TestGateFailsWhenItMust(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	failedBase := writeGateTree(t, filepath.Join(dir, "failed-base"), allSpecs(func(r *results.Result) {
		*r = results.Result{Status: results.StatusFailed, Error: "exit status 1", WorldSize: r.WorldSize}
	}))
	// A user script that reports no model FLOPs, so no MFU, on either side.
	noMFU := func(r *results.Result) { r.ModelFlopsPerToken = 0 }
	noMFUBase := writeGateTree(t, filepath.Join(dir, "nomfu-base"), allSpecs(noMFU))

	tests := []struct {
		name     string
		baseline string
		current  func(t *testing.T, dir string) string
		flags    []string
		want     string
	}{
		{"empty sweep directory", base, func(t *testing.T, dir string) string {
			require.NoError(t, os.MkdirAll(filepath.Join(dir, "e", "runs"), 0o755))
			return filepath.Join(dir, "e")
		}, nil, "the current results hold no finished run"},
		{"runs killed before any finished", base, func(t *testing.T, dir string) string {
			sd, err := results.OpenSweep(filepath.Join(dir, "killed"))
			require.NoError(t, err)
			for _, s := range okSpecs {
				rc, _ := gateRun(s.ws, s.sharding, nil)
				require.NoError(t, sd.WriteRunArgs(rc))
			}
			return sd.Path
		}, nil, "the current results hold no finished run"},
		{"export file []", base, func(t *testing.T, dir string) string {
			path := filepath.Join(dir, "empty.json")
			require.NoError(t, os.WriteFile(path, []byte("[]\n"), 0o644))
			return path
		}, nil, "the current results hold no finished run"},
		{"failed on both sides", failedBase, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "failed"), allSpecs(func(r *results.Result) {
				*r = results.Result{Status: results.StatusFailed, Error: "exit status 1", WorldSize: r.WorldSize}
			}))
		}, nil, "did not finish: failed: exit status 1"},
		{"ok runs without figures", base, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "null"), allSpecs(func(r *results.Result) {
				r.MeasuredWallS, r.Steps, r.PeakMemReservedBytes = 0, nil, nil
			}))
		}, nil, "tokens_per_s_per_rank was known in the baseline, unknown now"},
		{"another configuration", base, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "other"), []gateSpec{{8, sweeps.FullShard, slower}})
		}, nil, "missing: in the baseline, not in the current results"},
		{"another configuration, partial runs allowed", base, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "other2"), []gateSpec{{8, sweeps.FullShard, slower}})
		}, []string{"--allow-missing"}, "every check was skipped"},
		{"two sweeps with the same run IDs", base, func(t *testing.T, dir string) string {
			root := filepath.Join(dir, "two")
			writeSweepAs(t, filepath.Join(root, "nightly"), "nightly", allSpecs(slower))
			writeSweepAs(t, filepath.Join(root, "nightly-again"), "nightly-again", allSpecs(slower))
			return root
		}, nil, "-54.0%, beyond the -5% limit"},
		{"a rule on a figure unknown on both sides", noMFUBase, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "nomfu"), allSpecs(noMFU))
		}, []string{"--rule", "mfu>=0.35", "--rule", "tokens_per_s_per_rank:-5%"}, "mfu unknown: the bound 0.35 cannot be checked"},
		{"a relative rule on a figure unknown on both sides", base, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "nomfu2"), okSpecs)
		}, []string{"--rule", "tokens_per_s_per_rank:-5%", "--rule", "peak_rss_bytes:+5%"}, "rule peak_rss_bytes:+5% decided nothing"},
		{"predicted figures against measured ones", base, func(t *testing.T, dir string) string {
			return writeGateTree(t, filepath.Join(dir, "predicted"), allSpecs(func(r *results.Result) { r.Predicted = true }))
		}, nil, "the baseline was measured, the current figure is predicted by the analytic model"},
		{"an index.jsonl that carries other figures", base, func(t *testing.T, dir string) string {
			cur := writeGateTree(t, filepath.Join(dir, "forged"), allSpecs(slower))
			forgeIndex(t, cur)
			return cur
		}, nil, "-54.0%, beyond the -5% limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cur := tt.current(t, t.TempDir())
			r := cli(t, append([]string{"gate", "--baseline", tt.baseline, "--current", cur}, tt.flags...)...)
			assert.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
			assert.Contains(t, r.stdout, "gate FAILED")
			assert.Contains(t, r.stdout, tt.want)
			assert.NotContains(t, r.stdout, "gate passed")
		})
	}
}

// forgeIndex appends to the sweep's index a line per run claiming the figures of an
// unchanged run, with the size and time of the metrics.json on disk: what a stale
// cache (or a forger) holds.
func forgeIndex(t *testing.T, sweepDir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(sweepDir, results.IndexFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	for _, s := range okSpecs {
		rc, m := gateRun(s.ws, s.sharding, nil)
		st, err := os.Stat(filepath.Join(sweepDir, results.RunsDir, rc.ID, results.MetricsFile))
		require.NoError(t, err)
		line, err := json.Marshal(map[string]any{"id": rc.ID, "metrics_size": st.Size(),
			"metrics_mtime_ns": st.ModTime().UnixNano(), "config": rc, "metrics": m})
		require.NoError(t, err)
		_, err = f.Write(append(line, '\n'))
		require.NoError(t, err)
	}
}

// TestGateRefusesBadInput: rules that can never fail, unreadable sides and flags out
// of range are usage or data errors (exit 2), never a verdict.
func TestGateRefusesBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	cur := writeGateTree(t, filepath.Join(dir, "cur"), allSpecs(slower))
	nostatus := writeGateTree(t, filepath.Join(dir, "nostatus"), okSpecs)
	rc, _ := gateRun(1, sweeps.FullShard, nil)
	nostatusFile := filepath.Join(nostatus, results.RunsDir, rc.ID, results.MetricsFile)
	b, err := os.ReadFile(nostatusFile)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(nostatusFile, []byte(strings.Replace(string(b), `"status": "ok",`, "", 1)), 0o644))
	rulesFile := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(rulesFile, []byte("rules:\n  - mfu>=.nan\n"), 0o644))
	rulesNaN := filepath.Join(dir, "rules-nan.yaml")
	require.NoError(t, os.WriteFile(rulesNaN, []byte("rules:\n  - tokens_per_s_per_rank:-NaN%\n"), 0o644))
	// This file made the YAML decoder panic (FuzzParseRulesFile).
	rulesCrash := filepath.Join(dir, "rules-crash.yaml")
	require.NoError(t, os.WriteFile(rulesCrash, []byte("rules:\n  ! 0000000000000000000000000000000000000"), 0o644))
	// An alias bomb: each level doubles the last one nine times.
	var bomb strings.Builder
	bomb.WriteString("a0: &a0 [tokens_per_s_per_rank:-5%]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&bomb, "a%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			fmt.Fprintf(&bomb, "*a%d,", i-1)
		}
		bomb.WriteString("]\n")
	}
	bomb.WriteString("rules: *a9\n")
	rulesBomb := filepath.Join(dir, "rules-bomb.yaml")
	require.NoError(t, os.WriteFile(rulesBomb, []byte(bomb.String()), 0o644))
	gate := func(extra ...string) []string {
		return append([]string{"gate", "--baseline", base, "--current", cur}, extra...)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"NaN drop", gate("--rule", "tokens_per_s_per_rank:-NaN%"), `"NaN" is not a finite number`},
		{"NaN bound", gate("--rule", "mfu>=NaN"), `"NaN" is not a finite number`},
		{"+Inf bound", gate("--rule", "peak_mem_reserved_bytes<=+Inf"), `"+Inf" is not a finite number`},
		{"-Inf bound", gate("--rule", "mfu>=-Inf"), `"-Inf" is not a finite number`},
		{"Inf rise", gate("--rule", "peak_mem_reserved_bytes:+Inf%"), `"Inf" is not a finite number`},
		{"drop of 100%", gate("--rule", "tokens_per_s_per_rank:-100%"), "would never fail"},
		{"fraction as percent", gate("--rule", "mfu<=35"), "mfu is a fraction"},
		{"NaN in a rules file", gate("--rules", rulesNaN), rulesNaN + ":2:5: rule"},
		{"unparsable number in a rules file", gate("--rules", rulesFile), rulesFile + ":2:5: rule"},
		{"rules file that crashed the decoder", gate("--rules", rulesCrash), rulesCrash + ":2:"},
		{"alias bomb", gate("--rules", rulesBomb), "once its aliases (*name) are expanded"},
		{"baseline without status", []string{"gate", "--baseline", nostatus, "--current", cur}, nostatusFile},
		{"current without status", []string{"gate", "--baseline", base, "--current", nostatus}, "status is missing"},
		{"alpha 0", gate("--alpha", "0"), "--alpha 0: give a significance level between 0 and 1"},
		{"alpha 1", gate("--alpha", "1"), "--alpha 1:"},
		{"alpha negative", gate("--alpha", "-0.5"), "--alpha -0.5:"},
		{"alpha NaN", gate("--alpha", "NaN"), "--alpha NaN:"},
		{"compare alpha 0", []string{"compare", base, cur, "--alpha", "0"}, "--alpha 0:"},
		{"compare alpha NaN", []string{"compare", base, cur, "--alpha", "NaN"}, "--alpha NaN:"},
		{"baseline is the current results", []string{"gate", "--baseline", base, "--current", base + "/"}, "would compare the results with themselves"},
		{"contradicting flags", gate("--fail-missing", "--allow-missing"), "contradict"},
		{"current inside history", []string{"gate", "--history", dir, "--current", cur}, "is inside --history"},
		{"history inside current", []string{"gate", "--history", filepath.Join(cur, "history"), "--current", cur}, "is inside --current"},
		{"ambiguous sweeps", func() []string {
			root := filepath.Join(dir, "ambiguous")
			writeSweepAs(t, filepath.Join(root, "a"), "a", okSpecs)
			writeSweepAs(t, filepath.Join(root, "b"), "b", okSpecs)
			return []string{"gate", "--baseline", base, "--current", root}
		}(), "which to compare with which cannot be told"},
		{"long binary rule", gate("--rule", strings.Repeat("\x00\xff", 4000)+":-5%"), "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cli(t, tt.args...)
			assert.Equal(t, ExitUsage, r.code, r.stdout+r.stderr)
			assert.Contains(t, r.stderr, tt.want)
			assert.Less(t, len(r.stderr), 2000, "errors do not echo kilobytes of input")
		})
	}
	_, err = os.Stat(filepath.Join(cur, "history"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing was stored inside --current")
}

// TestGateHistoryNeverTakesAFailedNight: an empty night fails, is stored as failed,
// and the next night's regression is still caught against the last good night.
func TestGateHistoryNeverTakesAFailedNight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hist := filepath.Join(dir, "history")
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.MkdirAll(filepath.Join(empty, results.RunsDir), 0o755))

	// The very first night is empty: it fails, and is no baseline.
	r := cli(t, "gate", "--history", hist, "--current", empty, "--commit", "a0", "--date", "2026-03-01")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "no finished run")
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)
	r = cli(t, "gate", "--history", hist, "--current", good, "--commit", "a1", "--date", "2026-03-02")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "baseline none (no night of "+hist+" passed yet)")

	r = cli(t, "gate", "--history", hist, "--current", empty, "--commit", "b2", "--date", "2026-03-03")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "failed: the next night keeps the last passing baseline")

	bad := writeGateTree(t, filepath.Join(dir, "bad"), allSpecs(slower))
	r = cli(t, "gate", "--history", hist, "--current", bad, "--commit", "c3", "--date", "2026-03-04")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "baseline 2026-03-02-a1")
	assert.Contains(t, r.stdout, "-54.0%, beyond the -5% limit")

	nights, err := results.Nights(hist)
	require.NoError(t, err)
	var passed []bool
	for _, n := range nights {
		passed = append(passed, n.Passed)
	}
	assert.Equal(t, []bool{false, true, false, false}, passed)

	// A night that older versions stored as passed while empty is no baseline either.
	old := filepath.Join(hist, "2026-03-05-old")
	require.NoError(t, os.MkdirAll(filepath.Join(old, "nightly", results.RunsDir), 0o755))
	night, err := json.Marshal(results.Night{Date: "2026-03-05", Commit: "old", Passed: true})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(old, results.NightFile), night, 0o644))
	last, err := results.LastPassingNight(hist)
	require.NoError(t, err)
	require.NotNil(t, last)
	assert.Equal(t, "2026-03-02-a1", last.Name)
}

// TestWriteErrorsNameTheDestination: a failed write names the file asked for, never
// the temporary file beside it.
func TestWriteErrorsNameTheDestination(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	same := writeGateTree(t, filepath.Join(dir, "same"), okSpecs)
	isDir := filepath.Join(dir, "x.csv")
	require.NoError(t, os.MkdirAll(filepath.Join(isDir, "keep"), 0o755))
	for _, out := range []string{filepath.Join(dir, "nope", "x.csv"), isDir} {
		r := cli(t, "export", base, "--format", "csv", "-o", out)
		assert.Equal(t, ExitUsage, r.code, "an unwritable path is a usage error, as in gate")
		assert.Contains(t, r.stderr, "write "+out+":")
		assert.NotContains(t, r.stderr, ".tmp")
		r = cli(t, "gate", "--baseline", base, "--current", same, "--junit", out)
		assert.Equal(t, ExitUsage, r.code)
		assert.Contains(t, r.stderr, out)
		assert.NotContains(t, r.stderr, ".tmp")
	}
}

// TestCommandsNameTheBadRun: every command that reads results refuses an invalid run
// (exit 2) and names its file.
func TestCommandsNameTheBadRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)
	rc, _ := gateRun(2, sweeps.FullShard, nil)
	for _, tt := range []struct{ name, body, want string }{
		{"banana", `{"run_id": "` + rc.ID + `", "status": "banana", "world_size": 2}`, `status "banana" is not a run status`},
		{"empty", `{}`, "status is missing"},
		{"null", `null`, "status is missing"},
		{"world size 0", `{"status": "ok", "world_size": 0}`, "world_size 0 is not between 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bad := writeGateTree(t, filepath.Join(t.TempDir(), "bad"), okSpecs)
			path := filepath.Join(bad, results.RunsDir, rc.ID, results.MetricsFile)
			require.NoError(t, os.WriteFile(path, []byte(tt.body), 0o644))
			for _, args := range [][]string{{"report", bad}, {"export", bad, "--format", "json"}, {"export", bad, "--format", "csv"},
				{"compare", good, bad}, {"compare", bad, good}, {"plot", bad, "--out", t.TempDir()},
				{"gate", "--baseline", bad, "--current", good}, {"gate", "--baseline", good, "--current", bad}} {
				r := cli(t, args...)
				assert.Equal(t, ExitUsage, r.code, "%v: %s", args, r.stdout)
				assert.Contains(t, r.stderr, path, "%v", args)
				assert.Contains(t, r.stderr, tt.want, "%v", args)
			}
		})
	}
}

// TestGateJUnitCarriesProblems: a gate that fails with no failed check (nothing
// measured) still fails its JUnit report, which is what CI shows.
func TestGateJUnitCarriesProblems(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.MkdirAll(filepath.Join(empty, results.RunsDir), 0o755))
	junit := filepath.Join(dir, "gate.xml")
	r := cli(t, "gate", "--baseline", base, "--current", empty, "--junit", junit, "--allow-missing")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	x, err := os.ReadFile(junit)
	require.NoError(t, err)
	assert.Contains(t, string(x), `<failure message="the current results hold no finished run (no metrics.json): nothing was measured" type="gate">`)
	assert.Contains(t, string(x), `<testsuites name="fsdpbench gate" tests="13" failures="1" errors="0" skipped="12"`,
		"the 12 skipped checks and the problem that fails the gate")
}

// TestPlotOfAnExportedFile: the charts of an exported JSON file go beside it (they
// went under it, "x.json/plots", which cannot be made).
func TestPlotOfAnExportedFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := writeGateTree(t, filepath.Join(dir, "base"), okSpecs)
	exported := filepath.Join(dir, "base.json")
	r := cli(t, "export", base, "--format", "json", "-o", exported)
	require.Equal(t, ExitOK, r.code, r.stderr)
	r = cli(t, "plot", exported)
	require.Equal(t, ExitOK, r.code, r.stderr)
	assert.FileExists(t, filepath.Join(dir, "plots", "scaling.svg"))
}
