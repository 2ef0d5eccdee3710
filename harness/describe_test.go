package harness

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestProgressLineMemoryUnit: the line a finished run prints gives its memory in
// the unit that suits it: a CPU run's 40 MiB allocated (no allocator reserve)
// is no "0.00 GiB", nor a 300 MiB reserve "0.29 GiB".
func TestProgressLineMemoryUnit(t *testing.T) {
	be := &fake{name: "fake", run: func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		res := okResult(rc, emit)
		switch rc.BatchPerDevice {
		case 1:
			res.PeakMemAllocatedBytes = results.I64(40 << 20)
		case 2:
			res.PeakMemReservedBytes = results.I64(300 << 20)
		default: // torch on CPU: only the resident set
			res.PeakRSSBytes = results.I64(512 << 20)
		}
		return res, nil
	}}
	opts, out := options(t, be)
	_, err := Run(context.Background(), plan("units", 3), opts)
	require.NoError(t, err)
	assert.Contains(t, out.String(), " peak_allocated=40.0 MiB")
	assert.Contains(t, out.String(), " peak_reserved=300 MiB")
	assert.Contains(t, out.String(), " peak_rss=512 MiB")
	assert.NotContains(t, out.String(), "0.00 GiB")
}

// A run measured with warnings (a script that ran more iterations than
// configured) says so on its progress line, not only in metrics.json.
func TestProgressLineShowsWarnings(t *testing.T) {
	be := &fake{name: "fake", run: func(_ context.Context, rc sweeps.RunConfig, _ backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
		res := okResult(rc, emit)
		if rc.BatchPerDevice == 1 {
			res.Extra = map[string]any{"warnings": []string{"the script ran 31 iterations for 30 steps\nmore", "second"}}
		}
		return res, nil
	}}
	opts, out := options(t, be)
	_, err := Run(context.Background(), plan("warn", 2), opts)
	require.NoError(t, err)
	assert.Contains(t, out.String(), "; warning: the script ran 31 iterations for 30 steps ... (and 1 more in metrics.json's extra.warnings)")
	assert.Equal(t, 1, strings.Count(out.String(), "warning:"))
}
