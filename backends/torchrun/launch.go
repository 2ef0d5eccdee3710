package torchrun

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Node places one launcher invocation in a multi-node run: every node runs the same
// command with its own Rank, and the ranks meet at Endpoint (c10d rendezvous; one
// node: static, see TorchrunArgv).
// Rank may be a shell variable ("$SLURM_NODEID") when a job script runs the command.
type Node struct {
	Nodes    int
	Rank     string
	Endpoint string // host:port of the rendezvous (the first node)
	ID       string // the rendezvous ID, shared by the run's nodes
}

// ScriptArgs are the project script's flags for rc.
func ScriptArgs(rc sweeps.RunConfig, o Options, p contract.Paths) []string {
	args := []string{
		"--seed", strconv.FormatInt(rc.Seed, 10),
		"--seq-len", strconv.Itoa(rc.SeqLen),
		"--batch-per-device", strconv.Itoa(rc.BatchPerDevice),
		"--grad-accum", strconv.Itoa(max(rc.GradAccum, 1)),
		"--steps", strconv.Itoa(rc.Steps),
		"--warmup-steps", strconv.Itoa(rc.WarmupSteps),
		"--sharding", rc.Sharding,
		"--mixed-precision", rc.MixedPrecision,
		"--gpus-per-node", strconv.Itoa(rc.GPUsPerNode),
		"--backward-prefetch", orDefault(rc.BackwardPrefetch, sweeps.BackwardPre),
		"--wrap-policy", orDefault(rc.WrapPolicy, "transformer"),
		"--lr", strconv.FormatFloat(o.LR, 'g', -1, 64),
		"--weight-decay", strconv.FormatFloat(o.WeightDecay, 'g', -1, 64),
	}
	if o.ModelImpl == ModelTransformers {
		args = append(args, "--model-impl", ModelTransformers, "--hf-config", rc.Model)
	} else {
		args = append(args, "--model-json", p.ModelJSON)
	}
	if rc.Checkpoints() {
		args = append(args, "--checkpoint", rc.Checkpoint, "--checkpoint-every", strconv.Itoa(rc.CheckpointEvery),
			"--checkpoint-dir", filepath.Join(p.RunDir, contract.CheckpointDir))
		if rc.ResumeCheck {
			args = append(args, "--resume-check")
		}
	}
	if o.Data != "" && o.Data != DataRandom {
		// Only when asked: random is the script's default, and its argv stays
		// as it was.
		args = append(args, "--data", o.Data)
	}
	if o.FSDPAPI != 0 {
		args = append(args, "--fsdp-api", strconv.Itoa(o.FSDPAPI))
	}
	for _, f := range []struct {
		on   bool
		flag string
	}{
		{rc.ActivationCheckpointing, "--activation-checkpointing"},
		{rc.ForwardPrefetch, "--forward-prefetch"},
		{rc.CPUOffload, "--cpu-offload"},
		{rc.Compile, "--compile"},
	} {
		if f.on {
			args = append(args, f.flag)
		}
	}
	return args
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// TorchrunArgv is the command line that starts rc's ranks on one node under
// torchrun (python -m torch.distributed.run, so the interpreter that has torch is
// the one that runs it), meeting at node's rendezvous endpoint. A nil node is
// torchrun's --standalone. Flags are spelled with underscores, which torch 1.13
// needs and torch 2 still accepts.
//
// One-node runs get a node too (LocalNode): torch 1.x's --standalone always
// listens on localhost:29400, so two runs on one host at the same time (parallel
// sweeps, parallel test packages) would meet in one store and break each other.
// They meet through the static rendezvous: its one store is the agent's, on the
// endpoint's port, which the agent binds or fails on at once. With c10d the
// agent falls back to being a client when the port is taken (and hangs, a store
// client of whatever listens there: seen in CI, where parallel tests open
// listeners all the time), and it picks the workers' MASTER_PORT by binding port
// 0 and closing it, a second port another listener can take before rank 0 binds
// it. Several nodes keep c10d, as hand-written multi-node scripts do.
//
// logDir, when set, is where torchrun keeps its per-rank logs and error files:
// without --log_dir, --redirects and --tee make it create $TMPDIR/torchelastic_*
// and leave it there after every run.
func TorchrunArgv(rc sweeps.RunConfig, o Options, node *Node, logDir, script string, scriptArgs []string) []string {
	argv := []string{o.Python, "-m", "torch.distributed.run"}
	switch {
	case node == nil:
		argv = append(argv, "--standalone", "--nnodes", "1")
	case node.Nodes <= 1:
		argv = append(argv, "--nnodes", "1", "--node_rank", "0",
			"--rdzv_backend", "static", "--rdzv_endpoint", node.Endpoint, "--rdzv_id", node.ID)
	default:
		argv = append(argv, "--nnodes", strconv.Itoa(node.Nodes), "--node_rank", node.Rank,
			"--rdzv_backend", "c10d", "--rdzv_endpoint", node.Endpoint, "--rdzv_id", node.ID)
	}
	argv = append(argv, "--nproc_per_node", strconv.Itoa(rc.GPUsPerNode),
		// Python 3.11 breaks torch 1.13's default log capture; redirect and tee stderr.
		"--redirects", "2", "--tee", "2")
	if logDir != "" {
		argv = append(argv, "--log_dir", logDir)
	}
	argv = append(argv, script)
	return append(argv, scriptArgs...)
}

// LocalNode is the one node of a run on this host, with a rendezvous on a free
// local port of its own. The port is drawn below the kernel's ephemeral range
// (ip_local_port_range), from which every connection's source port and every
// "port 0" listener is taken: between this check and torchrun binding it, only
// another explicit chooser could take it, and then the static rendezvous fails
// at once instead of hanging (and Run starts it again on another port).
func LocalNode(id string) (*Node, error) {
	lo := ephemeralLow()
	const span = 7000
	first := max(lo-span, 10000)
	var err error
	for range 64 {
		port := first + rand.IntN(lo-first)
		var l net.Listener
		// Every address, as the agent's store binds ([::] and 0.0.0.0): a port
		// some program holds on one interface only is taken for torchrun too.
		if l, err = net.Listen("tcp", ":"+strconv.Itoa(port)); err != nil {
			continue
		}
		if err = l.Close(); err != nil {
			return nil, err
		}
		return &Node{Nodes: 1, Rank: "0", Endpoint: "127.0.0.1:" + strconv.Itoa(port), ID: id}, nil
	}
	return nil, fmt.Errorf("torchrun: no free port for the rendezvous in %d-%d: %w", first, lo-1, err)
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it
// cannot be read or is implausible).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo >= 12000 && lo <= 65535 {
				return lo
			}
		}
	}
	return 32768
}

// AccelerateArgv is the command line of accelerate launch with the generated
// config file. The file is the same on every node; where the nodes meet and which
// one this is go on the command line (accelerate's flags override the file), so
// that a job script can pass $SLURM_NODEID and the first host.
func AccelerateArgv(o Options, node *Node, configFile, script string, scriptArgs []string) []string {
	argv := []string{o.Python, "-m", "accelerate.commands.launch", "--config_file", configFile}
	if node != nil && node.Nodes > 1 {
		host, port, _ := strings.Cut(node.Endpoint, ":")
		argv = append(argv, "--machine_rank", node.Rank, "--main_process_ip", host, "--main_process_port", port)
	}
	argv = append(argv, script)
	return append(argv, scriptArgs...)
}

// layerClasses are the Hugging Face decoder layer classes by architecture, which
// accelerate's transformer wrap policy names.
var layerClasses = map[string]string{
	"llama":   "LlamaDecoderLayer",
	"mistral": "MistralDecoderLayer",
	"qwen2":   "Qwen2DecoderLayer",
	"gpt2":    "GPT2Block",
}

// family is the Hugging Face model family of a shape: config.json's model_type, or
// for a preset its name's prefix (mistral-7b) or architecture.
func family(s shapes.Shape) string {
	if s.ModelType != "" {
		return s.ModelType
	}
	for f := range layerClasses {
		if strings.HasPrefix(s.Name, f) {
			return f
		}
	}
	return s.Arch
}

// AccelerateConfig is the accelerate config file (accelerate's own YAML format) for
// rc: distributed_type FSDP with the run's sharding strategy, wrap policy and layer
// class, prefetch, offload, state dict type and activation checkpointing, or
// MULTI_GPU/MULTI_CPU for ddp. fsdp_version 2 spells the strategy as
// fsdp_reshard_after_forward and has no prefetch settings; it refuses what it
// cannot express rather than silently run something else.
func AccelerateConfig(rc sweeps.RunConfig, o Options) ([]byte, error) {
	cpu := rc.Hardware == "cpu"
	mp := "no"
	switch rc.MixedPrecision {
	case sweeps.BF16, sweeps.FP16:
		mp = rc.MixedPrecision
	}
	nodes := max(rc.Nodes, 1)
	cfg := yaml.MapSlice{
		{Key: "compute_environment", Value: "LOCAL_MACHINE"},
		{Key: "debug", Value: false},
	}
	switch {
	case rc.Sharding == sweeps.DDP && cpu:
		cfg = append(cfg, yaml.MapItem{Key: "distributed_type", Value: "MULTI_CPU"})
	case rc.Sharding == sweeps.DDP:
		cfg = append(cfg, yaml.MapItem{Key: "distributed_type", Value: "MULTI_GPU"})
	default:
		fc, err := fsdpConfig(rc, o)
		if err != nil {
			return nil, err
		}
		cfg = append(cfg, yaml.MapItem{Key: "distributed_type", Value: "FSDP"}, yaml.MapItem{Key: "fsdp_config", Value: fc})
	}
	cfg = append(cfg,
		// Each node's own rank, and where they meet, are AccelerateArgv's flags.
		yaml.MapItem{Key: "machine_rank", Value: 0},
		yaml.MapItem{Key: "main_training_function", Value: "main"},
		yaml.MapItem{Key: "mixed_precision", Value: mp},
		yaml.MapItem{Key: "num_machines", Value: nodes},
		yaml.MapItem{Key: "num_processes", Value: rc.WorldSize},
	)
	if nodes > 1 {
		cfg = append(cfg, yaml.MapItem{Key: "rdzv_backend", Value: "c10d"}, yaml.MapItem{Key: "same_network", Value: true})
	} else {
		cfg = append(cfg, yaml.MapItem{Key: "rdzv_backend", Value: "static"}, yaml.MapItem{Key: "same_network", Value: true})
	}
	cfg = append(cfg, yaml.MapItem{Key: "use_cpu", Value: cpu})
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	// A header says where the file comes from; accelerate ignores comments.
	head := fmt.Sprintf("# accelerate config generated by fsdpbench for run %s\n", rc.ID)
	return append([]byte(head), out...), nil
}

func fsdpConfig(rc sweeps.RunConfig, o Options) (yaml.MapSlice, error) {
	layer := o.LayerClass
	if layer == "" {
		if s, err := shapes.Lookup(rc.Model); err == nil {
			layer = layerClasses[family(s)]
		}
		if layer == "" {
			return nil, fmt.Errorf("torchrun: model %s: no known decoder layer class to wrap; set backend_options.layer_class", rc.Model)
		}
	}
	fc := yaml.MapSlice{}
	if wp := orDefault(rc.WrapPolicy, "transformer"); wp == "transformer" {
		fc = append(fc, yaml.MapItem{Key: "fsdp_auto_wrap_policy", Value: "TRANSFORMER_BASED_WRAP"},
			yaml.MapItem{Key: "fsdp_transformer_layer_cls_to_wrap", Value: layer})
	} else {
		n, err := strconv.ParseInt(strings.TrimPrefix(wp, "size:"), 10, 64)
		if err != nil || !strings.HasPrefix(wp, "size:") {
			return nil, fmt.Errorf("torchrun: wrap_policy %q: use transformer or size:<min params>", wp)
		}
		fc = append(fc, yaml.MapItem{Key: "fsdp_auto_wrap_policy", Value: "SIZE_BASED_WRAP"},
			yaml.MapItem{Key: "fsdp_min_num_params", Value: n})
	}
	fc = append(fc, yaml.MapItem{Key: "fsdp_activation_checkpointing", Value: rc.ActivationCheckpointing},
		yaml.MapItem{Key: "fsdp_cpu_ram_efficient_loading", Value: false},
		yaml.MapItem{Key: "fsdp_offload_params", Value: rc.CPUOffload},
		yaml.MapItem{Key: "fsdp_state_dict_type", Value: o.StateDictType})
	if o.AccelerateFSDPVersion == 2 {
		switch {
		case rc.Sharding != sweeps.FullShard && rc.Sharding != sweeps.ShardGradOp:
			return nil, fmt.Errorf("torchrun: accelerate fsdp_version 2 expresses full_shard and shard_grad_op only, not %s; set backend_options.accelerate_fsdp_version: 1", rc.Sharding)
		case rc.ForwardPrefetch || rc.BackwardPrefetch == sweeps.BackwardPost || rc.BackwardPrefetch == sweeps.PrefetchNone:
			return nil, fmt.Errorf("torchrun: accelerate fsdp_version 2 has no prefetch settings (it always prefetches backward_pre); set backward_prefetch: backward_pre, forward_prefetch: false, or accelerate_fsdp_version: 1")
		}
		fc = append(fc, yaml.MapItem{Key: "fsdp_reshard_after_forward", Value: rc.Sharding == sweeps.FullShard},
			yaml.MapItem{Key: "fsdp_version", Value: 2})
		return fc, nil
	}
	prefetch := "NO_PREFETCH"
	switch rc.BackwardPrefetch {
	case sweeps.BackwardPre, "":
		prefetch = "BACKWARD_PRE"
	case sweeps.BackwardPost:
		prefetch = "BACKWARD_POST"
	}
	fc = append(fc,
		yaml.MapItem{Key: "fsdp_backward_prefetch", Value: prefetch},
		yaml.MapItem{Key: "fsdp_forward_prefetch", Value: rc.ForwardPrefetch},
		yaml.MapItem{Key: "fsdp_sharding_strategy", Value: strings.ToUpper(rc.Sharding)},
		yaml.MapItem{Key: "fsdp_sync_module_states", Value: true},
		yaml.MapItem{Key: "fsdp_use_orig_params", Value: true},
		yaml.MapItem{Key: "fsdp_version", Value: 1})
	return fc, nil
}

// PythonArgv is the command line of launcher: python, the script run as one
// plain process, as a script's single-process mode expects (python train.py
// --device=cpu ...).
func PythonArgv(o Options, script string, scriptArgs []string) []string {
	return append([]string{o.Python, script}, scriptArgs...)
}

// commandWhere names the command template in errors.
const commandWhere = "torchrun: backend_options.command"

// scriptArgsList is the element of a command template that becomes the
// script's argument list.
const scriptArgsList = "script_args"

// CommandArgv is the command line of launcher: command: o.Command expanded with
// the run's variables (vars, from contract.Vars), the launch's own ({python},
// {script}, and where node's ranks meet: {master_addr}, {master_port},
// {node_rank}, {rdzv_endpoint}), and "{script_args}" as the script's arguments.
// Every element stays one argument whatever a value holds: nothing is split
// after substitution and no shell reads it.
func CommandArgv(o Options, vars map[string]string, node *Node, script string, scriptArgs []string) ([]string, error) {
	return contract.ExpandLists(commandWhere, o.Command, commandVars(o, vars, node, script),
		map[string][]string{scriptArgsList: scriptArgs})
}

// commandVars adds the launch's own variables to the run's.
func commandVars(o Options, vars map[string]string, node *Node, script string) map[string]string {
	out := make(map[string]string, len(vars)+6)
	for k, v := range vars {
		out[k] = v
	}
	if node == nil {
		node = &Node{Nodes: 1, Rank: "0", Endpoint: "127.0.0.1:" + strconv.Itoa(o.RdzvPort)}
	}
	host, port, _ := strings.Cut(node.Endpoint, ":")
	out["python"] = o.Python
	out["script"] = script
	out["master_addr"] = host
	out["master_port"] = port
	out["node_rank"] = node.Rank
	out["rdzv_endpoint"] = node.Endpoint
	return out
}
