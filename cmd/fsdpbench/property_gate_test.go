package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestABAAOnTheSimPassesTheGate (issue 37 item 5), as a user runs it: an A/A
// `fsdpbench ab` on the sim (the same setting on both sides: identical figures,
// repeat by repeat) and then `fsdpbench gate --ab` with the default rules exits
// 0. It exited 3 forever: ab.json held no per-repeat peak memory, and the two
// default memory rules were "inconclusive: measure again, with more pairs".
// The memory rule given explicitly passes too; a rule on a figure the sim
// does not measure is a usage error (exit 2), not noise.
func TestABAAOnTheSimPassesTheGate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, `name: aa
backend: sim
hardware: h100-sxm
model: gpt2-124m
seq_len: 1024
steps: 5
grid:
  world_size: [1, 2]
base:
  sharding: full_shard
  batch_per_device: 4
`)
	res := fsdpbench(t, dir, "ab", spec, "--a", "batch_per_device=4", "--b", "batch_per_device=4", "--pairs", "6", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	abDir := filepath.Join(dir, "fsdpbench-results", "aa-ab")
	ab, err := results.ReadAB(abDir)
	require.NoError(t, err)
	require.Len(t, ab.Points, 2)
	for _, p := range ab.Points {
		for _, m := range []string{results.SamplePeakReserved, results.SamplePeakAllocated} {
			c := p.Change(m)
			require.NotNil(t, c, "%s: ab.json pairs %s", p.Point, m)
			assert.Len(t, c.Changes, 6)
		}
	}

	g := fsdpbench(t, dir, "gate", "--ab", abDir)
	assert.Equal(t, ExitOK, g.code, g.stdout+g.stderr)
	assert.Contains(t, g.stdout, "PASS: 6 checks, 0 failed, 0 inconclusive")
	g = fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "peak_mem_allocated_bytes:+0%", "--format", "json")
	assert.Equal(t, ExitOK, g.code, g.stdout+g.stderr)
	var rep results.ABGateReport
	require.NoError(t, json.Unmarshal([]byte(g.stdout), &rep))
	assert.Equal(t, results.OutcomePass, rep.Verdict)
	g = fsdpbench(t, dir, "gate", "--ab", abDir, "--rule", "peak_rss_bytes:+3%")
	assert.Equal(t, ExitUsage, g.code, g.stdout+g.stderr)
	assert.Contains(t, g.stderr, "rule peak_rss_bytes:+3% (--rule) cannot be checked: no point of the A/B result has per-repeat peak_rss_bytes on both sides")
}

// TestGateHistoryKeepsBothNights (issue 37 item 4), as a nightly job runs it: a
// gate fails, the job measures again and gates again on the same date; both
// nights stay in the history, each with its own verdict (the second one
// inconclusive, not failed), named after the commit manifest.json recorded (not
// <date>-unknown: the runs' metrics.json carry none), and plot --history draws
// both.
func TestGateHistoryKeepsBothNights(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	night1, err := filepath.Abs(filepath.Join("..", "..", "examples", "gate-noisy", "night1"))
	require.NoError(t, err)
	cur := filepath.Join(dir, "cur")
	require.NoError(t, os.CopyFS(cur, os.DirFS(filepath.Join(filepath.Dir(night1), "night2"))))
	sd := &results.SweepDir{Path: cur}
	require.NoError(t, sd.WriteManifest(results.Manifest{Sweep: "noisy", Env: results.Env{Commit: "c0ffee1234567890"}}))
	hist := filepath.Join(dir, "history")
	gate := func(args ...string) result {
		cmd := command(dir, append([]string{"gate", "--history", hist, "--current", cur, "--date", "2026-03-02"}, args...)...)
		cmd.Env = withoutVar(cmd.Env, "GITHUB_SHA") // the commit comes from the manifest
		return runCommand(t, cmd)
	}

	r := gate("--baseline", night1, "--rule", "tokens_per_s_per_rank>=1e12")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "stored night "+filepath.Join(hist, "2026-03-02-c0ffee123456")+" (failed")
	r = gate("--baseline", night1, "--rule", "tokens_per_s_per_rank:-5%")
	require.Equal(t, ExitInconclusive, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "stored night "+filepath.Join(hist, "2026-03-02-c0ffee123456-2")+" (inconclusive")
	assert.Contains(t, r.stderr, "night 2 of 2026-03-02 c0ffee1234567890, the earlier ones kept")

	nights, err := results.Nights(hist)
	require.NoError(t, err)
	require.Len(t, nights, 2)
	assert.Equal(t, []string{"2026-03-02-c0ffee123456", "2026-03-02-c0ffee123456-2"}, []string{nights[0].Name, nights[1].Name})
	assert.Equal(t, []results.Outcome{results.OutcomeFail, results.OutcomeInconclusive}, []results.Outcome{nights[0].Verdict, nights[1].Verdict})
	for _, n := range nights {
		assert.Equal(t, "c0ffee1234567890", n.Commit)
		runs, err := results.Load(n.Dir)
		require.NoError(t, err)
		assert.NotEmpty(t, runs, "%s keeps its results", n.Name)
	}

	out := filepath.Join(dir, "plots")
	p := fsdpbench(t, dir, "plot", cur, "--history", hist, "--out", out)
	require.Equal(t, ExitOK, p.code, p.stderr)
	svg, err := os.ReadFile(filepath.Join(out, "trend.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "gate failed that night")
	assert.Contains(t, string(svg), "gate inconclusive that night")
}
