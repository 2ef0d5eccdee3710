package sim

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// Options are the sim's backend_options. The zero value keeps the hardware profile's
// figures.
type Options struct {
	// InterNodeBusBW and IntraNodeBusBW override the profile's collective bus
	// bandwidths, in bytes/s (the spec gives GB/s, as nccl-tests reports busbw).
	InterNodeBusBW float64
	IntraNodeBusBW float64
	// Efficiency overrides the profile's fraction of peak FLOP/s the matmuls
	// reach (attention and the elementwise kernels keep their rates).
	Efficiency float64
	// SleepPerStep makes Run sleep this long per simulated step and emit step events,
	// so the harness's progress, Ctrl-C and resume can be exercised with a backend
	// that is otherwise instant.
	SleepPerStep time.Duration
	// GradientAsBucketView is DDP's gradient_as_bucket_view: gradients live in the
	// all-reduce buckets instead of beside them (saves one gradient copy).
	GradientAsBucketView bool
	// Calibration holds constants fitted to measured runs (`fsdpbench
	// calibrate`), applied per hardware profile; nil: the model's own.
	Calibration *Calibration
	// GradSync, Loss, Attention, Checkpointing, FSDPVersion and ReservedFactor
	// override DefaultAssumptions' fields of the same names; empty (zero) keeps the
	// default.
	GradSync       string
	Loss           string
	Attention      string
	Checkpointing  string
	FSDPVersion    int
	ReservedFactor float64
	// CommOverlap overrides Assumptions.CommOverlap.
	CommOverlap string
	// Dropout (with DropoutSet) overrides Assumptions.Dropout.
	Dropout, DropoutSet bool
	// InterNodeFabric and IntraNodeFabric name a fabric profile (FabricNames)
	// whose nccl-tests busbw curves replace the hardware profile's flat figures.
	InterNodeFabric string
	IntraNodeFabric string
	// NCCLTests are paths of nccl-tests outputs (all_gather_perf,
	// reduce_scatter_perf, all_reduce_perf) whose busbw curves replace the
	// profiles' for the collectives and scope (inside a node, across nodes) they
	// measured.
	NCCLTests []string
	// StorageBW is the checkpoint storage's bandwidth per node, bytes/s
	// (storage_bw_gbps; 0 = DefaultStorageBWGBps).
	StorageBW float64
	// Links are the curves read from InterNodeFabric, IntraNodeFabric and
	// NCCLTests, filled by ParseOptions.
	Links Links
	// noVerdict stops a prediction made for a verdict's alternatives from
	// asking for alternatives of its own.
	noVerdict bool
}

// assumptions merges the options over base.
func (o Options) assumptions(base Assumptions) Assumptions {
	a := base
	if o.GradSync != "" {
		a.GradSync = o.GradSync
	}
	if o.Loss != "" {
		a.Loss = o.Loss
	}
	if o.Attention != "" {
		a.Attention = o.Attention
	}
	if o.Checkpointing != "" {
		a.Checkpointing = o.Checkpointing
	}
	if o.FSDPVersion != 0 {
		a.FSDPVersion = o.FSDPVersion
	}
	if o.ReservedFactor != 0 {
		a.ReservedFactor = o.ReservedFactor
	}
	if o.CommOverlap != "" {
		a.CommOverlap = o.CommOverlap
	}
	if o.GradientAsBucketView {
		a.GradientAsBucketView = true
	}
	if o.DropoutSet {
		a.Dropout = o.Dropout
	}
	return a
}

// option describes one backend option: its name, what it takes and how to read it.
type option struct {
	help string
	set  func(o *Options, v any) error
}

// Bounds of the options. A bus bandwidth above maxBusBWGBps (ten times NVLink 5's
// 1.8 TB/s) is a typo, and one below minBusBWGBps (1 MB/s, 8 Mbit/s: below any link
// collectives run over, while the 50 Mbit/s links the two-node tests shape, 0.00625
// GB/s, must be predictable) or an efficiency below
// minEfficiency predicts steps of centuries, past what the figures derived from
// them can hold (an efficiency of 1e-320 made tokens/s NaN). A simulated step
// sleeps at most maxSleepPerStep (a run that must last, for tests of cancellation).
const (
	minBusBWGBps    = 0.001
	maxBusBWGBps    = 20000
	minEfficiency   = 1e-3
	maxSleepPerStep = time.Hour
	// maxReservedFactor: the caching allocator holding more than twice what is
	// allocated is a leak or a typo, not a fragmentation figure.
	maxReservedFactor = 2
	// maxNCCLTestsFiles bounds backend_options.nccl_tests (one file per
	// collective and scope is 6).
	maxNCCLTestsFiles = 16
)

// choice reads a string option that must be one of ok.
func choice(v any, ok ...string) (string, error) {
	s, isString := v.(string)
	if isString && slices.Contains(ok, s) {
		return s, nil
	}
	return "", fmt.Errorf("must be one of %s, got %s", strings.Join(ok, ", "), describe(v))
}

// describe quotes a value for an error, clipped.
func describe(v any) string {
	if s, ok := v.(string); ok {
		return input.Quote(s, 40)
	}
	return input.Quote(fmt.Sprint(v), 40)
}

var optionTable = map[string]option{
	"storage_bw_gbps": {storageBWHelp, setStorageBW},
	"inter_node_bus_bw_gbps": {"bus bandwidth of collectives that span nodes, GB/s in [0.001, 20000]: nccl-tests' busbw at large sizes across your nodes, not one NIC's line rate (rail-optimized 8 × 400 Gb/s InfiniBand measures hundreds of GB/s; plain TCP a few); better, give nccl_tests or inter_node_fabric",
		func(o *Options, v any) error { return setBusBW(&o.InterNodeBusBW, v) }},
	"intra_node_bus_bw_gbps": {"bus bandwidth inside a node, GB/s in [0.001, 20000] (nccl-tests busbw)",
		func(o *Options, v any) error { return setBusBW(&o.IntraNodeBusBW, v) }},
	"efficiency": {"fraction of peak FLOP/s the step's matmuls reach, in [0.001, 1]",
		func(o *Options, v any) error {
			f, err := backends.NumberIn(v, minEfficiency, 1, false)
			o.Efficiency = f
			return err
		}},
	"sleep_per_step": {"a Go duration (\"50ms\", at most 1h) to sleep per simulated step, emitting step events",
		func(o *Options, v any) error {
			d, err := backends.DurationIn(v, 0, maxSleepPerStep)
			o.SleepPerStep = d
			return err
		}},
	"calibration": {"path of a calibration file written by `fsdpbench calibrate` (its constants for the run's hardware apply)",
		func(o *Options, v any) error {
			path, ok := v.(string)
			if !ok || path == "" {
				return fmt.Errorf("%v is not a file path", v)
			}
			c, err := LoadCalibration(path)
			o.Calibration = c
			return err
		}},
	"grad_sync": {"gradient sync under grad_accum: every_micro_step (FSDP2's default: reduce after every backward, gradients stay sharded) or no_sync (full unsharded fp32 gradients kept until the last micro-step)",
		func(o *Options, v any) error {
			c, err := choice(v, GradSyncEveryMicroStep, GradSyncNoSync)
			o.GradSync = c
			return err
		}},
	"loss": {"loss implementation: upcast (F.cross_entropy on fp32 logits, the default: 12 bytes per logit), fused (logits only, gradient in place) or chunked (no whole-batch logits)",
		func(o *Options, v any) error {
			c, err := choice(v, LossUpcast, LossFused, LossChunked)
			o.Loss = c
			return err
		}},
	"attention": {"attention implementation: auto (flash on a GPU at bf16/fp16, eager otherwise), sdpa (fused on a GPU, math on CPU), flash, math (softmax output kept) or eager (Korthikanti's 5·a·s²·b)",
		func(o *Options, v any) error {
			c, err := choice(v, AttentionAuto, AttentionSDPA, AttentionFlash, AttentionMath, AttentionEager)
			o.Attention = c
			return err
		}},
	"checkpointing": {"what activation_checkpointing: true does: full (every layer checkpointed whole, the default, as Hugging Face's gradient_checkpointing, PyTorch's apply_activation_checkpointing, llm-foundry and Lightning do) or selective (torchtitan's op policy: every other matmul and attention saved)",
		func(o *Options, v any) error {
			c, err := choice(v, CheckpointSelective, CheckpointFull)
			o.Checkpointing = c
			return err
		}},
	"comm_overlap": {"how collectives meet compute: prefetch (under compute as backward_prefetch and forward_prefetch allow, the default) or none (every collective adds to the step, as llm-foundry's torch 2.0 runs measure)",
		func(o *Options, v any) error {
			c, err := choice(v, CommOverlapPrefetch, CommOverlapNone)
			o.CommOverlap = c
			return err
		}},
	"fsdp_version": {"1 (FullyShardedDataParallel, flat parameters) or 2 (fully_shard, the default)",
		func(o *Options, v any) error {
			n, err := backends.WholeIn(v, 1, 2)
			o.FSDPVersion = int(n)
			return err
		}},
	"reserved_factor": {"max_memory_reserved over max_memory_allocated, in [1, 2]",
		func(o *Options, v any) error {
			f, err := backends.NumberIn(v, 1, maxReservedFactor, false)
			o.ReservedFactor = f
			return err
		}},
	"inter_node_fabric": {"a fabric profile for collectives across nodes (nccl-tests busbw curves): " + strings.Join(FabricNames(), ", "),
		func(o *Options, v any) error {
			c, err := choice(v, FabricNames()...)
			o.InterNodeFabric = c
			return err
		}},
	"intra_node_fabric": {"a fabric profile for collectives inside a node (nccl-tests busbw curves): " + strings.Join(FabricNames(), ", "),
		func(o *Options, v any) error {
			c, err := choice(v, FabricNames()...)
			o.IntraNodeFabric = c
			return err
		}},
	"nccl_tests": {fmt.Sprintf("a path, or a list of at most %d paths, of nccl-tests output (all_gather_perf, reduce_scatter_perf, all_reduce_perf) whose busbw curves the prediction uses", maxNCCLTestsFiles),
		func(o *Options, v any) error {
			paths, err := pathList(v)
			o.NCCLTests = paths
			return err
		}},
	"dropout": {"whether the model trains with residual dropout, whose masks cost 2·s·b·h bytes per layer; default false (Llama, MPT)",
		func(o *Options, v any) error {
			b, err := backends.Bool(v)
			o.Dropout, o.DropoutSet = b, err == nil
			return err
		}},
	"ddp_gradient_as_bucket_view": {"DDP's gradient_as_bucket_view (true saves a gradient copy); default false, as in PyTorch",
		func(o *Options, v any) error {
			b, err := backends.Bool(v)
			o.GradientAsBucketView = b
			return err
		}},
}

// OptionNames lists the backend_options the sim accepts, sorted.
func OptionNames() []string {
	names := make([]string, 0, len(optionTable))
	for n := range optionTable {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseOptions reads and validates backend_options. Errors are
// *backends.SpecError values that name the option, the bad value and what is
// accepted; an unknown option suggests the closest known one and lists them.
func ParseOptions(m map[string]any) (Options, error) {
	var o Options
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // report the same error first on every run
	for _, k := range keys {
		opt, ok := optionTable[k]
		if !ok {
			return Options{}, backends.UnknownOption("backend_options", "the sim backend", k, OptionNames())
		}
		if err := opt.set(&o, m[k]); err != nil {
			return Options{}, backends.SpecErrorf("backend_options.%s: %w (%s)", k, err, opt.help)
		}
	}
	links, err := o.links()
	if err != nil {
		return Options{}, backends.SpecErr(err)
	}
	// A flat figure and a curve for the same links contradict each other.
	if o.InterNodeBusBW > 0 && len(links.Inter) > 0 {
		return Options{}, backends.SpecErrorf("backend_options: inter_node_bus_bw_gbps and a curve across nodes (inter_node_fabric, or nccl_tests output spanning nodes) both set the bandwidth between nodes: keep one")
	}
	if o.IntraNodeBusBW > 0 && len(links.Intra) > 0 {
		return Options{}, backends.SpecErrorf("backend_options: intra_node_bus_bw_gbps and a curve inside a node (intra_node_fabric, or nccl_tests output from one node) both set the bandwidth inside a node: keep one")
	}
	o.Links = links
	return o, nil
}

// pathList reads one path or a list of paths.
func pathList(v any) ([]string, error) {
	var items []any
	switch x := v.(type) {
	case string:
		items = []any{x}
	case []any:
		items = x
	case []string:
		for _, s := range x {
			items = append(items, s)
		}
	default:
		return nil, fmt.Errorf("must be a path or a list of paths, got %s", describe(v))
	}
	if len(items) == 0 || len(items) > maxNCCLTestsFiles {
		return nil, fmt.Errorf("must name 1 to %d files, got %d", maxNCCLTestsFiles, len(items))
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		s, ok := it.(string)
		if !ok || strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("item %d must be a non-empty path, got %s", i+1, describe(it))
		}
		out = append(out, s)
	}
	return out, nil
}

func setBusBW(dst *float64, v any) error {
	f, err := backends.NumberIn(v, minBusBWGBps, maxBusBWGBps, false)
	*dst = f * 1e9
	return err
}
