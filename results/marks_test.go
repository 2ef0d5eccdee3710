package results

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowerRuns are copies of runs 10% slower per rank.
func slowerRuns(runs []Run) []Run {
	out := make([]Run, len(runs))
	for i, r := range runs {
		out[i] = r
		if v := r.Metrics.TokensPerSPerRank; v != nil {
			out[i].Metrics.TokensPerSPerRank = F64(*v * 0.9)
		}
	}
	return out
}

// TestCompareAndGateMarkPredictions: compare and gate mark the analytic model's
// figures * with report's footnote, and a gate failing on them says they are
// predictions.
func TestCompareAndGateMarkPredictions(t *testing.T) {
	base := quickstartRuns(t) // predicted by sim
	cur := slowerRuns(base)

	cmp, err := Compare(base, cur, CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, cmp.Write(&buf, FormatTable))
	assert.Regexp(t, `\d\* │ +\d+\* │`, buf.String())
	assert.Contains(t, buf.String(), "* predicted (backend sim), not measured")
	buf.Reset()
	require.NoError(t, cmp.Write(&buf, FormatJSON))
	var back struct {
		Rows []map[string]any `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &back))
	assert.Equal(t, true, back.Rows[0]["current_predicted"])

	rules, err := ParseRules([]string{"tokens_per_s_per_rank:-5%"}, "test")
	require.NoError(t, err)
	rep, err := Gate(base, cur, GateOptions{Rules: rules})
	require.NoError(t, err)
	require.False(t, rep.Passed)
	assert.Contains(t, rep.Headline(), "on figures predicted by the analytic model, not measured")
	buf.Reset()
	require.NoError(t, rep.Write(&buf, FormatTable))
	assert.Regexp(t, `\d\* │ +\d+\* │ FAIL`, buf.String())
	assert.Contains(t, buf.String(), "* predicted (backend sim), not measured")

	// Measured figures carry neither.
	measured := fixtureRuns()
	rep, err = Gate(measured, slowerRuns(measured), GateOptions{Rules: rules})
	require.NoError(t, err)
	assert.NotContains(t, rep.Headline(), "predicted")
}

// TestCSVKeepsWholeRunFlag: the CSV export says which runs' throughput divides
// by the whole run's wall time (the table's †), as the JSON export does.
func TestCSVKeepsWholeRunFlag(t *testing.T) {
	runs := fixtureRuns()[:2]
	runs[0].Metrics.WholeRunWallTime = true
	var buf bytes.Buffer
	require.NoError(t, WriteCSV(&buf, runs))
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	j := slices.Index(recs[0], "whole_run_wall_time")
	require.GreaterOrEqual(t, j, 0, "a column of its own: %v", recs[0])
	assert.Equal(t, "true", recs[1][j])
	assert.Equal(t, "false", recs[2][j])
}
