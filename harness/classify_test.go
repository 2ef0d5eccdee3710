package harness

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestClassifyKeepsTheBackendsDiagnosisOfATimeout: a backend that saw why its run
// hung (a rank stopped) keeps saying so after the harness's "timed out".
func TestClassifyKeepsTheBackendsDiagnosisOfATimeout(t *testing.T) {
	runCtx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-runCtx.Done()
	rc := sweeps.RunConfig{Timeout: sweeps.Duration(30 * time.Second)}
	for _, tc := range []struct {
		name string
		res  results.Result
		want string
	}{
		{"diagnosis", results.Result{Status: results.StatusTimeout, Error: "rank 1 was stopped by a signal"},
			"timed out after 30s (raise timeout: in the spec, or --set timeout=...); rank 1 was stopped by a signal"},
		{"only the context's error", results.Result{Status: results.StatusTimeout, Error: context.DeadlineExceeded.Error()},
			"timed out after 30s (raise timeout: in the spec, or --set timeout=...)"},
		{"canceled by the backend", results.Result{Status: results.StatusCanceled, Error: "canceled"},
			"timed out after 30s (raise timeout: in the spec, or --set timeout=...)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, msg := classify(context.Background(), runCtx, rc, tc.res, nil, &runLogs{})
			assert.Equal(t, results.StatusTimeout, st)
			assert.Equal(t, tc.want, msg)
		})
	}
}
