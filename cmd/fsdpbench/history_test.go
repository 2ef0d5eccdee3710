package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestGateHistoryFutureDateDoesNotPinTheBaseline: one night stored as 2062-01-01
// (a typo, a skewed clock) was the baseline of every later night, and a 54%
// regression passed against it. A date after tomorrow is now refused; stored on
// purpose (--allow-future-date), it counts from when it was stored.
func TestGateHistoryFutureDateDoesNotPinTheBaseline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hist := filepath.Join(dir, "history")
	slow := writeGateTree(t, filepath.Join(dir, "slow"), allSpecs(slower))
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)

	r := cli(t, "gate", "--history", hist, "--current", slow, "--commit", "typo", "--date", "2062-01-01")
	require.Equal(t, ExitUsage, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "date 2062-01-01 is after tomorrow (UTC)")
	tomorrow := time.Now().UTC().Add(24 * time.Hour).Format(time.DateOnly)
	r = cli(t, "gate", "--history", filepath.Join(dir, "history-tz"), "--current", good, "--commit", "tz", "--date", tomorrow)
	assert.Equal(t, ExitOK, r.code, "tomorrow (a time zone ahead of UTC) is allowed: %s", r.stderr)

	hist = filepath.Join(dir, "history2")
	r = cli(t, "gate", "--history", hist, "--current", slow, "--commit", "typo", "--date", "2062-01-01", "--allow-future-date")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	r = cli(t, "gate", "--history", hist, "--current", good, "--commit", "b1")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "baseline 2062-01-01-typo")
	r = cli(t, "gate", "--history", hist, "--current", slow, "--commit", "c2")
	assert.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "baseline "+time.Now().UTC().Format(time.DateOnly)+"-b1")
	assert.Contains(t, r.stdout, "beyond the -5% limit")
}

// TestGateHistoryRefusesAnEditedNight: a failed night edited to "passed": true
// became the baseline. The verdict and the night's files are stored with their
// checksum; a night whose files disagree with it is refused (exit 2), whether
// night.json or a run's metrics was edited.
func TestGateHistoryRefusesAnEditedNight(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hist := filepath.Join(dir, "history")
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)
	slow := writeGateTree(t, filepath.Join(dir, "slow"), allSpecs(slower))
	faster := writeGateTree(t, filepath.Join(dir, "faster"), okSpecs)

	r := cli(t, "gate", "--history", hist, "--current", good, "--commit", "a1", "--date", "2026-03-01")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	r = cli(t, "gate", "--history", hist, "--current", slow, "--commit", "b2", "--date", "2026-03-02")
	require.Equal(t, ExitFailed, r.code, r.stdout+r.stderr)

	// The failed night, edited to pass, would be the baseline: the slow night
	// again would pass against it.
	nightFile := filepath.Join(hist, "2026-03-02-b2", results.NightFile)
	b, err := os.ReadFile(nightFile)
	require.NoError(t, err)
	require.Contains(t, string(b), `"passed": false`)
	require.NoError(t, os.WriteFile(nightFile, []byte(strings.Replace(string(b), `"passed": false`, `"passed": true`, 1)), 0o644))
	r = cli(t, "gate", "--history", hist, "--current", slow, "--commit", "c3", "--date", "2026-03-03")
	assert.Equal(t, ExitUsage, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, "were changed after the gate stored them")
	require.NoError(t, os.WriteFile(nightFile, b, 0o644))

	// A passing night whose runs were edited is refused too.
	r = cli(t, "gate", "--history", hist, "--current", faster, "--commit", "d4", "--date", "2026-03-04")
	require.Equal(t, ExitOK, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stdout, "baseline 2026-03-01-a1")
	metrics, err := filepath.Glob(filepath.Join(hist, "2026-03-04-d4", results.RunsDir, "*", results.MetricsFile))
	require.NoError(t, err)
	require.NotEmpty(t, metrics)
	f, err := os.OpenFile(metrics[0], os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString(" ")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	r = cli(t, "gate", "--history", hist, "--current", good, "--commit", "e5", "--date", "2026-03-05")
	assert.Equal(t, ExitUsage, r.code, r.stdout+r.stderr)
	assert.Contains(t, r.stderr, filepath.Join(hist, "2026-03-04-d4"))
}

// TestGateHistoryNightFollowsTheUmask: a stored night was mode 0700 (a temporary
// directory's), unreadable to the colleagues a shared history is for; it now
// follows the umask like every other output.
func TestGateHistoryNightFollowsTheUmask(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := writeGateTree(t, filepath.Join(dir, "good"), okSpecs)
	hist := filepath.Join(dir, "history")
	cmd := exec.Command("sh", "-c", `umask 002 && exec "$0" "$@"`, bin, "gate", "--history", hist, "--current", good, "--commit", "a1", "--date", "2026-03-01")
	cmd.Dir = dir
	res := runCommand(t, cmd)
	require.Equal(t, ExitOK, res.code, res.stdout+res.stderr)
	for _, p := range []string{hist, filepath.Join(hist, "2026-03-01-a1")} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o775), st.Mode().Perm(), p)
	}
	st, err := os.Stat(filepath.Join(hist, "2026-03-01-a1", results.NightFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o664), st.Mode().Perm())
}
