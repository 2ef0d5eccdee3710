package results

import (
	"bytes"
	"encoding/csv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

func steps(n int, stepTime float64, tokens int64) []Step {
	out := make([]Step, n)
	for i := range out {
		loss := 5 - float64(i)
		out[i] = Step{Step: i, Loss: &loss, StepTimeS: stepTime, Tokens: tokens}
	}
	return out
}

func TestNormalizeThroughput(t *testing.T) {
	rc := fixtureConfig(4, sweeps.FullShard) // global batch 8 x seq 128 = 1024 tokens/step
	const flops, peak = 1.2e9, 989e12
	tps := rc.TokensPerStep()
	tests := []struct {
		name          string
		res           Result
		wantTokens    float64 // tokens of all ranks over the measured steps
		wantWall      float64 // measured wall time, slowest rank
		wantMFU       bool
		wantStepCount int
	}{
		{
			name: "per-rank tokens and wall time",
			res: Result{Status: StatusOK, Steps: steps(10, 0.2, tps), MeasuredWallS: 2.5, ModelFlopsPerToken: flops, PeakFlopsPerS: peak,
				PerRank: []RankResult{{Rank: 0, Tokens: 2560}, {Rank: 1, Tokens: 2560}, {Rank: 2, Tokens: 2560}, {Rank: 3, Tokens: 2560}}},
			wantTokens: 4 * 2560, wantWall: 2.5, wantMFU: true, wantStepCount: 10,
		},
		{
			name:       "tokens per step when ranks do not report tokens",
			res:        Result{Status: StatusOK, Steps: steps(10, 0.2, tps), MeasuredWallS: 2.5, ModelFlopsPerToken: flops, PeakFlopsPerS: peak},
			wantTokens: float64(10 * tps), wantWall: 2.5, wantMFU: true, wantStepCount: 10,
		},
		{
			name: "some ranks without tokens: tokens per step",
			res: Result{Status: StatusOK, Steps: steps(10, 0.2, tps), MeasuredWallS: 2.5,
				PerRank: []RankResult{{Rank: 0, Tokens: 9999}, {Rank: 1}, {Rank: 2}, {Rank: 3}}},
			wantTokens: float64(10 * tps), wantWall: 2.5, wantStepCount: 10,
		},
		{
			name: "slowest rank's wall time when the result has none",
			res: Result{Status: StatusOK, Steps: steps(5, 0.2, tps),
				PerRank: []RankResult{{Rank: 0, MeasuredWallS: 1.0}, {Rank: 1, MeasuredWallS: 1.3}}},
			wantTokens: float64(5 * tps), wantWall: 1.3, wantStepCount: 5,
		},
		{
			name:       "sum of step times as the last resort; MFU needs a peak",
			res:        Result{Status: StatusOK, Steps: steps(5, 0.25, tps), ModelFlopsPerToken: flops},
			wantTokens: float64(5 * tps), wantWall: 5 * 0.25, wantStepCount: 5,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Normalize(rc, []Result{tt.res})
			require.Equal(t, StatusOK, m.Status)
			assert.Equal(t, rc.ID, m.RunID)
			assert.Equal(t, tt.wantStepCount, m.StepsMeasured)
			require.NotNil(t, m.TokensPerS)
			assert.InDelta(t, tt.wantTokens/tt.wantWall, *m.TokensPerS, 1e-9)
			assert.InDelta(t, tt.wantTokens/tt.wantWall/4, *m.TokensPerSPerRank, 1e-9)
			if tt.res.ModelFlopsPerToken > 0 {
				require.NotNil(t, m.TFLOPsPerRank)
				assert.InDelta(t, flops*(*m.TokensPerSPerRank)/1e12, *m.TFLOPsPerRank, 1e-12)
			} else {
				assert.Nil(t, m.TFLOPsPerRank, "no FLOP count: TFLOP/s unknown, not 0")
			}
			if tt.wantMFU {
				require.NotNil(t, m.MFU)
				assert.InDelta(t, flops*(*m.TokensPerSPerRank)/peak, *m.MFU, 1e-15)
			} else {
				assert.Nil(t, m.MFU, "MFU needs both the FLOP count and the peak")
			}
			assert.Nil(t, m.Samples, "one repeat has no samples")
			assert.Nil(t, m.CI)
		})
	}
}

func TestNormalizeStepTimesAndLoss(t *testing.T) {
	rc := fixtureConfig(1, sweeps.FullShard)
	var ss []Step
	for i := 1; i <= 11; i++ { // step times 0.1 .. 1.1: the median is 0.6
		loss := 10 / float64(i)
		ss = append(ss, Step{Step: i, Loss: &loss, StepTimeS: 0.1 * float64(i)})
	}
	m := Normalize(rc, []Result{{Status: StatusOK, Steps: ss}})
	require.NotNil(t, m.StepTimeS)
	assert.InDelta(t, 0.6, m.StepTimeS.Median, 1e-12)
	assert.Less(t, m.StepTimeS.P10, m.StepTimeS.Median)
	assert.Greater(t, m.StepTimeS.P90, m.StepTimeS.Median)
	assert.InDelta(t, *ss[0].Loss, *m.LossFirst, 0)
	assert.InDelta(t, *ss[10].Loss, *m.LossLast, 0)

	t.Run("final loss from rank 0 when steps carry none", func(t *testing.T) {
		m := Normalize(rc, []Result{{Status: StatusOK, Steps: []Step{{Step: 1, StepTimeS: 1}},
			PerRank: []RankResult{{Rank: 1, LossLast: F64(9)}, {Rank: 0, LossLast: F64(2.5)}}}})
		require.NotNil(t, m.LossLast)
		assert.InDelta(t, 2.5, *m.LossLast, 0)
		assert.Nil(t, m.LossFirst)
	})
}

func TestNormalizeStatus(t *testing.T) {
	rc := fixtureConfig(2, sweeps.NoShard)
	ok := Result{Status: StatusOK, Steps: steps(3, 0.1, 512), PeakMemReservedBytes: I64(10 << 30)}
	tests := []struct {
		name      string
		repeats   []Result
		want      Status
		wantError string
	}{
		{"no repeats", nil, StatusFailed, "no repeat of the run was recorded; rerun it (fsdpbench sweep --rerun)"},
		{"all ok", []Result{ok, ok}, StatusOK, ""},
		{"oom beats ok", []Result{ok, {Status: StatusOOM, Error: "CUDA out of memory"}}, StatusOOM, "repeat 2 of 2: CUDA out of memory"},
		{"failed beats timeout", []Result{{Status: StatusTimeout, Error: "10m"}, {Status: StatusFailed, Error: "exit 1"}, ok},
			StatusFailed, "repeat 2 of 3: exit 1"},
		{"canceled beats oom", []Result{{Status: StatusOOM}, {Status: StatusCanceled, Error: "interrupted"}}, StatusCanceled, "repeat 2 of 2: interrupted"},
		{"infeasible", []Result{{Status: StatusInfeasible, Error: "needs 95 GiB"}}, StatusInfeasible, "needs 95 GiB"},
		{"no status reads as failed", []Result{{Error: "crashed"}}, StatusFailed,
			`the backend reported status "", which is not a known status: crashed`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := Normalize(rc, tt.repeats)
			assert.Equal(t, tt.want, m.Status)
			assert.Equal(t, tt.wantError, m.Error)
			assert.Equal(t, len(tt.repeats), m.Repeats)
		})
	}

	t.Run("severity order", func(t *testing.T) {
		order := []Status{StatusOK, StatusInfeasible, StatusOOM, StatusDiverged, StatusCanceled, StatusTimeout, StatusFailed}
		for i := 1; i < len(order); i++ {
			assert.Less(t, order[i-1].Severity(), order[i].Severity(), "%s should be better than %s", order[i-1], order[i])
		}
		assert.Equal(t, StatusFailed.Severity(), Status("exploded").Severity())
	})

	t.Run("diverged is a final result", func(t *testing.T) {
		// Like oom: resume keeps it, and it is no failure of the sweep.
		assert.True(t, StatusDiverged.Final())
		assert.False(t, StatusDiverged.Fits())
		loss := 2.5
		m := Normalize(rc, []Result{
			{Status: StatusOK, WorldSize: 2, Steps: []Step{{Step: 1, Loss: &loss, StepTimeS: 0.1, Tokens: 8}}, MeasuredWallS: 0.1},
			{Status: StatusDiverged, Error: "loss NaN at step 1", WorldSize: 2, Steps: []Step{{Step: 1, StepTimeS: 0.1, Tokens: 8}}},
		})
		assert.Equal(t, StatusDiverged, m.Status)
		assert.Equal(t, "repeat 2 of 2: loss NaN at step 1", m.Error)
	})

	t.Run("throughput only from ok repeats, peak from all", func(t *testing.T) {
		oom := Result{Status: StatusOOM, PerRank: []RankResult{{Rank: 1, PeakMemReservedBytes: I64(79 << 30)}}}
		m := Normalize(rc, []Result{ok, oom})
		require.NotNil(t, m.TokensPerS)
		assert.InDelta(t, 3*512/(3*0.1), *m.TokensPerS, 1e-9)
		assert.Equal(t, int64(79<<30), *m.PeakMemReservedBytes)
		assert.Nil(t, m.PeakMemAllocatedBytes, "never reported: unknown, not 0")
	})
}

func TestNormalizeRepeats(t *testing.T) {
	rc := fixtureConfig(2, sweeps.FullShard)
	walls := []float64{1.00, 1.10, 0.95, 1.30, 1.05, 0.98}
	var repeats []Result
	for i, w := range walls {
		repeats = append(repeats, Result{Status: StatusOK, Steps: steps(4, w/4, rc.TokensPerStep()), MeasuredWallS: w,
			ModelFlopsPerToken: 1e9, PeakFlopsPerS: 1e14, PeakMemReservedBytes: I64(int64(10+i) << 30), Predicted: i == 3})
	}

	t.Run("six repeats: samples and CI", func(t *testing.T) {
		m := Normalize(rc, repeats)
		assert.True(t, m.Predicted, "one predicted repeat marks the run")
		want := make([]float64, len(walls))
		for i, w := range walls {
			want[i] = float64(4*rc.TokensPerStep()) / w
		}
		assert.InDeltaSlice(t, want, m.Samples[SampleTokensPerS], 1e-9)
		for _, name := range []string{SampleTokensPerS, SampleTokensPerSPerRank, SampleStepTimeS, SampleMFU,
			SampleTFLOPsPerRank, SamplePeakReserved, SampleLossFirst, SampleLossLast} {
			assert.Len(t, m.Samples[name], len(walls), name)
		}
		assert.NotContains(t, m.Samples, SamplePeakAllocated, "never reported")

		s := benchmath.NewSample(append([]float64(nil), want...), &benchmath.DefaultThresholds)
		sum := benchmath.AssumeNothing.Summary(s, 0.95)
		ci, ok := m.CI[SampleTokensPerS]
		require.True(t, ok)
		assert.Equal(t, Interval{Center: sum.Center, Lo: sum.Lo, Hi: sum.Hi}, ci)
		assert.InDelta(t, sum.Center, *m.TokensPerS, 1e-9, "the headline is the median over repeats")
		assert.LessOrEqual(t, ci.Lo, ci.Center)
		assert.GreaterOrEqual(t, ci.Hi, ci.Center)
		assert.Equal(t, int64(15<<30), *m.PeakMemReservedBytes, "peak is the max over repeats")
	})

	t.Run("two repeats: samples, no finite CI", func(t *testing.T) {
		m := Normalize(rc, repeats[:2])
		assert.Len(t, m.Samples[SampleTokensPerS], 2)
		assert.Nil(t, m.CI, "benchmath needs 6 samples for a finite 95% interval")
		assert.InDelta(t, median(m.Samples[SampleTokensPerS]), *m.TokensPerS, 1e-9)
	})
}

func TestStepsCSV(t *testing.T) {
	loss := 2.5
	var buf bytes.Buffer
	require.NoError(t, StepsCSV(&buf, []Step{{Step: 3, Loss: &loss, StepTimeS: 0.125, Tokens: 4096}, {Step: 4, StepTimeS: 0.5, Tokens: 4096}}))
	assert.Equal(t, "step,loss,step_time_s,tokens\n3,2.5,0.125,4096\n4,,0.5,4096\n", buf.String())
	recs, err := csv.NewReader(&buf).ReadAll()
	require.NoError(t, err)
	assert.Len(t, recs, 3)
}
