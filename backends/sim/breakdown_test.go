package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// checkPredictedBreakdown asserts the breakdown's identities against the
// prediction it came from and returns it.
func checkPredictedBreakdown(t *testing.T, p Prediction) *results.StepBreakdown {
	t.Helper()
	b := p.StepBreakdown()
	require.NotNil(t, b)
	f, msg := b.Check()
	require.Empty(t, f, msg)
	assert.Equal(t, SourceSim, b.Source)
	assert.Equal(t, p.StepTimeS, b.StepS)
	assert.InDelta(t, b.StepS, b.ComputeS+b.ExposedCommS+b.OtherS, 1e-12)
	assert.Equal(t, p.ExposedCommS, b.ExposedCommS)
	assert.Equal(t, p.CommS, b.CollectiveS)
	if b.AllGatherS != nil {
		assert.InDelta(t, b.CollectiveS, *b.AllGatherS+*b.ReduceScatterS+*b.AllReduceS, 1e-12,
			"the sim's collectives run one after another: the kinds add up to the union")
	}
	return b
}

func TestPredictedBreakdownPerStrategy(t *testing.T) {
	for _, s := range []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard, sweeps.DDP} {
		t.Run(s, func(t *testing.T) {
			b := checkPredictedBreakdown(t, mustPredict(t, cfg("llama-1b", 8, s)))
			require.NotNil(t, b.AllGatherS)
			switch s {
			case sweeps.FullShard, sweeps.ShardGradOp:
				assert.Positive(t, *b.AllGatherS)
				assert.Positive(t, *b.ReduceScatterS)
				assert.Zero(t, *b.AllReduceS)
			default:
				assert.Zero(t, *b.AllGatherS)
				assert.Zero(t, *b.ReduceScatterS)
				assert.Positive(t, *b.AllReduceS)
			}
			o := b.Overlap()
			require.NotNil(t, o)
			assert.InDelta(t, 1-b.ExposedCommS/b.CollectiveS, *o, 1e-12)
		})
	}
	t.Run("hybrid_shard", func(t *testing.T) {
		rc := cfg("llama-1b", 16, sweeps.HybridShard)
		rc.Nodes, rc.GPUsPerNode = 2, 8
		b := checkPredictedBreakdown(t, mustPredict(t, rc))
		// Within the node all-gathers and reduce-scatters, across nodes an
		// all-reduce of the shards.
		assert.Positive(t, *b.AllGatherS)
		assert.Positive(t, *b.ReduceScatterS)
		assert.Positive(t, *b.AllReduceS)
	})
	t.Run("one rank", func(t *testing.T) {
		b := checkPredictedBreakdown(t, mustPredict(t, cfg("gpt2-124m", 1, sweeps.DDP)))
		assert.Zero(t, b.CollectiveS)
		assert.Zero(t, b.ExposedCommS)
		assert.Nil(t, b.Overlap(), "no collective: no overlap to speak of")
	})
}

// Backward prefetch hides backward all-gathers: the predicted exposed
// communication falls and the overlap rises, the collectives' time the same.
func TestPredictedBreakdownPrefetchHidesCommunication(t *testing.T) {
	rc := cfg("llama-1b", 8, sweeps.FullShard)
	rc.Nodes, rc.GPUsPerNode = 2, 4 // inter-node links: communication matters
	none, pre := rc, rc
	none.BackwardPrefetch = sweeps.PrefetchNone
	bn := checkPredictedBreakdown(t, mustPredict(t, none))
	bp := checkPredictedBreakdown(t, mustPredict(t, pre))
	assert.InEpsilon(t, bn.CollectiveS, bp.CollectiveS, 1e-12)
	assert.Less(t, bp.ExposedCommS, bn.ExposedCommS)
	assert.Greater(t, *bp.Overlap(), *bn.Overlap())
	assert.InEpsilon(t, bn.ComputeS, bp.ComputeS, 1e-12)
}

// The calibrated fixed costs keep the identities: the per-call latency lands
// in the kinds by their calls, the per-micro-step overhead in other.
func TestPredictedBreakdownCalibrated(t *testing.T) {
	rc := cfg("llama-1b", 16, sweeps.HybridShard)
	rc.Nodes, rc.GPUsPerNode = 2, 8
	base := mustPredict(t, rc)
	cal := &Calibration{Profiles: map[string]Constants{"h100-sxm": {Efficiency: 0.4, StepOverheadS: 0.01, CollectiveLatencyS: 1e-4}}}
	p, err := PredictCalibrated(rc, nil, cal)
	require.NoError(t, err)
	b := checkPredictedBreakdown(t, p)
	assert.InEpsilon(t, 0.01, b.OtherS, 1e-6, "the per-micro-step overhead is neither compute nor communication")

	wu, err := unitsFor(base.Shape, WrapTransformer)
	require.NoError(t, err)
	pt := point{rc: rc, shape: base.Shape}
	ag, rs, ar := callsByKind(&pt, sweeps.HybridShard, wu)
	assert.Equal(t, collectiveCalls(&pt, sweeps.HybridShard, wu), ag+rs+ar, "callsByKind splits collectiveCalls")
	bb := base.StepBreakdown()
	assert.InDelta(t, float64(ar)*1e-4, *b.AllReduceS-*bb.AllReduceS, 1e-9)
	for _, s := range []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard, sweeps.DDP} {
		ag, rs, ar := callsByKind(&pt, s, wu)
		assert.Equal(t, collectiveCalls(&pt, s, wu), ag+rs+ar, s)
	}
}

// The sim's result carries the breakdown, and the run's metrics keep it
// through normalization and the figure check.
func TestRunCarriesThePredictedBreakdown(t *testing.T) {
	rc := cfg("llama-1b", 8, sweeps.FullShard)
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status)
	require.NotNil(t, res.StepBreakdown)
	assert.Equal(t, res.Steps[0].StepTimeS, res.StepBreakdown.StepS)
	m := results.Checked(rc, results.Normalize(rc, []results.Result{res, res}))
	require.Equal(t, results.StatusOK, m.Status, m.Error)
	require.NotNil(t, m.StepBreakdown)
	assert.Equal(t, *res.StepBreakdown, *m.StepBreakdown)
	e := res.StepBreakdown.ExposedCommS
	assert.Equal(t, []float64{e, e}, m.Samples[results.SampleExposedCommS], "repeats give samples")

	// A measured run annotated by --predict keeps the predicted breakdown.
	mm := results.Metrics{Status: results.StatusOK}
	Annotator(nil, nil)(rc, &mm)
	sp := mm.StoredPrediction()
	require.NotNil(t, sp)
	require.NotNil(t, sp.StepBreakdown)
	assert.Equal(t, res.StepBreakdown.ExposedCommS, sp.StepBreakdown.ExposedCommS)
}
