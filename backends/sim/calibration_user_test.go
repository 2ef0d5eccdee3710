package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// userProfile writes a user-defined hardware profile named name and returns
// its path.
func userProfile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+"-file.yaml")
	require.NoError(t, os.WriteFile(path, []byte("name: "+name+`
peak_tflops: {bf16: 300, fp32: 20}
memory_gib: 48
gpus_per_node: 4
intra_node_bus_bw_gbps: 150
`), 0o644))
	return path
}

// userRuns are "measured" runs on the profile file hw: the sim's uncalibrated
// figures, slower and larger than predicted, so that a fit moves the constants.
func userRuns(t *testing.T, hw, backend string) []Measurement {
	t.Helper()
	var ms []Measurement
	for _, ws := range []int{1, 2, 4} {
		for _, bs := range []int{1, 2} {
			rc := sweeps.RunConfig{Backend: backend, Hardware: hw, Model: "gpt2-124m", SeqLen: 512, Nodes: 1, GPUsPerNode: ws, WorldSize: ws,
				BatchPerDevice: bs, GradAccum: 1, Sharding: sweeps.FullShard, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16}
			rc.ID = rc.MakeSlug()
			pred, err := predict(rc, Options{})
			require.NoError(t, err)
			ms = append(ms, Measurement{Run: rc.ID, Backend: backend, Config: rc, TokensPerS: pred.TokensPerS * 0.6,
				AllocatedBytes: pred.PeakMemAllocatedBytes * 6 / 5})
		}
	}
	return ms
}

// TestCalibrationOfAUserProfileRoundTrips (issue 37 item 6): runs on a
// user-defined profile (a profile file) were keyed "my-gpu/torchrun", and
// reading the file back refused the key as no hardware profile. The key stays
// the profile's name, the constants name the file, the file reads back, and a
// prediction on the profile file uses the constants; a built-in profile never
// takes them.
func TestCalibrationOfAUserProfileRoundTrips(t *testing.T) {
	dir := t.TempDir()
	hw := userProfile(t, dir, "my-gpu")
	cal, err := Fit(userRuns(t, hw, "torchrun"))
	require.NoError(t, err)
	k, ok := cal.Profiles["my-gpu/torchrun"]
	require.True(t, ok, "keys: %v", cal.Profiles)
	assert.Equal(t, hw, k.ProfileFile)
	assert.Equal(t, []string{"torchrun"}, k.Fit.Backends)

	path := filepath.Join(dir, CalibrationFile)
	require.NoError(t, cal.Write(path))
	read, err := LoadCalibration(path)
	require.NoError(t, err, "calibrate's own output reads back")

	rc := userRuns(t, hw, "torchrun")[3].Config
	rc.Backend = Name // plan predicts a sim spec's runs
	plain, err := PredictCalibrated(rc, nil, nil)
	require.NoError(t, err)
	calibrated, err := PredictCalibrated(rc, nil, read)
	require.NoError(t, err)
	require.NotNil(t, calibrated.Calibration, "the fit applies: %s", joinNotes(calibrated.Notes))
	assert.Equal(t, "my-gpu/torchrun", calibrated.Calibration.Profile)
	assert.InEpsilon(t, 0.6, calibrated.TokensPerS/plain.TokensPerS, 0.1, "the fit's slower throughput")
	assert.NotContains(t, joinNotes(calibrated.Notes), "fitted to runs on the profile file", "the same file: nothing to say")

	// The same profile reached by another path: still the fit, said as such
	// only when it is another file.
	rel, err := filepath.Rel(mustGetwd(t), hw)
	require.NoError(t, err)
	rc.Hardware = rel
	viaRel, err := PredictCalibrated(rc, nil, read)
	require.NoError(t, err)
	require.NotNil(t, viaRel.Calibration)
	assert.NotContains(t, joinNotes(viaRel.Notes), "fitted to runs on the profile file")
	other := filepath.Join(t.TempDir(), "copy.yaml")
	b, err := os.ReadFile(hw)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, b, 0o644))
	rc.Hardware = other
	viaCopy, err := PredictCalibrated(rc, nil, read)
	require.NoError(t, err)
	require.NotNil(t, viaCopy.Calibration, "the key is the profile's name")
	assert.Contains(t, joinNotes(viaCopy.Notes), "were fitted to runs on the profile file "+hw)

	// A built-in profile does not take a user profile's constants, even
	// under its name.
	c := &Calibration{Profiles: map[string]Constants{"h100-sxm/torchrun": {Efficiency: 0.2, ProfileFile: hw}}}
	_, _, ok = c.lookup("h100-sxm", "torchrun", false)
	assert.False(t, ok)
	_, _, ok = c.lookup("h100-sxm", "torchrun", true)
	assert.True(t, ok)
	c = &Calibration{Profiles: map[string]Constants{"h100-sxm": {Efficiency: 0.2}}}
	_, _, ok = c.lookup("h100-sxm", "torchrun", true)
	assert.False(t, ok, "and a profile file named like a built-in one takes none of the built-in's")
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

// TestIngestedRunsAreKeyedByHardware (issue 37 item 6): an ingested run was
// keyed under the backend its ingest spec named (torchrun by default), which
// never ran it. It is keyed by its hardware alone, counted as ingested, and a
// prediction of any backend on that hardware takes the constants.
func TestIngestedRunsAreKeyedByHardware(t *testing.T) {
	hw := userProfile(t, t.TempDir(), "lab-gpu")
	var runs []results.Run
	for _, m := range userRuns(t, hw, "torchrun") {
		tps, alloc := m.TokensPerS, m.AllocatedBytes
		runs = append(runs, results.Run{Config: m.Config, Metrics: results.Metrics{Status: results.StatusOK, TokensPerS: &tps,
			PeakMemAllocatedBytes: &alloc, Extra: map[string]any{"source_dir": "/past/" + m.Run, "source_dirs": []any{"/past/" + m.Run}}}})
	}
	ms, skipped := Measurements(runs, false)
	require.Empty(t, skipped)
	for _, m := range ms {
		assert.True(t, m.Ingested)
		assert.Empty(t, m.Backend, "no backend ran it")
	}
	cal, err := Fit(ms)
	require.NoError(t, err)
	require.Len(t, cal.Profiles, 1)
	k, ok := cal.Profiles["lab-gpu"]
	require.True(t, ok, "keys: %v", cal.Profiles)
	assert.Empty(t, k.Fit.Backends)
	assert.Equal(t, len(runs), k.Fit.Ingested)
	b, err := cal.Encode()
	require.NoError(t, err)
	read, err := ParseCalibration(b)
	require.NoError(t, err)
	for _, backend := range []string{Name, "torchrun", TrainerGotrain} {
		rc := runs[0].Config
		rc.Backend = backend
		pred, err := PredictCalibrated(rc, nil, read)
		require.NoError(t, err)
		require.NotNil(t, pred.Calibration, backend)
		assert.Equal(t, "lab-gpu", pred.Calibration.Profile)
	}
}

// TestCalibrationKeysAreChecked (issue 37 item 6): a key's hardware half is a
// built-in profile or a user-defined one that names its file, never a file
// path; its backend half a backend (built in, or a plugin found).
func TestCalibrationKeysAreChecked(t *testing.T) {
	file := func(key, extra string) []byte {
		return []byte(`{"version": 1, "profiles": {"` + key + `": {"efficiency": 0.3` + extra + `, "fit": {"runs": 2}}}}`)
	}
	for key, want := range map[string]string{
		"h100-sxm/bogusbackend": `key "h100-sxm/bogusbackend": "bogusbackend" is no backend (backends: gotrain, sim, torchrun, or a plugin`,
		"my-gpu/torchrun":       `key "my-gpu/torchrun": "my-gpu" is no hardware profile`,
		"my-gpu.yaml":           `key "my-gpu.yaml": give a hardware profile, or PROFILE/BACKEND`,
	} {
		_, err := ParseCalibration(file(key, ""))
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), want)
	}
	for _, key := range []string{"h100-sxm/torchrun", "cpu/gotrain", "h200", "a100-80g/sim"} {
		_, err := ParseCalibration(file(key, ""))
		assert.NoError(t, err, key)
	}
	_, err := ParseCalibration(file("my-gpu/torchrun", `, "profile_file": "/x/my-gpu.yaml"`))
	assert.NoError(t, err, "a user-defined profile names its file")
	_, err = ParseCalibration(file("my-gpu.yaml/torchrun", `, "profile_file": "/x/my-gpu.yaml"`))
	assert.Error(t, err, "still no file path as a key")

	// A plugin found on the plugin path is a backend.
	defer func(f func() []string) { PluginBackends = f }(PluginBackends)
	PluginBackends = func() []string { return []string{"mytrainer"} }
	_, err = ParseCalibration(file("h100-sxm/mytrainer", ""))
	assert.NoError(t, err)
	_, err = ParseCalibration(file("h100-sxm/bogusbackend", ""))
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "gotrain, mytrainer, sim, torchrun"), err)
}

// TestFitRefusesTwoProfilesOfOneName: runs on two profile files that give
// themselves one name would share a key and mix their constants.
func TestFitRefusesTwoProfilesOfOneName(t *testing.T) {
	a := userProfile(t, t.TempDir(), "twin")
	b := userProfile(t, t.TempDir(), "twin")
	ms := append(userRuns(t, a, "torchrun")[:2], userRuns(t, b, "torchrun")[:2]...)
	_, err := Fit(ms)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "two hardware profiles named twin")
	assert.Contains(t, err.Error(), "distinct name: keys")
}

// TestMeasurementsSayWhyAProfileFileIsLeftOut: a run on a profile file that
// no longer reads is left out with the file's error, not "not a profile".
func TestMeasurementsSayWhyAProfileFileIsLeftOut(t *testing.T) {
	gone := filepath.Join(t.TempDir(), "gone.yaml")
	tps := 1000.0
	_, skipped := Measurements([]results.Run{{Config: sweeps.RunConfig{ID: "r", Backend: "torchrun", Hardware: gone, Model: "tiny", SeqLen: 64,
		WorldSize: 1, BatchPerDevice: 1}, Metrics: results.Metrics{Status: results.StatusOK, TokensPerS: &tps}}}, false)
	require.Len(t, skipped, 1)
	assert.Contains(t, skipped[0], "r: its hardware profile file does not read: hardware profile file "+gone)
}
