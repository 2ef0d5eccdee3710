package harness

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestRunRefusesInvalidFigures: a backend (a plugin, a script) that reports figures
// no run can have gets its run stored as failed, naming the field, never as ok.
func TestRunRefusesInvalidFigures(t *testing.T) {
	tests := []struct {
		name string
		edit func(*results.Result)
		want string
	}{
		{"3,000,000 steps for a 3-step run", func(r *results.Result) {
			for len(r.Steps) < 3_000_000 {
				r.Steps = append(r.Steps, r.Steps[0])
			}
		}, "steps_measured 3000000 is not between 0 and the 3 steps configured"},
		{"negative step times", func(r *results.Result) {
			for i := range r.Steps {
				r.Steps[i].StepTimeS = -0.01
			}
		}, "step_time_s.p10 -0.01 is not between"},
		{"a wrapped peak", func(r *results.Result) { r.PeakMemReservedBytes = results.I64(-9223370500853066752) }, "peak_mem_reserved_bytes -9223370500853066752"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := &fake{name: "fake", run: func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				res := okResult(rc, emit)
				tt.edit(&res)
				return res, nil
			}}
			opts, _ := options(t, be)
			p := plan("invalid", 1)
			_, err := Run(context.Background(), p, opts)
			require.NoError(t, err)
			m := readMetrics(t, filepath.Join(opts.ResultsDir, "invalid"), p.Runs[0].ID)
			assert.Equal(t, results.StatusFailed, m.Status)
			assert.Contains(t, m.Error, tt.want)
			assert.Nil(t, m.TokensPerS, "no figure of the run is kept")
			runs, err := results.Load(opts.ResultsDir)
			require.NoError(t, err, "the stored run loads")
			require.Len(t, runs, 1)
		})
	}
}
