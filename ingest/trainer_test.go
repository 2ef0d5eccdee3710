package ingest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
)

// needTorch skips without Debian's torch, and fails instead in CI, where .ci/run
// installs it and sets FSDPBENCH_REQUIRE_TORCH=1.
func needTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import torch").Run(); err != nil {
		if os.Getenv("FSDPBENCH_REQUIRE_TORCH") == "1" {
			t.Fatalf("FSDPBENCH_REQUIRE_TORCH=1 but /usr/bin/python3 cannot import torch (%v): run .ci/deps", err)
		}
		t.Skipf("no torch in /usr/bin/python3 (%v); apt install python3-torch", err)
	}
}

// readJSONFile decodes a JSON file the fixture writer left.
func readJSONFile(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	return m
}

// TestIngestTrainerOutputDir trains a small model for real (testdata/
// trainer_output.py under Debian's torch, once alone and once as two DDP ranks
// under torchrun) into a Hugging Face Trainer output_dir, as the Trainer lays
// it out, and ingests the directory as it is: no run_args.json.
func TestIngestTrainerOutputDir(t *testing.T) {
	needTorch(t)
	tiny, err := shapes.Lookup("tiny")
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		ranks     int
		args      []string
		set       []string
		ws, ga    int
		tokensPer bool // the Trainer counted tokens (include_tokens_per_second)
	}{
		{name: "one process, tokens counted", ranks: 1, args: []string{"--include_tokens_per_second"}, ws: 1, ga: 1, tokensPer: true},
		{name: "two DDP ranks, grad accumulation, samples only", ranks: 2, args: []string{"--gradient_accumulation_steps", "2"},
			set: []string{"world_size=2", "seq_len=32"}, ws: 2, ga: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			outDir := filepath.Join(root, "runs", "tiny-sft")
			argv := []string{"ingest/testdata/trainer_output.py"}
			if tc.ranks > 1 {
				argv = append([]string{"-m", "torch.distributed.run", "--standalone", "--nproc_per_node", strconv.Itoa(tc.ranks),
					"--redirects", "2", "--tee", "2"}, argv...)
			}
			cmd := exec.Command("/usr/bin/python3", append(append(argv, "--output_dir", outDir), tc.args...)...)
			cmd.Dir = ".."
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, string(out))
			m := regexp.MustCompile(`params (\d+)`).FindSubmatch(out)
			require.NotNil(t, m, string(out))
			assert.Equal(t, strconv.FormatInt(tiny.Params(), 10), string(m[1]), "the script trains the tiny preset's shape")

			state := readJSONFile(t, filepath.Join(outDir, TrainerStateFile))
			metrics := readJSONFile(t, filepath.Join(outDir, TrainerAllResults))
			hist := state["log_history"].([]any)

			if tc.ranks > 1 {
				_, err := Ingest(context.Background(), []string{filepath.Join(root, "runs")}, filepath.Join(root, "res"), Options{Name: "hf"})
				require.Error(t, err)
				assert.Contains(t, err.Error(), "the Trainer's figures give world_size × grad_accum = 4")
				assert.Contains(t, err.Error(), "give --set world_size=N")
			}
			reports, err := Ingest(context.Background(), []string{filepath.Join(root, "runs")}, filepath.Join(root, "res"),
				Options{Name: "hf", Set: tc.set, TrainsModelAxis: true})
			require.NoError(t, err)
			require.Len(t, reports, 1, "the checkpoint folder is no run")
			assert.Equal(t, []string{TrainerAllResults, TrainerTrainResult, TrainerStateFile}, reports[0].Files)
			assert.Contains(t, reports[0].Mapped, "train_batch_size -> batch_per_device=4")
			assert.Contains(t, reports[0].Mapped, "global_step -> steps=12")
			assert.Contains(t, reports[0].Mapped, "config.json -> model=tiny (the shape of "+filepath.Join(outDir, "config.json")+")")

			runs, err := results.Load(filepath.Join(root, "res", "hf"))
			require.NoError(t, err)
			require.Len(t, runs, 1)
			rc, met := runs[0].Config, runs[0].Metrics
			assert.Equal(t, []int{tc.ws, tc.ga, 4, 12}, []int{rc.WorldSize, rc.GradAccum, rc.BatchPerDevice, rc.Steps})
			assert.Equal(t, "tiny", rc.Model)
			assert.True(t, met.WholeRunWallTime, "train_runtime spans the whole training loop")
			require.NotNil(t, met.TokensPerSPerRank)
			if tc.tokensPer {
				assert.InEpsilon(t, metrics["train_tokens_per_second"].(float64), *met.TokensPerSPerRank, 1e-3, "whole tokens per rank")
				assert.Contains(t, reports[0].Mapped, "train_tokens_per_second × world_size ÷ train_samples_per_second -> seq_len=32 (every sample 32 tokens, packed or padded)")
			} else {
				assert.InEpsilon(t, metrics["train_samples_per_second"].(float64)*32/2, *met.TokensPerSPerRank, 1e-3, "whole tokens per rank: within half a token of 3,072")
			}
			assert.Equal(t, 32, rc.SeqLen)
			// The script's own count: every rank's tokens over the rounded runtime.
			perRank := float64(12 * tc.ga * 4 * 32)
			assert.InEpsilon(t, perRank/metrics["train_runtime"].(float64), *met.TokensPerSPerRank, 2e-3)
			require.NotNil(t, met.LossFirst)
			require.NotNil(t, met.LossLast)
			assert.Equal(t, hist[0].(map[string]any)["loss"], *met.LossFirst)
			assert.Equal(t, hist[len(hist)-2].(map[string]any)["loss"], *met.LossLast, "the last logging step's loss")
			assert.Equal(t, 12, met.StepsMeasured)
			require.NotNil(t, met.ModelFlopsPerToken, "the model axis is the trained model")
			assert.InDelta(t, tiny.FlopsPerToken(32), *met.ModelFlopsPerToken, 1e-6)
			tr := met.Extra["trainer"].(map[string]any)
			assert.Equal(t, metrics["train_runtime"], tr["train_runtime"])
			assert.Equal(t, float64(3), tr["log_history_losses"])
		})
	}
}

// TestIngestTrainerFiguresWithoutReplicas: a Trainer output_dir whose figures
// give no whole number of replicas (an epoch-based run's short last batch)
// needs the world size from --set; with it, its figures are read.
func TestIngestTrainerFiguresWithoutReplicas(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "out")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	write := func(name string, v any) {
		data, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
	}
	write(TrainerTrainResult, map[string]any{"train_runtime": 100.0, "train_samples_per_second": 51.3, "train_tokens_per_second": 4000.0})
	write(TrainerStateFile, map[string]any{"train_batch_size": 2, "global_step": 300, "max_steps": 300,
		"log_history": []any{map[string]any{"loss": 2.5, "step": 10}, map[string]any{"loss": 1.5, "step": 300}}})
	_, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "res"), Options{Name: "x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the Trainer's files do not give the world size")

	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "res"), Options{Name: "x", Set: []string{"world_size=8", "grad_accum=1"}})
	require.NoError(t, err)
	assert.Empty(t, reports[0].Warnings)
	runs, err := results.Load(filepath.Join(root, "res", "x"))
	require.NoError(t, err)
	assert.InDelta(t, 4000, *runs[0].Metrics.TokensPerSPerRank, 1e-9, "train_tokens_per_second is per device")
	assert.InDelta(t, 2.5, *runs[0].Metrics.LossFirst, 0)
	assert.InDelta(t, 1.5, *runs[0].Metrics.LossLast, 0)
}
