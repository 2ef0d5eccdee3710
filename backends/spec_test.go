package backends

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestSpecError(t *testing.T) {
	assert.NoError(t, SpecErr(nil))
	err := SpecErrorf("backend_options.x: no such option")
	assert.True(t, IsSpecError(fmt.Errorf("run a: %w", err)))
	assert.Same(t, err, SpecErr(err), "marked once")
	assert.False(t, IsSpecError(errors.New("does not fit")))
	assert.Equal(t, "backend_options.x: no such option", err.Error())
}

func TestOptionReaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  func() (any, error)
		want any
		err  string
	}{
		{"int", func() (any, error) { return Number(3) }, 3.0, ""},
		{"uint64", func() (any, error) { return Number(uint64(3)) }, 3.0, ""},
		{"string", func() (any, error) { return Number(" 2.5 ") }, 2.5, ""},
		{"NaN", func() (any, error) { return Number(math.NaN()) }, nil, "must be a finite number"},
		{"-Inf text", func() (any, error) { return Number("-Inf") }, nil, "must be a finite number"},
		{"bool", func() (any, error) { return Number(true) }, nil, "must be a number, got true (a boolean)"},
		{"long text", func() (any, error) { return Number("x" + string(make([]byte, 100))) }, nil, `..."`},
		{"open bound", func() (any, error) { return NumberIn(0, 0, 1, true) }, nil, "must be in (0, 1], got 0"},
		{"closed bound", func() (any, error) { return NumberIn(0, 0, 1, false) }, 0.0, ""},
		{"above", func() (any, error) { return NumberIn(1e300, 0, 1, false) }, nil, "must be in [0, 1], got 1e+300"},
		{"whole", func() (any, error) { return WholeIn(4.0, 1, 8) }, int64(4), ""},
		{"fraction", func() (any, error) { return WholeIn(4.5, 1, 8) }, nil, "must be a whole number in [1, 8], got 4.5"},
		{"duration", func() (any, error) { return DurationIn("50ms", 0, time.Second) }, 50 * time.Millisecond, ""},
		{"forever", func() (any, error) { return DurationIn("forever", 0, time.Second) }, nil, `got "forever"`},
		{"bare number", func() (any, error) { return DurationIn(5, 0, time.Second) }, nil, "got a int"},
		{"too long", func() (any, error) { return DurationIn("2s", 0, time.Second) }, nil, "must be between 0s and 1s"},
		{"bool", func() (any, error) { return Bool("TRUE") }, true, ""},
		{"yes", func() (any, error) { return Bool("yes") }, nil, "must be true or false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.got()
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	err := UnknownOption("backend_options", "gotrain", "lrr", []string{"lr", "weight_decay"})
	assert.True(t, IsSpecError(err))
	assert.EqualError(t, err, `backend_options.lrr: gotrain has no such option (did you mean "lr"?); known: lr, weight_decay`)
	assert.EqualError(t, UnknownOption("launcher_options", "the local launcher", "x", nil), "launcher_options.x: the local launcher has no such option; it takes none")
}

func TestCheckResult(t *testing.T) {
	rc := sweeps.RunConfig{WorldSize: 2, Steps: 2}
	ok := func() results.Result {
		return results.Result{Status: results.StatusOK, WorldSize: 2, MeasuredWallS: 1,
			Steps: []results.Step{{Step: 1, StepTimeS: 0.5}, {Step: 2, StepTimeS: 0.5}}}
	}
	require.NoError(t, CheckResult(rc, ok()))
	for _, tc := range []struct {
		edit func(*results.Result)
		want string
	}{
		{func(r *results.Result) { r.Status = "banana" }, `status "banana" is not a run status`},
		{func(r *results.Result) { r.Status = "" }, `status "" is not a run status`},
		{func(r *results.Result) { r.WorldSize = 3 }, "world_size is 3 but the run has 2 ranks"},
		{func(r *results.Result) { r.Steps = append(r.Steps, r.Steps...) }, "steps holds 4 steps but the run measures 2"},
		{func(r *results.Result) { r.Steps[1].StepTimeS = 0 }, "steps[1].step_time_s is 0; a time must be a number of seconds from 1e-09 to 1e+06"},
		{func(r *results.Result) { r.MeasuredWallS = 1e-320 }, "measured_wall_s is 1e-320; a time must be a number of seconds from 1e-09 to 1e+07"},
		{func(r *results.Result) { r.PeakFlopsPerS = 1e-300 }, "peak_flops_per_s is 1e-300"},
		{func(r *results.Result) { r.MeasuredWallS = -1 }, "measured_wall_s is -1"},
		{func(r *results.Result) { r.PeakRSSBytes = results.I64(-5) }, "peak_rss_bytes is -5"},
		{func(r *results.Result) { r.ModelFlopsPerToken = 1e300 }, "model_flops_per_token is 1e+300"},
		{func(r *results.Result) { r.PerRank = []results.RankResult{{Rank: 7}} }, "per_rank[0].rank is 7; the run has ranks 0 to 1"},
		{func(r *results.Result) { r.PerRank = []results.RankResult{{Rank: 1, Tokens: -1}} }, "per_rank[0].tokens is -1"},
		{func(r *results.Result) { r.CommBytesPerStep = &results.CommBytes{AllGather: -1} }, "comm_bytes_per_step.all_gather is -1"},
	} {
		res := ok()
		tc.edit(&res)
		assert.ErrorContains(t, CheckResult(rc, res), tc.want)
	}
}
