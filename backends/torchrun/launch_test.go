package torchrun

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/<name>, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run `go test ./backends/torchrun -run %s -update` to create it", t.Name())
	assert.Equal(t, string(want), got)
}

func gpuRun() sweeps.RunConfig {
	return sweeps.RunConfig{ID: "ws8-bs2-full_shard-ac1-pre-0123abcd", Backend: Name, Hardware: "h100-sxm", Model: "llama-1b",
		SeqLen: 2048, Steps: 20, WarmupSteps: 3, Seed: 0, Nodes: 1, GPUsPerNode: 8, WorldSize: 8, BatchPerDevice: 2,
		GradAccum: 1, GlobalBatch: 16, Sharding: sweeps.FullShard, ActivationCheckpointing: true,
		BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.BF16, WrapPolicy: "transformer"}
}

func TestExpandTemplate(t *testing.T) {
	rc := gpuRun()
	vars := contract.Vars(rc, contract.Paths{RunDir: "/r", MetricsDir: "/r/ranks", OutputDir: "/r/output", ModelJSON: "/r/model.json"})
	tests := []struct {
		tmpl []string
		want []string
	}{
		{[]string{"--batch_size_per_device", "{batch_per_device}", "--seq={seq_len}"}, []string{"--batch_size_per_device", "2", "--seq=2048"}},
		{[]string{"{activation_checkpointing?--gradient_checkpointing}", "{cpu_offload?--offload}", "x"}, []string{"--gradient_checkpointing", "x"}},
		{[]string{"--strategy", "{sharding_upper}", "--out", "{output_dir}/m.json"}, []string{"--strategy", "FULL_SHARD", "--out", "/r/output/m.json"}},
		{[]string{"{{literal}}", "{bf16?--bf16}{fsdp?--fsdp}"}, []string{"{literal}", "--bf16--fsdp"}},
		{[]string{"--steps", "{total_steps}", "--ga", "{grad_accum}"}, []string{"--steps", "23", "--ga", "1"}},
	}
	for _, tc := range tests {
		got, err := contract.Expand("args", tc.tmpl, vars)
		require.NoError(t, err, "%q", tc.tmpl)
		assert.Equal(t, tc.want, got, "%q", tc.tmpl)
	}

	bad := []struct {
		tmpl []string
		want string
	}{
		{[]string{"--bs", "{batch_per_devce}"}, `args[1] "{batch_per_devce}": column 1: unknown placeholder {batch_per_devce} (did you mean {batch_per_device}?)`},
		{[]string{"--x={seq_len"}, `args[0] "--x={seq_len": column 5: '{' is never closed`},
		{[]string{"a}"}, `column 2: unmatched '}'`},
		{[]string{"{sharding?--x}"}, `{sharding?...} needs a boolean, and sharding is "full_shard"`},
	}
	for _, tc := range bad {
		_, err := contract.Expand("args", tc.tmpl, vars)
		require.Error(t, err, "%q", tc.tmpl)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(map[string]any{"launcher": "accelerate", "args": "--a {seq_len}  --b", "extra_args": []any{"--c", 3},
		"lr": 0.5, "fsdp_api": uint64(1), "rdzv_port": 1234, "state_dict_type": "full_state_dict"})
	require.NoError(t, err)
	assert.Equal(t, LauncherAccelerate, o.Launcher)
	assert.Equal(t, []string{"--a", "{seq_len}", "--b"}, o.Args)
	assert.Equal(t, []string{"--c", "3"}, o.ExtraArgs)
	assert.Equal(t, 0.5, o.LR)
	assert.Equal(t, 1, o.FSDPAPI)
	assert.Equal(t, 1234, o.RdzvPort)
	assert.Equal(t, "FULL_STATE_DICT", o.StateDictType)
	assert.Equal(t, DefaultPython, o.Python)
	assert.False(t, o.NoProfile, "the step breakdown is on unless turned off")
	o, err = ParseOptions(map[string]any{"profile": false})
	require.NoError(t, err)
	assert.True(t, o.NoProfile)

	for opts, want := range map[string]map[string]any{
		"backend_options.launcher: unknown launcher \"deepspeed\"":                                     {"launcher": "deepspeed"},
		"backend_options.fsdp_api: must be a whole number in [0, 2], got 3":                            {"fsdp_api": 3},
		"backend_options.lr: must be in (0, 10], got -1":                                               {"lr": -1.0},
		"backend_options.lr: must be a finite number":                                                  {"lr": math.Inf(1)},
		"backend_options.weight_decay: must be a finite number":                                        {"weight_decay": "NaN"},
		"backend_options.args: must be a list of strings":                                              {"args": 3},
		"backend_options.bogus: torchrun has no such option (did you mean \"logs\"?); known: launcher": {"bogus": true},
		"backend_options.scrpt: torchrun has no such option (did you mean \"script\"?)":                {"scrpt": "x.py"},
		"backend_options.rdzv_port: must be a whole number in [1, 65535]":                              {"rdzv_port": 1.5},
		"backend_options.profile:":                                                                     {"profile": "sometimes"},
		"backend_options.rdzv_port: must be a whole number in [1, 65535], got 0":                       {"rdzv_port": 0},
		"backend_options.logs: skip_steps: must be a whole number in [0, 1048576]":                     {"logs": map[string]any{"builtin": "iter", "skip_steps": 1e12}},
	} {
		_, err := ParseOptions(want)
		require.Error(t, err)
		assert.Contains(t, err.Error(), opts)
		assert.True(t, backends.IsSpecError(err), "%v is not a backends.SpecError", err)
	}
}

// TestCommandLines pins the launcher command lines and the generated accelerate
// configs in golden files: single node, a two-node torchrun as a job script runs
// it, and accelerate's FSDP1/FSDP2/DDP configs.
func TestCommandLines(t *testing.T) {
	rc := gpuRun()
	o, err := ParseOptions(nil)
	require.NoError(t, err)
	p := contract.Paths{RunDir: "/results/s/runs/x", MetricsDir: "/results/s/runs/x/ranks", OutputDir: "/results/s/runs/x/output",
		ModelJSON: "/results/s/runs/x/model.json"}
	args := ScriptArgs(rc, o, p)
	var sb strings.Builder
	sb.WriteString("# one node, standalone\n" + strings.Join(TorchrunArgv(rc, o, nil, "", "train.py", args), " ") + "\n")
	local := &Node{Nodes: 1, Rank: "0", Endpoint: "127.0.0.1:41234", ID: rc.ID}
	sb.WriteString("# one node, a rendezvous of its own (what Run uses)\n" + strings.Join(TorchrunArgv(rc, o, local, "/results/s/runs/x/torchelastic", "train.py", args), " ") + "\n")
	two := rc
	two.Nodes, two.GPUsPerNode, two.WorldSize, two.Sharding = 2, 8, 16, sweeps.HybridShard
	node := &Node{Nodes: 2, Rank: "$SLURM_NODEID", Endpoint: "gpu-001:29500", ID: "fsdpbench-x"}
	sb.WriteString("# two nodes, hybrid_shard\n" + strings.Join(TorchrunArgv(two, o, node, "/results/s/runs/x/torchelastic", "train.py", ScriptArgs(two, o, p)), " ") + "\n")
	sb.WriteString("# accelerate\n" + strings.Join(AccelerateArgv(o, nil, "/results/s/runs/x/accelerate_config.yaml", "train.py", []string{"--bs", "2"}), " ") + "\n")
	sb.WriteString("# accelerate, two nodes\n" + strings.Join(AccelerateArgv(o, node, "/results/s/runs/x/accelerate_config.yaml", "train.py", []string{"--bs", "2"}), " ") + "\n")
	golden(t, "argv.golden", sb.String())

	cfg, err := AccelerateConfig(rc, o)
	require.NoError(t, err)
	golden(t, "accelerate_fsdp1.golden", string(cfg))
	var parsed map[string]any
	require.NoError(t, yaml.Unmarshal(cfg, &parsed), "the config must be valid YAML")
	assert.Equal(t, "FSDP", parsed["distributed_type"])

	cfg, err = AccelerateConfig(two, o)
	require.NoError(t, err)
	golden(t, "accelerate_hybrid_2nodes.golden", string(cfg))

	o2 := o
	o2.AccelerateFSDPVersion = 2
	cfg, err = AccelerateConfig(rc, o2)
	require.NoError(t, err)
	golden(t, "accelerate_fsdp2.golden", string(cfg))
	_, err = AccelerateConfig(two, o2)
	assert.ErrorContains(t, err, "fsdp_version 2 expresses full_shard and shard_grad_op only")

	ddp := rc
	ddp.Sharding, ddp.Hardware, ddp.MixedPrecision, ddp.ActivationCheckpointing = sweeps.DDP, "cpu", sweeps.FP32, false
	cfg, err = AccelerateConfig(ddp, o)
	require.NoError(t, err)
	golden(t, "accelerate_ddp_cpu.golden", string(cfg))

	unknown := rc
	unknown.Model = "/nonexistent/config.json"
	_, err = AccelerateConfig(unknown, o)
	assert.ErrorContains(t, err, "set backend_options.layer_class")
}

// TestGPUExample keeps examples/gpu/torchrun-llama1b-1xh100.yaml (issue 4's GPU
// table, run where a GPU is) loadable: every run's options parse, its model's shape
// is known (for MFU), and its command line asks for what the table needs.
func TestGPUExample(t *testing.T) {
	plan, err := sweeps.Load("../../examples/gpu/torchrun-llama1b-1xh100.yaml", sweeps.Options{})
	require.NoError(t, err)
	require.Len(t, plan.Runs, 6)
	for _, rc := range plan.Runs {
		o, err := ParseOptions(rc.BackendOptions)
		require.NoError(t, err)
		assert.Equal(t, ModelTransformers, o.ModelImpl)
		shape, err := shapes.Lookup(rc.Model) // resolved against the spec's folder
		require.NoError(t, err)
		assert.Equal(t, int64(1_235_814_400), shape.Params(), "Llama 3.2 1B")
		args := strings.Join(ScriptArgs(rc, o, contract.Paths{}), " ")
		assert.Contains(t, args, "--model-impl transformers --hf-config "+rc.Model)
		assert.Contains(t, args, "--mixed-precision bf16")
		assert.Equal(t, rc.ActivationCheckpointing, strings.Contains(args, "--activation-checkpointing"))
	}
}
