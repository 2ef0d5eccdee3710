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

// A trainer_state.json that gives global_step twice (10, then -1: "no limit")
// is refused at the second, not read as the last.
func TestIngestTrainerStateDuplicateKey(t *testing.T) {
	dir := trainerDir(t, "{\"global_step\": 10,\n \"global_step\": -1, \"train_batch_size\": 2}",
		`{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`)
	_, err := Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, TrainerStateFile)+`:2:2: the key "global_step" is given twice in one object (first at line 1, column 2)`)

	// So is a results file or run_args.json that does.
	dir = trainerDir(t, `{"global_step": 10, "train_batch_size": 2}`,
		`{"train_runtime": 10.0, "train_runtime": -5, "train_tokens_per_second": 256.0}`)
	_, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), TrainerAllResults+`:1:25: the key "train_runtime" is given twice`)
	writeFile(t, dir, TrainerAllResults, `{"train_runtime": 10.0, "train_tokens_per_second": 256.0}`)
	writeFile(t, dir, RunArgsFile, `{"per_device_train_batch_size": 2, "per_device_train_batch_size": 8}`)
	_, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), RunArgsFile+`:1:36: the key "per_device_train_batch_size" is given twice`)
}

// A trainer_state.json saved with a UTF-8 byte order mark reads.
func TestIngestTrainerStateBOM(t *testing.T) {
	dir := trainerDir(t, "\ufeff{\"global_step\": 10, \"max_steps\": 10, \"train_batch_size\": 2}",
		"\ufeff{\"train_runtime\": 10.0, \"train_samples_per_second\": 4.0, \"train_tokens_per_second\": 256.0}")
	out := filepath.Join(t.TempDir(), "out")
	_, err := Ingest(context.Background(), []string{dir}, out, Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	runs, err := results.Load(filepath.Join(out, "x"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, 10, runs[0].Metrics.StepsMeasured)
}

// Throughput figures present and 0, with seq_len given, say so: not "absent",
// not "give --set seq_len".
func TestIngestTrainerZeroThroughput(t *testing.T) {
	dir := trainerDir(t, `{"global_step": 10, "max_steps": 10, "train_batch_size": 2}`,
		`{"train_runtime": 10.0, "train_tokens_per_second": 0, "train_samples_per_second": 0}`)
	_, err := Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "train_tokens_per_second is 0 (all_results.json) and train_samples_per_second is 0 (all_results.json) over a train_runtime of 10s: the run recorded no throughput")
	assert.NotContains(t, err.Error(), "absent")
	assert.NotContains(t, err.Error(), "--set seq_len")

	// Tokens 0 and samples counted, without seq_len: the tokens are 0, not absent.
	_, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: []string{"world_size=2", "hardware=cpu", "model=tiny"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "train_tokens_per_second is 0 (all_results.json) and train_samples_per_second is 0")
	writeFile(t, dir, TrainerAllResults, `{"train_runtime": 10.0, "train_tokens_per_second": 0, "train_samples_per_second": 4.0}`)
	_, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: []string{"world_size=2", "hardware=cpu", "model=tiny"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "all_results.json: train_tokens_per_second is 0, and train_samples_per_second needs the tokens per sample: give --set seq_len=N")
}

// A hostile all_results.json beside a sane train_results.json is not ignored
// without a word: the report says which file's figures were used and why the
// other's were not; the other way round too; two sane files that disagree are
// named; a lone hostile file is refused naming it.
func TestIngestTrainerResultsFileChoice(t *testing.T) {
	const sane = `{"train_runtime": 10.0, "train_samples_per_second": 4.0, "train_tokens_per_second": 256.0}`
	const hostile = `{"train_runtime": -5, "train_tokens_per_second": -3789, "eval_loss": 3.0}`
	state := `{"global_step": 10, "max_steps": 10, "train_batch_size": 2}`

	dir := trainerDir(t, state, hostile)
	writeFile(t, dir, TrainerTrainResult, sane)
	out := filepath.Join(t.TempDir(), "out")
	reports, err := Ingest(context.Background(), []string{dir}, out, Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	require.Len(t, reports, 1)
	assert.Contains(t, reports[0].Warnings, "the train figures are train_results.json's; all_results.json's were not used: "+
		"train_runtime is -5, outside [0, 1e+07]; train_tokens_per_second is -3789, outside [0, 1.125899906842624e+15]")
	runs, err := results.Load(filepath.Join(out, "x"))
	require.NoError(t, err)
	require.NotNil(t, runs[0].Metrics.TokensPerSPerRank)
	assert.InDelta(t, 256.0, *runs[0].Metrics.TokensPerSPerRank, 1e-9)
	assert.Equal(t, 3.0, runs[0].Metrics.Extra["trainer"].(map[string]any)["eval_loss"], "the dropped file's other keys are kept")

	dir = trainerDir(t, state, sane)
	writeFile(t, dir, TrainerTrainResult, hostile)
	reports, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	assert.Contains(t, reports[0].Warnings[0], "the train figures are all_results.json's; train_results.json's were not used: train_runtime is -5")

	dir = trainerDir(t, state, sane)
	writeFile(t, dir, TrainerTrainResult, `{"train_runtime": 20.0, "train_samples_per_second": 2.0, "train_tokens_per_second": 128.0}`)
	reports, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.NoError(t, err)
	assert.Contains(t, reports[0].Warnings, "train_results.json and all_results.json disagree (train_runtime 20 against 10, train_samples_per_second 2 against 4, "+
		"train_tokens_per_second 128 against 256): the figures used are train_results.json's, the train split's own file; were they written by one run?")

	dir = trainerDir(t, state, hostile)
	_, err = Ingest(context.Background(), []string{dir}, filepath.Join(t.TempDir(), "out"), Options{Name: "x", Set: trainerSet})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "all_results.json: train_runtime is -5, outside")
}
