package sim

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// recorder collects the events a run emits.
type recorder struct {
	mu     sync.Mutex
	events []backends.Event
}

func (r *recorder) emit(ev backends.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) kinds() map[backends.EventKind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := map[backends.EventKind]int{}
	for _, ev := range r.events {
		n[ev.Kind]++
	}
	return n
}

func TestDescribe(t *testing.T) {
	d, err := New().Describe(t.Context())
	require.NoError(t, err)
	assert.Equal(t, Name, d.Name)
	assert.Equal(t, Name, New().Name())
	assert.True(t, d.Available)
	assert.False(t, d.NeedsGPU)
	assert.Nil(t, d.Axes, "every axis and value")
}

func TestRunReportsThePrediction(t *testing.T) {
	rc := cfg("llama-1b", 8, sweeps.FullShard)
	rc.Steps, rc.WarmupSteps = 5, 2
	pred := mustPredict(t, rc)
	var rec recorder
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, rec.emit)
	require.NoError(t, err)

	assert.Equal(t, results.StatusOK, res.Status)
	assert.True(t, res.Predicted)
	assert.Equal(t, 8, res.WorldSize)
	require.Len(t, res.Steps, rc.Steps, "warm-up steps are not reported")
	for i, st := range res.Steps {
		assert.Equal(t, i+1, st.Step)
		assert.Equal(t, pred.StepTimeS, st.StepTimeS)
		assert.Equal(t, int64(8*1*rc.SeqLen), st.Tokens)
		assert.Nil(t, st.Loss, "the sim trains nothing")
	}
	assert.InEpsilon(t, 5*pred.StepTimeS, res.MeasuredWallS, 1e-12)
	assert.Equal(t, int64(8*1*rc.SeqLen), res.TokensPerStep)
	assert.Equal(t, pred.ModelFlopsPerToken, res.ModelFlopsPerToken)
	assert.Equal(t, pred.Hardware.PeakFLOPS[sweeps.BF16], res.PeakFlopsPerS)
	assert.Equal(t, pred.PeakMemAllocatedBytes, *res.PeakMemAllocatedBytes)
	assert.Equal(t, pred.PeakMemReservedBytes, *res.PeakMemReservedBytes)
	assert.Equal(t, pred.Hardware.MemBytes, *res.DeviceMemBytes)
	assert.Equal(t, pred.Breakdown, res.MemBreakdownBytes)
	assert.Equal(t, pred.CommBytesPerStep, *res.CommBytesPerStep)
	assert.Equal(t, "h100-sxm", res.Env.Hardware)
	assert.Equal(t, pred.Shape.Params(), res.Env.ModelParams)
	assert.Equal(t, runtime.Version(), res.Env.Go)
	assert.False(t, res.Finished.Before(res.Started))

	k := rec.kinds()
	assert.Equal(t, 1, k[backends.EventStarted])
	assert.Equal(t, rc.Steps, k[backends.EventStep])
	assert.Equal(t, 1, k[backends.EventFinished])
	assert.Equal(t, backends.EventStarted, rec.events[0].Kind)
	last := rec.events[len(rec.events)-1]
	assert.Equal(t, backends.EventFinished, last.Kind)
	assert.Equal(t, results.StatusOK, last.Status)
}

func TestRunInfeasibleIsAResult(t *testing.T) {
	var rec recorder
	res, err := New().Run(t.Context(), cfg("llama3-8b", 1, sweeps.DDP), backends.RunEnv{}, rec.emit)
	require.NoError(t, err, "infeasible is a result, not an error")
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "GiB on h100-sxm")
	assert.Empty(t, res.Steps)
	require.NotNil(t, res.PeakMemReservedBytes, "the prediction is still reported")
	assert.Greater(t, *res.PeakDeviceMemBytes, *res.DeviceMemBytes)
	assert.Zero(t, rec.kinds()[backends.EventStep])
	assert.Equal(t, 1, rec.kinds()[backends.EventFinished])

	// A config Validate refuses is infeasible too, with Validate's reason.
	rc := cfg("llama-1b", 8, sweeps.HybridShard)
	res, err = New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "nodes ≥ 2")
}

// An absurd but legal configuration is stored infeasible, as plan shows it: its
// saturated memory figures (2^58 bytes) are left out, since the harness's figure
// check refuses anything past 1 PiB and stored the run failed.
func TestRunAbsurdConfigIsInfeasibleNotFailed(t *testing.T) {
	rc := cfg("llama3-8b", 8, sweeps.FullShard)
	rc.SeqLen, rc.BatchPerDevice = 1<<24, 1<<16
	rc.GlobalBatch = rc.WorldSize * rc.BatchPerDevice
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "GiB per GPU")
	m := results.Checked(rc, results.Normalize(rc, []results.Result{res}))
	assert.Equal(t, results.StatusInfeasible, m.Status, m.Error)
	assert.Nil(t, m.PeakMemAllocatedBytes)
}

func TestRunRejectsBadOptions(t *testing.T) {
	rc := cfg("tiny", 1, sweeps.NoShard)
	rc.BackendOptions = map[string]any{"sleep_per_step": "soon"}
	_, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	assert.ErrorContains(t, err, `backend_options.sleep_per_step: must be a duration such as "50ms" or "2s", got "soon"`)
	assert.True(t, backends.IsSpecError(err))
}

func TestSleepPerStepEmitsSteps(t *testing.T) {
	rc := cfg("tiny", 2, sweeps.FullShard)
	rc.Steps, rc.WarmupSteps = 3, 1
	rc.BackendOptions = map[string]any{"sleep_per_step": "1ms"}
	var rec recorder
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, rec.emit)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status)
	assert.Len(t, res.Steps, 3)
	assert.Equal(t, 3, rec.kinds()[backends.EventStep])
}

func TestSleepPerStepHonoursCancel(t *testing.T) {
	rc := cfg("tiny", 2, sweeps.FullShard)
	rc.Steps = 1_000_000
	rc.BackendOptions = map[string]any{"sleep_per_step": "1h"}
	ctx, cancel := context.WithCancel(t.Context())
	var rec recorder
	done := make(chan struct{})
	var res results.Result
	var err error
	go func() {
		defer close(done)
		res, err = New().Run(ctx, rc, backends.RunEnv{}, rec.emit)
	}()
	cancel() // the first step sleeps an hour: only cancellation can end it
	<-done
	require.NoError(t, err)
	assert.Equal(t, results.StatusCanceled, res.Status)
	assert.Contains(t, res.Error, "canceled after 0 of 1000000 steps")
	assert.Empty(t, res.Steps)
	assert.Equal(t, 1, rec.kinds()[backends.EventFinished])
}

func TestCancelMidRunKeepsStepsDone(t *testing.T) {
	rc := cfg("tiny", 2, sweeps.FullShard)
	rc.Steps = 1000
	rc.BackendOptions = map[string]any{"sleep_per_step": "1ms"}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	emit := func(ev backends.Event) {
		if ev.Kind == backends.EventStep && ev.Step == 2 {
			cancel()
		}
	}
	res, err := New().Run(ctx, rc, backends.RunEnv{}, emit)
	require.NoError(t, err)
	assert.Equal(t, results.StatusCanceled, res.Status)
	assert.Len(t, res.Steps, 2)
	assert.InEpsilon(t, 2*res.Steps[0].StepTimeS, res.MeasuredWallS, 1e-12)
}

func TestRunWithoutSleepStillNoticesCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	res, err := New().Run(ctx, cfg("tiny", 1, sweeps.NoShard), backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusCanceled, res.Status)
}

func TestValidate(t *testing.T) {
	b := New()
	assert.NoError(t, b.Validate(t.Context(), cfg("mistral-7b", 8, sweeps.FullShard)))
	// Too big to fit is Run's verdict (infeasible with figures), not Validate's.
	assert.NoError(t, b.Validate(t.Context(), cfg("llama3-8b", 1, sweeps.DDP)))
	rc := cfg("tiny", 1, sweeps.NoShard)
	rc.BackendOptions = map[string]any{"nope": 1}
	err := b.Validate(t.Context(), rc)
	require.Error(t, err)
	for _, name := range OptionNames() {
		assert.Contains(t, err.Error(), name, "the error lists the known options")
	}
}
