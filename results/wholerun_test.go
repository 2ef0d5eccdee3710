package results

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestWholeRunWallTimeIsMarked: a run whose throughput divides by a whole run's
// wall time keeps the mark through Normalize, and tables and compare flag its
// throughput figures † with the footnote, while figures of other runs and other
// columns stay plain.
func TestWholeRunWallTimeIsMarked(t *testing.T) {
	rc := fixtureConfig(2, sweeps.FullShard)
	rc.AssignID()
	whole := fixtureResult(rc)
	whole.WholeRunWallTime = true
	whole.MeasuredWallS *= 5 // start-up and warm-up: a fifth of the steady rate
	m := Normalize(rc, []Result{whole})
	require.True(t, m.WholeRunWallTime)
	steady := Normalize(rc, []Result{fixtureResult(rc)})
	require.False(t, steady.WholeRunWallTime)

	old := []Run{{Config: rc, Metrics: m}}
	fresh := []Run{{Config: rc, Metrics: steady}}
	for _, tc := range []struct {
		name    string
		runs    []Run
		marked  bool
		metrics []string
	}{
		{"whole run", old, true, []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}},
		{"steady state", fresh, false, []string{"tokens_per_s_per_rank"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, Report(&buf, tc.runs, ReportOptions{Metrics: tc.metrics}))
			if tc.marked {
				assert.Contains(t, buf.String(), "†")
				assert.Contains(t, buf.String(), wholeRunNote)
				assert.Equal(t, 1, bytes.Count(buf.Bytes(), []byte("†"))-1, "only the throughput cell (plus the note):\n%s", buf.String())
			} else {
				assert.NotContains(t, buf.String(), "†")
			}
		})
	}

	cmp, err := Compare(old, fresh, CompareOptions{Metrics: []string{"tokens_per_s_per_rank", "peak_mem_reserved_bytes"}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, cmp.Write(&buf, FormatTable))
	out := buf.String()
	assert.Contains(t, out, wholeRunNote)
	assert.Equal(t, 2, bytes.Count(buf.Bytes(), []byte("†")), "the baseline's tokens/s/rank cell and the note:\n%s", out)
	require.NotNil(t, cmp.Rows[0].Deltas[0].Change)
	assert.InDelta(t, 4, *cmp.Rows[0].Deltas[0].Change, 1e-9, "steady state is 5x the whole-run rate")
}
