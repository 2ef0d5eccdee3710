package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
	"github.com/fsdpbench/fsdpbench/results"
)

// TestGateHistoryDamagedNightSaysRestoreOrMove (issue 39 item 13): a damaged
// night.json in a --history said "rerun the sweep with --rerun or delete the
// run's directory", which mends no night. It now says what the checksum
// message says: restore the night, or move it out of the history.
func TestGateHistoryDamagedNightSaysRestoreOrMove(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hist := filepath.Join(dir, "history")
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)
	r := cli(t, "gate", "--history", hist, "--current", good, "--commit", "a1", "--date", "2026-03-01")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	nightFile := filepath.Join(hist, "2026-03-01-a1", results.NightFile)
	for _, body := range []string{`{"date": "2026-03-01", "passed": tr`, `{"date": 7}`} {
		require.NoError(t, os.WriteFile(nightFile, []byte(body), 0o644))
		r = cli(t, "gate", "--history", hist, "--current", good, "--commit", "b2", "--date", "2026-03-02")
		assert.Equal(t, ExitUsage, r.code, r.stdout+r.stderr)
		assert.Contains(t, r.stderr, nightFile+": ")
		assert.Contains(t, r.stderr, "(the file is damaged: restore the night, or move it out of the history; a night is a baseline only as the gate stored it)")
		assert.NotContains(t, r.stderr, "--rerun")
		assert.NotContains(t, r.stderr, "delete the run's directory")
	}
}

// TestSetRepeatsMappingSaysWhatSetTakes (issue 39 item 8): --set
// 'repeats={min: 6, max: 7, ci: 50%}' said "takes one value, not a list"; it
// now says --set takes no mapping and gives the forms it takes. repeats: AUTO
// names auto and the {min, max, ci} form; ci: .nan no longer advises NaN%.
func TestSetRepeatsMappingSaysWhatSetTakes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	spec := writeSpec(t, dir, "name: r\nbackend: sim\nrepeats: 3\ngrid: {world_size: [1]}\n")
	r := fsdpbench(t, dir, "plan", spec, "--set", "repeats={min: 6, max: 7, ci: 50%}")
	assert.Equal(t, ExitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, "--set:1:9: --set cannot take the repeats mapping {min, max, ci}")
	assert.Contains(t, r.stderr, "Give --set repeats=auto")
	assert.NotContains(t, r.stderr, "not a list")

	spec = writeSpec(t, dir, "name: r\nbackend: sim\nrepeats: AUTO\ngrid: {world_size: [1]}\n")
	r = fsdpbench(t, dir, "plan", spec)
	assert.Equal(t, ExitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, `spec.yaml:3:10: repeats must be a positive integer (at most 1000), got the string "AUTO" (write auto in lower case: repeats: auto repeats`)
	assert.Contains(t, r.stderr, "repeats: {min: 6, max: 20, ci: 2%}")

	spec = writeSpec(t, dir, "name: r\nbackend: sim\nrepeats: {min: 6, max: 20, ci: .nan}\ngrid: {world_size: [1]}\n")
	r = fsdpbench(t, dir, "plan", spec)
	assert.Equal(t, ExitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, "spec.yaml:3:32: repeats.ci must be a percentage such as 2%, got the number .nan (a width above 0.01% and below 100%)")
	assert.NotContains(t, r.stderr, "NaN%")
}

// TestPlanCalibrationOfThousandsOfKeysIsCut (issue 39 item 10): a calibration
// file of 3,000 keys (user-defined profiles) printed a 47 KB summary line, and
// the same list in every prediction's note; both are cut to the first few
// keys and a count, as other lists are.
func TestPlanCalibrationOfThousandsOfKeysIsCut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cal := &sim.Calibration{Profiles: map[string]sim.Constants{}}
	for i := range 3000 {
		cal.Profiles[fmt.Sprintf("my-gpu-%04d/gotrain", i)] = sim.Constants{Efficiency: 0.2, Fit: sim.FitReport{Runs: 3}, ProfileFile: fmt.Sprintf("my-gpu-%04d.yaml", i)}
	}
	path := filepath.Join(dir, "many.json")
	require.NoError(t, cal.Write(path))
	spec := filepath.Join(repoRoot, "sweeps", "examples", "quickstart.yaml")
	r := cli(t, "plan", spec, "--calibration", path)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "uncalibrated: "+path+" has no constants for h100-sxm (it has my-gpu-0000/gotrain, my-gpu-0001/gotrain")
	assert.Contains(t, r.stdout, "my-gpu-0007/gotrain and 2992 more)")
	assert.NotContains(t, r.stdout+r.stderr, "my-gpu-0008/gotrain")
	for _, line := range strings.Split(r.stdout+r.stderr, "\n") {
		assert.Less(t, len(line), 2000, "no line of tens of kilobytes: %.200s", line)
	}
}
