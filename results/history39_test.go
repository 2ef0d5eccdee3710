package results

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDamagedNightSaysRestoreOrMove (issue 39 item 13): a night.json that does
// not read is named with the checksum message's way out, not a run's (rerun
// the sweep, delete the run's directory), which mends no night; a directory
// without one is still no night.
func TestDamagedNightSaysRestoreOrMove(t *testing.T) {
	hist := t.TempDir()
	night := filepath.Join(hist, "2026-03-01-aaaa")
	require.NoError(t, os.MkdirAll(night, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(hist, "notes"), 0o755))
	for _, body := range []string{`{"date": "2026-03-01", "passed": tr`, `{"checks": "three"}`, ``} {
		require.NoError(t, os.WriteFile(filepath.Join(night, NightFile), []byte(body), 0o644))
		_, err := Nights(hist)
		require.Error(t, err, body)
		assert.Contains(t, err.Error(), "history night "+night+": "+filepath.Join(night, NightFile))
		assert.Contains(t, err.Error(), "restore the night, or move it out of the history")
		assert.NotContains(t, err.Error(), "--rerun")
		assert.NotContains(t, err.Error(), "delete the run's directory")
	}
	require.NoError(t, os.Remove(filepath.Join(night, NightFile)))
	nights, err := Nights(hist)
	require.NoError(t, err)
	assert.Empty(t, nights)
}
