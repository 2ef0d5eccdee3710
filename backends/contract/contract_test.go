package contract

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestReadRanks(t *testing.T) {
	dir := t.TempDir()
	rc := sweeps.RunConfig{WorldSize: 2, Steps: 2, GlobalBatch: 4, SeqLen: 8}
	loss := 2.5
	for r, wall := range []float64{1.0, 1.5} {
		f := RankFile{Rank: r, Tokens: 16, MeasuredWallS: wall, Device: "cpu", Torch: "1.13",
			Steps:                 []results.Step{{Step: 1, StepTimeS: wall / 2}, {Step: 2, StepTimeS: wall / 2, Loss: &loss}},
			PeakMemAllocatedBytes: results.I64(int64(100 * (r + 1)))}
		data, err := json.Marshal(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "rank-"+string(rune('0'+r))+".json"), data, 0o644))
	}
	has, err := HasRankFiles(dir)
	require.NoError(t, err)
	assert.True(t, has)
	var res results.Result
	require.NoError(t, ReadRanks(&res, rc, dir, "test"))
	assert.Equal(t, 1.5, res.MeasuredWallS, "the slowest rank's wall time")
	assert.Equal(t, 0.75, res.Steps[0].StepTimeS, "each step as the slowest rank saw it")
	assert.Equal(t, int64(32), res.Steps[0].Tokens, "the global batch's tokens")
	assert.Equal(t, int64(200), *res.PeakMemAllocatedBytes, "the highest rank's peak")
	require.Len(t, res.PerRank, 2)
	assert.Equal(t, "cpu", res.Env.Hardware)

	rc.Steps = 3
	assert.ErrorContains(t, ReadRanks(&res, rc, dir, "test"), "test: rank 0 reported 2 measured steps, want 3")
	rc.Steps, rc.WorldSize = 2, 3
	assert.ErrorContains(t, ReadRanks(&res, rc, dir, "test"), "rank 2 exited cleanly but its report is missing")
}

func TestParseStepLine(t *testing.T) {
	st, ok := ParseStepLine(`[0]:FSDPBENCH {"step": 3, "loss": 1.5, "step_time_s": 0.2, "rank": 0}`)
	require.True(t, ok)
	assert.Equal(t, 3, st.Step.Step)
	assert.Equal(t, 0.2, st.StepTimeS)
	for _, bad := range []string{"FSDPBENCH {", "FSDPBENCH {\"step\": 0}", "iter 1: loss 2"} {
		_, ok := ParseStepLine(bad)
		assert.False(t, ok, bad)
	}
}
func TestVisibleDevices(t *testing.T) {
	assert.Equal(t, "0,1", VisibleDevices([]int{0, 1}, ""))
	assert.Equal(t, "2,3", VisibleDevices([]int{0, 1}, "2,3"), "fsdpbench's own device 0 is physical GPU 2")
	assert.Equal(t, "GPU-abc,GPU-def", VisibleDevices([]int{1, 2}, "GPU-xyz, GPU-abc,GPU-def"))
}
