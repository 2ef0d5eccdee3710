package ingest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// FuzzIngestFolder writes a past run's folder (run_args.json and metrics.json)
// from the fuzzer's bytes and ingests it: it must never panic or hang, and a
// folder it accepts must load back as a run with an ID.
func FuzzIngestFolder(f *testing.F) {
	good := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	args := map[string]any{"per_device_train_batch_size": 2, "max_seq_length": 512, "gradient_checkpointing": true}
	f.Add(good(args), good(seedMetrics(16, 54.2, 5122)))
	f.Add([]byte(`{}`), good(seedMetrics(8, 4.7, 5076)))
	f.Add([]byte(`{"max_seq_length": 1000000000, "per_device_train_batch_size": 1e12}`), good(seedMetrics(1000000000000, 1, 1)))
	f.Add([]byte(`{"a": `+strings.Repeat("[", 10_000)), []byte(`{"wall_time_s": NaN}`))
	f.Add([]byte("\ufeff{\"max_seq_length\": 2048.0}"), []byte(`{"wall_time_s": -1, "approx_tokens_per_rank": 1e308, "world_size": 0}`))
	f.Add([]byte(`null`), []byte(`[]`))
	f.Fuzz(func(t *testing.T, runArgs, metrics []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "in", "run")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, RunArgsFile), runArgs, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "metrics.json"), metrics, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(root, "out")
		reports, err := Ingest(context.Background(), []string{filepath.Join(root, "in")}, out, Options{Name: "fuzz", FSDPSharding: sweeps.FullShard,
			Now: func() time.Time { return time.Unix(0, 0) }})
		if err != nil {
			if len(err.Error()) > 4096 {
				t.Fatalf("a %d-byte error message", len(err.Error()))
			}
			return
		}
		if len(reports) != 1 || reports[0].ID == "" {
			t.Fatalf("one folder gave %d reports: %+v", len(reports), reports)
		}
		runs, err := results.Load(filepath.Join(out, "fuzz"))
		if err != nil {
			t.Fatalf("the ingested tree does not load: %v", err)
		}
		if len(runs) != 1 || runs[0].Config.ID != reports[0].ID {
			t.Fatalf("loaded %d runs, want the one ingested (%s)", len(runs), reports[0].ID)
		}
	})
}

// TestIngestErrorsDoNotEchoInput is issue 13 §7 for ingest: a run_args.json value
// that is a long list made a 14 KB error message.
func TestIngestErrorsDoNotEchoInput(t *testing.T) {
	root := t.TempDir()
	long := make([]any, 3000)
	for i := range long {
		long[i] = i
	}
	writeRun(t, root, "r", map[string]any{"max_seq_length": long}, seedMetrics(1, 1, 1))
	_, err := Ingest(context.Background(), []string{root}, filepath.Join(root, "out"), Options{Name: "x", FSDPSharding: sweeps.FullShard})
	if err == nil {
		t.Fatal("a list for max_seq_length was accepted")
	}
	if len(err.Error()) > 400 || !strings.Contains(err.Error(), "bytes in all") {
		t.Fatalf("a %d-byte error: %.400s", len(err.Error()), err)
	}
}

// FuzzIngestConfigsAndTrainer writes a Trainer output_dir (trainer_state.json,
// all_results.json) with a torchtitan TOML and an accelerate YAML beside it,
// from the fuzzer's bytes, and ingests it: never a panic or a hang, and a
// folder it accepts loads back as one run.
func FuzzIngestConfigsAndTrainer(f *testing.F) {
	f.Add([]byte("[training]\nlocal_batch_size = 2\nseq_len = 64\n[model]\nname = \"llama3\"\nflavor = \"8B\"\n"),
		[]byte("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: 1\n"),
		[]byte(`{"train_batch_size": 2, "global_step": 10, "max_steps": 10, "log_history": [{"loss": 2.0, "step": 5}]}`),
		[]byte(`{"train_runtime": 10.0, "train_samples_per_second": 2.0, "train_tokens_per_second": 128.0}`))
	f.Add([]byte("a = [[[[1]]]]\n"), []byte("fsdp_config: {fsdp_backward_prefetch: BACKWARD_POST}\n"),
		[]byte(`{"train_batch_size": 1e300, "max_steps": -1}`), []byte(`{"train_runtime": 1e-300, "train_samples_per_second": 1e300}`))
	// Dotted keys and headers, deep (issue 28: 100,000 levels took 6 GB) and within
	// the bound, with quoted and spaced segments.
	f.Add([]byte(strings.Repeat("a.", 100_000)+"a = 1\n"), []byte("{}"), []byte(`{}`), []byte(`{}`))
	f.Add([]byte("["+strings.Repeat("a.", 30_000)+"a]\nb = 2\n"), []byte("{}"), []byte(`{}`), []byte(`{}`))
	f.Add([]byte("training . \"local.batch\" . 'x.y' = 2.5\n[a . b.\"c\"]\nd.e = {f.g = 1979-05-27T07:32:00.5Z}\n"), []byte("{}"), []byte(`{}`), []byte(`{}`))
	f.Add([]byte("x = \"\"\"[[[\"\"\"\n"), []byte("num_processes: 2\n"), []byte(`{"log_history": [null, 1, {"loss": "NaN"}]}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, toml, yaml, state, res []byte) {
		root := t.TempDir()
		dir := filepath.Join(root, "in", "run")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string][]byte{"job.toml": toml, "accelerate.yaml": yaml, TrainerStateFile: state, TrainerAllResults: res} {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(root, "out")
		reports, err := Ingest(context.Background(), []string{filepath.Join(root, "in")}, out, Options{Name: "fuzz", FSDPSharding: sweeps.FullShard,
			Set: []string{"world_size=1"}, Now: func() time.Time { return time.Unix(0, 0) }})
		if err != nil {
			if len(err.Error()) > 4096 {
				t.Fatalf("a %d-byte error message", len(err.Error()))
			}
			return
		}
		runs, err := results.Load(filepath.Join(out, "fuzz"))
		if err != nil {
			t.Fatalf("the ingested tree does not load: %v", err)
		}
		if len(runs) != 1 || runs[0].Config.ID != reports[0].ID {
			t.Fatalf("loaded %d runs, want the one ingested", len(runs))
		}
	})
}
