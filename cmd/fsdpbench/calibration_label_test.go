//go:build unix

package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/sim"
)

// writeCalibration stores a calibration holding constants for the given profiles.
func writeCalibration(t *testing.T, path string, profiles ...string) string {
	t.Helper()
	cal := &sim.Calibration{Profiles: map[string]sim.Constants{}}
	for _, p := range profiles {
		cal.Profiles[p] = sim.Constants{Efficiency: 0.2, Fit: sim.FitReport{Runs: 3}}
	}
	require.NoError(t, cal.Write(path))
	return path
}

// TestCalibrationLabelsOnlyWhatItChanged: a calibration holding only the cpu
// profile's constants (what calibrate writes from cpu runs) made plan and
// recommend say "calibrated by" on h100 predictions it did not change. They now
// say uncalibrated and why, and "calibrated by" only where it applied.
func TestCalibrationLabelsOnlyWhatItChanged(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cpuOnly := writeCalibration(t, filepath.Join(dir, "cpu.json"), "cpu/gotrain")
	h100 := writeCalibration(t, filepath.Join(dir, "h100.json"), "h100-sxm")
	spec := filepath.Join(repoRoot, "sweeps", "examples", "quickstart.yaml")
	rec := []string{"recommend", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "2048", "--top", "2", "--results", dir}

	r := cli(t, "plan", spec, "--calibration", cpuOnly)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "calibrated by")
	assert.Contains(t, r.stdout, "uncalibrated: "+cpuOnly+" has no constants for h100-sxm (it has cpu/gotrain)")
	none := cli(t, "plan", spec)
	require.Equal(t, 0, none.code, none.stderr)

	r = cli(t, append(rec, "--calibration", cpuOnly)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.NotContains(t, r.stdout, "calibrated by")
	assert.Contains(t, r.stdout, "uncalibrated: "+cpuOnly+" has no constants for h100-sxm")

	r = cli(t, "plan", spec, "--calibration", h100)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "calibrated by "+h100+")")
	assert.NotEqual(t, none.stdout, r.stdout, "the calibration changed the figures")
	r = cli(t, append(rec, "--calibration", h100)...)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "(calibrated by "+h100+")")
}

// TestCalibrationFileProblemsAreErrors: a profile that is no hardware profile is
// refused when the file is loaded (its constants would never apply); a default
// calibration.json that is a dangling or looping link is an error (it was taken
// as no calibration, silently).
func TestCalibrationFileProblemsAreErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"version": 1, "profiles": {"x100/gotrain": {"efficiency": 0.3, "fit": {"runs": 2}}}}`), 0o644))
	spec := filepath.Join(repoRoot, "sweeps", "examples", "quickstart.yaml")
	r := cli(t, "plan", spec, "--calibration", bad)
	assert.Equal(t, ExitUsage, r.code, r.stdout)
	assert.Contains(t, r.stderr, `"x100" is no hardware profile`)

	rec := []string{"recommend", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus-per-node", "8", "--global-batch", "64", "--seq-len", "2048", "--top", "2"}
	for target, want := range map[string]string{"nowhere.json": "leads to nothing", sim.CalibrationFile: "loops"} {
		res := filepath.Join(t.TempDir(), "results")
		require.NoError(t, os.MkdirAll(res, 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(res, sim.CalibrationFile)))
		r := cli(t, append(rec, "--results", res)...)
		assert.Equal(t, ExitUsage, r.code, r.stdout)
		assert.Contains(t, r.stderr, "is a symbolic link that "+want, target)
	}
}
