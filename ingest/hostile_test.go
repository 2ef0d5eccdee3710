package ingest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// trainerDir writes a Trainer output_dir: trainer_state.json and, when not
// empty, all_results.json, as the texts given (Python's json.dump may write
// bare NaN, which no Go value marshals to).
func trainerDir(t *testing.T, state, allResults string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	writeFile(t, dir, TrainerStateFile, state)
	if allResults != "" {
		writeFile(t, dir, TrainerAllResults, allResults)
	}
	return dir
}

var trainerSet = []string{"world_size=2", "seq_len=128", "hardware=cpu", "model=tiny"}

// What the Trainer writes for a diverged run — bare NaN losses — is read, as
// rank files are, and the run is stored diverged, saying where; an infinite
// grad_norm (a step the loss scaler skipped) says nothing about the run.
func TestIngestTrainerNaNLossIsDiverged(t *testing.T) {
	dir := trainerDir(t, `{"global_step": 10, "max_steps": 10, "train_batch_size": 2, "log_history": [
		{"loss": 2.5, "step": 5, "grad_norm": Infinity}, {"loss": NaN, "step": 10, "grad_norm": NaN}]}`,
		`{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`)
	out := filepath.Join(t.TempDir(), "out")
	_, err := Ingest(context.Background(), []string{dir}, out, Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	runs, err := results.Load(filepath.Join(out, "x"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, results.StatusDiverged, runs[0].Metrics.Status)
	assert.Contains(t, runs[0].Metrics.Error, "NaN loss (log_history[1].loss at ")
	assert.Contains(t, runs[0].Metrics.Error, "trainer_state.json:2:")

	// The same with finite losses is ok: the infinite grad_norm is no verdict.
	dir = trainerDir(t, `{"global_step": 10, "max_steps": 10, "train_batch_size": 2, "log_history": [
		{"loss": 2.5, "step": 5, "grad_norm": Infinity}, {"loss": 2.0, "step": 10}]}`,
		`{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`)
	out = filepath.Join(t.TempDir(), "out")
	_, err = Ingest(context.Background(), []string{dir}, out, Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	runs, err = results.Load(filepath.Join(out, "x"))
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, runs[0].Metrics.Status, runs[0].Metrics.Error)
}

// A step count below 1 (other than -1, "no limit") is an error naming the key,
// not a run stored with 0 steps measured.
func TestIngestNegativeGlobalStep(t *testing.T) {
	dir := trainerDir(t, `{"global_step": -8, "train_batch_size": 2}`,
		`{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`)
	_, err := Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "global_step (trainer_state.json): -8 is no step count")
}

// A results file that gave nothing is said so, and two throughput figures that
// disagree are a warning, as a metrics.json's are.
func TestIngestTrainerWarnings(t *testing.T) {
	dir := trainerDir(t, `{"global_step": 10, "max_steps": 10, "train_batch_size": 2}`,
		`{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 30208.0}`)
	writeFile(t, dir, TrainerTrainResult, `{"train_runtime": 10.0}`)
	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	require.Len(t, reports, 1)
	assert.Contains(t, reports[0].Warnings[0], "disagree 118×")

	dir = trainerDir(t, `{"global_step": 10, "max_steps": 10, "train_batch_size": 2}`, `{"eval_loss": 3.0}`)
	writeFile(t, dir, TrainerTrainResult, `{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`)
	reports, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	assert.Contains(t, reports[0].Warnings, "all_results.json holds none of train_runtime, train_samples_per_second, train_tokens_per_second: nothing in it was used")
}
