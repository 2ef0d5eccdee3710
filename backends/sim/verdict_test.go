package sim

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
)

// foundryRowNamed is the llm-foundry row of a model, sequence and GPU count.
func foundryRowNamed(t *testing.T, hw, model string, seq, gpus int) foundryRow {
	t.Helper()
	for _, r := range allFoundryRows() {
		if r.hw == hw && r.model == model && r.seq == seq && r.gpus == gpus {
			return r
		}
	}
	t.Fatalf("no row %s %s %d %d", hw, model, seq, gpus)
	return foundryRow{}
}

// gibIn reads the GiB figure after prefix in s.
func gibIn(t *testing.T, s, prefix string) float64 {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + ` \(([0-9.]+) GiB\)`).FindStringSubmatch(s)
	require.NotNil(t, m, "%q in %q", prefix, s)
	f, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return f
}

// TestInfeasibleVerdictNamesTheDecidingAssumption: MPT-760m at seq 8192 trained
// on 8 × H100 80GB with a fused cross-entropy; at the CLI's defaults (upcast
// loss) it does not fit, and the verdict must say that the loss decides it, with
// the peak under each, the same figures the two predictions give (issue 26).
func TestInfeasibleVerdictNamesTheDecidingAssumption(t *testing.T) {
	dir := t.TempDir()
	rc := foundryRun(t, dir, foundryRowNamed(t, "h100-sxm", "760m", 8192, 8), false)
	p := mustPredict(t, rc)
	require.False(t, p.Feasible)
	fused := mustPredict(t, withOpts(rc, "loss", LossFused))
	require.True(t, fused.Feasible)
	t.Log(p.Reason)
	assert.Contains(t, p.Reason, "infeasible with loss upcast (")
	assert.Contains(t, p.Reason, "fits with loss fused (")
	assert.InDelta(t, gibs(p.PeakDeviceMemBytes), gibIn(t, p.Verdict, "loss upcast"), 0.05)
	assert.InDelta(t, gibs(fused.PeakDeviceMemBytes), gibIn(t, p.Verdict, "loss fused"), 0.05)
	// Flash attention is already the cheapest: it decides nothing here.
	assert.NotContains(t, p.Verdict, "attention")

	// sweep records it as the run's reason.
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusInfeasible, res.Status)
	assert.Contains(t, res.Error, "fits with loss fused (")
}

// TestNearLimitVerdict: a point that fits within 10% of the device says which
// assumption would push it over; one far below the limit says nothing.
func TestNearLimitVerdict(t *testing.T) {
	dir := t.TempDir()
	rc := foundryRun(t, dir, foundryRowNamed(t, "h100-sxm", "3b", 8192, 8), true)
	p := mustPredict(t, rc)
	require.True(t, p.Feasible)
	require.Greater(t, float64(p.PeakDeviceMemBytes), NearLimit*float64(p.DeviceMemBytes), "the row is near the limit")
	t.Log(p.Verdict)
	assert.Contains(t, p.Verdict, "fits with loss fused (")
	assert.Contains(t, p.Verdict, "infeasible with loss upcast (")
	assert.NotContains(t, p.Reason, "rests on")
	var lines []string
	res, err := New().Run(t.Context(), rc, backends.RunEnv{}, func(e backends.Event) { lines = append(lines, e.Line) })
	require.NoError(t, err)
	assert.Equal(t, p.Verdict, res.Extra["verdict"])
	assert.Contains(t, fmt.Sprint(lines), "near the memory limit: "+p.Verdict)

	far := mustPredict(t, foundryRun(t, dir, foundryRowNamed(t, "h100-sxm", "1b", 1024, 8), true))
	require.Less(t, float64(far.PeakDeviceMemBytes), NearLimit*float64(far.DeviceMemBytes))
	assert.Empty(t, far.Verdict)
}

// TestNoVerdictForTheGoTrainer: the Go trainer's loss, attention and sharding
// are facts of its code, so its runs near or over the limit name no assumption.
func TestNoVerdictForTheGoTrainer(t *testing.T) {
	rc := cfg("llama3-8b", 8, "full_shard")
	rc.SeqLen = 4096
	decided := 0
	for b := 1; b <= 8; b++ {
		rc.BatchPerDevice, rc.GlobalBatch = b, 0
		rc.Backend = Name
		if p := mustPredict(t, rc); p.Verdict != "" {
			decided++
		}
		rc.Backend = "gotrain"
		assert.Empty(t, mustPredict(t, rc).Verdict, "batch %d", b)
	}
	require.Positive(t, decided, "some of these points are decided by an assumption for the sim")
}
