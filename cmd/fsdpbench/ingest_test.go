package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
)

// writeJSONFile writes v as JSON at dir/name, making dir.
func writeJSONFile(t *testing.T, dir, name string, v any) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	data, err := json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), data, 0o644))
}

// seedOneNode is the seed's one-node metrics.json, key for key and value for
// value as FACTS.md quotes it (8 × H100, Mistral-7B, full-parameter FSDP, bf16).
func seedOneNode() map[string]any {
	return map[string]any{"wall_time_s": 4.739885568618774, "approx_tokens_per_rank": 5120, "approx_tokens_per_s_per_rank": 1080.19,
		"world_size": 8, "gpu0": "NVIDIA H100 80GB HBM3", "torch": "2.5.1+cu121", "model": "mistralai/Mistral-7B-v0.1",
		"dataset": "yahma/alpaca-cleaned", "fsdp": true, "bf16": true}
}

// seedTwoNodes is the seed's two-node run in the same keys: 16 × H100 over TCP,
// 54.2 s wall and 94.5 tokens/s/rank (the same 5,120 tokens per rank).
func seedTwoNodes() map[string]any {
	m := seedOneNode()
	m["wall_time_s"], m["world_size"], m["approx_tokens_per_s_per_rank"] = 54.2, 16, 94.46
	return m
}

// TestIngestSeedsComparedWithSim ingests the seeds' three examples — the
// one-node and two-node metrics.json as the seed's script wrote them, and the
// design write-up's layout (results/training/<run>/run_args.json from a Trainer
// script, with its fsdp string and fsdp_config, beside metrics.json) — and
// compares them with the sim's predictions of the same points
// (sweeps/examples/mistral7b-1node-vs-2nodes.yaml), with the real binary. The
// ingested throughput is marked † as whole-run wall time, with the footnote.
func TestIngestSeedsComparedWithSim(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	training := filepath.Join(root, "seeds", "results", "training")
	writeJSONFile(t, filepath.Join(training, "mistral-8gpu"), "metrics.json", seedOneNode())
	writeJSONFile(t, filepath.Join(training, "mistral-16gpu"), "metrics.json", seedTwoNodes())
	s0 := filepath.Join(root, "s0", "results", "training", "mistral-7b-fsdp")
	writeJSONFile(t, s0, "run_args.json", map[string]any{
		"model_name_or_path": "mistralai/Mistral-7B-v0.1", "per_device_train_batch_size": 1, "max_seq_length": 512,
		"fsdp": "full_shard auto_wrap", "bf16": true, "learning_rate": 2e-5, "output_dir": "/scratch/mistral-7b-fsdp",
		"fsdp_config": map[string]any{"backward_prefetch": "backward_pre", "forward_prefetch": false,
			"transformer_layer_cls_to_wrap": []string{"MistralDecoderLayer"}, "fsdp_version": 1, "state_dict_type": "FULL_STATE_DICT"}})
	writeJSONFile(t, s0, "metrics.json", seedOneNode())

	sim := fsdpbench(t, repoRoot, "sweep", "sweeps/examples/mistral7b-1node-vs-2nodes.yaml", "--results", out)
	require.Equal(t, 0, sim.code, sim.stderr)
	predicted, err := results.Load(filepath.Join(out, "mistral7b-1node-vs-2nodes"))
	require.NoError(t, err)
	simByID := map[string]results.Run{}
	for _, r := range predicted {
		simByID[r.Config.ID] = r
	}

	// The bare metrics.json say world size, FSDP, bf16 and the model (a Hugging
	// Face id, read as the mistral-7b preset); the rest of the point is --set.
	ing := fsdpbench(t, repoRoot, "ingest", filepath.Join(root, "seeds"), "--name", "seeds", "--results", out,
		"--fsdp-sharding", "full_shard", "--set", "hardware=h100-sxm", "--set", "gpus_per_node=8",
		"--set", "seq_len=512", "--set", "batch_per_device=1")
	require.Equal(t, 0, ing.code, ing.stderr)
	assert.Contains(t, ing.stdout, "model -> model=mistral-7b (Hugging Face id mistralai/Mistral-7B-v0.1)")
	// The design write-up's layout gives the rest itself: its run_args.json.
	ing0 := fsdpbench(t, repoRoot, "ingest", filepath.Join(root, "s0"), "--name", "s0", "--results", out,
		"--set", "hardware=h100-sxm", "--set", "gpus_per_node=8")
	require.Equal(t, 0, ing0.code, ing0.stderr)
	for _, want := range []string{"fsdp -> sharding=full_shard", "fsdp -> wrap_policy=transformer",
		"fsdp_config.backward_prefetch -> backward_prefetch=backward_pre", "per_device_train_batch_size -> batch_per_device=1",
		"max_seq_length -> seq_len=512", "model_name_or_path -> model=mistral-7b"} {
		assert.Contains(t, ing0.stdout, want)
	}

	for _, tc := range []struct {
		name   string
		ranks  map[int]float64 // world size -> the seed's tokens/s/rank
		marked []string
	}{
		{"seeds", map[int]float64{8: 5120 / 4.739885568618774, 16: 5120 / 54.2}, []string{"1080†", "94.46†"}},
		{"s0", map[int]float64{8: 5120 / 4.739885568618774}, []string{"1080†"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs, err := results.Load(filepath.Join(out, tc.name))
			require.NoError(t, err)
			require.Len(t, runs, len(tc.ranks))
			for _, r := range runs {
				want, ok := tc.ranks[r.Config.WorldSize]
				require.True(t, ok, "world size %d", r.Config.WorldSize)
				require.NotNil(t, r.Metrics.TokensPerSPerRank)
				assert.InDelta(t, want, *r.Metrics.TokensPerSPerRank, 1e-9)
				assert.True(t, r.Metrics.WholeRunWallTime, "wall_time_s is the whole run's")
				assert.Equal(t, "mistral-7b", r.Config.Model)
				p, ok := simByID[r.Config.ID]
				require.True(t, ok, "the sim sweep predicts the same point %s", r.Config.ID)
				require.NotNil(t, p.Metrics.TokensPerSPerRank)
				t.Logf("%s: seed %.2f tokens/s/rank (whole run) vs sim %.2f (steady state): ratio %.3f",
					r.Config.ID, want, *p.Metrics.TokensPerSPerRank, *p.Metrics.TokensPerSPerRank/want)
			}
			cmp := fsdpbench(t, repoRoot, "compare", filepath.Join(out, tc.name), filepath.Join(out, "mistral7b-1node-vs-2nodes"),
				"--metric", "tokens_per_s_per_rank")
			require.Equal(t, 0, cmp.code, cmp.stderr)
			for _, m := range tc.marked {
				assert.Contains(t, cmp.stdout, m, "the ingested figure is marked:\n%s", cmp.stdout)
			}
			assert.Contains(t, cmp.stdout, "† throughput over the whole run's wall time", "the footnote:\n%s", cmp.stdout)
			js := fsdpbench(t, repoRoot, "compare", filepath.Join(out, tc.name), filepath.Join(out, "mistral7b-1node-vs-2nodes"),
				"--metric", "tokens_per_s_per_rank", "--format", "json")
			require.Equal(t, 0, js.code, js.stderr)
			var got struct {
				Rows []struct {
					Run                      string `json:"run"`
					BaselineWholeRunWallTime bool   `json:"baseline_whole_run_wall_time"`
					Deltas                   []struct {
						Baseline, Current *struct{ Value float64 }
						Change            *float64
					} `json:"deltas"`
				} `json:"rows"`
			}
			require.NoError(t, json.Unmarshal([]byte(js.stdout), &got))
			for _, r := range runs {
				line := regexp.MustCompile(`(?m)^.*` + regexp.QuoteMeta(r.Config.ID) + `.*$`).FindString(cmp.stdout)
				require.NotEmpty(t, line, "run %s is matched:\n%s", r.Config.ID, cmp.stdout)
				assert.NotContains(t, line, "missing")
				assert.Contains(t, line, "†")
				for _, row := range got.Rows {
					if row.Run != r.Config.ID {
						continue
					}
					assert.True(t, row.BaselineWholeRunWallTime)
					d := row.Deltas[0]
					require.NotNil(t, d.Baseline)
					require.NotNil(t, d.Current)
					assert.InDelta(t, *r.Metrics.TokensPerSPerRank, d.Baseline.Value, 1e-9)
					assert.InDelta(t, *simByID[r.Config.ID].Metrics.TokensPerSPerRank, d.Current.Value, 1e-9, "the sim's prediction of the point")
				}
			}
			rep := fsdpbench(t, repoRoot, "report", filepath.Join(out, tc.name))
			require.Equal(t, 0, rep.code, rep.stderr)
			assert.Contains(t, rep.stdout, "†")
			assert.Contains(t, rep.stdout, "whole run's wall time")
		})
	}
}

// TestIngestSetWinsOverTheFolder: an explicit --set beats the folder's value,
// and the output says which value it replaced.
func TestIngestSetWinsOverTheFolder(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "past", "results", "training", "r")
	writeJSONFile(t, dir, "run_args.json", map[string]any{"model_name": "mistralai/Mistral-7B-v0.1", "per_device_batch_size": 2})
	writeJSONFile(t, dir, "metrics.json", seedOneNode())
	res := fsdpbench(t, root, "ingest", "past", "--set", "model=llama3-8b", "--fsdp-sharding", "full_shard", "--results", "out")
	require.Equal(t, 0, res.code, res.stderr)
	assert.Contains(t, res.stdout, `overridden by --set: model_name (run_args.json)="mistralai/Mistral-7B-v0.1" -> --set model=llama3-8b`)
	assert.Contains(t, res.stdout, "per_device_batch_size -> batch_per_device=2")
	runs, err := results.Load(filepath.Join(root, "out", "ingested"))
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, "llama3-8b", runs[0].Config.Model)

	help := fsdpbench(t, root, "ingest", "--help")
	require.Equal(t, 0, help.code, help.stderr)
	for _, want := range []string{"per_device_batch_size [accelerate examples]", "training.local_batch_size [torchtitan]",
		"accumulate_grad_batches [Lightning]", "max_iters [nanoGPT]", "mistralai/mistral-7b-v0.1=mistral-7b"} {
		assert.Contains(t, strings.Join(strings.Fields(help.stdout), " "), want)
	}
}
