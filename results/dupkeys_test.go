package results

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadBackRefusesDuplicateKeys: every JSON file the tool reads back (ab.json,
// a history's night.json, a run's metrics.json and run_args.json) refuses a key
// given twice at its file:line:col, rather than reading the last value.
func TestReadBackRefusesDuplicateKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(path, text string) string {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
		return path
	}
	const want = `:2:2: the key "status" is given twice in one object (first at line 1, column 2)`

	ab := write(filepath.Join(dir, "ab", ABFile), "{\"status\": \"ok\",\n \"status\": \"failed\"}")
	_, err := ReadAB(ab)
	require.Error(t, err)
	assert.Contains(t, err.Error(), ab+want)

	night := write(filepath.Join(dir, "history", "2026-11-27-abc", NightFile), "{\"status\": \"ok\",\n \"status\": \"failed\"}")
	_, err = Nights(filepath.Join(dir, "history"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), night+want)

	sd, err := OpenSweep(filepath.Join(dir, "sweep"))
	require.NoError(t, err)
	metrics := write(filepath.Join(sd.RunDir("r1"), MetricsFile), "{\"status\": \"ok\",\n \"status\": \"failed\"}")
	_, err = sd.ReadMetrics("r1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), metrics+want)

	args := write(filepath.Join(sd.RunDir("r1"), RunArgsFile), "{\"world_size\": 2,\n \"world_size\": 8}")
	_, err = sd.ReadRunArgs("r1")
	require.Error(t, err)
	assert.Contains(t, err.Error(), args+`:2:2: the key "world_size" is given twice`)
}
