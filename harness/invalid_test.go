package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestResumeRerunsInvalidStoredResults damages finished runs' files: a negative
// step_time_s.median, an MFU past every bound, metrics.json that does not decode.
// A resume used to skip the first two as done, and then the sweep's own final load
// (and every report) failed until --rerun redid every run. Now each damaged run
// runs again, saying why on the console and in its stderr.log; the intact run is
// skipped, and the sweep loads.
func TestResumeRerunsInvalidStoredResults(t *testing.T) {
	be := &fake{name: "fake"}
	opts, out := options(t, be)
	p := plan("damaged", 4)
	dir := filepath.Join(opts.ResultsDir, "damaged")
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	require.Len(t, be.runs(), 4)

	edit := func(id string, f func(map[string]any)) {
		path := filepath.Join(dir, results.RunsDir, id, results.MetricsFile)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		f(m)
		b, err = json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, b, 0o644))
	}
	edit(p.Runs[0].ID, func(m map[string]any) { m["step_time_s"].(map[string]any)["median"] = -0.5 })
	edit(p.Runs[1].ID, func(m map[string]any) { m["mfu"] = 1e9 })
	require.NoError(t, os.WriteFile(filepath.Join(dir, results.RunsDir, p.Runs[2].ID, results.MetricsFile), []byte(`{"status": "ok", `), 0o644))
	_, err = results.Load(dir)
	require.Error(t, err, "the damage is what Load refuses")
	pre := Preview(p, opts)
	assert.Equal(t, "rerun", pre[0].Action)
	assert.Contains(t, pre[0].Why, "its stored result is invalid: metrics.json: step_time_s.median")

	out.Reset()
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{p.Runs[0].ID, p.Runs[1].ID, p.Runs[2].ID}, be.runs()[4:], "the damaged runs ran again")
	assert.Equal(t, 1, sum.Skipped)
	assert.Equal(t, 4, sum.OK)
	for _, want := range []string{
		"run " + p.Runs[0].ID + ": its stored result is invalid, so it runs again: metrics.json: step_time_s.median",
		"run " + p.Runs[1].ID + ": its stored result is invalid, so it runs again: metrics.json: mfu",
		"run " + p.Runs[2].ID + ": its stored result is invalid, so it runs again: ",
	} {
		assert.Contains(t, out.String(), want)
	}
	log, err := os.ReadFile(filepath.Join(dir, results.RunsDir, p.Runs[0].ID, results.StderrFile))
	require.NoError(t, err)
	assert.Contains(t, string(log), "fsdpbench: the stored result was invalid, so the run ran again: metrics.json: step_time_s.median -0.5")
	runs, err := results.Load(dir)
	require.NoError(t, err)
	assert.Len(t, runs, 4)
	for _, pl := range Preview(p, opts) {
		assert.Equal(t, "skip", pl.Action, pl.Config.ID)
	}
}
