package results

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestGateAB: a check fails only when the whole interval is beyond the rule's
// limit in the bad direction, passes when it is wholly within, and is
// inconclusive otherwise, as it is without an interval.
func TestGateAB(t *testing.T) {
	point := func(name string, median, lo, hi float64, backed bool) ABPoint {
		return ABPoint{Point: name, AStatus: StatusOK, BStatus: StatusOK, Metrics: []ABChange{{
			Metric: "tokens_per_s_per_rank", Changes: make([]float64, 8), Median: median, Lo: lo, Hi: hi, Backed: backed}}}
	}
	r := ABResult{Points: []ABPoint{
		point("slower", -0.20, -0.25, -0.12, true),
		point("same", 0.0, -0.02, 0.03, true),
		point("straddles", -0.04, -0.09, 0.01, true),
		point("few", -0.30, -0.30, -0.30, false),
		{Point: "oom", AStatus: StatusOK, BStatus: StatusOOM, BError: "out of memory"},
		{Point: "afailed", AStatus: StatusFailed, BStatus: StatusOK},
	}}
	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%", "mfu>=0.3"}, "--rule")
	require.NoError(t, err)
	checks, skipped := GateAB(r, rules)
	assert.Equal(t, []string{"mfu>=0.3"}, skipped)
	got := map[string]ABOutcome{}
	for _, c := range checks {
		got[c.Point] = c.Outcome
	}
	assert.Equal(t, map[string]ABOutcome{"slower": ABFail, "same": ABPass, "straddles": ABInconclusive,
		"few": ABInconclusive, "oom": ABFail, "afailed": ABInconclusive}, got)

	rise, err := ParseRules([]string{"tokens_per_s_per_rank:+10%"}, "--rule")
	require.NoError(t, err)
	checks, _ = GateAB(ABResult{Points: []ABPoint{point("up", 0.2, 0.15, 0.3, true), point("flat", 0, -0.01, 0.01, true)}}, rise)
	assert.Equal(t, ABFail, checks[0].Outcome)
	assert.Equal(t, ABPass, checks[1].Outcome)
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
	} {
		require.NoError(t, os.WriteFile(bad, []byte(body), 0o644))
		_, err := ReadAB(bad)
		assert.Error(t, err, name)
	}
}
