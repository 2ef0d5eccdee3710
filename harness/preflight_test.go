package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestPreflightStopsSpecErrorsBeforeAnythingRuns: a backend's spec error
// (backends.SpecError) stops the sweep before any run starts or anything is
// written, naming the runs it hits; infeasible runs and plain Validate refusals are
// left to the sweep, which records them.
func TestPreflightStopsSpecErrorsBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		validate func(rc sweeps.RunConfig) error
		launcher map[string]any
		want     string // "" = no spec error
	}{
		{"all runs", func(sweeps.RunConfig) error { return backends.SpecErrorf("backend_options.x: no such option") },
			nil, "sweep pre: backend_options.x: no such option (all 5 runs)"},
		{"some runs", func(rc sweeps.RunConfig) error {
			if rc.BatchPerDevice > 1 {
				return fmt.Errorf("wrapped: %w", backends.SpecErrorf("bad for big batches"))
			}
			return nil
		}, nil, "wrapped: bad for big batches (runs ws2-bs2-"},
		{"infeasible is a verdict, not a spec error", func(sweeps.RunConfig) error { return errors.New("does not fit") }, nil, ""},
		{"panic is left to the run", func(sweeps.RunConfig) error { panic("boom") }, nil, ""},
		{"launcher options", nil, map[string]any{"partiton": "gpu"}, `launcher_options.partiton: the slurm launcher has no such option (did you mean "partition"?)`},
		{"slurm's options under the local launcher", nil, map[string]any{"partition": "gpu"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			be := &fake{name: "fake", validate: tc.validate}
			opts, _ := options(t, be)
			p := plan("pre", 5)
			for i := range p.Runs {
				p.Runs[i].LauncherOptions = tc.launcher
			}
			err := Preflight(t.Context(), p, opts.Registry)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, backends.IsSpecError(err))
			assert.Contains(t, err.Error(), tc.want)
			_, err = Run(t.Context(), p, opts)
			assert.True(t, backends.IsSpecError(err), "%v", err)
			assert.Empty(t, be.runs(), "nothing may run")
			_, statErr := os.Stat(filepath.Join(opts.ResultsDir, "pre"))
			assert.ErrorIs(t, statErr, os.ErrNotExist, "nothing may be written")
		})
	}
}

func TestRunList(t *testing.T) {
	assert.Equal(t, "run a", runList([]string{"a"}, 1))
	assert.Equal(t, "all 2 runs", runList([]string{"a", "b"}, 2))
	assert.Equal(t, "run a, b", runList([]string{"a", "b"}, 9))
	assert.Equal(t, "runs a, b, c and 2 more", runList([]string{"a", "b", "c", "d", "e"}, 9))
}

// TestPreflightDoesNotWaitForAHungValidate: a Validate that never returns gives no
// verdict once the preflight stops waiting (here: its context ends).
func TestPreflightDoesNotWaitForAHungValidate(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	defer close(block)
	be := &fake{name: "fake", validate: func(sweeps.RunConfig) error { <-block; return nil }}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	assert.NoError(t, validateSafely(ctx, be, runConfig("hung", 1)))
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestPreflighterIsPreflightRunByRun: checking the runs one at a time
// (Preflighter, as plan does) finds the spec error Preflight finds, naming the
// same runs, and hands back each run's Validate verdict, spec error or not,
// so the caller need not validate again.
func TestPreflighterIsPreflightRunByRun(t *testing.T) {
	t.Parallel()
	for _, validate := range []func(sweeps.RunConfig) error{
		func(sweeps.RunConfig) error { return nil },
		func(rc sweeps.RunConfig) error {
			if rc.BatchPerDevice%2 == 0 {
				return backends.SpecErrorf("backend_options.x: even batches")
			}
			return errors.New("does not fit")
		},
		func(rc sweeps.RunConfig) error {
			if rc.BatchPerDevice > 6 {
				return backends.SpecErrorf("too big")
			}
			return nil
		},
		func(sweeps.RunConfig) error { return backends.SpecErrorf("every run") },
	} {
		be := &fake{name: "fake", validate: validate}
		opts, _ := options(t, be)
		p := plan("pre", 9)
		want := Preflight(t.Context(), p, opts.Registry)
		pf := NewPreflighter(p, opts.Registry)
		for _, rc := range p.Runs {
			got := pf.Check(t.Context(), rc, nil)
			assert.Equal(t, errText(validate(rc)), errText(got), rc.ID)
		}
		assert.Equal(t, errText(want), errText(pf.Err()))
		assert.Equal(t, want != nil, pf.Failed())
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
