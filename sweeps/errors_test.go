package sweeps

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// specError parses spec and returns its one *SpecError (failing on no error or several).
func specError(t *testing.T, spec string, opts Options) *SpecError {
	t.Helper()
	plan, err := Parse([]byte(spec), "spec.yaml", opts)
	require.Error(t, err, "plan: %+v", plan)
	var se *SpecError
	require.ErrorAs(t, err, &se)
	var many SpecErrors
	require.False(t, errors.As(err, &many), "want one error, got:\n%v", err)
	return se
}

func TestSpecErrors(t *testing.T) {
	tests := []struct {
		name      string
		spec      string
		opts      Options
		line, col int
		want      string // the message, or a part of it
		exact     bool
	}{
		{
			name: "typo in a value",
			spec: "name: x\ngrid:\n  sharding: [full_shrad, ddp]\n",
			line: 3, col: 14, exact: true,
			want: `unknown sharding "full_shrad" (allowed: full_shard, shard_grad_op, hybrid_shard, no_shard, ddp; did you mean full_shard?)`,
		},
		{
			name: "typo in a base value",
			spec: "name: x\nbase:\n  backward_prefetch: backwards_pre\n",
			line: 3, col: 22,
			want: `unknown backward_prefetch "backwards_pre" (allowed: backward_pre, backward_post, none; did you mean backward_pre?)`, exact: true,
		},
		{
			name: "unknown mixed precision",
			spec: "name: x\nbase: {mixed_precision: bf32}\n",
			line: 2, col: 25,
			want: `unknown mixed_precision "bf32" (allowed: bf16, fp16, fp32; did you mean bf16?)`, exact: true,
		},
		{
			name: "unknown top-level key suggests the axis",
			spec: "name: x\ngrad_acum: 2\n",
			line: 2, col: 1,
			want: `unknown key "grad_acum" (allowed: name, backend, launcher, hardware, model, seq_len, steps, warmup_steps, repeats, timeout, seed, base, grid, exclude, include, search, backend_options, launcher_options, env; did you mean grad_accum? (an axis: put it under base: or grid:))`, exact: true,
		},
		{
			name: "unknown top-level key suggests a key",
			spec: "name: x\nwarmup_step: 2\n",
			line: 2, col: 1, want: "did you mean warmup_steps?",
		},
		{
			name: "axis at the top level",
			spec: "name: x\nworld_size: 8\n",
			line: 2, col: 1, want: "world_size is an axis, not a top-level key: put it under base:",
		},
		{
			name: "unknown axis in grid",
			spec: "name: x\ngrid:\n  grad_acum: [1, 2]\n",
			line: 3, col: 3, want: `unknown axis "grad_acum" in grid (allowed: nodes, gpus_per_node, world_size, batch_per_device, grad_accum, global_batch, seq_len, model, sharding, activation_checkpointing, backward_prefetch, forward_prefetch, cpu_offload, mixed_precision, wrap_policy, compile, hardware, seed, checkpoint, checkpoint_every, resume_check; did you mean grad_accum?)`, exact: true,
		},
		{
			name: "unknown key in base",
			spec: "name: x\nbase:\n  shardin: ddp\n",
			line: 3, col: 3, want: `unknown key "shardin" in base`,
		},
		{
			name: "unknown axis in exclude",
			spec: "name: x\ngrid: {sharding: [ddp, no_shard]}\nexclude:\n  - {shardng: ddp}\n",
			line: 4, col: 6, want: `unknown axis "shardng" in exclude`,
		},
		{
			name: "typo in an exclude value",
			spec: "name: x\ngrid: {sharding: [ddp, no_shard]}\nexclude:\n  - {sharding: no_shrd}\n",
			line: 4, col: 16, want: `unknown sharding "no_shrd"`,
		},
		{
			name: "measurement setting as an axis",
			spec: "name: x\ngrid:\n  steps: [10, 20]\n",
			line: 3, col: 3, want: "steps cannot be an axis: run IDs name the training configuration and leave steps out",
		},
		{
			name: "backend as an axis",
			spec: "name: x\ngrid:\n  backend: [sim, gotrain]\n",
			line: 3, col: 3, want: "backend cannot vary inside a sweep",
		},
		{
			name: "hybrid_shard on one node from two axes",
			spec: "name: x\nbase: {gpus_per_node: 8}\ngrid:\n  nodes: [1, 2]\n  sharding: [full_shard, hybrid_shard]\n",
			line: 5, col: 26, exact: true,
			want: "hybrid_shard needs nodes >= 2 (it shards inside a node and replicates across nodes), but this point has nodes 1 (at 4:11) (grid point {nodes: 1, sharding: hybrid_shard}); drop such points with `exclude: [{sharding: hybrid_shard, nodes: 1}]`",
		},
		{
			name: "hybrid_shard on one node through a derived value",
			spec: "name: x\nbase:\n  world_size: 8\n  sharding: hybrid_shard\n",
			line: 4, col: 13, exact: true,
			want: "hybrid_shard needs nodes >= 2 (it shards inside a node and replicates across nodes), but this point has nodes 1 (world_size alone means one node); use full_shard on one node, or give nodes >= 2 (e.g. nodes: 2 with gpus_per_node: 8)",
		},
		{
			name: "hybrid_shard in an include",
			spec: "name: x\ninclude:\n  - {sharding: hybrid_shard, world_size: 8}\n",
			line: 3, col: 16, want: "hybrid_shard needs nodes >= 2",
		},
		{
			name: "world size not divisible by gpus per node",
			spec: "name: x\nbase:\n  world_size: 6\n  gpus_per_node: 4\n",
			line: 3, col: 15, exact: true,
			want: "world_size 6 is not a whole number of nodes of gpus_per_node 4 (at 4:18); use a multiple of 4 such as 4 or 8, or give nodes instead",
		},
		{
			name: "inconsistent nodes, gpus per node and world size",
			spec: "name: x\nbase: {nodes: 2, gpus_per_node: 8, world_size: 8}\n",
			line: 2, col: 48, want: "world_size 8 does not equal nodes × gpus_per_node = 2 × 8 = 16",
		},
		{
			name: "world size not divisible by nodes",
			spec: "name: x\ngrid:\n  nodes: [3]\n  world_size: [8]\n",
			line: 4, col: 16, want: "world_size 8 cannot be split evenly over nodes 3 (at 3:11); use a multiple of 3 such as 6 or 9",
		},
		{
			name: "nodes alone",
			spec: "name: x\nbase: {nodes: 2}\n",
			line: 2, col: 15, want: "nodes 2 needs gpus_per_node (or world_size) too",
		},
		{
			name: "global batch not divisible by world size",
			spec: "name: x\nbase:\n  world_size: 8\n  global_batch: 100\n",
			line: 4, col: 17, exact: true,
			want: "global_batch 100 is not a multiple of world_size 8, so the ranks cannot share it evenly; use a global_batch such as 96 or 104",
		},
		{
			name: "global batch not divisible by the batch per device",
			spec: "name: x\nbase:\n  world_size: 8\n  batch_per_device: 5\n  global_batch: 96\n",
			line: 5, col: 17, exact: true,
			want: "global_batch 96 gives 12 samples per rank at world_size 8, which batch_per_device 5 (at 4:21) does not divide, so grad_accum would not be whole; use batch_per_device 1, 2, 3, 4, 6, 12, or a global_batch such as 80 or 120",
		},
		{
			name: "global batch, grad accum and batch inconsistent",
			spec: "name: x\nbase:\n  world_size: 8\n  batch_per_device: 5\n  global_batch: 96\n  grad_accum: 2\n",
			line: 5, col: 17, want: "global_batch 96 does not equal world_size × batch_per_device × grad_accum = 8 × 5 × 2 = 80",
		},
		{
			name: "global batch and grad accum without a whole batch",
			spec: "name: x\nbase: {world_size: 4, grad_accum: 3, global_batch: 20}\n",
			line: 2, col: 52, want: "global_batch 20 is not a multiple of world_size × grad_accum = 4 × 3 = 12, so batch_per_device would not be whole",
		},
		{
			name: "zero world size",
			spec: "name: x\nbase:\n  world_size: 0\n",
			line: 3, col: 15, want: "world_size must be a positive integer (at most 131072), got 0", exact: true,
		},
		{
			name: "negative batch in a grid",
			spec: "name: x\ngrid:\n  batch_per_device: [1, -2]\n",
			line: 3, col: 25, want: "batch_per_device must be a positive integer (at most 65536), got -2", exact: true,
		},
		{
			name: "zero steps",
			spec: "name: x\nsteps: 0\n",
			line: 2, col: 8, want: "steps must be a positive integer (at most 1000000), got 0", exact: true,
		},
		{
			name: "negative warmup",
			spec: "name: x\nwarmup_steps: -1\n",
			line: 2, col: 15, want: "warmup_steps must be an integer from 0 to 1000000, got -1", exact: true,
		},
		{
			name: "string where a number is expected",
			spec: "name: x\nbase:\n  world_size: \"8\"\n",
			line: 3, col: 15, want: `world_size must be a positive integer (at most 131072), got the string "8" (remove the quotes)`, exact: true,
		},
		{
			name: "float where an integer is expected",
			spec: "name: x\nseq_len: 512.5\n",
			line: 2, col: 10, want: "seq_len must be a positive integer (at most 16777216), got the number 512.5", exact: true,
		},
		{
			name: "yes is not a boolean",
			spec: "name: x\nbase:\n  activation_checkpointing: yes\n",
			line: 3, col: 29, want: `activation_checkpointing must be true or false, got the string "yes"`, exact: true,
		},
		{
			name: "list where one value is expected",
			spec: "name: x\nbase:\n  sharding: [ddp, no_shard]\n",
			line: 3, col: 13, want: "base gives one value per key, but sharding has a list; to try several, move it to grid:",
		},
		{
			name: "number where a name is expected",
			spec: "name: x\nmodel: 7\n",
			line: 2, col: 8, want: "model must be a model preset name or a path to a config.json, got 7 (quote it if you mean a name)",
		},
		{
			name: "timeout without a unit",
			spec: "name: x\ntimeout: 10\n",
			line: 2, col: 10, want: "timeout must be a Go duration such as 30m or 90s, got 10 (add a unit: 10s or 10m)", exact: true,
		},
		{
			name: "bad timeout",
			spec: "name: x\ntimeout: 10 minutes\n",
			line: 2, col: 10, want: `timeout must be a positive Go duration such as 30m, 90s or 1h30m, at most 720h (30 days), got "10 minutes"`, exact: true,
		},
		{
			name: "unknown launcher",
			spec: "name: x\nlauncher: slurn\n",
			line: 2, col: 11, want: `unknown launcher "slurn" (allowed: local, slurm; did you mean slurm?)`, exact: true,
		},
		{
			name: "script launcher at the top level",
			spec: "name: x\nlauncher: python\n",
			line: 2, col: 11, want: `unknown launcher "python" (allowed: local, slurm); launcher says where runs go; how the torchrun backend starts a script is backend_options.launcher: python`, exact: true,
		},
		{
			name: "bad wrap policy",
			spec: "name: x\nbase: {wrap_policy: size:lots}\n",
			line: 2, col: 21, want: `wrap_policy "size:lots": the size must be a number of parameters`,
		},
		{
			name: "unknown wrap policy",
			spec: "name: x\nbase: {wrap_policy: transfomer}\n",
			line: 2, col: 21, want: `unknown wrap_policy "transfomer" (allowed: transformer, or size:<min params> such as size:100000000 or size:100M; did you mean transformer?)`, exact: true,
		},
		{
			name: "duplicate key",
			spec: "name: x\nseq_len: 1024\nsteps: 5\nseq_len: 2048\n",
			line: 4, col: 1, want: `duplicate key "seq_len" (first at 2:1); keep one of them`, exact: true,
		},
		{
			name: "duplicate key in a grid",
			spec: "name: x\ngrid:\n  sharding: [ddp]\n  sharding: [no_shard]\n",
			line: 4, col: 3, want: `duplicate key "sharding" (first at 3:3)`,
		},
		{
			name: "value listed twice",
			spec: "name: x\ngrid:\n  wrap_policy: [transformer, size:100M, size:100000000]\n",
			line: 3, col: 41, want: "wrap_policy size:100000000 is listed twice in the grid (first at 3:30); remove one", exact: true,
		},
		{
			name: "empty grid axis",
			spec: "name: x\ngrid:\n  sharding: []\n",
			line: 3, col: 13, want: "grid axis sharding has no values",
		},
		{
			name: "axis both in grid and base",
			spec: "name: x\nbase: {sharding: ddp}\ngrid:\n  sharding: [ddp, no_shard]\n",
			line: 4, col: 3, want: "sharding is a grid axis and also has one value at 2:8; keep one",
		},
		{
			name: "setting both at the top level and in base",
			spec: "name: x\nseq_len: 128\nbase: {seq_len: 256}\n",
			line: 3, col: 8, want: "seq_len is set both at the top level (2:1) and under base; keep one",
		},
		{
			name: "everything excluded",
			spec: "name: x\ngrid:\n  sharding: [ddp, no_shard]\nexclude:\n  - {sharding: [ddp, no_shard]}\n",
			line: 4, col: 1, exact: true,
			want: "exclude drops all 2 points of the grid and there is no include, so there is nothing to run; remove or narrow an exclude entry",
		},
		{
			name: "empty exclude entry",
			spec: "name: x\nexclude:\n  - {}\n",
			line: 3, col: 5, want: "an empty exclude entry",
		},
		{
			name: "include with a list",
			spec: "name: x\ninclude:\n  - {world_size: [1, 2]}\n",
			line: 3, col: 18, want: "an include entry gives one value per axis, but world_size has a list; add one entry per value",
		},
		{
			name: "search of another axis",
			spec: "name: x\nsearch:\n  seq_len: max_fit\n",
			line: 3, col: 3, want: "search supports one form: `search: {batch_per_device: max_fit}`",
		},
		{
			name: "unknown search mode",
			spec: "name: x\nsearch:\n  batch_per_device: maxfit\n",
			line: 3, col: 21, want: `unknown search mode "maxfit" for batch_per_device (allowed: max_fit; did you mean max_fit?)`, exact: true,
		},
		{
			name: "search with a fixed global batch",
			spec: "name: x\nbase: {global_batch: 64}\nsearch: {batch_per_device: max_fit}\n",
			line: 2, col: 8, want: "global_batch cannot be fixed while search doubles batch_per_device",
		},
		{
			name: "missing name",
			spec: "grid: {sharding: [ddp]}\n",
			line: 1, col: 1, want: "the spec needs a name (results go to <results-dir>/<name>/); add e.g. `name: spec`", exact: true,
		},
		{
			name: "unsafe name",
			spec: "name: ../results\n",
			line: 1, col: 7, want: `name "../results" cannot name a results directory`,
		},
		{
			name: "not a mapping",
			spec: "- name: x\n",
			line: 1, col: 1, want: "a spec is a mapping of keys",
		},
		{
			name: "empty file",
			spec: "# nothing\n",
			line: 1, col: 1, want: "the spec is empty",
		},
		{
			name: "two documents",
			spec: "name: a\n---\nname: b\n",
			line: 3, col: 5, want: "a spec holds one YAML document",
		},
		{
			name: "backend options not a mapping",
			spec: "name: x\nbackend_options: [1]\n",
			line: 2, col: 18, want: "backend_options must be a mapping of option: value",
		},
		{
			name: "unknown alias",
			spec: "name: x\nbase: *nothing\n",
			line: 2, col: 7, want: "alias *nothing refers to no anchor",
		},
		{
			name: "custom tag",
			spec: "name: x\nseq_len: !big 5\n",
			line: 2, col: 10, want: "unsupported tag !big",
		},
		{
			name: "model refused by the callback",
			spec: "name: x\ngrid:\n  model: [tiny, llama-9b]\n",
			opts: Options{CheckModel: knownOnly("tiny", "llama-1b")},
			line: 3, col: 17,
			want:  `model "llama-9b": unknown (known: tiny, llama-1b)`,
			exact: true,
		},
		{
			name: "hardware refused by the callback",
			spec: "name: x\nhardware: h100\n",
			opts: Options{CheckHardware: knownOnly("h100-sxm")},
			line: 2, col: 11, want: `hardware "h100": unknown (known: h100-sxm)`,
		},
		{
			name: "backend refused by the callback",
			spec: "name: x\nbackend: torch\n",
			opts: Options{CheckBackend: knownOnly("sim", "torchrun")},
			line: 2, col: 10, want: `backend "torch": unknown (known: sim, torchrun)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := specError(t, tt.spec, tt.opts)
			assert.Equal(t, "spec.yaml", se.File)
			assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{se.Line, se.Column}, "position of: %s", se.Msg)
			if tt.exact {
				assert.Equal(t, tt.want, se.Msg)
			} else {
				assert.Contains(t, se.Msg, tt.want)
			}
			assert.Equal(t, fmt.Sprintf("spec.yaml:%d:%d: %s", se.Line, se.Column, se.Msg), se.Error())
		})
	}
}

func knownOnly(names ...string) func(string) error {
	return func(s string) error {
		for _, n := range names {
			if s == n {
				return nil
			}
		}
		return fmt.Errorf("unknown (known: %s)", strings.Join(names, ", "))
	}
}

func TestMalformedYAMLKeepsGoccyError(t *testing.T) {
	tests := []struct {
		name      string
		spec      string
		line, col int
	}{
		{name: "unclosed flow sequence", spec: "name: x\ngrid: [1, 2\n", line: 2, col: 7},
		{name: "bad indentation", spec: "name: x\ngrid:\n  sharding:\n    - ddp\n   - no_shard\n", line: 5, col: 4},
		{name: "mapping in a scalar", spec: "name: x\nmodel: a: b\n", line: 2, col: 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			se := specError(t, tt.spec, Options{})
			assert.Equal(t, [2]int{tt.line, tt.col}, [2]int{se.Line, se.Column}, se.Msg)
			assert.True(t, strings.HasPrefix(se.Msg, "malformed YAML: "), se.Msg)
			var ye yaml.Error
			require.ErrorAs(t, se, &ye)
			assert.Contains(t, se.Msg, ye.GetMessage())
		})
	}
}

// A tab used for indentation is named, not printed as the character itself
// (goccy quotes it; it showed as U+FFFD).
func TestTabInYAMLIsNamed(t *testing.T) {
	se := specError(t, "name: x\nbackend: sim\n\tmodel: tiny\n", Options{})
	assert.Equal(t, [2]int{3, 1}, [2]int{se.Line, se.Column})
	assert.Equal(t, "malformed YAML: a tab, which YAML does not allow for indentation; indent with spaces", se.Msg)
}

func TestSeveralErrorsAreReportedTogether(t *testing.T) {
	spec := "name: x\nsteps: 0\ngrid:\n  sharding: [ful_shard]\n  world_sise: [1]\n"
	_, err := Parse([]byte(spec), "spec.yaml", Options{})
	var es SpecErrors
	require.ErrorAs(t, err, &es)
	require.Len(t, es, 3)
	assert.Equal(t, []string{
		"spec.yaml:2:8: steps must be a positive integer (at most 1000000), got 0",
		`spec.yaml:4:14: unknown sharding "ful_shard" (allowed: full_shard, shard_grad_op, hybrid_shard, no_shard, ddp; did you mean full_shard?)`,
		`spec.yaml:5:3: unknown axis "world_sise" in grid (allowed: nodes, gpus_per_node, world_size, batch_per_device, grad_accum, global_batch, seq_len, model, sharding, activation_checkpointing, backward_prefetch, forward_prefetch, cpu_offload, mixed_precision, wrap_policy, compile, hardware, seed, checkpoint, checkpoint_every, resume_check; did you mean world_size?)`,
	}, strings.Split(err.Error(), "\n"))
	var first *SpecError
	require.ErrorAs(t, err, &first)
	assert.Equal(t, 2, first.Line)
}

func TestPointErrorsAreReportedOnce(t *testing.T) {
	// Every sharding value pairs with hybrid_shard on one node for each batch size:
	// one message, not one per point.
	spec := "name: x\nbase: {gpus_per_node: 8}\ngrid:\n  nodes: [1, 2]\n  sharding: [hybrid_shard]\n  batch_per_device: [1, 2, 4]\n"
	se := specError(t, spec, Options{})
	assert.Equal(t, 5, se.Line)
}

func TestClosest(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"full_shrad", "full_shard"},
		{"FULL_SHARD", "full_shard"},
		{"full-shard", "full_shard"},
		{"grad_acum", "grad_accum"},
		{"sharding", ""}, // exact: nothing to suggest
		{"xyz", ""},
		{"ws", ""},
	}
	cands := append(append([]string{}, ShardingValues...), Axes...)
	cands = append(cands, "sharding")
	for _, tt := range tests {
		assert.Equal(t, tt.want, Closest(tt.in, cands), tt.in)
	}
}
