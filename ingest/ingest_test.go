package ingest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeRun writes one past run's folder in the layout existing scripts use.
func writeRun(t *testing.T, root, name string, args, metrics map[string]any) string {
	t.Helper()
	dir := filepath.Join(root, "results", "training", name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for file, v := range map[string]map[string]any{RunArgsFile: args, "metrics.json": metrics} {
		if v == nil {
			continue
		}
		data, err := json.MarshalIndent(v, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, file), data, 0o644))
	}
	return dir
}

// seedMetrics is a metrics.json as the seeds' scripts write it.
func seedMetrics(ws int, wall, tokens float64) map[string]any {
	return map[string]any{"wall_time_s": wall, "approx_tokens_per_rank": tokens, "approx_tokens_per_s_per_rank": tokens / wall,
		"world_size": ws, "gpu0": "NVIDIA H100 80GB HBM3", "torch": "2.5.1", "model": "mistralai/Mistral-7B-v0.1",
		"dataset": "alpaca", "fsdp": true, "bf16": true}
}

func TestIngestMapsAndGroupsRepeats(t *testing.T) {
	root := t.TempDir()
	args := map[string]any{"per_device_train_batch_size": 2, "max_seq_length": 512, "gradient_checkpointing": true,
		"learning_rate": 2e-5, "output_dir": "/scratch/out"}
	writeRun(t, root, "mistral-16gpu-a", args, seedMetrics(16, 54.2, 5122))
	writeRun(t, root, "mistral-16gpu-b", args, seedMetrics(16, 50.0, 5122))
	writeRun(t, root, "mistral-8gpu", args, seedMetrics(8, 4.7, 5076))

	out := filepath.Join(root, "out")
	reports, err := Ingest([]string{filepath.Join(root, "results")}, out, Options{Name: "seeds", FSDPSharding: sweeps.FullShard,
		Set: []string{"hardware=h100-sxm", "model=mistral-7b", "gpus_per_node=8"}, TrainsModelAxis: true,
		Now: func() time.Time { return time.Unix(0, 0) }})
	require.NoError(t, err)
	require.Len(t, reports, 3)
	r := reports[0]
	assert.Equal(t, reports[0].ID, reports[1].ID, "two folders with the same settings are repeats of one run")
	assert.NotEqual(t, reports[0].ID, reports[2].ID)
	assert.Contains(t, r.Mapped, "per_device_train_batch_size -> batch_per_device=2")
	assert.Contains(t, r.Mapped, "gradient_checkpointing -> activation_checkpointing=true")
	assert.Contains(t, r.Mapped, "fsdp -> sharding=full_shard")
	assert.Contains(t, r.Mapped, "bf16 -> mixed_precision=bf16")
	assert.Contains(t, r.Mapped, "world_size -> world_size=16")
	assert.Equal(t, []string{"learning_rate", "output_dir"}, r.Unmapped, "listed, not guessed")
	assert.Contains(t, r.Defaulted, "grad_accum")
	assert.NotContains(t, r.Defaulted, "model", "--set gave it")

	runs, err := results.Load(filepath.Join(out, "seeds"))
	require.NoError(t, err)
	require.Len(t, runs, 2)
	byWS := map[int]results.Run{}
	for _, run := range runs {
		byWS[run.Config.WorldSize] = run
	}
	two := byWS[16]
	assert.Equal(t, 2, two.Metrics.Repeats)
	assert.Equal(t, 2, two.Config.Nodes, "16 ranks at 8 per node")
	require.NotNil(t, two.Metrics.TokensPerSPerRank)
	// The median of the two repeats' tokens/s/rank: 5122/54.2 and 5122/50.0.
	assert.InDelta(t, (5122/54.2+5122/50.0)/2, *two.Metrics.TokensPerSPerRank, 1e-9)
	require.NotNil(t, two.Metrics.MFU, "the model axis names the trained model, so MFU is known")
	assert.Equal(t, "NVIDIA H100 80GB HBM3", two.Metrics.Env.GPU)
	assert.Equal(t, results.StatusOK, two.Metrics.Status)
	one := byWS[8]
	assert.InDelta(t, 5076/4.7, *one.Metrics.TokensPerSPerRank, 1e-9)
}

// TestIngestMatchesASweepsIDs: a folder ingested with a sweep's spec gets the ID
// the sweep gives the same point, so compare and gate match them.
func TestIngestMatchesASweepsIDs(t *testing.T) {
	root := t.TempDir()
	spec := "../sweeps/examples/torchrun-user-script.yaml"
	writeRun(t, root, "old", map[string]any{"batch_size_per_device": 4, "seq_len": 128, "gradient_checkpointing": true},
		map[string]any{"wall_time_s": 2.0, "approx_tokens_per_rank": 10240, "world_size": 2, "fsdp": false, "bf16": false})
	reports, err := Ingest([]string{root}, filepath.Join(root, "out"), Options{Name: "old", Spec: spec})
	require.NoError(t, err)
	plan, err := sweeps.Load(spec, sweeps.Options{})
	require.NoError(t, err)
	var ids []string
	for _, rc := range plan.Runs {
		ids = append(ids, rc.ID)
	}
	assert.Contains(t, ids, reports[0].ID)
}

func TestIngestErrors(t *testing.T) {
	root := t.TempDir()
	dir := writeRun(t, root, "bad", map[string]any{"batch_size_per_device": 4}, nil)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "metrics.json"), []byte("{\n  \"wall_time_s\": 3,\n  oops\n}"), 0o644))
	_, err := Ingest([]string{root}, t.TempDir(), Options{Name: "x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "metrics.json")+":3:3: not valid JSON")

	root = t.TempDir()
	writeRun(t, root, "fsdp", nil, seedMetrics(8, 4.7, 5076))
	_, err = Ingest([]string{root}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "fsdp: true does not say which strategy; give it with --fsdp-sharding")

	_, err = Ingest([]string{t.TempDir()}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "no metrics.json under")

	root = t.TempDir()
	writeRun(t, root, "nothroughput", nil, map[string]any{"world_size": 1, "model": "x"})
	_, err = Ingest([]string{root}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "needs two of wall_time_s, approx_tokens_per_rank, approx_tokens_per_s_per_rank")
}
