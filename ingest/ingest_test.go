package ingest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/harness/dirlock"
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
	reports, err := Ingest(context.Background(), []string{filepath.Join(root, "results")}, out, Options{Name: "seeds", FSDPSharding: sweeps.FullShard,
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
	reports, err := Ingest(context.Background(), []string{root}, filepath.Join(root, "out"), Options{Name: "old", Spec: spec})
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
	_, err := Ingest(context.Background(), []string{root}, t.TempDir(), Options{Name: "x"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), filepath.Join(dir, "metrics.json")+":3:3: not valid JSON")

	root = t.TempDir()
	writeRun(t, root, "fsdp", nil, seedMetrics(8, 4.7, 5076))
	_, err = Ingest(context.Background(), []string{root}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "fsdp: true does not say which strategy; give it with --fsdp-sharding")

	_, err = Ingest(context.Background(), []string{t.TempDir()}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "no metrics.json (or a Trainer's all_results.json / train_results.json) under")

	root = t.TempDir()
	writeRun(t, root, "nothroughput", nil, map[string]any{"world_size": 1, "model": "x"})
	_, err = Ingest(context.Background(), []string{root}, t.TempDir(), Options{Name: "x"})
	assert.ErrorContains(t, err, "needs two of wall_time_s, approx_tokens_per_rank, approx_tokens_per_s_per_rank")
}

// ingestSeeds ingests the folders under root/results into out as sweep "seeds".
func ingestSeeds(root, out string, set ...string) ([]Report, error) {
	return Ingest(context.Background(), []string{filepath.Join(root, "results")}, out, Options{Name: "seeds",
		FSDPSharding: sweeps.FullShard, Set: append([]string{"hardware=h100-sxm", "model=mistral-7b", "gpus_per_node=8"}, set...)})
}

func runIDs(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, results.RunsDir))
	require.NoError(t, err)
	var ids []string
	for _, e := range entries {
		ids = append(ids, e.Name())
	}
	return ids
}

// TestIngestAgainExtendsItsOwnTree: the same ingest over the same folders, or
// over more of them, rewrites its tree with every run back; a changed mapping
// replaces the runs those folders gave before.
func TestIngestAgainExtendsItsOwnTree(t *testing.T) {
	root := t.TempDir()
	args := map[string]any{"per_device_train_batch_size": 2, "max_seq_length": 512}
	writeRun(t, root, "a", args, seedMetrics(16, 54.2, 5122))
	out := filepath.Join(root, "out")
	first, err := ingestSeeds(root, out)
	require.NoError(t, err)
	tree := filepath.Join(out, "seeds")

	writeRun(t, root, "b", args, seedMetrics(8, 4.7, 5076))
	again, err := ingestSeeds(root, out)
	require.NoError(t, err, "the same folders and one more")
	require.Len(t, again, 2)
	assert.ElementsMatch(t, []string{again[0].ID, again[1].ID}, runIDs(t, tree))
	assert.Contains(t, runIDs(t, tree), first[0].ID)
	man, err := (&results.SweepDir{Path: tree}).ReadManifest()
	require.NoError(t, err)
	assert.Len(t, man.Runs, 2, "the manifest lists both, not only the new one")

	// An ingest killed between a run's run_args.json and its metrics.json left
	// that run half written: the next ingest writes it, it does not refuse.
	half := filepath.Join(tree, results.RunsDir, "ws8-half-written")
	require.NoError(t, os.MkdirAll(half, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(half, results.RunArgsFile), []byte("{}"), 0o644))
	_, err = ingestSeeds(root, out)
	require.NoError(t, err)
	assert.NoDirExists(t, half)

	remapped, err := ingestSeeds(root, out, "seq_len=1024")
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{remapped[0].ID, remapped[1].ID}, runIDs(t, tree), "the old mapping's runs are gone")
}

// TestIngestRefusesToReplaceAnotherTree: ingesting into a sweep's tree, or into
// an ingest of other folders, is refused and leaves the tree as it was.
func TestIngestRefusesToReplaceAnotherTree(t *testing.T) {
	root := t.TempDir()
	out := filepath.Join(root, "out")
	tree := filepath.Join(out, "seeds")
	sd, err := results.OpenSweep(tree)
	require.NoError(t, err)
	rc := sweeps.RunConfig{Sweep: "seeds", Backend: "sim", Hardware: "h100-sxm", Model: "tiny", SeqLen: 16, Steps: 1,
		Nodes: 1, GPUsPerNode: 1, WorldSize: 1, BatchPerDevice: 1, GradAccum: 1, GlobalBatch: 1}
	rc.AssignID()
	require.NoError(t, sd.WriteRunArgs(rc))
	// A run the store accepts: metrics are checked where they enter (world_size ≥ 1).
	require.NoError(t, sd.WriteMetrics(rc.ID, results.Metrics{RunID: rc.ID, Status: results.StatusOK, WorldSize: rc.WorldSize}))
	require.NoError(t, sd.WriteSpec([]byte("name: seeds\nbackend: sim\n")))

	writeRun(t, root, "a", map[string]any{"per_device_train_batch_size": 2}, seedMetrics(8, 4.7, 5076))
	_, err = ingestSeeds(root, out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), tree+" already holds run "+rc.ID+", measured by a sweep")
	assert.Contains(t, err.Error(), "Choose another --name")
	spec, err := os.ReadFile(filepath.Join(tree, results.SpecFile))
	require.NoError(t, err)
	assert.Equal(t, "name: seeds\nbackend: sim\n", string(spec), "sweep.yaml untouched")
	assert.Equal(t, []string{rc.ID}, runIDs(t, tree))

	// An ingest of other folders is not replaced by this one either.
	other := t.TempDir()
	writeRun(t, other, "x", map[string]any{"per_device_train_batch_size": 4}, seedMetrics(8, 4.7, 5076))
	out2 := filepath.Join(root, "out2")
	_, err = ingestSeeds(other, out2)
	require.NoError(t, err)
	_, err = ingestSeeds(root, out2)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "which this ingest does not read (give that folder too)")
	_, err = Ingest(context.Background(), []string{filepath.Join(root, "results"), filepath.Join(other, "results")}, out2,
		Options{Name: "seeds", FSDPSharding: sweeps.FullShard, Set: []string{"hardware=h100-sxm", "model=mistral-7b", "gpus_per_node=8"}})
	require.NoError(t, err, "both folders: nothing is lost")
	assert.Len(t, runIDs(t, filepath.Join(out2, "seeds")), 2)
}

// TestIngestWaitsForTheTreesLock: an ingest into a tree another writer holds is
// refused at once with the holder, or waits for it with Wait.
func TestIngestWaitsForTheTreesLock(t *testing.T) {
	root := t.TempDir()
	writeRun(t, root, "a", map[string]any{"per_device_train_batch_size": 2}, seedMetrics(8, 4.7, 5076))
	out := filepath.Join(root, "out")
	sd, err := results.OpenSweep(filepath.Join(out, "seeds"))
	require.NoError(t, err)
	held, err := dirlock.Acquire(context.Background(), sd.Path, dirlock.Options{Command: []string{"fsdpbench", "sweep", "s.yaml"}})
	require.NoError(t, err)

	_, err = ingestSeeds(root, out)
	require.True(t, dirlock.IsHeld(err), "%v", err)
	assert.Contains(t, err.Error(), "(fsdpbench sweep s.yaml)")
	assert.Empty(t, runIDs(t, sd.Path), "nothing written")

	told := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := Ingest(context.Background(), []string{filepath.Join(root, "results")}, out, Options{Name: "seeds",
			FSDPSharding: sweeps.FullShard, Set: []string{"hardware=h100-sxm", "model=mistral-7b", "gpus_per_node=8"},
			Wait: true, OnWait: func(*dirlock.HeldError) { close(told) }})
		done <- err
	}()
	<-told
	require.NoError(t, held.Release())
	require.NoError(t, <-done)
	assert.Len(t, runIDs(t, sd.Path), 1)
}

// TestIngestNameIsADirectoryName: --name names a directory under --results; one
// that climbs out of it, or smuggles YAML into the spec, is refused.
func TestIngestNameIsADirectoryName(t *testing.T) {
	root := t.TempDir()
	writeRun(t, root, "a", map[string]any{"per_device_train_batch_size": 2}, seedMetrics(8, 4.7, 5076))
	out := filepath.Join(root, "out", "results")
	for _, name := range []string{"../escaped", "a/b", "x\nbackend: sim", ".."} {
		_, err := Ingest(context.Background(), []string{filepath.Join(root, "results")}, out, Options{Name: name, FSDPSharding: sweeps.FullShard})
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), "cannot name a results directory", name)
	}
	assert.NoDirExists(t, filepath.Join(root, "out"), "nothing written anywhere")
}
