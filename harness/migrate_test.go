package harness

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestLegacyTreeResumesAndGates is issue 13 §6: run IDs grew from 32 to 64 bits
// of hash. A tree written with the old IDs must still match itself: loading it
// gives the current IDs, a gate against a new sweep matches every run, and a
// resume finds the runs done (renaming their directories) instead of redoing them.
func TestLegacyTreeResumesAndGates(t *testing.T) {
	be := &fake{name: "fake"}
	opts, _ := options(t, be)
	p := plan("old", 3)
	_, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	require.Len(t, be.runs(), 3)

	// Rewrite the tree as fsdpbench wrote it before: directories, run_args.json,
	// metrics.json, the index and the manifest name the runs by their legacy IDs.
	dir := filepath.Join(opts.ResultsDir, "old")
	legacy := map[string]string{}
	for _, rc := range p.Runs {
		old := rc.LegacyID()
		require.NotEqual(t, rc.ID, old)
		legacy[rc.ID] = old
		require.NoError(t, os.Rename(filepath.Join(dir, results.RunsDir, rc.ID), filepath.Join(dir, results.RunsDir, old)))
	}
	rewrite := func(path string) {
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return
		}
		require.NoError(t, err)
		s := string(b)
		for cur, old := range legacy {
			s = strings.ReplaceAll(s, cur, old)
		}
		require.NoError(t, os.WriteFile(path, []byte(s), 0o644))
	}
	rewrite(filepath.Join(dir, results.ManifestFile))
	rewrite(filepath.Join(dir, results.IndexFile))
	for _, old := range legacy {
		rewrite(filepath.Join(dir, results.RunsDir, old, results.RunArgsFile))
		rewrite(filepath.Join(dir, results.RunsDir, old, results.MetricsFile))
	}

	// Loading gives the current IDs, whether from the index or the files.
	for _, withIndex := range []bool{true, false} {
		if !withIndex {
			require.NoError(t, os.RemoveAll(filepath.Join(dir, results.IndexFile)))
		}
		runs, err := results.Load(dir)
		require.NoError(t, err)
		var ids []string
		for _, r := range runs {
			ids = append(ids, r.Config.ID)
		}
		assert.ElementsMatch(t, []string{p.Runs[0].ID, p.Runs[1].ID, p.Runs[2].ID}, ids, "index %v", withIndex)
	}

	// A gate of the old tree against a new sweep of the same points matches them all.
	newOpts, _ := options(t, be)
	np := plan("new", 3)
	_, err = Run(context.Background(), np, newOpts)
	require.NoError(t, err)
	base, err := results.Load(dir)
	require.NoError(t, err)
	cur, err := results.Load(filepath.Join(newOpts.ResultsDir, "new"))
	require.NoError(t, err)
	g, err := results.Gate(base, cur, results.GateOptions{})
	require.NoError(t, err)
	assert.Empty(t, g.Missing)
	assert.Empty(t, g.New)
	// Every point matched, so nothing fails. The fake backend's timed figures are
	// real wall times, so on a loaded machine the two sides' machine states may
	// differ enough to make a check inconclusive (issue 29), never failed.
	assert.Zero(t, g.Failures, "%+v", g.Checks)
	assert.NotEqual(t, results.OutcomeFail, g.Verdict)
	assert.NotEmpty(t, g.Checks)

	// A resume of the old tree finds every run done and moves it to its new ID.
	ran := len(be.runs())
	sum, err := Run(context.Background(), p, opts)
	require.NoError(t, err)
	assert.Equal(t, 3, sum.Skipped)
	assert.Len(t, be.runs(), ran, "nothing was run again")
	for _, rc := range p.Runs {
		assert.DirExists(t, filepath.Join(dir, results.RunsDir, rc.ID))
		assert.NoDirExists(t, filepath.Join(dir, results.RunsDir, rc.LegacyID()))
	}
}
