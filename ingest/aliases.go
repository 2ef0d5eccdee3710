package ingest

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// An Alias is one spelling of an axis (or setting) in the files existing scripts
// leave: a run_args.json key, a key of a Trainer or accelerate fsdp_config, a
// torchtitan TOML key (section.key), a nanoGPT config global, a Lightning
// Trainer argument.
type Alias struct {
	// Key as the script spells it; a torchtitan key is section.key.
	Key string
	// Axis is the canonical axis or setting it gives; several axes for keys that
	// say more than one thing (the Trainer's fsdp string); empty for a key that
	// gives no axis and is kept in the metrics' extra.fsdp.
	Axis string
	// From names the scripts that use the spelling.
	From string
	// conv reads the value into axis=value pairs; nil reads it as Axis's value.
	conv func(v any) ([]axisValue, error)
}

// axisValue is one axis (or setting) a key gives, with its canonical value.
type axisValue struct{ axis, value string }

// Sources named in the table.
const (
	fromHF         = "HF Trainer"
	fromAccelerate = "accelerate"
	fromTitan      = "torchtitan"
	fromNanoGPT    = "nanoGPT"
	fromLightning  = "Lightning"
	fromTorchrun   = "torchrun"
	fromScripts    = "scripts"
	fromFSDPConfig = "fsdp_config"
	// fromTrainerState keys count only in a Trainer's trainer_state.json.
	fromTrainerState = "HF Trainer's trainer_state.json only"
)

// Aliases is the one table of the names scripts give the axes. A key of an
// fsdp_config object (the Trainer's, or accelerate's config file) is looked up
// with its fsdp_ prefix, as accelerate writes it; the Trainer strips the prefix
// and both spellings are read there (fsdp_config.backward_prefetch), while
// outside an fsdp_config a bare name such as version means nothing.
var Aliases = []Alias{
	{Key: "world_size", Axis: "world_size", From: fromScripts},
	{Key: "num_processes", Axis: "world_size", From: fromAccelerate},
	{Key: "num_gpus", Axis: "world_size", From: fromScripts},
	{Key: "n_gpus", Axis: "world_size", From: fromScripts},
	{Key: "nodes", Axis: "nodes", From: fromScripts},
	{Key: "nnodes", Axis: "nodes", From: fromTorchrun},
	{Key: "num_nodes", Axis: "nodes", From: fromLightning},
	{Key: "num_machines", Axis: "nodes", From: fromAccelerate},
	{Key: "gpus_per_node", Axis: "gpus_per_node", From: fromScripts},
	{Key: "nproc_per_node", Axis: "gpus_per_node", From: fromTorchrun},
	{Key: "devices", Axis: "gpus_per_node", From: fromLightning + " (devices per node)"},

	{Key: "batch_per_device", Axis: "batch_per_device", From: fromScripts},
	{Key: "per_device_train_batch_size", Axis: "batch_per_device", From: fromHF},
	{Key: "per_device_batch_size", Axis: "batch_per_device", From: fromAccelerate + " examples"},
	{Key: "batch_size_per_device", Axis: "batch_per_device", From: fromScripts},
	{Key: "micro_batch_size", Axis: "batch_per_device", From: fromScripts},
	{Key: "train_batch_size", Axis: "batch_per_device", From: fromTrainerState},
	{Key: "batch_size", Axis: "batch_per_device", From: fromNanoGPT + ", " + fromLightning + " (per process)"},
	{Key: "training.local_batch_size", Axis: "batch_per_device", From: fromTitan},
	{Key: "training.batch_size", Axis: "batch_per_device", From: fromTitan + " (before local_batch_size)"},
	{Key: "grad_accum", Axis: "grad_accum", From: fromScripts},
	{Key: "gradient_accumulation_steps", Axis: "grad_accum", From: fromHF + ", " + fromAccelerate + ", " + fromNanoGPT + " (÷ world size)"},
	{Key: "grad_accum_steps", Axis: "grad_accum", From: fromScripts},
	{Key: "accumulate_grad_batches", Axis: "grad_accum", From: fromLightning},
	{Key: "global_batch", Axis: "global_batch", From: fromScripts},
	{Key: "training.global_batch_size", Axis: "global_batch", From: fromTitan},

	{Key: "seq_len", Axis: "seq_len", From: fromScripts},
	{Key: "training.seq_len", Axis: "seq_len", From: fromTitan},
	{Key: "seq_length", Axis: "seq_len", From: fromScripts},
	{Key: "max_seq_length", Axis: "seq_len", From: fromHF + " (TRL)"},
	{Key: "max_seq_len", Axis: "seq_len", From: fromScripts},
	{Key: "max_length", Axis: "seq_len", From: fromAccelerate + " examples"},
	{Key: "block_size", Axis: "seq_len", From: fromNanoGPT + ", " + fromHF + " run_clm"},
	{Key: "sequence_length", Axis: "seq_len", From: fromScripts},

	{Key: "model", Axis: "model", From: fromScripts},
	{Key: "model_name", Axis: "model", From: fromScripts},
	{Key: "model_name_or_path", Axis: "model", From: fromHF + ", " + fromAccelerate + " examples"},
	{Key: "model_id", Axis: "model", From: fromScripts},
	{Key: "model.name", Axis: "model", From: fromTitan + " (with model.flavor)"},

	{Key: "sharding", Axis: "sharding", From: fromScripts, conv: convSharding},
	{Key: "sharding_strategy", Axis: "sharding", From: fromFSDPConfig + ", " + fromLightning, conv: convSharding},
	{Key: "fsdp_sharding_strategy", Axis: "sharding", From: fromFSDPConfig, conv: convSharding},
	{Key: "fsdp", Axis: "sharding,cpu_offload,wrap_policy", From: fromHF + " (--fsdp \"full_shard auto_wrap\") or true/false", conv: convHFFSDP},
	{Key: "strategy", Axis: "sharding", From: fromLightning + " (fsdp: FULL_SHARD unless sharding_strategy says; ddp)", conv: convStrategy},
	{Key: "distributed_type", Axis: "sharding", From: fromAccelerate + " (FSDP: FULL_SHARD unless fsdp_sharding_strategy says; MULTI_GPU)", conv: convDistributedType},
	{Key: "fsdp_reshard_after_forward", Axis: "sharding", From: fromFSDPConfig + " (FSDP2)", conv: convReshard},
	{Key: "parallelism.fsdp_reshard_after_forward", Axis: "sharding", From: fromTitan + " (never = shard_grad_op)", conv: convReshard},
	{Key: "parallelism.data_parallel_replicate_degree", Axis: "sharding", From: fromTitan + " (> 1 = hybrid_shard)", conv: convReplicate},

	{Key: "activation_checkpointing", Axis: "activation_checkpointing", From: fromScripts + ", " + fromFSDPConfig},
	{Key: "fsdp_activation_checkpointing", Axis: "activation_checkpointing", From: fromFSDPConfig},
	{Key: "gradient_checkpointing", Axis: "activation_checkpointing", From: fromHF},
	{Key: "activation_checkpoint.mode", Axis: "activation_checkpointing", From: fromTitan + " (full, none)", conv: convACMode},
	{Key: "cpu_offload", Axis: "cpu_offload", From: fromScripts},
	{Key: "fsdp_offload_params", Axis: "cpu_offload", From: fromFSDPConfig},
	{Key: "training.enable_cpu_offload", Axis: "cpu_offload", From: fromTitan},
	{Key: "backward_prefetch", Axis: "backward_prefetch", From: fromScripts + ", " + fromFSDPConfig, conv: convPrefetch},
	{Key: "fsdp_backward_prefetch", Axis: "backward_prefetch", From: fromFSDPConfig, conv: convPrefetch},
	{Key: "fsdp_backward_prefetch_policy", Axis: "backward_prefetch", From: fromAccelerate + " (older)", conv: convPrefetch},
	{Key: "forward_prefetch", Axis: "forward_prefetch", From: fromScripts + ", " + fromFSDPConfig},
	{Key: "fsdp_forward_prefetch", Axis: "forward_prefetch", From: fromFSDPConfig},
	{Key: "fsdp_auto_wrap_policy", Axis: "wrap_policy", From: fromFSDPConfig, conv: convWrap},
	{Key: "fsdp_transformer_layer_cls_to_wrap", Axis: "wrap_policy", From: fromFSDPConfig + " (kept in extra.fsdp)", conv: convLayerCls},
	{Key: "fsdp_min_num_params", Axis: "wrap_policy", From: fromFSDPConfig + " (size:N)", conv: convMinParams},
	{Key: "wrap_policy", Axis: "wrap_policy", From: fromScripts},
	{Key: "fsdp_state_dict_type", From: fromFSDPConfig},
	{Key: "fsdp_version", From: fromFSDPConfig},
	{Key: "fsdp_use_orig_params", From: fromFSDPConfig},
	{Key: "fsdp_sync_module_states", From: fromFSDPConfig},
	{Key: "fsdp_cpu_ram_efficient_loading", From: fromFSDPConfig},

	{Key: "mixed_precision", Axis: "mixed_precision", From: fromScripts + ", " + fromAccelerate + " (no, fp16, bf16)", conv: convPrecision},
	{Key: "bf16", Axis: "mixed_precision", From: fromHF + " (true = bf16)", conv: convFlag("bf16")},
	{Key: "fp16", Axis: "mixed_precision", From: fromHF + " (true = fp16)", conv: convFlag("fp16")},
	{Key: "precision", Axis: "mixed_precision", From: fromLightning + " (bf16-mixed, 16-mixed, 32-true)", conv: convPrecision},
	{Key: "dtype", Axis: "mixed_precision", From: fromNanoGPT + " (bfloat16, float16, float32)", conv: convPrecision},
	{Key: "training.mixed_precision_param", Axis: "mixed_precision", From: fromTitan, conv: convPrecision},
	{Key: "compile", Axis: "compile", From: fromScripts + ", " + fromNanoGPT},
	{Key: "torch_compile", Axis: "compile", From: fromHF},
	{Key: "training.compile", Axis: "compile", From: fromTitan + " (older)"},
	{Key: "compile.enable", Axis: "compile", From: fromTitan},

	{Key: "seed", Axis: "seed", From: fromScripts + ", " + fromHF},
	{Key: "training.seed", Axis: "seed", From: fromTitan + " (older)"},
	{Key: "debug.seed", Axis: "seed", From: fromTitan},
	{Key: "steps", Axis: "steps", From: fromScripts},
	{Key: "max_steps", Axis: "steps", From: fromHF + ", " + fromLightning},
	{Key: "max_iters", Axis: "steps", From: fromNanoGPT},
	{Key: "training.steps", Axis: "steps", From: fromTitan},
	{Key: "global_step", Axis: "steps", From: fromTrainerState},
}

// aliasByKey indexes Aliases.
var aliasByKey = func() map[string]Alias {
	m := make(map[string]Alias, len(Aliases))
	for _, a := range Aliases {
		if _, dup := m[a.Key]; dup {
			panic("ingest: alias " + a.Key + " listed twice")
		}
		m[a.Key] = a
	}
	return m
}()

// AliasHelp renders Aliases for `ingest --help`: per axis, every spelling and
// the scripts that use it, wrapped; then the Hugging Face ids read as presets.
func AliasHelp() string {
	byAxis := map[string][]string{}
	var axes []string
	for _, a := range Aliases {
		axis := a.Axis
		if axis == "" {
			axis = "(no axis; kept in extra.fsdp)"
		}
		if _, ok := byAxis[axis]; !ok {
			axes = append(axes, axis)
		}
		byAxis[axis] = append(byAxis[axis], a.Key+" ["+a.From+"]")
	}
	var b strings.Builder
	for _, axis := range axes {
		wrap(&b, axis+": ", byAxis[axis])
	}
	b.WriteString("  (fsdp_config is the Trainer's fsdp_config or accelerate's; inside it the fsdp_ prefix is optional)\n")
	wrap(&b, "Hugging Face ids read as presets: ", shapes.HFIDs())
	return b.String()
}

// helpWidth is the width AliasHelp wraps at, that of the rest of the help text.
const helpWidth = 88

// wrap writes items after head, comma-separated, in lines of at most helpWidth,
// continued lines indented.
func wrap(b *strings.Builder, head string, items []string) {
	line := "  " + head
	for i, it := range items {
		if i < len(items)-1 {
			it += ","
		}
		if len(line)+1+len(it) > helpWidth && strings.TrimSpace(line) != strings.TrimSpace(head) {
			b.WriteString(line + "\n")
			line = "      " + it
			continue
		}
		if !strings.HasSuffix(line, " ") {
			line += " "
		}
		line += it
	}
	b.WriteString(line + "\n")
}

// lookupAlias finds a key's alias: the key itself, else (inside an fsdp_config
// object) its last element with and without the fsdp_ prefix.
func lookupAlias(key string, extra map[string]string) (Alias, bool) {
	if axis, ok := extra[key]; ok {
		// The axis's own spelling reads its values (FULL_SHARD, BACKWARD_PRE, bf16-mixed...).
		a := Alias{Key: key, Axis: axis, From: "--map"}
		if canon, ok := aliasByKey[axis]; ok && canon.Axis == axis {
			a.conv = canon.conv
		}
		return a, true
	}
	if a, ok := aliasByKey[key]; ok {
		return a, true
	}
	parent, leaf, nested := cutLast(key)
	if !nested || !strings.HasSuffix(parent, "fsdp_config") {
		return Alias{}, false
	}
	if a, ok := aliasByKey["fsdp_"+strings.TrimPrefix(leaf, "fsdp_")]; ok {
		return a, true
	}
	a, ok := aliasByKey[strings.TrimPrefix(leaf, "fsdp_")]
	return a, ok
}

// cutLast splits a dotted key at its last dot.
func cutLast(key string) (string, string, bool) {
	i := strings.LastIndexByte(key, '.')
	if i < 0 {
		return "", key, false
	}
	return key[:i], key[i+1:], true
}

// convert reads a value through the alias: its conv, or as its axis's value.
func (a Alias) convert(v any) ([]axisValue, error) {
	if a.conv != nil {
		return a.conv(v)
	}
	if a.Axis == "" {
		return nil, nil
	}
	s, err := axisText(a.Axis, v)
	if err != nil {
		return nil, err
	}
	return []axisValue{{a.Axis, s}}, nil
}

// Kinds of axis values, for axisText.
var (
	intAxes  = []string{"world_size", "nodes", "gpus_per_node", "batch_per_device", "grad_accum", "global_batch", "seq_len", "steps", "seed"}
	boolAxes = []string{"activation_checkpointing", "cpu_offload", "forward_prefetch", "compile"}
)

// maxInt bounds an integer read from a folder before sweeps checks its axis's own
// range: it keeps the text exact and the error short.
const maxInt = 1 << 53

// axisText reads v as the value of axis: integers for counts, booleans (also
// "true"/"false", 0/1) for flags, text for the rest.
func axisText(axis string, v any) (string, error) {
	switch {
	case contains(intAxes, axis):
		switch x := v.(type) {
		case float64:
			if x != math.Trunc(x) || math.Abs(x) > maxInt {
				return "", fmt.Errorf("%s must be a whole number, got %v", axis, x)
			}
			return strconv.FormatInt(int64(x), 10), nil
		case int64:
			return strconv.FormatInt(x, 10), nil
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil && n >= -maxInt && n <= maxInt {
				return strconv.FormatInt(n, 10), nil
			}
		}
		return "", fmt.Errorf("%s must be a whole number, got %s", axis, show(v))
	case contains(boolAxes, axis):
		if b, ok := boolOf(v); ok {
			return strconv.FormatBool(b), nil
		}
		return "", fmt.Errorf("%s must be true or false, got %s", axis, show(v))
	}
	switch x := v.(type) {
	case string:
		return strings.TrimSpace(x), nil
	case float64, int64, bool:
		return fmt.Sprint(x), nil
	}
	return "", fmt.Errorf("%s must be a string, got %s", axis, show(v))
}

// boolOf reads true/false, "true"/"false" (any case) and 1/0.
func boolOf(v any) (bool, bool) {
	switch x := v.(type) {
	case bool:
		return x, true
	case float64:
		if x == 0 || x == 1 {
			return x == 1, true
		}
	case int64:
		if x == 0 || x == 1 {
			return x == 1, true
		}
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
			return b, true
		}
	}
	return false, false
}

// shardingNames are the spellings of the strategies: PyTorch's ShardingStrategy
// names and accelerate's numbers (1 FULL_SHARD ... 5 _HYBRID_SHARD_ZERO2).
var shardingNames = map[string]string{
	"full_shard": sweeps.FullShard, "1": sweeps.FullShard,
	"shard_grad_op": sweeps.ShardGradOp, "2": sweeps.ShardGradOp,
	"no_shard": sweeps.NoShard, "3": sweeps.NoShard,
	"hybrid_shard": sweeps.HybridShard, "4": sweeps.HybridShard,
	"ddp": sweeps.DDP,
}

func convSharding(v any) ([]axisValue, error) {
	s := strings.ToLower(strings.TrimSpace(fmt.Sprint(v)))
	s = strings.TrimPrefix(s, "shardingstrategy.")
	if x, ok := v.(float64); ok {
		s = strconv.FormatFloat(x, 'f', -1, 64)
	}
	if c, ok := shardingNames[s]; ok {
		return []axisValue{{"sharding", c}}, nil
	}
	if s == "hybrid_shard_zero2" || s == "_hybrid_shard_zero2" || s == "5" {
		return nil, fmt.Errorf("HYBRID_SHARD_ZERO2 (shard_grad_op inside a node, replicated across) has no sharding axis value; say which to file it under with --set sharding=hybrid_shard or shard_grad_op")
	}
	return nil, fmt.Errorf("sharding strategy %s is none of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD (or 1-4)", show(v))
}

// convHFFSDP reads the Trainer's fsdp argument: a string of space-separated
// options ("full_shard auto_wrap", "shard_grad_op offload"), a list of them (as
// TrainingArguments.to_dict writes it), or a boolean (the seeds' metrics.json).
// An empty string or list means no FSDP: DDP.
func convHFFSDP(v any) ([]axisValue, error) {
	var opts []string
	switch x := v.(type) {
	case bool:
		if !x {
			return []axisValue{{"sharding", sweeps.DDP}}, nil
		}
		return []axisValue{{"sharding", fsdpTrue}}, nil
	case string:
		if b, err := strconv.ParseBool(strings.TrimSpace(x)); err == nil {
			return convHFFSDP(b) // a script that wrote its flag as text
		}
		opts = strings.Fields(x)
	case []any:
		for _, o := range x {
			s, ok := o.(string)
			if !ok {
				return nil, fmt.Errorf("fsdp options must be strings, got %s", show(o))
			}
			opts = append(opts, strings.Fields(s)...)
		}
	default:
		return nil, fmt.Errorf("fsdp must be the Trainer's option string (\"full_shard auto_wrap\"), a list of options, or true/false; got %s", show(v))
	}
	if len(opts) == 0 {
		return []axisValue{{"sharding", sweeps.DDP}}, nil
	}
	var out []axisValue
	sharding := ""
	for _, o := range opts {
		switch o = strings.ToLower(o); o {
		case "full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2":
			if sharding != "" {
				return nil, fmt.Errorf("fsdp %s names two sharding strategies (%s, %s)", show(v), sharding, o)
			}
			sharding = o
			avs, err := convSharding(o)
			if err != nil {
				return nil, err
			}
			out = append(out, avs...)
		case "offload":
			out = append(out, axisValue{"cpu_offload", "true"})
		case "auto_wrap":
			// The Trainer wraps by fsdp_config's transformer_layer_cls_to_wrap (or
			// the model's _no_split_modules), or by min_num_params when that is set:
			// transformer unless a size is given, which then overrides this.
			out = append(out, axisValue{"wrap_policy", "transformer"})
		default:
			return nil, fmt.Errorf("fsdp option %s is none of full_shard, shard_grad_op, hybrid_shard, hybrid_shard_zero2, no_shard, offload, auto_wrap", show(o))
		}
	}
	if sharding == "" {
		// "offload" or "auto_wrap" alone: the Trainer then uses FULL_SHARD.
		out = append(out, axisValue{"sharding", sweeps.FullShard})
	}
	return out, nil
}

// fsdpTrue stands for `fsdp: true`, which does not say the strategy: Options.FSDPSharding does.
const fsdpTrue = "fsdp:true"

// fsdpToolDefault stands for accelerate's distributed_type FSDP and
// Lightning's strategy fsdp: without a sharding_strategy both use FULL_SHARD,
// their documented default.
const fsdpToolDefault = "fsdp:default"

func convStrategy(v any) ([]axisValue, error) {
	s, _ := v.(string)
	switch s = strings.ToLower(strings.TrimSpace(s)); {
	case s == "fsdp" || strings.HasPrefix(s, "fsdp_"):
		return []axisValue{{"sharding", fsdpToolDefault}}, nil
	case s == "ddp" || strings.HasPrefix(s, "ddp_"):
		return []axisValue{{"sharding", sweeps.DDP}}, nil
	}
	return nil, fmt.Errorf("strategy %s is neither fsdp nor ddp (the strategies fsdpbench compares)", show(v))
}

func convDistributedType(v any) ([]axisValue, error) {
	s, _ := v.(string)
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "FSDP":
		return []axisValue{{"sharding", fsdpToolDefault}}, nil
	case "MULTI_GPU", "MULTI_CPU":
		return []axisValue{{"sharding", sweeps.DDP}}, nil
	case "NO":
		return nil, nil // one process: world_size says it
	}
	return nil, fmt.Errorf("distributed_type %s is none of FSDP, MULTI_GPU, MULTI_CPU, NO", show(v))
}

// convReshard: FSDP2's reshard_after_forward=false keeps the gathered parameters
// until backward, which is FSDP1's SHARD_GRAD_OP; true is FULL_SHARD.
func convReshard(v any) ([]axisValue, error) {
	if s, ok := v.(string); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "never":
			return []axisValue{{"sharding", sweeps.ShardGradOp}}, nil
		case "always":
			return []axisValue{{"sharding", sweeps.FullShard}}, nil
		case "default":
			return nil, nil // torchtitan: full_shard without pipeline parallelism; the strategy comes from elsewhere
		}
	}
	b, ok := boolOf(v)
	if !ok {
		return nil, fmt.Errorf("reshard_after_forward must be true, false, or torchtitan's default/always/never; got %s", show(v))
	}
	if b {
		return []axisValue{{"sharding", sweeps.FullShard}}, nil
	}
	return []axisValue{{"sharding", sweeps.ShardGradOp}}, nil
}

func convReplicate(v any) ([]axisValue, error) {
	x, ok := v.(float64)
	if !ok {
		if n, isInt := v.(int64); isInt {
			x, ok = float64(n), true
		}
	}
	if !ok || x != math.Trunc(x) || x < 1 || x > maxInt {
		return nil, fmt.Errorf("data_parallel_replicate_degree must be a whole number ≥ 1, got %s", show(v))
	}
	if x > 1 {
		return []axisValue{{"sharding", sweeps.HybridShard}}, nil
	}
	return nil, nil
}

func convACMode(v any) ([]axisValue, error) {
	s, _ := v.(string)
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "full":
		return []axisValue{{"activation_checkpointing", "true"}}, nil
	case "none":
		return []axisValue{{"activation_checkpointing", "false"}}, nil
	case "selective":
		return nil, fmt.Errorf("selective activation checkpointing has no axis value (the axis is full or none); say which to file it under with --set activation_checkpointing=true or false")
	}
	return nil, fmt.Errorf("activation_checkpoint.mode %s is none of full, selective, none", show(v))
}

func convPrefetch(v any) ([]axisValue, error) {
	s := strings.ToLower(strings.TrimSpace(fmt.Sprint(v)))
	s = strings.TrimPrefix(s, "backwardprefetch.")
	switch s {
	case "backward_pre", "1":
		return []axisValue{{"backward_prefetch", sweeps.BackwardPre}}, nil
	case "backward_post", "2":
		return []axisValue{{"backward_prefetch", sweeps.BackwardPost}}, nil
	case "no_prefetch", "none", "3", "false":
		return []axisValue{{"backward_prefetch", sweeps.PrefetchNone}}, nil
	}
	return nil, fmt.Errorf("backward prefetch %s is none of BACKWARD_PRE, BACKWARD_POST, NO_PREFETCH", show(v))
}

func convWrap(v any) ([]axisValue, error) {
	s, _ := v.(string)
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "TRANSFORMER_BASED_WRAP":
		return []axisValue{{"wrap_policy", "transformer"}}, nil
	case "SIZE_BASED_WRAP":
		return nil, nil // the size is fsdp_min_num_params
	case "NO_WRAP":
		return nil, fmt.Errorf("auto_wrap_policy NO_WRAP (one unit for the whole model) has no wrap_policy value; say which to file it under with --set wrap_policy=")
	}
	return nil, fmt.Errorf("auto_wrap_policy %s is none of TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP", show(v))
}

func convLayerCls(v any) ([]axisValue, error) {
	switch x := v.(type) {
	case string, []any:
		if x == "" {
			return nil, nil
		}
		return []axisValue{{"wrap_policy", "transformer"}}, nil
	}
	return nil, fmt.Errorf("transformer_layer_cls_to_wrap must be a class name or a list of them, got %s", show(v))
}

func convMinParams(v any) ([]axisValue, error) {
	x, ok := v.(float64)
	if !ok || x != math.Trunc(x) || x < 0 || x > 1e15 {
		return nil, fmt.Errorf("min_num_params must be a whole number of parameters, got %s", show(v))
	}
	if x == 0 {
		return nil, nil // the Trainer's default: no size policy
	}
	return []axisValue{{"wrap_policy", "size:" + strconv.FormatInt(int64(x), 10)}}, nil
}

// precisionNames are the spellings of the compute precision: accelerate's
// mixed_precision, Lightning's precision, nanoGPT's and torchtitan's dtypes.
var precisionNames = map[string]string{
	"bf16": sweeps.BF16, "bfloat16": sweeps.BF16, "bf16-mixed": sweeps.BF16, "bf16-true": sweeps.BF16, "torch.bfloat16": sweeps.BF16,
	"fp16": sweeps.FP16, "float16": sweeps.FP16, "16": sweeps.FP16, "16-mixed": sweeps.FP16, "16-true": sweeps.FP16, "half": sweeps.FP16, "torch.float16": sweeps.FP16,
	"fp32": sweeps.FP32, "float32": sweeps.FP32, "32": sweeps.FP32, "32-true": sweeps.FP32, "no": sweeps.FP32, "float": sweeps.FP32, "torch.float32": sweeps.FP32,
}

func convPrecision(v any) ([]axisValue, error) {
	s := strings.ToLower(strings.TrimSpace(fmt.Sprint(v)))
	if x, ok := v.(float64); ok {
		s = strconv.FormatFloat(x, 'f', -1, 64)
	}
	if p, ok := precisionNames[s]; ok {
		return []axisValue{{"mixed_precision", p}}, nil
	}
	return nil, fmt.Errorf("precision %s is none of bf16, fp16, fp32 (or bfloat16, bf16-mixed, 16-mixed, 32-true, no, ...)", show(v))
}

// convFlag reads the Trainer's bf16 / fp16 flags: true gives that precision;
// false gives nothing alone (the other flag, or fp32 when both are false, is
// decided in mapSettings).
func convFlag(p string) func(v any) ([]axisValue, error) {
	return func(v any) ([]axisValue, error) {
		b, ok := boolOf(v)
		if !ok {
			return nil, fmt.Errorf("%s must be true or false, got %s", p, show(v))
		}
		if b {
			return []axisValue{{"mixed_precision", p}}, nil
		}
		return nil, nil
	}
}

// show quotes a value for an error, clipped (input.Quote): a folder's value may
// be a long list.
func show(v any) string {
	if s, isStr := v.(string); isStr {
		return input.Quote(s, 64)
	}
	return input.Clip(fmt.Sprint(v), 64)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
