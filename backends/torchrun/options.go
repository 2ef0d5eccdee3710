package torchrun

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
)

// Launchers the backend can start a run with.
const (
	LauncherTorchrun   = "torchrun"
	LauncherAccelerate = "accelerate"
	// LauncherPython runs the script as one plain process (python SCRIPT ARGS), with
	// no distributed environment: a script's single-process mode, world size 1.
	LauncherPython = "python"
	// LauncherCommand runs backend_options.command, an argv template that starts
	// the ranks itself (deepspeed, composer, tune run, srun inside an allocation).
	LauncherCommand = "command"
)

// launchers lists the launcher values, for errors.
var launchers = []string{LauncherTorchrun, LauncherAccelerate, LauncherPython, LauncherCommand}

// Model implementations of the project's script.
const (
	ModelBuiltin      = "builtin"      // the Go trainer's model, identical to gotrain's
	ModelTransformers = "transformers" // a Hugging Face config.json through transformers
)

// The project script's synthetic data sets (backend_options.data, --data):
// gotrain's model.DataKinds, which the script computes token for token (kept
// here by name, so that this backend does not build the Go trainer's model;
// TestDataKindsMatchGotrain holds them equal).
const (
	DataRandom = "random"
	DataRepeat = "repeat"
)

// DataKinds are the data sets, DataRandom (the default) first.
var DataKinds = []string{DataRandom, DataRepeat}

// DefaultRdzvPort is the c10d rendezvous port of multi-node runs (torchrun's default).
const DefaultRdzvPort = 29500

// Options are the torchrun backend_options.
type Options struct {
	// Launcher is "torchrun" (default), "accelerate" (accelerate launch with a
	// generated FSDP config file), "python" (one process, no distributed
	// environment) or "command" (Command).
	Launcher string
	// Command is the argv template of launcher: command, in the language of Args
	// (see contract.Expand), plus {python}, {script}, {master_addr},
	// {master_port}, {node_rank}, {rdzv_endpoint}, and the element
	// "{script_args}", which becomes the script's argument list. It is split into
	// elements before any substitution and never given to a shell.
	Command []string
	// Python is the interpreter that has torch (default /usr/bin/python3).
	Python string
	// Script replaces the embedded fsdpbench_train.py (a path, relative to the
	// directory fsdpbench runs in).
	Script string
	// WorkingDir is the directory the script (or command) runs in, a template
	// like Args with {script_dir} as well; a relative path is relative to the
	// directory fsdpbench runs in. Unset, it is the run's output directory.
	// nanoGPT's train.py reads configurator.py and data/ relative to the
	// directory it runs in, so it needs working_dir: "{script_dir}".
	WorkingDir string
	// Args, when set, is the script's whole argument list as a template: each
	// element may hold {axis} placeholders (see Expand), so a script with its own
	// flags runs unchanged. Unset, the script gets the project script's flags.
	Args []string
	// ExtraArgs are appended to the script's arguments, as they are.
	ExtraArgs []string
	// MetricsFile is where a script that writes a metrics.json of its own leaves it
	// (a template). Unset, the run's output directory is searched for metrics.json.
	MetricsFile string
	// LR and WeightDecay are AdamW's, with the Go trainer's defaults (1e-3, 0.01) so
	// the two engines train alike unless told otherwise.
	LR, WeightDecay float64
	// Data is the project script's synthetic data set, as gotrain's option:
	// "random" (the default, empty too: random tokens, the loss stays near
	// ln(vocab)) or
	// "repeat" (a repeated sequence the model learns; model.DataRepeat, which
	// the script computes token for token). A script of the user's makes its
	// own data, so it is refused there.
	Data string
	// FSDPAPI picks the project script's FSDP: 0 = FSDP2 when torch has it, else
	// FSDP1; 1 or 2 to force one.
	FSDPAPI int
	// ModelImpl is "builtin" (default) or "transformers" (the model axis is a
	// Hugging Face config.json, built with random weights).
	ModelImpl string
	// AccelerateFSDPVersion is the fsdp_version of the generated accelerate config
	// (1 or 2; default 1, which has every axis: sharding strategies, prefetch).
	AccelerateFSDPVersion int
	// LayerClass is the transformer layer class accelerate wraps (default from the
	// model's architecture, e.g. LlamaDecoderLayer).
	LayerClass string
	// StateDictType is accelerate's fsdp_state_dict_type (default SHARDED_STATE_DICT).
	StateDictType string
	// RdzvPort is the c10d rendezvous port of multi-node runs.
	RdzvPort int
	// TrainsModelAxis says the script trains the model the sweep's model axis names,
	// so model FLOPs (and MFU) can come from its shape. True for the project's
	// script; a user's script must say so (trains_model_axis: true), since its
	// model axis is often just a label and a wrong MFU is worse than none. A rank
	// file's own model_flops_per_token always wins.
	TrainsModelAxis bool
	// Logs, when set, reads the run's figures from its output lines (extract.go).
	Logs *LogOptions
	// NoProfile leaves $FSDPBENCH_PROFILE_DIR unset (backend_options.profile:
	// false): the project's script then records no profiled steps, and no run
	// has a step breakdown or a timeline.
	NoProfile bool
}

// Bounds of the numeric options: past them is a typo, not an experiment.
const (
	maxLR          = 10
	maxWeightDecay = 10
)

// knownOptions lists the backend_options keys, for errors.
var knownOptions = []string{"launcher", "python", "script", "args", "extra_args", "metrics_file", "lr", "weight_decay", "data",
	"fsdp_api", "model_impl", "accelerate_fsdp_version", "layer_class", "state_dict_type", "rdzv_port", "trains_model_axis", "logs",
	"command", "working_dir", "profile"}

// ParseOptions reads backend_options. Unknown keys and ill-typed or out-of-bounds
// values are *backends.SpecError values that name the key.
func ParseOptions(m map[string]any) (Options, error) {
	o := Options{Launcher: LauncherTorchrun, Python: DefaultPython, LR: 1e-3, WeightDecay: 0.01,
		ModelImpl: ModelBuiltin, AccelerateFSDPVersion: 1, StateDictType: "SHARDED_STATE_DICT", RdzvPort: DefaultRdzvPort}
	_, script := m["script"]
	o.TrainsModelAxis = !script
	for _, k := range sortedKeys(m) {
		if !slices.Contains(knownOptions, k) {
			return o, backends.UnknownOption("backend_options", "torchrun", k, knownOptions)
		}
		if err := o.set(k, m[k]); err != nil {
			return o, backends.SpecErrorf("torchrun: backend_options.%s: %w", k, err)
		}
	}
	switch {
	case o.Launcher == LauncherCommand && o.Command == nil:
		return o, backends.SpecErrorf("torchrun: backend_options.launcher command needs backend_options.command, the argv template to run, e.g. [deepspeed, --num_gpus, \"{gpus_per_node}\", train.py, \"{script_args}\"]")
	case o.Launcher != LauncherCommand && o.Command != nil:
		return o, backends.SpecErrorf("torchrun: backend_options.command is the template of launcher: command, and the launcher is %s; set backend_options.launcher: command, or drop command", o.Launcher)
	}
	if _, set := m["data"]; set && (!o.UsesProjectScript() || o.Args != nil) {
		// The option is the project script's --data; a script of the user's
		// (or an args list that replaces the project's flags) never sees it,
		// and a run labelled repeat that trained on other data would mislead.
		return o, backends.SpecErrorf("torchrun: backend_options.data chooses the synthetic data of the project's script (fsdpbench_train.py --data); %s, so drop data (or pass your script its own flag in args)",
			map[bool]string{true: "args replaces the script's flags", false: "your script makes its own data"}[o.UsesProjectScript()])
	}
	if _, explicit := m["trains_model_axis"]; !explicit && !o.UsesProjectScript() {
		o.TrainsModelAxis = false // a command of the user's trains a model of its own
	}
	return o, nil
}

// UsesProjectScript says whether the run starts the project's embedded script:
// no backend_options.script is set and, under launcher: command, the command
// names {script}.
func (o Options) UsesProjectScript() bool {
	if o.Script != "" {
		return false
	}
	if o.Launcher != LauncherCommand {
		return true
	}
	for _, el := range o.Command {
		if strings.Contains(el, "{script}") {
			return true
		}
	}
	return false
}

func (o *Options) set(k string, v any) error {
	switch k {
	case "launcher":
		s, err := str(v)
		if err != nil {
			return err
		}
		if !slices.Contains(launchers, s) {
			return fmt.Errorf("unknown launcher %q; use %s", s, strings.Join(launchers, ", "))
		}
		o.Launcher = s
	case "command":
		list, err := strs(v)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			return errors.New("is empty; give the program and its arguments")
		}
		o.Command = list
	case "python":
		s, err := str(v)
		o.Python = s
		return err
	case "script":
		s, err := str(v)
		o.Script = s
		return err
	case "metrics_file":
		s, err := str(v)
		o.MetricsFile = s
		return err
	case "working_dir":
		s, err := str(v)
		o.WorkingDir = s
		return err
	case "layer_class":
		s, err := str(v)
		o.LayerClass = s
		return err
	case "state_dict_type":
		s, err := str(v)
		if err != nil {
			return err
		}
		s = strings.ToUpper(s)
		if s != "SHARDED_STATE_DICT" && s != "FULL_STATE_DICT" && s != "LOCAL_STATE_DICT" {
			return fmt.Errorf("unknown state dict type %q; use SHARDED_STATE_DICT, FULL_STATE_DICT or LOCAL_STATE_DICT", s)
		}
		o.StateDictType = s
	case "model_impl":
		s, err := str(v)
		if err != nil {
			return err
		}
		if s != ModelBuiltin && s != ModelTransformers {
			return fmt.Errorf("unknown model_impl %q; use builtin or transformers", s)
		}
		o.ModelImpl = s
	case "logs":
		l, err := parseLogOptions(v)
		if err != nil {
			return err
		}
		o.Logs = l
	case "profile":
		b, err := backends.Bool(v)
		o.NoProfile = !b
		return err
	case "trains_model_axis":
		b, err := backends.Bool(v)
		o.TrainsModelAxis = b
		return err
	case "args", "extra_args":
		list, err := strs(v)
		if err != nil {
			return err
		}
		if k == "args" {
			o.Args = list
		} else {
			o.ExtraArgs = list
		}
	case "lr":
		x, err := backends.NumberIn(v, 0, maxLR, true)
		o.LR = x
		return err
	case "weight_decay":
		x, err := backends.NumberIn(v, 0, maxWeightDecay, false)
		o.WeightDecay = x
		return err
	case "data":
		s, _ := v.(string)
		if !slices.Contains(DataKinds, s) {
			return fmt.Errorf("must be one of %v (random: tokens no model can predict, the loss stays near ln(vocab); repeat: a repeated sequence the model learns), got %v", DataKinds, v)
		}
		o.Data = s
	case "fsdp_api":
		n, err := backends.WholeIn(v, 0, 2)
		if err != nil {
			return fmt.Errorf("%w (0: FSDP2 when torch has it, 1 or 2 to force one)", err)
		}
		o.FSDPAPI = int(n)
	case "accelerate_fsdp_version":
		n, err := backends.WholeIn(v, 1, 2)
		o.AccelerateFSDPVersion = int(n)
		return err
	case "rdzv_port":
		n, err := backends.WholeIn(v, 1, 65535)
		o.RdzvPort = int(n)
		return err
	default:
		return fmt.Errorf("unknown key (known: %s)", strings.Join(knownOptions, ", "))
	}
	return nil
}

func str(v any) (string, error) {
	s, ok := v.(string)
	if !ok || s == "" {
		return "", fmt.Errorf("must be a non-empty string, got %v", v)
	}
	return s, nil
}

// strs reads a list of strings, or one string split at spaces (no shell quoting:
// use the list form for an argument that holds a space).
func strs(v any) ([]string, error) {
	switch x := v.(type) {
	case string:
		return strings.Fields(x), nil
	case []any:
		out := make([]string, len(x))
		for i, a := range x {
			switch s := a.(type) {
			case string:
				out[i] = s
			case int, int64, uint64, float64, bool:
				out[i] = fmt.Sprint(s)
			default:
				return nil, fmt.Errorf("element %d must be a string, got %T", i, a)
			}
		}
		return out, nil
	default:
		return nil, fmt.Errorf("must be a list of strings (or one string of space-separated arguments), got %T", v)
	}
}
