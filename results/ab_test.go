package results

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestPairedChange: B 10% slower than A in every pair, under a drift that
// moves both sides of a pair alike and spans 3x over the pairs: the paired
// median is -10% whatever the drift, with an interval that holds it.
func TestPairedChange(t *testing.T) {
	var a, b []float64
	for i := range 10 {
		drift := 1 + 2*float64(i%5)/4 // 1x to 3x, as a machine's load comes and goes
		noise := 1 + 0.01*float64(i%3-1)
		a = append(a, 1000*drift)
		b = append(b, 900*drift*noise)
	}
	c := PairedChange("tokens_per_s", a, b, Confidence)
	require.True(t, c.Backed)
	assert.Len(t, c.Changes, 10)
	assert.InDelta(t, -0.10, c.Median, 0.0101)
	assert.LessOrEqual(t, c.Lo, -0.10+1e-9)
	assert.GreaterOrEqual(t, c.Hi, -0.10-0.01)
	assert.Less(t, c.Hi, 0.0)

	few := PairedChange("tokens_per_s", a[:5], b[:5], Confidence)
	assert.False(t, few.Backed, "5 pairs give no interval")
	assert.Equal(t, few.Median, few.Lo)

	// Pairs without a ratio (a side 0, NaN or infinite) are dropped.
	odd := PairedChange("x", []float64{0, 1, math.NaN(), 2}, []float64{1, 2, 1, math.Inf(1)}, Confidence)
	assert.Equal(t, []float64{1}, odd.Changes)
}

// abPoint is a point whose tokens_per_s_per_rank changed by changes, pair by pair.
func abPoint(name string, changes ...float64) ABPoint {
	c := PairedChange("tokens_per_s_per_rank", ones(len(changes)), plusOne(changes), Confidence)
	return ABPoint{Point: name, AStatus: StatusOK, BStatus: StatusOK, Metrics: []ABChange{c}}
}

func ones(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = 1
	}
	return xs
}

func plusOne(changes []float64) []float64 {
	xs := make([]float64, len(changes))
	for i, c := range changes {
		xs[i] = 1 + c
	}
	return xs
}

// TestGateAB: a check fails only when the whole interval is beyond the rule's
// limit in the bad direction, passes when it is wholly within, and is
// inconclusive otherwise, as it is without an interval. The interval is
// recomputed from the pairs: one written into the file decides nothing.
func TestGateAB(t *testing.T) {
	edited := abPoint("edited", -0.2, 0.1, -0.2, 0.1, -0.2, 0.1, -0.2, 0.1)
	edited.Metrics[0].Lo, edited.Metrics[0].Median, edited.Metrics[0].Hi = -0.3, -0.2, -0.1
	r := ABResult{Confidence: Confidence, Points: []ABPoint{
		abPoint("slower", -0.20, -0.22, -0.18, -0.25, -0.19, -0.21, -0.2, -0.23),
		abPoint("same", 0.01, -0.01, 0.02, 0, -0.02, 0.01, 0, -0.01),
		abPoint("straddles", -0.04, -0.09, 0.01, -0.06, -0.03, -0.05, -0.07, 0),
		abPoint("few", -0.3, -0.3, -0.3, -0.3, -0.3),
		edited,
		{Point: "oom", AStatus: StatusOK, BStatus: StatusOOM, BError: "out of memory"},
		{Point: "afailed", AStatus: StatusFailed, BStatus: StatusOK},
	}}
	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%", "mfu>=0.3"}, "--rule")
	require.NoError(t, err)
	g, err := GateAB(r, rules, "")
	require.NoError(t, err)
	assert.Equal(t, []ABSkippedRule{{Rule: "mfu>=0.3", Why: "a bound judges one side, not a change"}}, g.Skipped)
	got := map[string]Outcome{}
	for _, c := range g.Checks {
		got[c.Point] = c.Outcome
	}
	assert.Equal(t, map[string]Outcome{"slower": OutcomeFail, "same": OutcomePass, "straddles": OutcomeInconclusive,
		"few": OutcomeInconclusive, "edited": OutcomeInconclusive, "oom": OutcomeFail, "afailed": OutcomeInconclusive}, got)
	assert.Equal(t, OutcomeFail, g.Verdict)
	assert.Equal(t, 2, g.Failures)
	assert.Equal(t, 4, g.Inconclusive)

	rise, err := ParseRules([]string{"tokens_per_s_per_rank:+10%"}, "--rule")
	require.NoError(t, err)
	g, err = GateAB(ABResult{Confidence: Confidence, Points: []ABPoint{abPoint("up", 0.2, 0.15, 0.3, 0.2, 0.25, 0.18),
		abPoint("flat", 0, -0.01, 0.01, 0, 0.01, -0.01)}}, rise, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomeFail, g.Checks[0].Outcome)
	assert.Equal(t, OutcomePass, g.Checks[1].Outcome)
}

// TestGateABPolicy: gate --ab's verdict under each inconclusive policy is the
// nightly gate's (GateVerdict): report makes it inconclusive, fail a failure,
// pass a pass; a failed check fails whatever the policy; a policy not known is
// refused.
func TestGateABPolicy(t *testing.T) {
	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "--rule")
	require.NoError(t, err)
	unsure := ABResult{Confidence: Confidence, Points: []ABPoint{abPoint("straddles", -0.04, -0.09, 0.01, -0.06, -0.03, -0.05, -0.07, 0),
		abPoint("same", 0, 0, 0, 0, 0, 0)}}
	slower := ABResult{Confidence: Confidence, Points: append(slices.Clone(unsure.Points), abPoint("slower", -0.2, -0.2, -0.2, -0.2, -0.2, -0.2))}
	for _, tt := range []struct {
		policy string
		r      ABResult
		want   Outcome
		says   string
	}{
		{"", unsure, OutcomeInconclusive, "INCONCLUSIVE"},
		{InconclusiveReport, unsure, OutcomeInconclusive, "INCONCLUSIVE"},
		{InconclusiveFail, unsure, OutcomeFail, "1 inconclusive counted as failures (--inconclusive=fail)"},
		{InconclusivePass, unsure, OutcomePass, "1 inconclusive counted as passing (--inconclusive=pass)"},
		{InconclusivePass, slower, OutcomeFail, "FAIL"},
	} {
		g, err := GateAB(tt.r, rules, tt.policy)
		require.NoError(t, err)
		assert.Equal(t, tt.want, g.Verdict, tt.policy)
		assert.Equal(t, GateVerdict(g.Failures > 0, g.Inconclusive, tt.policy), g.Verdict)
		assert.Contains(t, g.Headline(), tt.says)
	}
	_, err = GateAB(unsure, rules, "retry")
	assert.ErrorContains(t, err, "use report, fail, pass")
}

// TestPairedInterval: the interval is equal-tailed. With 8 pairs at 95% it is
// [x(1), x(8)] (benchmath's shortest interval is [x(1), x(7)], whose upper end
// misses the median 3.5% of the time, not 2.5%: 7 pairs of 8 beyond a drop
// limit failed a gate on identical code); with 10, [x(2), x(9)]; at 99% 8
// pairs are the fewest with an interval.
func TestPairedInterval(t *testing.T) {
	eight := []float64{-0.10, -0.08, 0.02, -0.09, -0.07, -0.12, -0.06, -0.11}
	med, lo, hi, ok := PairedInterval(eight, 0.95)
	require.True(t, ok)
	assert.InDelta(t, -0.085, med, 1e-12)
	assert.Equal(t, -0.12, lo)
	assert.Equal(t, 0.02, hi, "the largest of 8: a drop rule's failure needs every pair beyond")
	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "--rule")
	require.NoError(t, err)
	g, err := GateAB(ABResult{Confidence: 0.95, Points: []ABPoint{abPoint("p", eight...)}}, rules, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomeInconclusive, g.Checks[0].Outcome, g.Checks[0].Why)

	ten := []float64{9, 1, 8, 2, 7, 3, 6, 4, 5, 0}
	_, lo, hi, ok = PairedInterval(ten, 0.95)
	require.True(t, ok)
	assert.Equal(t, []float64{1, 8}, []float64{lo, hi})

	_, _, _, ok = PairedInterval(ten[:7], 0.99)
	assert.False(t, ok, "7 pairs give no 99% interval")
	_, _, _, ok = PairedInterval(ten[:8], 0.99)
	assert.True(t, ok)
	_, _, _, ok = PairedInterval(ten[:5], 0.95)
	assert.False(t, ok)
	assert.Equal(t, 6, MinPairs(0.95))
	assert.Equal(t, 8, MinPairs(0.99))
}

// machinePoint is abPoint whose pairs ran under the other-CPU shares given per
// pair for A and B (a negative share: unknown).
func machinePoint(changes, aShare, bShare []float64) ABPoint {
	p := abPoint("p", changes...)
	for i := range changes {
		var pr ABPair
		if aShare[i] >= 0 {
			pr.A.OtherCPUShare = F64(aShare[i])
		}
		if bShare[i] >= 0 {
			pr.B.OtherCPUShare = F64(bShare[i])
		}
		p.Pairs = append(p.Pairs, pr)
	}
	return p
}

// TestGateABMachinePairs: a pair whose A and B ran under materially different
// machine states can explain a verdict the way the nightly gate's two sides
// can (B busier: a failure; B quieter: a pass). The verdict stands only when the
// other pairs reach it without them.
func TestGateABMachinePairs(t *testing.T) {
	drop, err := ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "--rule")
	require.NoError(t, err)
	mem, err := ParseRules([]string{"peak_mem_reserved_bytes:+5%"}, "--rule")
	require.NoError(t, err)
	slow := []float64{-0.2, -0.3, -0.1, -0.25, -0.2, -0.15, -0.22, -0.18}
	quiet := []float64{0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02, 0.02}
	busyB := []float64{0.02, 0.6, 0.02, 0.02, 0.55, 0.02, 0.4, 0.02}
	for _, tt := range []struct {
		name    string
		changes []float64
		a, b    []float64
		rules   []Rule
		want    Outcome
		why     string
	}{
		{"B busier in 3 pairs: could explain the failure", slow, quiet, busyB, drop, OutcomeInconclusive,
			"could explain the failure: pair 2: other processes used 2% of the CPU in A, 60% in B, leaving 59% less of it free in B; pair 5: other processes used 2% of the CPU in A, 55% in B, leaving 54% less of it free in B; pair 7: "},
		{"B quieter in 3 pairs: the failure stands", slow, busyB, quiet, drop, OutcomeFail,
			"3 of 8 pairs ran under different machine states between A and B (pairs 2, 5, 7), none of which could explain the verdict"},
		{"B quieter in 3 pairs: could hide a regression", quiet, busyB, quiet, drop, OutcomeInconclusive, "could explain the pass"},
		{"B busier in 3 pairs: the pass stands", quiet, quiet, busyB, drop, OutcomePass, "none of which could explain"},
		{"unknown states decide nothing", slow, []float64{-1, -1, -1, -1, -1, -1, -1, -1}, busyB, drop, OutcomeFail, "the whole interval is below -5%"},
		{"memory is not timed", []float64{0.2, 0.3, 0.1, 0.25, 0.2, 0.15, 0.22, 0.18}, quiet, busyB, mem, OutcomeFail, "pairs 2, 5, 7"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := machinePoint(tt.changes, tt.a, tt.b)
			if tt.rules[0].Metric != "tokens_per_s_per_rank" {
				p.Metrics[0].Metric = tt.rules[0].Metric
			}
			g, err := GateAB(ABResult{Confidence: Confidence, Points: []ABPoint{p}}, tt.rules, "")
			require.NoError(t, err)
			require.Len(t, g.Checks, 1)
			assert.Equal(t, tt.want, g.Checks[0].Outcome, g.Checks[0].Why)
			assert.Contains(t, g.Checks[0].Why, tt.why)
		})
	}

	// With 16 pairs one busier pair cannot make the failure: the other 15 carry it.
	many := append(slices.Clone(slow), slow...)
	a16, b16 := append(slices.Clone(quiet), quiet...), append(slices.Clone(quiet), quiet...)
	b16[3] = 0.7
	g, err := GateAB(ABResult{Confidence: Confidence, Points: []ABPoint{machinePoint(many, a16, b16)}}, drop, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomeFail, g.Checks[0].Outcome, g.Checks[0].Why)
	assert.Contains(t, g.Checks[0].Why, "the other 15 pairs reach the verdict without the 1 that could explain it")
	assert.Equal(t, []int{4}, g.Checks[0].MachinePairs)
}

// TestABPointOfMachines: ab.json keeps each side's machine summary and each
// pair's A and B states (repeat i of each), with how they differ.
func TestABPointOfMachines(t *testing.T) {
	rc := fixtureConfig(1, sweeps.DDP)
	run := func(shares ...float64) *Run {
		var reps []Result
		for _, s := range shares {
			r := fixtureResult(rc)
			r.Env.Machine = &Machine{Repeats: 1, CPUs: 2, OtherCPUShare: F64(s)}
			reps = append(reps, r)
		}
		return &Run{Config: rc, Metrics: Normalize(rc, reps)}
	}
	a, b := run(0.1, 0.1, 0.1), run(0.1, 0.5, 0.12)
	p := ABPointOf(a, b, Confidence)
	require.NotNil(t, p.AMachine)
	require.NotNil(t, p.BMachine)
	assert.Nil(t, p.BMachine.PerRepeat, "the pairs hold the repeats")
	require.Len(t, p.Pairs, 3)
	assert.Equal(t, "", p.Pairs[0].MachineDiff)
	assert.Equal(t, "other processes used 10% of the CPU in A, 50% in B, leaving 44% less of it free in B", p.Pairs[1].MachineDiff)
	assert.InDelta(t, 0.12, *p.Pairs[2].B.OtherCPUShare, 1e-12)

	dir := t.TempDir()
	require.NoError(t, WriteAB(dir, ABResult{Order: "abba", Confidence: Confidence, A: []string{}, B: []string{}, Points: []ABPoint{p}}))
	got, err := ReadAB(dir)
	require.NoError(t, err)
	assert.Equal(t, p.Pairs, got.Points[0].Pairs)
}

// TestReadABRefusesOtherFiles: gate --ab reads only what ab wrote, whole.
func TestReadABRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	r := ABResult{Sweep: "s", Order: "abba", Confidence: Confidence, A: []string{}, B: []string{}, Points: []ABPoint{{Point: "p", AStatus: StatusOK, BStatus: StatusOK,
		Metrics: []ABChange{{Metric: "mfu", Changes: []float64{0.1}, Median: 0.1, Lo: 0.1, Hi: 0.1}}}}}
	require.NoError(t, WriteAB(dir, r))
	got, err := ReadAB(dir)
	require.NoError(t, err)
	assert.Equal(t, "s", got.Sweep)

	bad := filepath.Join(dir, "bad.json")
	for name, body := range map[string]string{
		"another kind": `{"kind": "something else"}`,
		"not json":     `{"kind": `,
		"lo above":     `{"kind": "fsdpbench-ab", "points": [{"point": "p", "metrics": [{"metric": "mfu", "median": 0.1, "lo": 0.2, "hi": 0.3}]}]}`,
		"pair machine": `{"kind": "fsdpbench-ab", "confidence": 0.95, "points": [{"point": "p", "pairs": [{"a": {"other_cpu_share": 7}, "b": {}}]}]}`,
		"a change":     `{"kind": "fsdpbench-ab", "confidence": 0.95, "points": [{"point": "p", "metrics": [{"metric": "mfu", "changes": [-2]}]}]}`,
	} {
		require.NoError(t, os.WriteFile(bad, []byte(body), 0o644))
		_, err := ReadAB(bad)
		assert.Error(t, err, name)
	}
}

// aaRuns are the runs of an A/A on the sim: A and B identical, repeat by
// repeat, peak memory included, as the sim predicts them (issue 37 item 5).
func aaRuns(t *testing.T, repeats int) (*Run, *Run) {
	t.Helper()
	rc := fixtureConfig(1, sweeps.DDP)
	var reps []Result
	for range repeats {
		reps = append(reps, fixtureResult(rc))
	}
	a := &Run{Config: rc, Metrics: Normalize(rc, reps)}
	b := &Run{Config: rc, Metrics: Normalize(rc, reps)}
	return a, b
}

// TestABPointOfPairsPeakMemory (issue 37 item 5): ab.json holds the per-repeat
// peak memory the runs measured, so that gate --ab's default rules, two of which
// are on peak memory, can decide; an A/A on the sim passes them.
func TestABPointOfPairsPeakMemory(t *testing.T) {
	a, b := aaRuns(t, 6)
	p := ABPointOf(a, b, Confidence)
	for _, m := range []string{SamplePeakReserved, SamplePeakAllocated} {
		c := p.Change(m)
		require.NotNil(t, c, "ab.json pairs %s", m)
		assert.Len(t, c.Changes, 6)
		assert.True(t, c.Backed)
		assert.Zero(t, c.Median)
	}
	assert.Nil(t, p.Change(SamplePeakRSS), "a figure no run measured is not paired")
	dir := t.TempDir()
	require.NoError(t, WriteAB(dir, ABResult{Order: "abab", Confidence: Confidence, A: []string{"x=1"}, B: []string{"x=1"}, Points: []ABPoint{p}}))
	ab, err := ReadAB(dir)
	require.NoError(t, err)
	rules, err := ParseRules(DefaultRules, "default")
	require.NoError(t, err)
	g, err := GateAB(ab, rules, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomePass, g.Verdict, g.Headline())
	assert.Len(t, g.Checks, 3)
	assert.Empty(t, g.Skipped)
}

// TestGateABSkipsUnmeasuredFigures (issue 37 item 5): a figure that no pair
// measured is not noise. A default rule on it is a skipped rule with the reason
// and the gate passes on the others; the same rule given explicitly is an
// error (a usage error on the command line); A measuring a figure B lost fails;
// an ab.json written before memory was recorded still reads and passes.
func TestGateABSkipsUnmeasuredFigures(t *testing.T) {
	// An ab.json as older versions wrote it: no peak memory, no a_only/b_only.
	old := []byte(`{"kind": "fsdpbench-ab", "sweep": "s-ab", "order": "abba", "a": ["x=1"], "b": ["x=1"], "confidence": 0.95,
  "points": [{"point": "p", "a_run": "a", "b_run": "b", "a_status": "ok", "b_status": "ok",
    "metrics": [{"metric": "tokens_per_s_per_rank", "changes": [0, 0, 0, 0, 0, 0], "a_median": 5, "b_median": 5, "median": 0, "lo": 0, "hi": 0, "backed": true}]}]}`)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ABFile), old, 0o644))
	ab, err := ReadAB(dir)
	require.NoError(t, err)
	defaults, err := ParseRules(DefaultRules, "default")
	require.NoError(t, err)
	g, err := GateAB(ab, defaults, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomePass, g.Verdict, g.Headline())
	assert.Zero(t, g.Inconclusive, "an unmeasured figure is never noise")
	require.Len(t, g.Skipped, 2)
	assert.Equal(t, "peak_mem_reserved_bytes:+3%", g.Skipped[0].Rule)
	assert.Equal(t, "no point of the A/B result has per-repeat peak_mem_reserved_bytes on both sides: the runs did not measure it (or an older fsdpbench wrote ab.json without it: run ab again)", g.Skipped[0].Why)
	assert.Contains(t, g.Headline(), "PASS: 1 checks, 0 failed, 0 inconclusive; 2 rules skipped")

	asked, err := ParseRules([]string{"peak_mem_reserved_bytes:+3%"}, "--rule")
	require.NoError(t, err)
	_, err = GateAB(ab, asked, "")
	var re *ABRuleError
	require.ErrorAs(t, err, &re)
	assert.ErrorContains(t, err, "rule peak_mem_reserved_bytes:+3% (--rule) cannot be checked")

	// Measured at one point and not at another: the other point's check is
	// skipped (with why), the rule decided; B losing a figure A had fails.
	a, b := aaRuns(t, 6)
	measured := ABPointOf(a, b, Confidence)
	unmeasured := abPoint("cpu", 0, 0, 0, 0, 0, 0)
	lost := abPoint("lost", 0, 0, 0, 0, 0, 0)
	lost.AOnly = []string{SamplePeakReserved}
	g, err = GateAB(ABResult{Confidence: Confidence, Points: []ABPoint{measured, unmeasured}}, asked, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomePass, g.Verdict)
	assert.Equal(t, 1, g.SkippedChecks)
	assert.Equal(t, []Outcome{OutcomePass, OutcomeSkip}, []Outcome{g.Checks[0].Outcome, g.Checks[1].Outcome})
	g, err = GateAB(ABResult{Confidence: Confidence, Points: []ABPoint{measured, lost}}, asked, "")
	require.NoError(t, err)
	assert.Equal(t, OutcomeFail, g.Verdict)
	assert.Contains(t, g.Checks[1].Why, "B lost the figure")
}
