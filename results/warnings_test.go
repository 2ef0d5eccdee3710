package results

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestNormalizeCollectsWarnings: every repeat's warnings, from Result.Warnings
// and extra.warnings ([]string in process, []any from JSON, as a plugin's),
// each once in the order first seen.
func TestNormalizeCollectsWarnings(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	a, b, c := fixtureResult(rc), fixtureResult(rc), fixtureResult(rc)
	a.Extra = map[string]any{"warnings": []string{"tokens counted twice"}}
	b.Warnings = []string{"fewer steps logged", "tokens counted twice"}
	c.Extra = map[string]any{"warnings": []any{"from a plugin", 3}}
	m := Normalize(rc, []Result{a, b, c})
	assert.Equal(t, []string{"tokens counted twice", "fewer steps logged", "from a plugin"}, m.Warnings)
	assert.Nil(t, Normalize(rc, []Result{fixtureResult(rc)}).Warnings)
}

// TestDeriveReadsLegacyWarnings: a metrics.json written before warnings had
// its own field kept them in extra.warnings only; loading reads them there.
func TestDeriveReadsLegacyWarnings(t *testing.T) {
	runs := fixtureRuns()
	data, err := json.Marshal(map[string]any{"warnings": []string{"old warning"}})
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &runs[0].Metrics.Extra))
	Derive(runs)
	assert.Equal(t, []string{"old warning"}, runs[0].Metrics.Warnings)
}

// TestWarningsMarkDerivedFigures: a scaling efficiency or memory saving built
// on a baseline with warnings carries WarningMark, and the footnote names the
// baseline's warnings; a run with none, over a baseline with none, has none.
func TestWarningsMarkDerivedFigures(t *testing.T) {
	runs := fixtureRuns()
	var ws1, ns *Run
	for i := range runs {
		r := &runs[i]
		if r.Config.WorldSize == 1 && r.Config.Sharding == sweeps.FullShard {
			ws1 = r
		}
		if r.Config.WorldSize == 2 && r.Config.Sharding == sweeps.NoShard {
			ns = r
		}
	}
	require.NotNil(t, ws1)
	require.NotNil(t, ns)
	ws1.Metrics.Warnings = []string{"baseline warning"}
	ns.Metrics.Warnings = []string{"memory baseline warning"}
	Derive(runs)
	var scaled, saved int
	for _, r := range runs {
		if r.Derived.ScalingEfficiency != nil && r.Derived.ScalingBaseline == ws1.Config.ID {
			assert.True(t, r.Derived.ScalingEfficiencyWarned, r.Config.ID)
			scaled++
		}
		if r.Derived.MemorySaving != nil && r.Derived.MemoryBaseline == ns.Config.ID {
			assert.True(t, r.Derived.MemorySavingWarned, r.Config.ID)
			saved++
		}
		if r.Derived.ScalingEfficiency != nil && r.Derived.ScalingBaseline != ws1.Config.ID && len(r.Metrics.Warnings) == 0 {
			assert.False(t, r.Derived.ScalingEfficiencyWarned, r.Config.ID)
		}
	}
	require.Positive(t, scaled)
	require.Positive(t, saved)
	var buf bytes.Buffer
	require.NoError(t, Report(&buf, runs, ReportOptions{Metrics: []string{"tokens_per_s_per_rank", "scaling_efficiency", "memory_saving"}}))
	out := buf.String()
	assert.Contains(t, out, "  "+ws1.Config.ID+": baseline warning")
	assert.Contains(t, out, "  "+ns.Config.ID+": memory baseline warning")
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, ws1.Config.ID) && strings.Contains(l, "│") {
			assert.Contains(t, l, WarningMark+" │", "the warned run's own figures: %s", l)
		}
	}
}

// TestCompareMarksNoiseAndWarnings: compare's tables mark a side's noisy
// figure ? and a warned one !, with report's footnotes; its JSON holds why.
func TestCompareMarksNoiseAndWarnings(t *testing.T) {
	_, _, runs := cpuStrategiesPair(t)
	cur := make([]Run, len(runs))
	copy(cur, runs)
	cur[1].Metrics.Warnings = []string{"tokens counted twice"}
	Derive(cur)
	cmp, err := Compare(runs, cur, CompareOptions{Metrics: []string{"tokens_per_s_per_rank", "peak_mem_allocated_bytes"}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, cmp.Write(&buf, FormatTable))
	out := buf.String()
	assert.Contains(t, out, NoiseMark+" too noisy to trust")
	assert.Contains(t, out, "  "+runs[0].Config.ID+": step times spread")
	assert.Contains(t, out, "  "+runs[1].Config.ID+": tokens counted twice")
	tps, mem, _ := strings.Cut(out, "peak allocated")
	assert.Regexp(t, `\d`+`\?`+` │ +\d+\?`+` │`, tps, "both sides of the noisy run's tokens/s/rank")
	assert.Regexp(t, `\d │ +\d+!`+` │`, tps, "the current side's warned figure")
	assert.NotContains(t, mem[:strings.Index(mem, "└")], NoiseMark+" │", "memory is not timed")
	buf.Reset()
	require.NoError(t, cmp.Write(&buf, FormatJSON))
	assert.Contains(t, buf.String(), `"current_warnings": [`)
	assert.Contains(t, buf.String(), `"baseline_noise": "step times spread`)
}

// TestNormalizeBoundsWarnings: a backend's flood of warnings is cut where it
// enters: MaxWarnings at most, the last saying how many more, each at most
// MaxWarningChars.
func TestNormalizeBoundsWarnings(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	res := fixtureResult(rc)
	for i := range 100 {
		res.Warnings = append(res.Warnings, strings.Repeat("x", i)+"!")
	}
	res.Warnings = append(res.Warnings, strings.Repeat("y", 10*MaxWarningChars))
	m := Normalize(rc, []Result{res})
	require.Len(t, m.Warnings, MaxWarnings)
	assert.Equal(t, "70 more warnings (the first 31 are kept; see the runs' stderr.log)", m.Warnings[MaxWarnings-1])
	for _, w := range m.Warnings {
		assert.LessOrEqual(t, len([]rune(w)), MaxWarningChars)
	}
}
