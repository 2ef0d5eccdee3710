package sim

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// withOption is rc with one more backend option (withOpts replaces them all).
func withOption(rc sweeps.RunConfig, k string, v any) sweeps.RunConfig {
	m := maps.Clone(rc.BackendOptions)
	if m == nil {
		m = map[string]any{}
	}
	m[k] = v
	rc.BackendOptions = m
	return rc
}

// comm_overlap none exposes every collective: the step is compute plus all of
// the communication, and the note says so; a value it does not know is refused
// with the values it does.
func TestCommOverlapNoneExposesEveryCollective(t *testing.T) {
	rc := cfg("llama-1b", 8, sweeps.FullShard)
	rc.SeqLen, rc.BatchPerDevice = 2048, 4
	pre := mustPredict(t, rc)
	none := mustPredict(t, withOption(rc, "comm_overlap", CommOverlapNone))
	assert.Less(t, pre.ExposedCommS, pre.CommS, "prefetch hides some")
	assert.InEpsilon(t, none.CommS, none.ExposedCommS, 1e-12)
	assert.InEpsilon(t, pre.CommS, none.CommS, 1e-12, "the same collectives")
	assert.InEpsilon(t, none.ComputeS+none.CommS+none.OptimizerS, none.StepTimeS, 1e-12)
	assert.Contains(t, none.Notes, "comm_overlap none: every collective adds to the step")
	assert.NotContains(t, pre.Notes, "comm_overlap none: every collective adds to the step")
	assert.Equal(t, CommOverlapNone, none.Assumptions.CommOverlap)

	_, err := ParseOptions(map[string]any{"comm_overlap": "some"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "prefetch, none")
}

// llm-foundry's micro-batch series (the same model, sequence and GPUs at
// micro-batch 1 to 6, published_foundrycsv_test.go) grow in step time by their
// tokens' compute plus a fixed part equal to every collective of a micro-step
// (see foundryCSVMisses). Stated with comm_overlap none, the sim follows them:
// the error no longer climbs as the micro-batch shrinks (its spread in each
// series is less than half of prefetch's), and every row is within 15%. This
// is what those rows show, not a held-out check: the held-out tests state the
// rows with the default.
func TestCommOverlapNoneFitsFoundrySeries(t *testing.T) {
	dir := t.TempDir()
	type series struct{ pre, none []float64 }
	all := map[string]*series{}
	for _, r := range llmFoundryCSVRows {
		if r.ac || r.hw == "h100-sxm" || r.numParams < 5e9 || r.seq < 1024 {
			continue
		}
		key := fmt.Sprintf("%s/mpt-%s/seq%d/ga%d/%s", r.hw, r.model, r.seq, r.ga, r.src)
		if all[key] == nil {
			all[key] = &series{}
		}
		rc := r.run(t, dir)
		pre := mustPredict(t, rc).TokensPerS/float64(r.gpus)/r.tokensPerSPerGPU - 1
		none := mustPredict(t, withOption(rc, "comm_overlap", CommOverlapNone)).TokensPerS/float64(r.gpus)/r.tokensPerSPerGPU - 1
		all[key].pre, all[key].none = append(all[key].pre, pre), append(all[key].none, none)
		t.Logf("%s: prefetch %+.1f%%, none %+.1f%%", r.name(), 100*pre, 100*none)
		assert.Less(t, abs(none), 0.15, r.name())
	}
	spread := func(xs []float64) float64 { return slices.Max(xs) - slices.Min(xs) }
	n := 0
	for key, s := range all {
		if len(s.pre) < 2 {
			continue
		}
		n++
		t.Logf("%s: %d micro-batch sizes, spread prefetch %.1f points, none %.1f", key, len(s.pre), 100*spread(s.pre), 100*spread(s.none))
		assert.Less(t, spread(s.none), spread(s.pre)/2, key)
	}
	assert.GreaterOrEqual(t, n, 3, "the series of larger_mb_1.csv and torch2.csv")
}
