package results

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// gateTime stamps the reports of these tests, so rendered output is stable.
var gateTime = time.Date(2026, 3, 4, 2, 0, 0, 0, time.UTC)

// writeTree stores runs as `fsdpbench sweep` would (run_args.json, then
// metrics.json) under dir and returns dir.
func writeTree(t *testing.T, dir string, runs []Run) string {
	t.Helper()
	sd, err := OpenSweep(dir)
	require.NoError(t, err)
	for _, r := range runs {
		require.NoError(t, sd.WriteRunArgs(r.Config))
		require.NoError(t, sd.WriteMetrics(r.Config.ID, r.Metrics))
	}
	return dir
}

// gateRun normalizes one repeat of the fixture backend for (ws, sharding), after
// edit changes what the backend reported.
func gateRun(ws int, sharding string, edit func(*Result)) Run {
	rc := fixtureConfig(ws, sharding)
	rc.Sweep = "nightly"
	rc.AssignID()
	res := fixtureResult(rc)
	if edit != nil {
		edit(&res)
	}
	return Run{Config: rc, Metrics: Normalize(rc, []Result{res})}
}

// gateTrees builds the baseline and current results trees of the example:
//
//	ws1 full_shard     tokens/s/rank 10% lower now
//	ws2 full_shard     peak reserved 2% higher now
//	ws2 no_shard       ok before, out of memory now
//	ws4 full_shard     in the baseline only
//	ws1 no_shard       unchanged
//	ws1 shard_grad_op  in the current results only
func gateTrees(t *testing.T) (baseDir, curDir string) {
	t.Helper()
	root := t.TempDir()
	base := []Run{
		gateRun(1, sweeps.FullShard, nil),
		gateRun(2, sweeps.FullShard, nil),
		gateRun(2, sweeps.NoShard, nil),
		gateRun(4, sweeps.FullShard, nil),
		gateRun(1, sweeps.NoShard, nil),
	}
	cur := []Run{
		gateRun(1, sweeps.FullShard, func(r *Result) { r.MeasuredWallS /= 0.9 }),
		gateRun(2, sweeps.FullShard, func(r *Result) { r.PeakMemReservedBytes = I64(*r.PeakMemReservedBytes * 102 / 100) }),
		gateRun(2, sweeps.NoShard, func(r *Result) {
			*r = Result{Status: StatusOOM, Error: "CUDA out of memory. Tried to allocate 2.00 GiB", WorldSize: 2,
				PeakMemReservedBytes: I64(79 << 30)}
		}),
		gateRun(1, sweeps.NoShard, nil),
		gateRun(1, sweeps.ShardGradOp, nil),
	}
	return writeTree(t, filepath.Join(root, "baseline"), base), writeTree(t, filepath.Join(root, "current"), cur)
}

var gateRules = []string{"tokens_per_s_per_rank:-5%", "peak_mem_reserved_bytes:+3%", "mfu>=0.0029"}

func runGate(t *testing.T, baseDir, curDir string, opt GateOptions) *GateReport {
	t.Helper()
	base, err := LoadPath(baseDir)
	require.NoError(t, err)
	cur, err := LoadPath(curDir)
	require.NoError(t, err)
	if opt.Rules == nil {
		opt.Rules, err = ParseRules(gateRules, "--rule")
		require.NoError(t, err)
	}
	opt.BaselineName, opt.CurrentName, opt.Now = "baseline", "current", gateTime
	g, err := Gate(base, cur, opt)
	require.NoError(t, err)
	return g
}

func TestGateVerdicts(t *testing.T) {
	baseDir, curDir := gateTrees(t)
	g := runGate(t, baseDir, curDir, GateOptions{AllowMissing: true})

	id := func(ws int, sh string) string { return gateRun(ws, sh, nil).Config.ID }
	type key struct{ run, rule string }
	want := map[key]Outcome{
		{id(1, sweeps.FullShard), gateRules[0]}:   OutcomeFail, // -10% beyond -5%
		{id(1, sweeps.FullShard), gateRules[1]}:   OutcomePass,
		{id(1, sweeps.FullShard), gateRules[2]}:   OutcomeFail, // MFU fell with the throughput, below the bound
		{id(2, sweeps.FullShard), gateRules[0]}:   OutcomePass,
		{id(2, sweeps.FullShard), gateRules[1]}:   OutcomePass, // +2% within +3%
		{id(2, sweeps.FullShard), gateRules[2]}:   OutcomePass,
		{id(2, sweeps.NoShard), gateRules[0]}:     OutcomeFail, // was ok, now oom
		{id(2, sweeps.NoShard), gateRules[1]}:     OutcomeFail,
		{id(2, sweeps.NoShard), gateRules[2]}:     OutcomeFail,
		{id(4, sweeps.FullShard), gateRules[0]}:   OutcomeSkip, // missing
		{id(4, sweeps.FullShard), gateRules[1]}:   OutcomeSkip,
		{id(4, sweeps.FullShard), gateRules[2]}:   OutcomeSkip,
		{id(1, sweeps.NoShard), gateRules[0]}:     OutcomePass,
		{id(1, sweeps.NoShard), gateRules[1]}:     OutcomePass,
		{id(1, sweeps.NoShard), gateRules[2]}:     OutcomePass,
		{id(1, sweeps.ShardGradOp), gateRules[0]}: OutcomeSkip, // new: nothing to compare with
		{id(1, sweeps.ShardGradOp), gateRules[1]}: OutcomeSkip,
		{id(1, sweeps.ShardGradOp), gateRules[2]}: OutcomePass, // absolute bounds apply to new runs
	}
	got := map[key]Outcome{}
	for _, c := range g.Checks {
		got[key{c.Run, c.Rule.String()}] = c.Outcome
	}
	assert.Equal(t, want, got, "one check per run x rule, none dropped")
	assert.False(t, g.Passed)
	assert.Equal(t, 5, g.Failures)
	assert.Equal(t, 5, g.Skipped)
	assert.Equal(t, []string{id(4, sweeps.FullShard)}, g.Missing)
	assert.Equal(t, []string{id(1, sweeps.ShardGradOp)}, g.New)

	for _, c := range g.Checks {
		switch {
		case c.Run == id(1, sweeps.FullShard) && c.Rule.Metric == "tokens_per_s_per_rank":
			require.NotNil(t, c.Delta.Change)
			assert.InDelta(t, -0.10, *c.Delta.Change, 1e-9)
			assert.False(t, c.Delta.Backed)
			assert.Contains(t, c.Reason, "not statistically backed")
		case c.Run == id(2, sweeps.FullShard) && c.Rule.Metric == "peak_mem_reserved_bytes":
			require.NotNil(t, c.Delta.Change)
			assert.InDelta(t, 0.02, *c.Delta.Change, 1e-6)
			assert.Contains(t, c.Reason, "within the +3% limit")
		case c.Run == id(2, sweeps.NoShard):
			assert.Equal(t, "was ok, now oom: CUDA out of memory. Tried to allocate 2.00 GiB", c.Reason)
		}
	}
	assert.Equal(t, 6, g.NotBacked, "the relative checks of the three runs ok on both sides")

	strict := runGate(t, baseDir, curDir, GateOptions{})
	assert.Equal(t, 8, strict.Failures, "by default a missing run fails each rule")
}

func TestGatePassesOnItself(t *testing.T) {
	baseDir, _ := gateTrees(t)
	g := runGate(t, baseDir, baseDir, GateOptions{Rules: []Rule{}})
	assert.True(t, g.Passed)
	assert.Len(t, g.Rules, len(DefaultRules), "no rule given: the defaults")
	assert.Zero(t, g.Failures)
	assert.Empty(t, g.Missing)
}

func TestGateMarkdownGolden(t *testing.T) {
	baseDir, curDir := gateTrees(t)
	g := runGate(t, baseDir, curDir, GateOptions{})
	var md, table bytes.Buffer
	require.NoError(t, g.Write(&md, FormatMarkdown))
	golden(t, "gate_markdown", md.Bytes())
	require.NoError(t, g.Write(&table, FormatTable))
	golden(t, "gate_table", table.Bytes())
	assert.True(t, strings.HasPrefix(md.String(), "### ❌ fsdpbench gate FAILED: 8 of 18 checks failed, in 3 of 6 runs\n"))
}

// TestGateJUnit checks the JUnit XML against the schema's required parts: testsuites
// and testsuite with name/tests/failures/errors/skipped/time (testsuite also id,
// package, timestamp, hostname), testcase with name/classname/time, a failure with
// message and type for every failed check and a skipped element for every skip.
func TestGateJUnit(t *testing.T) {
	baseDir, curDir := gateTrees(t)
	g := runGate(t, baseDir, curDir, GateOptions{AllowMissing: true})
	var buf bytes.Buffer
	require.NoError(t, g.Write(&buf, FormatJUnit))
	require.True(t, strings.HasPrefix(buf.String(), xml.Header))

	type attrs map[string]string
	collect := func(as []xml.Attr) attrs {
		m := attrs{}
		for _, a := range as {
			m[a.Name.Local] = a.Value
		}
		return m
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	var stack []string
	counts := map[string]int{}
	var suites, cases []attrs
	var failures []attrs
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		switch e := tok.(type) {
		case xml.StartElement:
			a := collect(e.Attr)
			switch e.Name.Local {
			case "testsuites":
				require.Empty(t, stack)
				suites = append(suites, a)
			case "testsuite":
				require.Equal(t, []string{"testsuites"}, stack)
				suites = append(suites, a)
			case "testcase":
				require.Equal(t, "testsuite", stack[len(stack)-1])
				cases = append(cases, a)
			case "failure":
				require.Equal(t, "testcase", stack[len(stack)-1])
				failures = append(failures, a)
			case "skipped", "properties", "property":
			default:
				t.Fatalf("unexpected element %s", e.Name.Local)
			}
			counts[e.Name.Local]++
			stack = append(stack, e.Name.Local)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		}
	}
	require.Len(t, suites, 2, "testsuites and one testsuite (one sweep)")
	for _, s := range suites {
		for _, k := range []string{"name", "tests", "failures", "errors", "skipped", "time"} {
			assert.Contains(t, s, k)
		}
	}
	for _, k := range []string{"id", "package", "timestamp", "hostname"} {
		assert.NotEmpty(t, suites[1][k], k)
	}
	assert.Equal(t, "2026-03-04T02:00:00", suites[1]["timestamp"])
	assert.Equal(t, "18", suites[0]["tests"])
	assert.Equal(t, "5", suites[0]["failures"])
	assert.Equal(t, "5", suites[0]["skipped"])
	assert.Equal(t, "0", suites[0]["errors"])
	require.Len(t, cases, 18, "one test case per run x rule")
	for _, c := range cases {
		for _, k := range []string{"name", "classname", "time"} {
			assert.NotEmpty(t, c[k], k)
		}
		assert.True(t, strings.HasPrefix(c["classname"], "nightly."))
	}
	require.Len(t, failures, 5)
	for _, f := range failures {
		assert.NotEmpty(t, f["message"])
		assert.Equal(t, "regression", f["type"])
	}
	assert.Equal(t, 5, counts["skipped"])
}

func TestGateJSON(t *testing.T) {
	baseDir, curDir := gateTrees(t)
	g := runGate(t, baseDir, curDir, GateOptions{})
	var buf bytes.Buffer
	require.NoError(t, g.Write(&buf, FormatJSON))
	var back GateReport
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.False(t, back.Passed)
	assert.Len(t, back.Checks, 18)
	assert.Equal(t, g.Missing, back.Missing)
}

// statRun is a run with six repeats whose tokens/s/rank are base x factors[i].
func statRun(ws int, factors []float64) Run {
	rc := fixtureConfig(ws, sweeps.FullShard)
	rc.Sweep, rc.Repeats = "stats", len(factors)
	rc.AssignID()
	var reps []Result
	for _, f := range factors {
		r := fixtureResult(rc)
		r.MeasuredWallS /= f
		reps = append(reps, r)
	}
	return Run{Config: rc, Metrics: Normalize(rc, reps)}
}

func TestGateNeedsSignificanceWithRepeats(t *testing.T) {
	base := []Run{statRun(1, []float64{1.00, 1.01, 0.99, 1.02, 0.98, 1.00}),
		statRun(2, []float64{1.00, 1.01, 0.99, 1.02, 0.98, 1.00})}
	cur := []Run{statRun(1, []float64{0.90, 0.91, 0.89, 0.92, 0.88, 0.90}), // -10%, every repeat lower
		statRun(2, []float64{0.80, 1.10, 0.85, 1.05, 0.90, 0.92})} // median -9%, but noisy: overlaps
	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "--rule")
	require.NoError(t, err)
	g, err := Gate(base, cur, GateOptions{Rules: rules, Now: gateTime})
	require.NoError(t, err)
	require.Len(t, g.Checks, 2)
	sig, noisy := g.Checks[0], g.Checks[1]
	require.True(t, sig.Delta.Backed)
	assert.Equal(t, OutcomeFail, sig.Outcome, sig.Reason)
	assert.Less(t, *sig.Delta.P, 0.05)
	assert.Contains(t, sig.Reason, "p=0.002")

	require.True(t, noisy.Delta.Backed)
	assert.Less(t, *noisy.Delta.Change, -0.05, "beyond the threshold")
	assert.Greater(t, *noisy.Delta.P, 0.05, "but not significant")
	// Issue 29: a spread this wide (± 21%) cannot resolve a 5% limit either way:
	// inconclusive, not a pass.
	assert.Equal(t, OutcomeInconclusive, noisy.Outcome, noisy.Reason)
	assert.Contains(t, noisy.Reason, "too noisy to tell against the -5% limit")
	assert.Zero(t, g.NotBacked)
	assert.Equal(t, OutcomeFail, g.Verdict, "a failed check fails the gate, inconclusive ones or not")
}

func TestParseRule(t *testing.T) {
	tests := []struct {
		in   string
		want Rule
		err  string
	}{
		{in: "tokens_per_s_per_rank:-5%", want: Rule{Metric: "tokens_per_s_per_rank", Kind: RuleDrop, Limit: 0.05}},
		{in: "peak_mem_reserved_bytes:+3%", want: Rule{Metric: "peak_mem_reserved_bytes", Kind: RuleRise, Limit: 0.03}},
		{in: " mfu >= 0.35 ", want: Rule{Metric: "mfu", Kind: RuleMin, Limit: 0.35}},
		{in: "peak_mem_reserved_bytes<=8e10", want: Rule{Metric: "peak_mem_reserved_bytes", Kind: RuleMax, Limit: 8e10}},
		{in: "step_time_s.median:+2.5%", want: Rule{Metric: "step_time_s.median", Kind: RuleRise, Limit: 0.025}},
		{in: "tokens_per_s_per_rank:5%", err: "needs a direction"},
		{in: "tokens_per_s_per_rank:-5", err: "is a percentage"},
		{in: "tokens_per_s_per_rank", err: "no threshold"},
		{in: "tokens_per_s:-x%", err: `"x" is not a number`},
		{in: "tokens_per_sec:-5%", err: `unknown metric or derived "tokens_per_sec"`},
		{in: "status:-5%", err: "is text"},
		{in: "world_size:-5%", err: "unknown metric or derived"},
		// 1e-400 parses as 0 without an error, and 1e309 as +Inf with one.
		{in: "mfu>=1e-400", err: "too small to tell from 0"},
		{in: "mfu>=0", want: Rule{Metric: "mfu", Kind: RuleMin, Limit: 0}},
		{in: "tokens_per_s:-1e309%", err: "beyond the range of a number"},
		{in: "mfu<=-1e309", err: "beyond the range of a number"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRule(tt.in)
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.InDelta(t, tt.want.Limit, r.Limit, 1e-12)
			r.Limit = tt.want.Limit
			assert.Equal(t, tt.want, r)
			back, err := ParseRule(r.String())
			require.NoError(t, err, "String reads back")
			assert.Equal(t, r.Kind, back.Kind)
			assert.InDelta(t, r.Limit, back.Limit, 1e-12)
		})
	}
}

func TestLoadRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rules.yaml")
	require.NoError(t, os.WriteFile(path, []byte("# nightly\nrules:\n  - tokens_per_s_per_rank:-5%\n  - mfu>=0.35\n"), 0o644))
	rules, err := LoadRules(path)
	require.NoError(t, err)
	require.Len(t, rules, 2)
	assert.Equal(t, RuleMin, rules[1].Kind)
	assert.Equal(t, path+":4:5", rules[1].From)

	bad := []struct{ body, want string }{
		{"rules:\n  - tokens_per_s_per_rank:-5%\n  - tokens_per_sec:-5%\n", ":3:5: rule \"tokens_per_sec:-5%\": unknown metric"},
		{"rule:\n  - mfu>=0.3\n", ":1:1: "},
		{"rules: [mfu>=0.3\n", path + ":"},
		{"rules: []\n", ":1:1: no rules"},
	}
	for _, b := range bad {
		require.NoError(t, os.WriteFile(path, []byte(b.body), 0o644))
		_, err := LoadRules(path)
		require.Error(t, err, b.body)
		var se *sweeps.SpecError
		require.ErrorAs(t, err, &se, b.body)
		assert.Contains(t, err.Error(), b.want, b.body)
	}
}

func TestLoadPathReadsExportedJSON(t *testing.T) {
	baseDir, _ := gateTrees(t)
	runs, err := Load(baseDir)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, WriteJSON(&buf, runs))
	path := filepath.Join(t.TempDir(), "base.json")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	back, err := LoadPath(path)
	require.NoError(t, err)
	require.Len(t, back, len(runs))
	for i := range runs {
		assert.Equal(t, runs[i].Config, back[i].Config)
		assert.Equal(t, runs[i].Metrics.TokensPerSPerRank, back[i].Metrics.TokensPerSPerRank)
		assert.Equal(t, runs[i].Derived, back[i].Derived)
	}

	require.NoError(t, os.WriteFile(path, []byte("[\n  {\"config\": }\n]"), 0o644))
	_, err = LoadPath(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+":2:")
	_, err = LoadPath(filepath.Join(t.TempDir(), "nope"))
	assert.ErrorContains(t, err, "give a results directory or a file")
}
