package ingest

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// writeFile writes text at dir/name.
func writeFile(t *testing.T, dir, name, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644))
}

// TestIngestLayouts writes a run folder in each layout scripts leave (the
// Trainer's run_args with its fsdp string and fsdp_config, TrainingArguments'
// to_dict with fsdp as a list, an accelerate config YAML, a torchtitan job
// TOML, nanoGPT's config globals, Lightning's Trainer arguments) and checks the
// axes and figures the ingested run gets.
func TestIngestLayouts(t *testing.T) {
	metrics := func(ws int) map[string]any {
		return map[string]any{"wall_time_s": 10.0, "approx_tokens_per_rank": 20480, "world_size": ws}
	}
	type want struct {
		ws, nodes, gpn, bs, ga, seq, steps  int
		model, sharding, prefetch, wrap, mp string
		ac, offload, fwd, compile           bool
		fsdpExtra                           map[string]any
		mapped                              []string
	}
	for _, tc := range []struct {
		name  string
		args  map[string]any
		files map[string]string
		set   []string
		fsdp  string
		ws    int
		want  want
	}{
		{
			name: "HF Trainer run_args with the fsdp string and fsdp_config",
			args: map[string]any{"model_name_or_path": "mistralai/Mistral-7B-v0.1", "per_device_train_batch_size": 2,
				"gradient_accumulation_steps": 4, "max_seq_length": 1024, "max_steps": 50, "bf16": true, "seed": 42,
				"train_batch_size": 256, // DeepSpeed's global batch: not the Trainer state's per-device one
				"fsdp":             "full_shard auto_wrap", "fsdp_config": map[string]any{"backward_prefetch": "backward_post",
					"forward_prefetch": true, "activation_checkpointing": true, "state_dict_type": "SHARDED_STATE_DICT",
					"transformer_layer_cls_to_wrap": []any{"MistralDecoderLayer"}, "fsdp_version": 1}},
			set: []string{"gpus_per_node=8"}, ws: 16,
			want: want{ws: 16, nodes: 2, gpn: 8, bs: 2, ga: 4, seq: 1024, steps: 50, model: "mistral-7b", sharding: "full_shard",
				prefetch: "backward_post", wrap: "transformer", mp: "bf16", ac: true, fwd: true,
				fsdpExtra: map[string]any{"state_dict_type": "SHARDED_STATE_DICT", "version": 1.0, "transformer_layer_cls_to_wrap": []any{"MistralDecoderLayer"}},
				mapped: []string{"fsdp -> sharding=full_shard", "fsdp -> wrap_policy=transformer",
					"fsdp_config.activation_checkpointing -> activation_checkpointing=true",
					"model_name_or_path -> model=mistral-7b (Hugging Face id mistralai/Mistral-7B-v0.1)"}},
		},
		{
			name: "TrainingArguments.to_dict: fsdp as a list, min_num_params, offload",
			args: map[string]any{"model_name_or_path": "meta-llama/Meta-Llama-3-8B", "per_device_train_batch_size": 1,
				"max_seq_length": 2048, "fp16": true, "bf16": false,
				"fsdp": []any{"shard_grad_op", "offload", "auto_wrap"}, "fsdp_config": map[string]any{"min_num_params": 100000000, "xla": false}},
			ws: 4,
			want: want{ws: 4, nodes: 1, gpn: 4, bs: 1, ga: 1, seq: 2048, steps: 20, model: "llama3-8b", sharding: "shard_grad_op",
				prefetch: "backward_pre", wrap: "size:100000000", mp: "fp16", offload: true,
				mapped: []string{"fsdp -> cpu_offload=true", "fsdp_config.min_num_params -> wrap_policy=size:100000000", "fp16 -> mixed_precision=fp16"}},
		},
		{
			// TrainingArguments.to_dict() as a Trainer script dumps it: every
			// argument, unset ones as null, max_steps -1 when epochs decide.
			name: "TrainingArguments.to_dict with its defaults",
			args: map[string]any{"output_dir": "out", "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8,
				"gradient_accumulation_steps": 2, "max_steps": -1, "num_train_epochs": 3.0, "bf16": true, "fp16": false,
				"fsdp": []any{"full_shard", "auto_wrap"}, "fsdp_min_num_params": 0, "fsdp_transformer_layer_cls_to_wrap": nil,
				"fsdp_config": map[string]any{"min_num_params": 0, "xla": false, "xla_fsdp_v2": false, "xla_fsdp_grad_ckpt": false,
					"backward_prefetch": nil, "transformer_layer_cls_to_wrap": []any{"LlamaDecoderLayer"}, "activation_checkpointing": true},
				"deepspeed": nil, "gradient_checkpointing": false, "torch_compile": false, "seed": 42, "local_rank": -1,
				"model_name_or_path": "meta-llama/Llama-3.1-8B"},
			set: []string{"gpus_per_node=8"}, ws: 8,
			want: want{ws: 8, nodes: 1, gpn: 8, bs: 8, ga: 2, seq: 512, steps: 20, model: "llama3-8b", sharding: "full_shard",
				prefetch: "backward_pre", wrap: "transformer", mp: "bf16", ac: true,
				fsdpExtra: map[string]any{"transformer_layer_cls_to_wrap": []any{"LlamaDecoderLayer"}},
				mapped:    []string{"fsdp -> sharding=full_shard", "bf16 -> mixed_precision=bf16", "seed -> seed=42"}},
		},
		{
			name: "HF Trainer fsdp_config given as a JSON file",
			args: map[string]any{"model_name_or_path": "meta-llama/Llama-3.2-1B", "per_device_train_batch_size": 8,
				"fsdp": "hybrid_shard auto_wrap", "fsdp_config": "fsdp.json"},
			files: map[string]string{"fsdp.json": `{"fsdp_backward_prefetch": "backward_post", "fsdp_forward_prefetch": true, "fsdp_version": 1}`},
			set:   []string{"gpus_per_node=4"}, ws: 8,
			want: want{ws: 8, nodes: 2, gpn: 4, bs: 8, ga: 1, seq: 512, steps: 20, model: "llama-1b", sharding: "hybrid_shard",
				prefetch: "backward_post", wrap: "transformer", fwd: true, mp: "bf16",
				fsdpExtra: map[string]any{"version": 1.0},
				mapped:    []string{"fsdp_config.fsdp_backward_prefetch -> backward_prefetch=backward_post", "fsdp -> sharding=hybrid_shard"}},
		},
		{
			name: "accelerate config YAML beside run_args",
			args: map[string]any{"model_name_or_path": "codellama/CodeLlama-7b-hf", "per_device_batch_size": 4, "max_length": 512},
			files: map[string]string{"accelerate_config.yaml": `compute_environment: LOCAL_MACHINE
distributed_type: FSDP
num_machines: 2
num_processes: 16
mixed_precision: bf16
fsdp_config:
  fsdp_sharding_strategy: HYBRID_SHARD
  fsdp_offload_params: false
  fsdp_backward_prefetch: NO_PREFETCH
  fsdp_forward_prefetch: false
  fsdp_activation_checkpointing: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_version: 2
`, "notes.yaml": "just: notes\n"},
			ws: 16,
			want: want{ws: 16, nodes: 2, gpn: 8, bs: 4, ga: 1, seq: 512, steps: 20, model: "codellama-7b", sharding: "hybrid_shard",
				prefetch: "none", wrap: "transformer", mp: "bf16", ac: true,
				fsdpExtra: map[string]any{"state_dict_type": "SHARDED_STATE_DICT", "version": 2.0, "transformer_layer_cls_to_wrap": "LlamaDecoderLayer"},
				mapped: []string{"distributed_type -> sharding=hybrid_shard", "fsdp_config.fsdp_sharding_strategy -> sharding=hybrid_shard",
					"num_machines -> nodes=2", "num_processes -> world_size=16", "per_device_batch_size -> batch_per_device=4"}},
		},
		{
			name: "torchtitan job TOML",
			files: map[string]string{"llama3_8b.toml": `# torchtitan job config
[job]
dump_folder = "./outputs"
description = "Llama 3 8B [training]"

[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
seq_len = 8192
steps = 100
mixed_precision_param = "bfloat16"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
fsdp_reshard_after_forward = "never"

[activation_checkpoint]
mode = "full"

[compile]
enable = true
`},
			ws: 8,
			want: want{ws: 8, nodes: 1, gpn: 8, bs: 2, ga: 1, seq: 8192, steps: 100, model: "llama3-8b", sharding: "shard_grad_op",
				prefetch: "backward_pre", wrap: "transformer", mp: "bf16", ac: true, compile: true,
				mapped: []string{"model.name -> model=llama3-8b", "parallelism.fsdp_reshard_after_forward -> sharding=shard_grad_op",
					"training.local_batch_size -> batch_per_device=2", "compile.enable -> compile=true"}},
		},
		{
			name: "nanoGPT config globals",
			args: map[string]any{"batch_size": 12, "block_size": 1024, "gradient_accumulation_steps": 40, "max_iters": 600000,
				"dtype": "bfloat16", "compile": true, "n_layer": 12, "n_head": 12, "n_embd": 768, "init_from": "scratch"},
			set: []string{"model=gpt2-124m"}, fsdp: "", ws: 8,
			want: want{ws: 8, nodes: 1, gpn: 8, bs: 12, ga: 5, seq: 1024, steps: 600000, model: "gpt2-124m", sharding: "ddp",
				prefetch: "backward_pre", wrap: "transformer", mp: "bf16", compile: true,
				mapped: []string{"gradient_accumulation_steps -> grad_accum=5 (nanoGPT's global 40 ÷ world_size 8)", "block_size -> seq_len=1024", "max_iters -> steps=600000"}},
		},
		{
			name: "Lightning Trainer arguments",
			args: map[string]any{"devices": 4, "num_nodes": 2, "strategy": "fsdp", "sharding_strategy": "SHARD_GRAD_OP",
				"precision": "bf16-mixed", "accumulate_grad_batches": 2, "max_steps": 200, "batch_size": 8, "model": "llama-1b"},
			ws: 8,
			want: want{ws: 8, nodes: 2, gpn: 4, bs: 8, ga: 2, seq: 512, steps: 200, model: "llama-1b", sharding: "shard_grad_op",
				prefetch: "backward_pre", wrap: "transformer", mp: "bf16",
				mapped: []string{"devices -> gpus_per_node=4", "strategy -> sharding=shard_grad_op", "precision -> mixed_precision=bf16"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			m := metrics(tc.ws)
			if tc.name == "nanoGPT config globals" {
				m["fsdp"] = false
			}
			dir := writeRun(t, root, "run", tc.args, m)
			for name, text := range tc.files {
				writeFile(t, dir, name, text)
			}
			out := filepath.Join(root, "out")
			reports, err := Ingest(context.Background(), []string{dir}, out, Options{Name: "x", Set: tc.set, FSDPSharding: tc.fsdp})
			require.NoError(t, err)
			require.Len(t, reports, 1)
			for _, mp := range tc.want.mapped {
				assert.Contains(t, reports[0].Mapped, mp)
			}
			runs, err := results.Load(filepath.Join(out, "x"))
			require.NoError(t, err)
			require.Len(t, runs, 1)
			rc, met := runs[0].Config, runs[0].Metrics
			w := tc.want
			assert.Equal(t, []int{w.ws, w.nodes, w.gpn, w.bs, w.ga, w.seq, w.steps},
				[]int{rc.WorldSize, rc.Nodes, rc.GPUsPerNode, rc.BatchPerDevice, rc.GradAccum, rc.SeqLen, rc.Steps},
				"world_size, nodes, gpus_per_node, batch_per_device, grad_accum, seq_len, steps")
			assert.Equal(t, []string{w.model, w.sharding, w.prefetch, w.wrap, w.mp},
				[]string{rc.Model, rc.Sharding, rc.BackwardPrefetch, rc.WrapPolicy, rc.MixedPrecision})
			assert.Equal(t, []bool{w.ac, w.offload, w.fwd, w.compile},
				[]bool{rc.ActivationCheckpointing, rc.CPUOffload, rc.ForwardPrefetch, rc.Compile},
				"activation_checkpointing, cpu_offload, forward_prefetch, compile")
			require.NotNil(t, met.TokensPerSPerRank)
			assert.InDelta(t, 2048, *met.TokensPerSPerRank, 1e-9, "20480 tokens per rank over 10 s")
			assert.True(t, met.WholeRunWallTime)
			if w.fsdpExtra != nil {
				assert.Equal(t, w.fsdpExtra, met.Extra["fsdp"])
			}
		})
	}
}

// TestIngestFolderErrors: settings that cannot be read, or that two keys give
// differently, are errors that name the keys and say what to do.
func TestIngestFolderErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  map[string]any
		files map[string]string
		set   []string
		want  string
	}{
		{"two strategies in the fsdp string", map[string]any{"fsdp": "full_shard shard_grad_op"}, nil, nil,
			`fsdp (run_args.json): fsdp "full_shard shard_grad_op" names two sharding strategies`},
		{"an unknown fsdp option", map[string]any{"fsdp": "full_shard turbo"}, nil, nil,
			`fsdp option "turbo" is none of full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap`},
		{"hybrid_shard_zero2", map[string]any{"fsdp": "hybrid_shard_zero2"}, nil, nil,
			"HYBRID_SHARD_ZERO2 (shard_grad_op inside a node, replicated across) has no sharding axis value"},
		{"two keys disagree", map[string]any{"per_device_train_batch_size": 2},
			map[string]string{"job.toml": "[training]\nlocal_batch_size = 4\n"}, nil,
			"per_device_train_batch_size (run_args.json) gives batch_per_device=2 but training.local_batch_size (job.toml) gives 4; say which with --set batch_per_device=..."},
		{"selective checkpointing", nil, map[string]string{"job.toml": "[activation_checkpoint]\nmode = \"selective\"\n"}, nil,
			"selective activation checkpointing has no axis value"},
		{"a TOML syntax error", nil, map[string]string{"job.toml": "[training]\nseq_len = = 3\n"}, nil,
			"job.toml:2:11: not valid TOML"},
		{"TOML nested too deep", nil, map[string]string{"job.toml": "a = " + nest(40) + "\n"}, nil,
			"arrays and tables nest deeper than 16 levels"},
		// Issue 28: a 200 KB dotted key took the decoder 6 GB; bounded before it parses.
		{"TOML dotted key too deep", nil, map[string]string{"job.toml": strings.Repeat("a.", 2000) + "a = 1\n"}, nil,
			"job.toml:1:34: dotted keys and table headers nest deeper than 16 levels"},
		{"TOML table header too deep", nil, map[string]string{"job.toml": "[" + strings.Repeat("a.", 2000) + "a]\nx = 1\n"}, nil,
			"job.toml:1:33: dotted keys and table headers nest deeper than 16 levels"},
		{"TOML dotted key in an inline table too deep", nil, map[string]string{"job.toml": "x = {" + strings.Repeat("b . ", 20) + "c = 1}\n"}, nil,
			"dotted keys and table headers nest deeper than 16 levels"},
		{"nanoGPT accumulation that the world size does not divide", map[string]any{"gradient_accumulation_steps": 5, "max_iters": 10}, nil, nil,
			"5 does not divide by world_size 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := writeRun(t, root, "run", tc.args, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
			for name, text := range tc.files {
				writeFile(t, dir, name, text)
			}
			_, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x", Set: tc.set, FSDPSharding: sweeps.FullShard})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// The same conflict with --set for the axis is no error: --set says which.
	root := t.TempDir()
	dir := writeRun(t, root, "run", map[string]any{"per_device_train_batch_size": 2}, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
	writeFile(t, dir, "job.toml", "[training]\nlocal_batch_size = 4\n[activation_checkpoint]\nmode = \"selective\"\n")
	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x",
		Set: []string{"batch_per_device=4", "activation_checkpointing=true"}})
	require.NoError(t, err)
	assert.Contains(t, reports[0].Overridden, "per_device_train_batch_size (run_args.json)=2 -> --set batch_per_device=4")
	assert.Contains(t, reports[0].Overridden, `activation_checkpoint.mode (job.toml)="selective" -> --set activation_checkpointing=true`)
}

// nest is n nested TOML arrays.
func nest(n int) string {
	s := "1"
	for range n {
		s = "[" + s + "]"
	}
	return s
}

// TestIngestModelFromConfig: a model value that is no preset and no known id is
// read from a config.json: one in a local Hugging Face cache (written here as
// huggingface_hub lays it out), as the preset of the same dimensions or as the
// file's path; a value found nowhere stays a label, with a warning.
func TestIngestModelFromConfig(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HF_HUB_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HF_HOME", home)
	cached := func(id, body string) string {
		org, name, _ := strings.Cut(id, "/")
		dir := filepath.Join(home, "hub", "models--"+org+"--"+name, "snapshots", "0123abcd")
		writeFile(t, dir, "config.json", body)
		return filepath.Join(dir, "config.json")
	}
	tinyDims := `{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
		"num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 1024}`
	cached("acme/tiny-clone", tinyDims)
	wide := cached("acme/Wide-1B", `{"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16,
		"intermediate_size": 5504, "vocab_size": 32000, "max_position_embeddings": 4096}`)
	for _, tc := range []struct {
		model, want, mapped, warning string
	}{
		{"acme/tiny-clone", "tiny", "model_name -> model=tiny (the shape of ", ""},
		{"acme/Wide-1B", wide, "model_name -> model=" + wide + " (config.json " + wide + ")", ""},
		{"acme/Unknown-9B", "acme/Unknown-9B", "model_name -> model=acme/Unknown-9B", `model "acme/Unknown-9B" is no preset, no known Hugging Face id, and no config.json of it was found`},
	} {
		t.Run(tc.model, func(t *testing.T) {
			root := t.TempDir()
			dir := writeRun(t, root, "run", map[string]any{"model_name": tc.model},
				map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 1})
			reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x"})
			require.NoError(t, err)
			runs, err := results.Load(filepath.Join(root, "out", "x"))
			require.NoError(t, err)
			assert.Equal(t, tc.want, runs[0].Config.Model)
			found := false
			for _, m := range reports[0].Mapped {
				found = found || strings.HasPrefix(m, tc.mapped)
			}
			assert.True(t, found, "%v", reports[0].Mapped)
			if tc.warning != "" {
				require.Len(t, reports[0].Warnings, 1)
				assert.Contains(t, reports[0].Warnings[0], tc.warning)
			} else {
				assert.Empty(t, reports[0].Warnings)
			}
		})
	}

	// A run folder's own config.json (as a Trainer saves the model) gives the
	// model when no key does.
	root := t.TempDir()
	dir := writeRun(t, root, "run", nil, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 1})
	writeFile(t, dir, "config.json", tinyDims)
	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x"})
	require.NoError(t, err)
	assert.Contains(t, reports[0].Mapped, "config.json -> model=tiny (the shape of "+filepath.Join(dir, "config.json")+")")
}

// TestIngestFSDPWithoutStrategy: a folder that says only `fsdp: true` needs
// --fsdp-sharding; accelerate's distributed_type FSDP and Lightning's strategy
// fsdp without a sharding_strategy are those tools' default, FULL_SHARD.
func TestIngestFSDPWithoutStrategy(t *testing.T) {
	for _, tc := range []struct {
		args  map[string]any
		files map[string]string
	}{
		{map[string]any{"strategy": "fsdp"}, nil},
		{nil, map[string]string{"acc.yaml": "distributed_type: FSDP\nnum_processes: 2\n"}},
		{map[string]any{"fsdp": true, "strategy": "fsdp"}, nil},
	} {
		root := t.TempDir()
		dir := writeRun(t, root, "run", tc.args, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
		for name, text := range tc.files {
			writeFile(t, dir, name, text)
		}
		reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x"})
		require.NoError(t, err)
		found := false
		for _, m := range reports[0].Mapped {
			found = found || strings.HasSuffix(m, "-> sharding=full_shard (FSDP without a sharding_strategy: the tool's default FULL_SHARD)")
		}
		assert.True(t, found, "%v", reports[0].Mapped)
	}

	for _, tc := range []struct {
		args  map[string]any
		files map[string]string
		want  string
	}{
		{map[string]any{"fsdp": true}, nil, "fsdp: true does not say which strategy; give it with --fsdp-sharding"},
		{map[string]any{"fsdp": "True"}, nil, "fsdp: true does not say which strategy; give it with --fsdp-sharding"},
		{map[string]any{"devices": "auto", "strategy": "fsdp"}, nil, `devices (run_args.json): gpus_per_node must be a whole number, got "auto" (an explicit --set gpus_per_node=... replaces the folder's value)`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			root := t.TempDir()
			dir := writeRun(t, root, "run", tc.args, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
			for name, text := range tc.files {
				writeFile(t, dir, name, text)
			}
			_, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x"})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x",
				FSDPSharding: "shard_grad_op", Set: []string{"gpus_per_node=2"}})
			require.NoError(t, err, "with --fsdp-sharding and --set it is read")
			assert.NotEmpty(t, reports[0].ID)
		})
	}
}

// TestIngestMapReadsValuesAsTheAxis: a key mapped with --map is read as its
// axis's own key would be (FULL_SHARD is full_shard).
func TestIngestMapReadsValuesAsTheAxis(t *testing.T) {
	root := t.TempDir()
	dir := writeRun(t, root, "run", map[string]any{"my_strategy": "FULL_SHARD", "my_prec": "bf16-mixed", "my_bs": 3},
		map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x",
		Map: map[string]string{"my_strategy": "sharding", "my_prec": "mixed_precision", "my_bs": "batch_per_device"}})
	require.NoError(t, err)
	assert.Subset(t, reports[0].Mapped, []string{"my_strategy -> sharding=full_shard", "my_prec -> mixed_precision=bf16", "my_bs -> batch_per_device=3"})
}

// TestTOMLDottedNamesWithinTheBoundIngest: the dotted-key bound leaves real
// configs alone: a 16-level key and header, floats, dates and dotted strings.
func TestTOMLDottedNamesWithinTheBoundIngest(t *testing.T) {
	root := t.TempDir()
	dir := writeRun(t, root, "run", nil, map[string]any{"wall_time_s": 1.0, "approx_tokens_per_rank": 100, "world_size": 2})
	writeFile(t, dir, "job.toml", "["+strings.Repeat("s.", 15)+"t]\n"+strings.Repeat("k.", 15)+"v = 1.5\n"+
		"[training]\nlocal_batch_size = 4\nlr = [1.5e-4, 2.5, 3.25]\nwhen = 2026-11-27T10:00:00.123Z\nname = \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r.s\"\n")
	reports, err := Ingest(context.Background(), []string{dir}, filepath.Join(root, "out"), Options{Name: "x", FSDPSharding: sweeps.FullShard})
	require.NoError(t, err)
	require.Len(t, reports, 1)
	assert.Contains(t, reports[0].Files, "job.toml")
}

// TestFlattenIsLinear: flattening a deep object allocated the key of every level
// afresh (quadratic: 10,000 levels took hundreds of MB); now the leaf's key once.
func TestFlattenIsLinear(t *testing.T) {
	const depth = 10_000
	m := map[string]any{"a": 1.0}
	for range depth {
		m = map[string]any{"a": m}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out := flatten("", m, "x.toml")
	runtime.ReadMemStats(&after)
	require.Len(t, out, 1)
	assert.Len(t, out[0].key, 2*(depth+1)-1)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(8<<20), "bytes allocated flattening %d levels", depth)
}
