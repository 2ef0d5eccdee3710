package results

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// breakdownRun is the fixture run for (ws, sharding) with a measured breakdown
// per repeat: exposed communication exposed[i] of a step of compute 0.08 and
// other 0.01, collectives 0.05 (or, with predicted, the sim's run of it).
func breakdownRun(ws int, sharding string, predicted bool, exposed ...float64) Run {
	rc := fixtureConfig(ws, sharding)
	rc.Repeats = len(exposed)
	rc.AssignID()
	var reps []Result
	for _, e := range exposed {
		r := fixtureResult(rc)
		r.Predicted = predicted
		r.StepBreakdown = &StepBreakdown{StepS: 0.09 + e, ComputeS: 0.08, CollectiveS: 0.05, ExposedCommS: e, OtherS: 0.01,
			AllGatherS: F64(0.03), ReduceScatterS: F64(0.02), Source: "gotrain"}
		reps = append(reps, r)
	}
	return Run{Config: rc, Metrics: Normalize(rc, reps)}
}

func reportText(t *testing.T, runs []Run, opt ReportOptions) string {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, Report(&b, runs, opt))
	return b.String()
}

// The default table gains "exposed comm (%)" when a measured run has a
// breakdown, and only then: runs without one, or the sim's predictions (which
// all carry one), keep the table they had.
func TestDefaultTableShowsExposedCommWhenMeasured(t *testing.T) {
	plain := []Run{gateRun(1, sweeps.FullShard, nil), gateRun(2, sweeps.FullShard, nil)}
	before := reportText(t, plain, ReportOptions{})
	assert.NotContains(t, before, "exposed comm")

	predicted := []Run{breakdownRun(1, sweeps.FullShard, true, 0.02), breakdownRun(2, sweeps.FullShard, true, 0.03)}
	require.True(t, predicted[0].Metrics.Predicted)
	out := reportText(t, predicted, ReportOptions{})
	assert.NotContains(t, out, "exposed comm", "the sim predicts a breakdown for every run: not a reason for a column")

	measured := []Run{breakdownRun(1, sweeps.FullShard, false, 0.01), breakdownRun(2, sweeps.FullShard, false, 0.03)}
	out = reportText(t, measured, ReportOptions{})
	assert.Contains(t, out, "exposed comm (%)")
	assert.Contains(t, out, "25.0", "0.03 of a 0.12 s step")
	assert.Contains(t, out, "10.0", "0.01 of a 0.10 s step")

	// One measured run among runs without: the column, "-" where unknown.
	mixed := []Run{plain[0], measured[1]}
	out = reportText(t, mixed, ReportOptions{Format: FormatCSV})
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	require.NoError(t, err)
	j := indexOf(rows[0], ColumnExposedCommShare)
	require.GreaterOrEqual(t, j, 0, "%v", rows[0])
	cells := map[string]string{}
	for _, row := range rows[1:] {
		cells[row[0]] = row[j]
	}
	assert.Equal(t, map[string]string{plain[0].Config.ID: "", measured[1].Config.ID: "0.25"}, cells)
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// The figures by name: the short names and the shares in reports, the
// step_breakdown.* paths in CSV exports, with confidence intervals from the
// repeats' samples.
func TestBreakdownColumnsByName(t *testing.T) {
	r := breakdownRun(2, sweeps.FullShard, false, 0.02, 0.021, 0.022, 0.023, 0.024, 0.025)
	want := map[string]float64{
		"compute_s": 0.08, "collective_s": 0.05, "exposed_comm_s": 0.022, "other_s": 0.01,
		"overlap": 1 - 0.022/0.05, "exposed_comm_share": 0.022 / 0.112,
		"step_breakdown.exposed_comm_s": 0.022, "step_breakdown.all_gather_s": 0.03, "step_breakdown.step_s": 0.112,
	}
	for name, v := range want {
		c, err := LookupColumn(name, KindMetric, KindDerived)
		require.NoError(t, err, name)
		got, ok := c.Value(&r).(float64)
		require.True(t, ok, "%s: %v", name, c.Value(&r))
		assert.InDelta(t, v, got, 1e-12, name)
	}
	c, err := LookupColumn("step_breakdown.source")
	require.NoError(t, err)
	assert.Equal(t, "gotrain", c.Value(&r))
	c, _ = LookupColumn("step_breakdown.all_reduce_s")
	assert.Nil(t, c.Value(&r), "a kind not measured is unknown, not 0")
	require.Contains(t, r.Metrics.CI, SampleExposedCommS, "six repeats give an interval")

	var b bytes.Buffer
	require.NoError(t, WriteCSV(&b, []Run{r}))
	rows, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	for _, name := range []string{"step_breakdown.compute_s", "step_breakdown.exposed_comm_s", "step_breakdown.other_s"} {
		assert.GreaterOrEqual(t, indexOf(rows[0], name), 0, name)
	}
	assert.Equal(t, "0.022", rows[1][indexOf(rows[0], "step_breakdown.exposed_comm_s")])
	assert.Less(t, indexOf(rows[0], "exposed_comm_s"), 0, "the short names are lookups, not extra CSV columns")

	out := reportText(t, []Run{r}, ReportOptions{Metrics: []string{"compute_s", "exposed_comm_s", "other_s", "overlap"}})
	for _, h := range []string{"compute (s)", "exposed comm (s)", "other (s)", "overlap (%)", "56.0"} {
		assert.Contains(t, out, h)
	}
}

// A gate rule names the breakdown's figures: exposed communication up 20% in
// every repeat fails exposed_comm_s:+10%, an unchanged one passes.
func TestGateRuleOnExposedComm(t *testing.T) {
	rules, err := ParseRules([]string{"exposed_comm_s:+10%", "overlap:-10%"}, "--rule")
	require.NoError(t, err)
	base := []Run{breakdownRun(1, sweeps.FullShard, false, 0.020, 0.0201, 0.0199, 0.0202, 0.0198, 0.020),
		breakdownRun(2, sweeps.FullShard, false, 0.030, 0.0301, 0.0299, 0.0302, 0.0298, 0.030)}
	cur := []Run{breakdownRun(1, sweeps.FullShard, false, 0.024, 0.0241, 0.0239, 0.0242, 0.0238, 0.024),
		breakdownRun(2, sweeps.FullShard, false, 0.030, 0.0301, 0.0299, 0.0302, 0.0298, 0.030)}
	g, err := Gate(base, cur, GateOptions{Rules: rules, Now: gateTime})
	require.NoError(t, err)
	require.Len(t, g.Checks, 4)
	byRun := map[string][]Check{}
	for _, c := range g.Checks {
		byRun[c.Run] = append(byRun[c.Run], c)
	}
	worse, same := byRun[cur[0].Config.ID], byRun[cur[1].Config.ID]
	require.Len(t, worse, 2)
	require.Len(t, same, 2)
	assert.Equal(t, OutcomeFail, worse[0].Outcome, worse[0].Reason)
	assert.True(t, worse[0].Delta.Backed, "the repeats' exposed_comm_s samples back the change")
	assert.InDelta(t, 0.2, *worse[0].Delta.Change, 1e-9)
	assert.Equal(t, OutcomeFail, worse[1].Outcome, "overlap fell from 60%% to 52%%: %s", worse[1].Reason)
	assert.Equal(t, OutcomePass, same[0].Outcome, same[0].Reason)
	assert.Equal(t, OutcomePass, same[1].Outcome, same[1].Reason)
	assert.False(t, g.Passed)

	// Runs without a breakdown: the rule has nothing to check.
	g, err = Gate([]Run{gateRun(1, sweeps.FullShard, nil)}, []Run{gateRun(1, sweeps.FullShard, nil)}, GateOptions{Rules: rules[:1], Now: gateTime})
	require.NoError(t, err)
	require.Len(t, g.Checks, 1)
	assert.Equal(t, OutcomeSkip, g.Checks[0].Outcome)
}

// compare of the sim's predictions against measured runs shows exposed
// communication with its prediction error by default; sim against sim does
// not add it.
func TestCompareShowsPredictedExposedComm(t *testing.T) {
	sim := []Run{breakdownRun(2, sweeps.FullShard, true, 0.03)}
	meas := []Run{breakdownRun(2, sweeps.FullShard, false, 0.02)}
	sim[0].Config.Backend = "sim"
	cmp, err := Compare(meas, sim, CompareOptions{BaselineName: "measured", CurrentName: "sim"})
	require.NoError(t, err)
	require.Equal(t, "current", cmp.PredictedSide)
	j := indexOf(cmp.Metrics, SampleExposedCommS)
	require.GreaterOrEqual(t, j, 0, "%v", cmp.Metrics)
	d := cmp.Rows[0].Deltas[j]
	require.NotNil(t, d.PredErr)
	assert.InDelta(t, 0.5, *d.PredErr, 1e-9, "0.03 predicted / 0.02 measured − 1")
	var b bytes.Buffer
	require.NoError(t, cmp.Write(&b, FormatTable))
	assert.Contains(t, b.String(), "exposed comm (s)")

	cmp, err = Compare(sim, sim, CompareOptions{})
	require.NoError(t, err)
	assert.NotContains(t, cmp.Metrics, SampleExposedCommS, "sim against sim: the default comparison stays as it was")
}

// sweep --predict keeps the sim's breakdown beside the measured one: the
// predicted figures and their error by name.
func TestPredictedExposedCommColumns(t *testing.T) {
	r := breakdownRun(2, sweeps.FullShard, false, 0.02)
	pb := StepBreakdown{StepS: 0.1, ComputeS: 0.07, CollectiveS: 0.04, ExposedCommS: 0.025, OtherS: 0.005, Source: "sim"}
	r.Metrics.Extra = map[string]any{ExtraPrediction: Prediction{StepTimeS: 0.1, Feasible: true, StepBreakdown: &pb}}
	for name, v := range map[string]float64{"predicted.exposed_comm_s": 0.025, "predicted.exposed_comm_share": 0.25,
		"pred_err.exposed_comm_s": 0.25} {
		c, err := LookupColumn(name, KindMetric)
		require.NoError(t, err, name)
		got, ok := c.Value(&r).(float64)
		require.True(t, ok, name)
		assert.InDelta(t, v, got, 1e-12, name)
	}
	// A stored breakdown out of its bounds (hand-edited) is no prediction.
	bad := pb
	bad.OtherS = 0.5
	r.Metrics.Extra[ExtraPrediction] = map[string]any{"step_time_s": 0.1, "step_breakdown": bad}
	assert.Nil(t, r.Metrics.StoredPrediction())
}
