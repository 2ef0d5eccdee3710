package results

import (
	"math"
	"testing"

	"github.com/fsdpbench/fsdpbench/sweeps"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func bd(step, compute, coll, exposed float64) StepBreakdown {
	return StepBreakdown{StepS: step, ComputeS: compute, CollectiveS: coll, ExposedCommS: exposed,
		OtherS: step - compute - exposed, Source: "test"}
}

func TestBreakdownCheck(t *testing.T) {
	good := bd(1, 0.6, 0.5, 0.3)
	f, msg := good.Check()
	require.Empty(t, f, msg)
	assert.InDelta(t, 0.4, *good.Overlap(), 1e-12)
	assert.InDelta(t, 0.3, *good.ExposedShare(), 1e-12)

	for name, tc := range map[string]struct {
		b     StepBreakdown
		field string
	}{
		"sum":            {StepBreakdown{StepS: 1, ComputeS: 0.5, CollectiveS: 0.2, ExposedCommS: 0.1, OtherS: 0.2}, "step_s"},
		"exposed>coll":   {bd(1, 0.5, 0.1, 0.3), "exposed_comm_s"},
		"negative other": {bd(1, 0.9, 0.3, 0.3), "other_s"},
		"kind>coll":      {func() StepBreakdown { b := bd(1, 0.6, 0.5, 0.3); b.AllGatherS = F64(0.7); return b }(), "all_gather_s"},
		"nan":            {func() StepBreakdown { b := bd(1, 0.6, 0.5, 0.3); b.ReduceScatterS = F64(math.NaN()); return b }(), "reduce_scatter_s"},
		"coll>step":      {bd(1, 0.5, 1.5, 0.3), "collective_s"},
	} {
		f, msg := tc.b.Check()
		assert.Equal(t, tc.field, f, "%s: %s", name, msg)
	}
	none := bd(1, 0.9, 0, 0)
	assert.Nil(t, none.Overlap(), "no collective: overlap is unknown, not 0 or 1")
}

func TestMedianBreakdownKeepsTheIdentity(t *testing.T) {
	steps := []StepBreakdown{bd(1.0, 0.6, 0.5, 0.3), bd(3.0, 1.0, 2.5, 1.5), bd(2.0, 1.2, 0.8, 0.4), bd(1.5, 0.7, 0.9, 0.6)}
	m := MedianBreakdown(steps)
	require.NotNil(t, m)
	assert.Equal(t, 1.5, m.StepS, "lower median of four step times")
	f, msg := m.Check()
	assert.Empty(t, f, msg)
	assert.Nil(t, MedianBreakdown(nil))
}

func TestNormalizeCarriesTheBreakdown(t *testing.T) {
	rc := fixtureConfig(2, sweeps.FullShard)
	rep := func(step float64) Result {
		r := Result{Status: StatusOK, WorldSize: 2, Steps: steps(4, step, rc.TokensPerStep()), MeasuredWallS: 4 * step,
			PerRank: []RankResult{{Rank: 0}, {Rank: 1}}}
		a, b := bd(step, step*0.5, step*0.4, step*0.2), bd(step*0.9, step*0.5, step*0.3, step*0.1)
		r.PerRank[0].StepBreakdown, r.PerRank[1].StepBreakdown = &a, &b
		return r
	}
	m := Normalize(rc, []Result{rep(1), rep(3), rep(2)})
	require.NotNil(t, m.StepBreakdown)
	assert.Equal(t, 2.0, m.StepBreakdown.StepS, "the median repeat's slowest rank")
	assert.InDeltaSlice(t, []float64{0.2, 0.6, 0.4}, m.Samples[SampleExposedCommS], 1e-12)
	require.NoError(t, CheckMetrics(&rc, &m))

	m.PerRank[1].StepBreakdown.OtherS += 0.5
	err := CheckMetrics(&rc, &m)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "per_rank[1].step_breakdown.step_s")
}
