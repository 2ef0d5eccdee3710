package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// storeRun writes one finished run the way the harness does.
func storeRun(t testing.TB, sd *SweepDir, rc sweeps.RunConfig) Metrics {
	t.Helper()
	m := Normalize(rc, []Result{fixtureResult(rc)})
	require.NoError(t, sd.WriteRunArgs(rc))
	require.NoError(t, sd.WriteMetrics(rc.ID, m))
	return m
}

func fixtureSweep(t *testing.T) (*SweepDir, []sweeps.RunConfig) {
	t.Helper()
	sd, err := OpenSweep(filepath.Join(t.TempDir(), "fixture"))
	require.NoError(t, err)
	var rcs []sweeps.RunConfig
	for _, ws := range []int{1, 2, 4} {
		for _, sh := range []string{sweeps.FullShard, sweeps.NoShard} {
			rc := fixtureConfig(ws, sh)
			storeRun(t, sd, rc)
			rcs = append(rcs, rc)
		}
	}
	return sd, rcs
}

func indexLines(t *testing.T, sd *SweepDir) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sd.Path, IndexFile))
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// loadScan is Load with the index set aside: what the run directories say.
func loadScan(t *testing.T, dir string) []Run {
	t.Helper()
	idx := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idx); err == nil {
		require.NoError(t, os.Rename(idx, idx+".aside"))
		defer func() { require.NoError(t, os.Rename(idx+".aside", idx)) }()
	}
	runs, err := Load(dir)
	require.NoError(t, err)
	return runs
}

func TestLoadIndexMatchesDirectories(t *testing.T) {
	sd, rcs := fixtureSweep(t)
	assert.Len(t, indexLines(t, sd), len(rcs), "one index line per finished run")

	runs, err := Load(sd.Path)
	require.NoError(t, err)
	require.Len(t, runs, len(rcs))
	assert.Equal(t, loadScan(t, sd.Path), runs, "the index must give what the run directories give")

	want := fixtureRuns()
	for i := range runs {
		w := findRun(t, want, runs[i].Config.ID)
		assert.Equal(t, w.Config, runs[i].Config)
		assert.Equal(t, w.Metrics.TokensPerSPerRank, runs[i].Metrics.TokensPerSPerRank)
		assert.Equal(t, w.Derived, runs[i].Derived, "Load derives the figures over the runs it read")
		assert.Equal(t, sd.RunDir(runs[i].Config.ID), runs[i].Dir)
		if i > 0 {
			assert.Less(t, runs[i-1].Config.ID, runs[i].Config.ID, "sorted by ID")
		}
	}
}

func TestLoadSurvivesKilledSweeps(t *testing.T) {
	tests := []struct {
		name string
		// damage changes the sweep after it was written; it returns the run ID whose
		// status Load must report, and that status ("" = the run must be absent).
		damage func(t *testing.T, sd *SweepDir, rcs []sweeps.RunConfig) (string, Status)
	}{
		{"killed after metrics.json, before the index line", func(t *testing.T, sd *SweepDir, _ []sweeps.RunConfig) (string, Status) {
			rc := fixtureConfig(8, sweeps.FullShard)
			require.NoError(t, sd.WriteRunArgs(rc))
			require.NoError(t, writeJSON(filepath.Join(sd.RunDir(rc.ID), MetricsFile), Normalize(rc, []Result{fixtureResult(rc)})))
			return rc.ID, StatusOK
		}},
		{"rerun killed before its index line (different size)", func(t *testing.T, sd *SweepDir, rcs []sweeps.RunConfig) (string, Status) {
			m := Metrics{RunID: rcs[0].ID, Status: StatusTimeout, Error: "exceeded 10m", WorldSize: rcs[0].WorldSize}
			require.NoError(t, writeJSON(filepath.Join(sd.RunDir(rcs[0].ID), MetricsFile), m))
			return rcs[0].ID, StatusTimeout
		}},
		{"torn last index line", func(t *testing.T, sd *SweepDir, rcs []sweeps.RunConfig) (string, Status) {
			f, err := os.OpenFile(filepath.Join(sd.Path, IndexFile), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.WriteString(`{"id":"` + rcs[2].ID + `","metrics_size":1,"metr`)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			return rcs[2].ID, StatusOK
		}},
		{"run directory deleted", func(t *testing.T, sd *SweepDir, rcs []sweeps.RunConfig) (string, Status) {
			require.NoError(t, os.RemoveAll(sd.RunDir(rcs[3].ID)))
			return rcs[3].ID, ""
		}},
		{"run started, never finished", func(t *testing.T, sd *SweepDir, _ []sweeps.RunConfig) (string, Status) {
			rc := fixtureConfig(16, sweeps.FullShard)
			require.NoError(t, sd.WriteRunArgs(rc))
			return rc.ID, ""
		}},
		{"index deleted", func(t *testing.T, sd *SweepDir, rcs []sweeps.RunConfig) (string, Status) {
			require.NoError(t, os.Remove(filepath.Join(sd.Path, IndexFile)))
			return rcs[4].ID, StatusOK
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sd, rcs := fixtureSweep(t)
			id, want := tt.damage(t, sd, rcs)
			runs, err := Load(sd.Path)
			require.NoError(t, err)
			assert.Equal(t, loadScan(t, sd.Path), runs, "Load must agree with the run directories")
			var got *Run
			for i := range runs {
				if runs[i].Config.ID == id {
					got = &runs[i]
				}
			}
			if want == "" {
				assert.Nil(t, got, "run %s must not be loaded", id)
				return
			}
			require.NotNil(t, got, "run %s must be loaded", id)
			assert.Equal(t, want, got.Metrics.Status)
		})
	}
}

func TestIndexAppendAfterTornLine(t *testing.T) {
	sd, rcs := fixtureSweep(t)
	f, err := os.OpenFile(filepath.Join(sd.Path, IndexFile), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"id":"torn","metr`)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	rc := fixtureConfig(8, sweeps.NoShard)
	storeRun(t, sd, rc)
	idx, err := readIndex(sd.Path)
	require.NoError(t, err)
	assert.Contains(t, idx, rc.ID, "the line after a torn one starts on its own line and parses")
	assert.NotContains(t, idx, "torn")
	assert.Len(t, idx, len(rcs)+1)
}

func TestWriteMetricsConcurrently(t *testing.T) {
	sd, err := OpenSweep(filepath.Join(t.TempDir(), "par"))
	require.NoError(t, err)
	var wg sync.WaitGroup
	const n = 16
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rc := fixtureConfig(1, sweeps.FullShard)
			rc.Seed = int64(i)
			rc.AssignID()
			storeRun(t, sd, rc)
		}(i)
	}
	wg.Wait()
	idx, err := readIndex(sd.Path)
	require.NoError(t, err)
	assert.Len(t, idx, n, "every line whole")
	assert.Len(t, indexLines(t, sd), n)
}

func TestLoadSeveralSweeps(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"b-sweep", "a-sweep"} {
		sd, err := OpenSweep(filepath.Join(root, name))
		require.NoError(t, err)
		rc := fixtureConfig(1, sweeps.FullShard)
		rc.Sweep = name
		storeRun(t, sd, rc)
	}
	runs, err := Load(root)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	assert.Equal(t, "a-sweep", runs[0].Config.Sweep)
	assert.Equal(t, "b-sweep", runs[1].Config.Sweep)
}

func TestLoadErrors(t *testing.T) {
	t.Run("damaged metrics", func(t *testing.T) {
		sd, rcs := fixtureSweep(t)
		require.NoError(t, os.WriteFile(filepath.Join(sd.RunDir(rcs[0].ID), MetricsFile), []byte("{not json"), 0o644))
		_, err := Load(sd.Path)
		require.Error(t, err)
		assert.Contains(t, err.Error(), rcs[0].ID)
		assert.Contains(t, err.Error(), "--rerun")
	})
	t.Run("no sweep", func(t *testing.T) {
		_, err := Load(t.TempDir())
		require.Error(t, err)
		assert.Contains(t, err.Error(), "no sweep found")
	})
	t.Run("missing", func(t *testing.T) {
		_, err := Load(filepath.Join(t.TempDir(), "nope"))
		require.Error(t, err)
	})
}

func TestWriteRankAndSteps(t *testing.T) {
	sd, err := OpenSweep(filepath.Join(t.TempDir(), "s"))
	require.NoError(t, err)
	rc := fixtureConfig(2, sweeps.FullShard)
	require.NoError(t, sd.WriteRunArgs(rc))
	require.NoError(t, sd.WriteRank(rc.ID, RankResult{Rank: 1, Tokens: 512, PeakMemReservedBytes: I64(1 << 30)}))
	var back RankResult
	require.NoError(t, readJSON(filepath.Join(sd.RunDir(rc.ID), RanksDir, "rank-1.json"), &back))
	assert.Equal(t, int64(512), back.Tokens)
	assert.Equal(t, int64(1<<30), *back.PeakMemReservedBytes)

	res := fixtureResult(rc)
	require.NoError(t, sd.WriteSteps(rc.ID, res.Steps))
	b, err := os.ReadFile(filepath.Join(sd.RunDir(rc.ID), StepsFile))
	require.NoError(t, err)
	var want bytes.Buffer
	require.NoError(t, StepsCSV(&want, res.Steps))
	assert.Equal(t, want.String(), string(b))
}
