package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// TestSweepNeverOverwritesItsSpec: a spec kept in its own sweep's results directory
// as sweep.yaml or manifest.json was replaced (comments and all) by the resolved
// spec or the manifest. The sweep now refuses (exit 2) and leaves it as written;
// a stored sweep's own resolved sweep.yaml still resumes the sweep, unchanged.
func TestSweepNeverOverwritesItsSpec(t *testing.T) {
	t.Parallel()
	const spec = "# my comments, kept\nname: mydir\nbackend: sim\nhardware: h100-sxm\nmodel: tiny\ngrid:\n  world_size: [1, 2]\n"
	for _, name := range []string{results.SpecFile, results.ManifestFile} {
		dir := t.TempDir()
		path := filepath.Join(dir, "mydir", name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(spec), 0o644))
		res := fsdpbench(t, dir, "sweep", filepath.Join("mydir", name), "--results", ".", "--progress", "none")
		assert.Equal(t, ExitUsage, res.code, res.stderr)
		assert.Contains(t, res.stderr, "would overwrite your file", name)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, spec, string(b), "%s is as the user wrote it", name)
	}

	// Resuming from the stored resolved spec is no overwrite: it runs and keeps it.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "spec.yaml"), []byte(spec), 0o644))
	res := fsdpbench(t, dir, "sweep", "spec.yaml", "--results", "r", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	stored := filepath.Join(dir, "r", "mydir", results.SpecFile)
	before, err := os.ReadFile(stored)
	require.NoError(t, err)
	res = fsdpbench(t, dir, "sweep", stored, "--results", "r", "--progress", "none")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout+res.stderr, "skipped")
	after, err := os.ReadFile(stored)
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after))
}
