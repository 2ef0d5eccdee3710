package results

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestStoredPredictionRoundTripAndBounds(t *testing.T) {
	p := Prediction{TokensPerS: 2000, TokensPerSPerRank: 1000, StepTimeS: 0.5, PeakMemAllocatedBytes: 3 << 30,
		PeakMemReservedBytes: 4 << 30, PeakDeviceMemBytes: 5 << 30, Feasible: true, Calibration: "cal.json"}
	m := Metrics{Extra: map[string]any{ExtraPrediction: p}}
	require.Equal(t, &p, m.StoredPrediction())

	// Through metrics.json: Extra comes back as a map.
	b, err := json.Marshal(m)
	require.NoError(t, err)
	var back Metrics
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, &p, back.StoredPrediction())

	for _, c := range []struct {
		name  string
		extra any
	}{
		{"negative throughput", map[string]any{"tokens_per_s": -1.0}},
		{"huge memory", map[string]any{"peak_device_mem_bytes": float64(MaxMemBytes) * 4}},
		{"step time past bounds", map[string]any{"step_time_s": MaxStepTimeS * 2}},
		{"not an object", "fast"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := Metrics{Extra: map[string]any{ExtraPrediction: c.extra}}
			assert.Nil(t, m.StoredPrediction())
		})
	}
	assert.Nil(t, (&Metrics{}).StoredPrediction())
}

func TestMemoryPairPicksWhatBothHave(t *testing.T) {
	p := &Prediction{PeakMemAllocatedBytes: 10, PeakMemReservedBytes: 20, PeakDeviceMemBytes: 30}
	for _, c := range []struct {
		name       string
		m          Metrics
		host       bool
		what       string
		pred, meas int64
	}{
		{"device first", Metrics{PeakDeviceMemBytes: I64(33), PeakMemReservedBytes: I64(22), PeakMemAllocatedBytes: I64(11)}, false, SamplePeakDevice, 30, 33},
		{"then reserved", Metrics{PeakMemReservedBytes: I64(22), PeakMemAllocatedBytes: I64(11)}, false, SamplePeakReserved, 20, 22},
		{"then allocated", Metrics{PeakMemAllocatedBytes: I64(11)}, false, SamplePeakAllocated, 10, 11},
		{"host RSS", Metrics{PeakRSSBytes: I64(44)}, true, SamplePeakRSS, 30, 44},
		{"GPU RSS is not device memory", Metrics{PeakRSSBytes: I64(44)}, false, "", 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := *p
			q.Host = c.host
			pred, meas, what, ok := MemoryPair(&q, &c.m)
			assert.Equal(t, c.what != "", ok)
			assert.Equal(t, c.what, what)
			assert.Equal(t, c.pred, pred)
			assert.Equal(t, c.meas, meas)
		})
	}
}

// predictedSides is a measured set of runs and the same runs as predicted,
// 20% faster and using 10% less memory.
func predictedSides() (measured, predicted []Run) {
	for _, ws := range []int{1, 2} {
		rc := fixtureConfig(ws, sweeps.FullShard)
		rc.Sweep = "m"
		rc.AssignID()
		r := fixtureResult(rc)
		measured = append(measured, Run{Config: rc, Metrics: Normalize(rc, []Result{r})})
		r.Predicted = true
		r.MeasuredWallS /= 1.2
		for i := range r.Steps {
			r.Steps[i].StepTimeS /= 1.2
		}
		r.PeakMemAllocatedBytes = I64(*r.PeakMemAllocatedBytes * 9 / 10)
		rc.Sweep = "p"
		predicted = append(predicted, Run{Config: rc, Metrics: Normalize(rc, []Result{r})})
	}
	return measured, predicted
}

func TestComparePredictedAgainstMeasured(t *testing.T) {
	measured, predicted := predictedSides()
	for _, c := range []struct {
		name       string
		base, cur  []Run
		side       string
		tput, mems float64
	}{
		{"predicted current", measured, predicted, "current", 0.2, -0.1},
		{"predicted baseline", predicted, measured, "baseline", 0.2, -0.1},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmp, err := Compare(c.base, c.cur, CompareOptions{Metrics: []string{"tokens_per_s_per_rank", "peak_mem_allocated_bytes"},
				BaselineName: "A", CurrentName: "B"})
			require.NoError(t, err)
			require.Equal(t, c.side, cmp.PredictedSide)
			for _, row := range cmp.Rows {
				require.NotNil(t, row.Deltas[0].PredErr)
				assert.InDelta(t, c.tput, *row.Deltas[0].PredErr, 1e-9)
				assert.InDelta(t, c.mems, *row.Deltas[1].PredErr, 1e-6)
			}
			assert.InDelta(t, c.tput, *cmp.MeanAbsPredErr[0], 1e-9)
			var buf bytes.Buffer
			require.NoError(t, cmp.Write(&buf, FormatTable))
			out := buf.String()
			assert.Contains(t, out, "pred err")
			assert.Contains(t, out, "+20.00%")
			assert.Contains(t, out, "mean |pred err|")
			assert.Contains(t, out, "the "+c.side+" side is the analytic model's prediction")
		})
	}
	// A whole-run (†) measurement keeps its pred err on its row but stays out of
	// the mean: its error is the start-up's as much as the model's.
	whole := append([]Run(nil), measured...)
	whole[1].Metrics.WholeRunWallTime = true
	whole[1].Metrics.TokensPerSPerRank = F64(*whole[1].Metrics.TokensPerSPerRank * 2)
	cmp, err := Compare(whole, predicted, CompareOptions{Metrics: []string{"tokens_per_s_per_rank"}})
	require.NoError(t, err)
	require.NotNil(t, cmp.Rows[1].Deltas[0].PredErr)
	assert.InDelta(t, 0.2, *cmp.MeanAbsPredErr[0], 1e-9, "the † row is left out")

	// Two measured sides: an ordinary comparison.
	cmp, err = Compare(measured, measured, CompareOptions{})
	require.NoError(t, err)
	assert.Empty(t, cmp.PredictedSide)
	assert.Nil(t, cmp.Rows[0].Deltas[0].PredErr)
}

func TestPredictedColumns(t *testing.T) {
	measured, _ := predictedSides()
	r := &measured[0]
	r.Metrics.Extra = map[string]any{ExtraPrediction: Prediction{TokensPerSPerRank: *r.Metrics.TokensPerSPerRank * 1.5,
		PeakMemAllocatedBytes: *r.Metrics.PeakMemAllocatedBytes / 2}}
	for _, c := range []struct {
		name string
		want any
	}{
		{"predicted.tokens_per_s_per_rank", *r.Metrics.TokensPerSPerRank * 1.5},
		{"pred_err.tokens_per_s_per_rank", 0.5},
		{"pred_err.peak_mem_bytes", -0.5},
	} {
		col, err := LookupColumn(c.name, KindMetric)
		require.NoError(t, err, c.name)
		assert.InDelta(t, c.want, col.Value(r), 1e-9, c.name)
		assert.Nil(t, col.Value(&measured[1]), "%s of a run without a prediction", c.name)
	}
	for _, c := range Columns() {
		assert.NotContains(t, c.Name, "pred_err", "exports keep their columns")
	}
}
