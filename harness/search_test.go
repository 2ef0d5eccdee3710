package harness

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestStoppedSearchSaysUnknown (issue 37 item 9): a max_fit search canceled
// (Ctrl-C) or stopped by a failure or a timeout mid-search reported "max fit:
// none fits", as if memory had refused every batch. It says the answer is
// unknown and why, with what the search had learned: the largest batch seen
// to fit and the smallest seen not to.
func TestStoppedSearchSaysUnknown(t *testing.T) {
	const limit = 12 // batches above it run out of memory
	for _, tt := range []struct {
		name   string
		stopAt int // the batch at which the search is stopped
		status results.Status
		want   string
	}{
		{"canceled at the first run", 1, results.StatusCanceled, "unknown (canceled before a run told)"},
		{"canceled while doubling", 8, results.StatusCanceled, "unknown (canceled): 4 fit"},
		{"canceled while bisecting", 12, results.StatusCanceled, "unknown (canceled): 8 fit, 16 did not"},
		{"timed out while bisecting", 14, results.StatusTimeout, "unknown (timeout): 12 fit, 16 did not"},
		{"failed", 2, results.StatusFailed, "unknown (failed): 1 fit"},
		{"diverged", 4, results.StatusDiverged, "unknown (diverged): 2 fit"},
		{"not stopped", 0, "", "12"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			be := &fake{name: "fake"}
			be.run = func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
				switch {
				case rc.BatchPerDevice == tt.stopAt:
					if tt.status == results.StatusCanceled {
						cancel() // Ctrl-C while this point runs
					}
					return results.Result{Status: tt.status, Error: "stopped"}, nil
				case rc.BatchPerDevice > limit:
					return results.Result{Status: results.StatusOOM, Error: "out of memory"}, nil
				}
				return okResult(rc, emit), nil
			}
			opts, _ := options(t, be)
			rc := runConfig("search", 1)
			rc.Search, rc.SearchGroup = "batch_per_device", "ws2"
			rc.AssignID()
			sum, _ := Run(ctx, &sweeps.Plan{Name: "search", Backend: "fake", Search: "batch_per_device", Runs: []sweeps.RunConfig{rc}}, opts)
			require.Len(t, sum.MaxFit, 1)
			sr := sum.MaxFit[0]
			assert.Equal(t, tt.want, sr.MaxFitText(), "%+v", sr)
			assert.Equal(t, tt.stopAt == 0, sr.Conclusive())
			assert.NotContains(t, sr.MaxFitText(), "none fits")
		})
	}
}

// TestSearchAnswerText: a search that ended at its wall gives its answer, or
// "none fits" when even the first point did not; one cut short before the
// wall (the run cap) gives its bounds.
func TestSearchAnswerText(t *testing.T) {
	for _, tc := range []struct {
		sr   results.SearchResult
		want string
	}{
		{results.SearchResult{MaxFit: 12, Wall: 13, StoppedBy: "oom"}, "12"},
		{results.SearchResult{MaxFit: 0, Wall: 1, StoppedBy: "infeasible"}, "none fits"},
		{results.SearchResult{MaxFit: 65536, StoppedBy: StoppedExhausted}, "65536"},
		{results.SearchResult{MaxFit: 8, Wall: 16, StoppedBy: "oom"}, "unknown (oom): 8 fit, 16 did not"},
		{results.SearchResult{StoppedBy: "canceled"}, "unknown (canceled before a run told)"},
	} {
		assert.Equal(t, tc.want, tc.sr.MaxFitText(), "%+v", tc.sr)
	}
}
