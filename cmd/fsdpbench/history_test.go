package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
