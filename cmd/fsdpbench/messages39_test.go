package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
