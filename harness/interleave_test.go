package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestRepeatOrder: by default a sweep runs repeat 1 of every run, then repeat
// 2 of every run (a disturbed minute touches one sample of many runs); with
// RepeatsSequential each run's repeats follow each other. Either way each run
// gets all its repeats, in order, and one metrics.json over them.
func TestRepeatOrder(t *testing.T) {
	for _, tt := range []struct {
		order string
		want  []string
	}{
		{"", []string{"1/0", "2/0", "3/0", "1/1", "2/1", "3/1", "1/2", "2/2", "3/2"}},
		{RepeatsSequential, []string{"1/0", "1/1", "1/2", "2/0", "2/1", "2/2", "3/0", "3/1", "3/2"}},
	} {
		t.Run("order="+tt.order, func(t *testing.T) {
			be := &fake{name: "fake"}
			opts, _ := options(t, be)
			opts.RepeatOrder = tt.order
			p := plan("order", 3)
			for i := range p.Runs {
				p.Runs[i].Repeats = 3
			}
			sum, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			var got []string
			for i, id := range be.runs() {
				for k, rc := range p.Runs {
					if rc.ID == id {
						got = append(got, fmt.Sprintf("%d/%d", k+1, be.envs[i].Repeat))
					}
				}
			}
			assert.Equal(t, tt.want, got)
			require.Len(t, sum.Runs, 3)
			for k, o := range sum.Runs {
				assert.Equal(t, p.Runs[k].ID, o.Config.ID, "outcomes in plan order")
				assert.Equal(t, results.StatusOK, o.Status)
				m := readMetrics(t, filepath.Join(opts.ResultsDir, "order"), o.Config.ID)
				assert.Equal(t, 3, m.Repeats)
				rows := readSteps(t, filepath.Join(opts.ResultsDir, "order", results.RunsDir, o.Config.ID, results.StepsFile))
				assert.Len(t, rows, 1+3*p.Runs[k].Steps)
				_, err := os.Stat(filepath.Join(opts.ResultsDir, "order", results.RunsDir, o.Config.ID, RepeatsDir))
				assert.True(t, os.IsNotExist(err), "the kept repeats go once metrics.json is written")
			}
			assert.Equal(t, 3, sum.OK)
		})
	}
}

// TestInterleavedRunEndsAtABadRepeat: a repeat that runs out of memory ends
// its run in that round (as in the sequential order) and the other runs go on.
func TestInterleavedRunEndsAtABadRepeat(t *testing.T) {
	be := &fake{name: "fake"}
	p := plan("bad", 2)
	for i := range p.Runs {
		p.Runs[i].Repeats = 3
	}
	be.run = func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		if rc.ID == p.Runs[0].ID && env.Repeat == 1 {
			return results.Result{Status: results.StatusOOM, Error: "out of memory"}, nil
		}
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Len(t, be.runs(), 2+3)
	assert.Equal(t, results.StatusOOM, sum.Runs[0].Status)
	assert.Equal(t, results.StatusOK, sum.Runs[1].Status)
	assert.Equal(t, 2, readMetrics(t, filepath.Join(opts.ResultsDir, "bad"), p.Runs[0].ID).Repeats)
}

// TestInterleavedResumeKeepsFinishedRepeats: a sweep interrupted between rounds
// resumes each run at its next repeat: the repeats it finished are not run
// again, and each run ends with all its repeats.
func TestInterleavedResumeKeepsFinishedRepeats(t *testing.T) {
	be := &fake{name: "fake"}
	p := plan("resume", 2)
	for i := range p.Runs {
		p.Runs[i].Repeats = 3
	}
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		calls++
		if calls == 4 { // round 2, second run: interrupted
			cancel()
			return blockUntilDone(ctx, rc, env, emit)
		}
		return okResult(rc, emit), nil
	}
	opts, _ := options(t, be)
	sum, err := Run(ctx, p, opts)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 2, sum.Canceled)
	be.run = nil
	n := len(be.runs())
	sum, err = Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 2, sum.OK)
	var repeats []int
	for _, env := range be.envs[n:] {
		repeats = append(repeats, env.Repeat)
	}
	// The first run had 2 repeats, the second 1: they go on at 3 and 2.
	assert.Equal(t, []int{1, 2, 2}, repeats)
	for _, rc := range p.Runs {
		m := readMetrics(t, filepath.Join(opts.ResultsDir, "resume"), rc.ID)
		assert.Equal(t, 3, m.Repeats, rc.ID)
		assert.Equal(t, results.StatusOK, m.Status)
	}
}

// TestAutoRepeats: repeats: {min: 6, max: 12, ci: 2%} stops a steady run at 6
// repeats, runs a noisy one to its 12, and says so in metrics.json, in either
// order.
func TestAutoRepeats(t *testing.T) {
	for _, order := range RepeatOrders {
		t.Run(order, func(t *testing.T) {
			be := &fake{name: "fake"}
			p := plan("auto", 2)
			for i := range p.Runs {
				p.Runs[i].Repeats, p.Runs[i].RepeatsMin, p.Runs[i].RepeatsCI = 12, 6, 0.02
			}
			noisy := p.Runs[1].ID
			be.run = func(_ context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				res := okResult(rc, emit)
				if rc.ID == noisy {
					// Step times alternating 10 and 20 ms from repeat to repeat: an
					// interval far wider than ±2%.
					for i := range res.Steps {
						res.Steps[i].StepTimeS = 0.01 * float64(1+env.Repeat%2)
					}
					res.MeasuredWallS = float64(len(res.Steps)) * res.Steps[0].StepTimeS
				}
				return res, nil
			}
			opts, _ := options(t, be)
			opts.RepeatOrder = order
			sum, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			assert.Equal(t, 2, sum.OK)
			for id, want := range map[string]struct {
				n       int
				reached bool
			}{p.Runs[0].ID: {6, true}, noisy: {12, false}} {
				m := readMetrics(t, filepath.Join(opts.ResultsDir, "auto"), id)
				assert.Equal(t, want.n, m.Repeats, id)
				note, ok := m.Extra[results.ExtraRepeatsAuto].(map[string]any)
				require.True(t, ok, "metrics.json says how the repeats stopped: %v", m.Extra)
				assert.Equal(t, want.reached, note["reached"], id)
				assert.InDelta(t, 0.02, note["ci_target"], 1e-12)
			}
		})
	}
}

// TestInterleavedJobs: with --jobs 2 the runs of a round go two at a time, and
// a round starts only when the last one ended: repeat numbers never go down.
func TestInterleavedJobs(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	opts.Jobs = 2
	p := plan("jobs", 3)
	for i := range p.Runs {
		p.Runs[i].Repeats = 3
	}
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 3, sum.OK)
	require.Len(t, be.envs, 9)
	for i := 1; i < len(be.envs); i++ {
		assert.GreaterOrEqual(t, be.envs[i].Repeat, be.envs[i-1].Repeat, "call %d", i)
	}
	for _, rc := range p.Runs {
		assert.Equal(t, 3, readMetrics(t, filepath.Join(opts.ResultsDir, "jobs"), rc.ID).Repeats)
	}
}

// TestInterleavedResumeAfterTheLastKeptRepeat: killed after a run's last
// repeat was kept and before its metrics.json, a sweep concludes the run from
// what it kept and runs nothing more of it.
func TestInterleavedResumeAfterTheLastKeptRepeat(t *testing.T) {
	be := &fake{name: "fake"}
	p := plan("last", 1)
	p.Runs[0].Repeats = 2
	ctx, cancel := context.WithCancel(context.Background())
	be.run = func(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		if env.Repeat == 1 {
			cancel()
			return blockUntilDone(ctx, rc, env, emit)
		}
		return okResult(rc, emit), nil
	}
	opts, out := options(t, be)
	_, err := Run(ctx, p, opts)
	require.ErrorIs(t, err, context.Canceled)
	runDir := filepath.Join(opts.ResultsDir, "last", results.RunsDir, p.Runs[0].ID)
	// Repeat 2 kept as if the kill came after its file was written.
	b, err := os.ReadFile(repeatPath(runDir, 0))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(repeatPath(runDir, 1), b, 0o644))

	n := len(be.runs())
	be.run = nil
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 1, sum.OK)
	assert.Len(t, be.runs(), n, "no repeat ran again")
	assert.Equal(t, 2, readMetrics(t, filepath.Join(opts.ResultsDir, "last"), p.Runs[0].ID).Repeats)
	assert.Contains(t, out.String(), "round 1 of 2: 1 runs, one repeat each")
}
