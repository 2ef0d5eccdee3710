package results

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestByteUnitFormat(t *testing.T) {
	tests := []struct {
		bytes float64
		want  string
	}{
		{0, "0 KiB"},
		{512, "0.500 KiB"},
		{40 << 20, "40.0 MiB"},
		{412.3 * (1 << 20), "412 MiB"},
		{1023 << 20, "1023 MiB"},
		{5.81 * (1 << 30), "5.81 GiB"},
		{9.996 * (1 << 30), "10.0 GiB"},
		{70.6 * (1 << 30), "70.6 GiB"},
		{1 << 30, "1.00 GiB"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, FormatBytes(tt.bytes), "%v bytes", tt.bytes)
	}
	// A figure far below its column's unit reads as small, not as nothing.
	assert.Equal(t, "<0.001", GiB.Format(100<<10))
	assert.Equal(t, "0.098", GiB.Format(100<<20))
}

// cpuRuns are runs of a CPU trainer: tens of MiB allocated, no allocator reserve.
func cpuRuns() []Run {
	runs := fixtureRuns()
	for i := range runs {
		m := &runs[i].Metrics
		m.PeakMemReservedBytes = nil
		if m.Status == StatusOK {
			m.PeakMemAllocatedBytes = I64(int64(20+10*i) << 20)
			m.PeakRSSBytes = I64(int64(300+10*i) << 20)
		}
	}
	Derive(runs)
	return runs
}

// TestReportBytesInColumnUnit: a CPU run's memory reads in MiB, not 0.00 GiB, in
// the default table, a pivot and a fitted table, and the default table shows the
// allocated peak when there is no reserved one.
func TestReportBytesInColumnUnit(t *testing.T) {
	runs := cpuRuns()
	out := report(t, runs, ReportOptions{})
	assert.Contains(t, out, "peak allocated (MiB)", "the default table shows the memory measured")
	assert.Contains(t, out, " 20.0 ")
	assert.NotContains(t, out, "0.02")

	out = report(t, runs, ReportOptions{Rows: []string{"world_size"}, Cols: []string{"sharding"},
		Metrics: []string{"peak_mem_allocated_bytes"}})
	assert.True(t, strings.HasPrefix(out, "peak allocated (MiB)\n"), out)
	assert.Contains(t, out, " 30.0 ")
	assert.NotContains(t, out, "0.00")

	out = report(t, runs, ReportOptions{Width: 60})
	assert.Contains(t, out, "alloc MiB", "the short heading keeps the column's unit")

	// GPU-sized figures stay in GiB.
	out = report(t, fixtureRuns(), ReportOptions{})
	assert.Contains(t, out, "peak reserved (GiB)")
	assert.Contains(t, out, " 18.0 ")
}

// TestCompareAndGateBytesInUnit: compare's per-metric tables and the gate's
// checks show small memory figures in MiB.
func TestCompareAndGateBytesInUnit(t *testing.T) {
	runs := cpuRuns()
	cmp, err := Compare(runs, runs, CompareOptions{Metrics: []string{"peak_mem_allocated_bytes"}})
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, cmp.Write(&buf, FormatTable))
	assert.Contains(t, buf.String(), "peak allocated (MiB)")
	assert.Contains(t, buf.String(), " 20.0 ")
	assert.NotContains(t, buf.String(), "0.02 ")

	rules, err := ParseRules([]string{"peak_mem_allocated_bytes:+3%"}, "test")
	require.NoError(t, err)
	rep, err := Gate(runs, runs, GateOptions{Rules: rules})
	require.NoError(t, err)
	buf.Reset()
	require.NoError(t, rep.Write(&buf, FormatTable))
	assert.Contains(t, buf.String(), "20.0 MiB")
	assert.NotContains(t, buf.String(), "0.00 GiB")
}

// TestSuperlinearScalingNote: a table showing a scaling efficiency above 100%
// says why under it; one that does not show one (none above 100%, or the
// column dropped to fit the width) has no such note.
func TestSuperlinearScalingNote(t *testing.T) {
	runs := quickstartRuns(t)
	assert.Contains(t, report(t, runs, ReportOptions{}), superlinearNote)
	assert.Contains(t, report(t, runs, ReportOptions{Rows: []string{"world_size"}, Cols: []string{"sharding"},
		Metrics: []string{"scaling_efficiency"}}), superlinearNote)
	narrow := report(t, runs, ReportOptions{Width: 80})
	require.Contains(t, narrow, "scaling_efficiency", "the 80-column table drops it (README)")
	assert.NotContains(t, narrow, "scaling eff. above 100%")
	assert.NotContains(t, report(t, fixtureRuns(), ReportOptions{}), "scaling eff. above 100%")
}

// TestGateBoundInByteUnits: an absolute bound on memory says the figure and
// the bound in a unit that reads, besides the plain bytes the rule was given in.
func TestGateBoundInByteUnits(t *testing.T) {
	runs := cpuRuns()
	rules, err := ParseRules([]string{"peak_mem_allocated_bytes<=1e9"}, "test")
	require.NoError(t, err)
	rep, err := Gate(nil, runs, GateOptions{Rules: rules, NoBaseline: true})
	require.NoError(t, err)
	require.NotEmpty(t, rep.Checks)
	passed := 0
	for _, c := range rep.Checks {
		if c.Outcome == OutcomePass {
			passed++
			assert.Regexp(t, `^[0-9.]+ MiB \([0-9.e+]+\), within the bound 954 MiB \(1e\+09\)$`, c.Reason)
		}
	}
	assert.Positive(t, passed)
}
