package plot

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// breakdownRuns are measured runs with a step breakdown: exposed communication
// grows with the world size, and backward prefetch hides part of it.
func breakdownRuns() []results.Run {
	var runs []results.Run
	for _, ws := range []int{1, 2, 4} {
		for _, pf := range []string{sweeps.PrefetchNone, sweeps.BackwardPre} {
			r := run(ws, 2, sweeps.FullShard, false, 1)
			r.Config.BackwardPrefetch = pf
			r.Config.AssignID()
			r.Metrics.RunID, r.Metrics.Predicted = r.Config.ID, false
			exposed := 0.01 * float64(ws-1)
			if pf == sweeps.BackwardPre {
				exposed /= 2
			}
			r.Metrics.StepBreakdown = &results.StepBreakdown{StepS: 0.08 + exposed + 0.01, ComputeS: 0.08,
				CollectiveS: 0.02 * float64(ws-1), ExposedCommS: exposed, OtherS: 0.01, Source: "gotrain"}
			runs = append(runs, r)
		}
	}
	results.Derive(runs)
	return runs
}

func TestBreakdown(t *testing.T) {
	runs := breakdownRuns()
	f, err := Breakdown(runs)
	require.NoError(t, err)
	assert.Equal(t, "breakdown", f.Name)
	checkFigure(t, f, []string{"compute", "exposed communication", "other (host, data, gaps)"},
		"Step time breakdown", "seconds per step (median step)", "world_size 4, prefetch backward_pre", "world_size 1, prefetch none",
		"llama-1b, h100-sxm")

	// Each bar is stacked compute, exposed, other, and ends at the run's step;
	// the first run in the axes' order is at the top (the last nominal y).
	bb, err := breakdownBars(runs)
	require.NoError(t, err)
	n := len(runs)
	require.Len(t, bb.names, n)
	assert.Equal(t, "world_size 1, prefetch backward_pre", bb.names[n-1], "naturalLess puts backward_pre before none")
	assert.Equal(t, "world_size 4, prefetch none", bb.names[0])
	assert.InDelta(t, 0.08, bb.values[0][n-1], 1e-12)
	assert.InDelta(t, 0.0, bb.values[1][n-1], 1e-12)
	assert.InDelta(t, 0.03, bb.values[1][0], 1e-12, "the most exposed communication")
	assert.InDelta(t, 0.12, bb.values[0][0]+bb.values[1][0]+bb.values[2][0], 1e-12, "the bar's length is the step")

	_, err = Breakdown(scalingRuns())
	assert.ErrorIs(t, err, ErrNothingToPlot, "runs without a breakdown")

	figs, err := All(runs)
	require.NoError(t, err)
	var names []string
	for _, f := range figs {
		names = append(names, f.Name)
	}
	assert.Contains(t, names, "breakdown")
	figs, err = All(scalingRuns())
	require.NoError(t, err)
	for _, f := range figs {
		assert.NotEqual(t, "breakdown", f.Name, "no breakdown: no chart")
	}
}

// Many runs draw a bounded chart: maxBreakdownBars bars, the title says of how
// many.
func TestBreakdownOfManyRunsIsBounded(t *testing.T) {
	var runs []results.Run
	for i := range 2 * maxBreakdownBars {
		r := run(2, 2, sweeps.FullShard, false, 1)
		r.Config.Seed = int64(i)
		r.Config.AssignID()
		r.Metrics.StepBreakdown = &results.StepBreakdown{StepS: 0.1, ComputeS: 0.08, CollectiveS: 0.02, ExposedCommS: 0.01, OtherS: 0.01}
		runs = append(runs, r)
	}
	f, err := Breakdown(runs)
	require.NoError(t, err)
	assert.Contains(t, f.Panels[0][0].Title.Text, fmt.Sprintf("(%d of %d runs)", maxBreakdownBars, 2*maxBreakdownBars))
	bb, err := breakdownBars(runs)
	require.NoError(t, err)
	assert.Len(t, bb.names, maxBreakdownBars)
	for _, v := range bb.values {
		assert.Len(t, v, maxBreakdownBars)
	}
	assert.Less(t, float64(f.Height), float64(20*72), "under 20 inches tall")
}
