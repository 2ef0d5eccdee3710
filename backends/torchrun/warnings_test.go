package torchrun

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestScriptTokensWarningFollowsFigures reproduces issue 37's item 8: nanoGPT
// at 2 ranks with the naive {grad_accum} prints "tokens per iteration will be:
// 64" for a run whose step is 128 tokens, so its 6848 tokens/s/rank count
// every token twice. The warning reaches metrics.json (warnings), marks the
// figures in report tables (! and a footnote), is the export's warnings
// column, and a gate judging the figure says so.
func TestScriptTokensWarningFollowsFigures(t *testing.T) {
	rc := runConfig(2, sweeps.DDP)
	rc.Steps, rc.WarmupSteps, rc.SeqLen, rc.BatchPerDevice, rc.GradAccum, rc.GlobalBatch = 4, 1, 16, 2, 2, 8
	rc.AssignID()
	step := float64(rc.TokensPerStep()) / 2 / 6848 // 6848 tokens/s per rank
	res := results.Result{Status: results.StatusOK, WorldSize: 2, TokensPerStep: rc.TokensPerStep()}
	for i := range rc.Steps {
		res.Steps = append(res.Steps, results.Step{Step: i + 1, StepTimeS: step, Tokens: rc.TokensPerStep()})
		res.MeasuredWallS += step
	}
	var logged []string
	c := collector{rc: rc, warn: func(s string) { logged = append(logged, s) }}
	(&Job{rc: rc}).checkScriptTokens(&c, &res, 64)
	require.Len(t, logged, 1, "the progress line's warning")

	m := results.Normalize(rc, []results.Result{res})
	require.NoError(t, results.CheckMetrics(&rc, &m))
	require.Len(t, m.Warnings, 1)
	assert.Contains(t, m.Warnings[0], `the script printed "tokens per iteration will be: 64" but the run's step is 128 tokens`)
	data, err := json.Marshal(m)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"warnings":["the script printed`, "metrics.json holds it")
	require.NotNil(t, m.TokensPerSPerRank)
	assert.InDelta(t, 6848, *m.TokensPerSPerRank, 1e-6)

	runs := []results.Run{{Config: rc, Metrics: m}}
	results.Derive(runs)
	var buf bytes.Buffer
	require.NoError(t, results.Report(&buf, runs, results.ReportOptions{Metrics: []string{"tokens_per_s_per_rank"}}))
	assert.Contains(t, buf.String(), "6848"+results.WarningMark)
	assert.Contains(t, buf.String(), results.WarningMark+" the run (or the baseline a derived figure divides by) carries warnings:")
	assert.Contains(t, buf.String(), rc.ID+`: the script printed "tokens per iteration will be: 64"`)

	buf.Reset()
	require.NoError(t, results.WriteCSV(&buf, runs))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	j := slices.Index(recs[0], "warnings")
	require.GreaterOrEqual(t, j, 0)
	var back []string
	require.NoError(t, json.Unmarshal([]byte(recs[1][j]), &back))
	assert.Equal(t, m.Warnings, back)

	// A gate against a baseline without the warning: the check says the figure
	// it judged carries one, and the table marks it.
	base := []results.Run{{Config: rc, Metrics: m}}
	base[0].Metrics.Warnings = nil
	rules, err := results.ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "test")
	require.NoError(t, err)
	rep, err := results.Gate(base, runs, results.GateOptions{Rules: rules})
	require.NoError(t, err)
	require.Len(t, rep.Checks, 1)
	ch := rep.Checks[0]
	assert.Equal(t, m.Warnings, ch.CurrentWarnings)
	assert.Empty(t, ch.BaselineWarnings)
	assert.Contains(t, ch.Reason, results.WarningMark+` the current figure carries a warning: the script printed "tokens per iteration will be: 64"`)
	buf.Reset()
	require.NoError(t, rep.Write(&buf, results.FormatTable))
	assert.Contains(t, buf.String(), "6848"+results.WarningMark)
	assert.Contains(t, buf.String(), rc.ID+" (current): the script printed")
}
