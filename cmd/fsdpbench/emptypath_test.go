package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A path flag given empty (an unset shell variable: --results "$OUT") is refused
// with exit 2, instead of silently meaning the default.
func TestEmptyPathFlagsAreRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, args := range [][]string{
		{"sweep", "spec.yaml", "--results", "", "--dry-run"},
		{"ingest", "x", "--results", " "},
		{"export", "x", "--format", "csv", "-o", ""},
		{"calibrate", "x", "--out", ""},
		{"plot", "x", "-o", ""},
	} {
		res := fsdpbench(t, dir, args...)
		assert.Equal(t, ExitUsage, res.code, "%v: %s", args, res.stderr)
		assert.Contains(t, res.stderr, "is empty: give a path", "%v", args)
	}
}
