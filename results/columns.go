package results

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// ColumnKind says where a column's value comes from.
type ColumnKind int

// Column kinds, in the order the registry lists them.
const (
	KindID      ColumnKind = iota // the run ID
	KindAxis                      // an axis of the run's config (run_args.json)
	KindMetric                    // a normalized figure (metrics.json)
	KindDerived                   // a figure computed over the set of runs (Derived)
)

// String names the kind as error messages do ("unknown axis ...").
func (k ColumnKind) String() string {
	switch k {
	case KindID:
		return "id"
	case KindAxis:
		return "axis"
	case KindMetric:
		return "metric"
	default:
		return "derived"
	}
}

// Unit is what a column's numbers are. CSV and JSON always hold the plain unit
// (bytes, seconds, fractions); tables scale them for reading (percent; bytes in
// the KiB, MiB or GiB that suits the column's figures, ByteUnitFor).
type Unit int

// Units.
const (
	UnitNone     Unit = iota // text, flags, counts, losses
	UnitBytes                // bytes; tables pick KiB, MiB or GiB from the figures
	UnitBytesMiB             // bytes, shown as UnitBytes (it once meant MiB always)
	UnitSeconds              // seconds
	UnitFraction             // a fraction; tables show percent
	UnitRate                 // a rate (tokens/s, TFLOP/s, FLOP/token)
)

// Column is one field of a run, as every reporter names and reads it.
type Column struct {
	// Name is the field's one name everywhere: the CSV header, the JSON key of
	// reports, --rows/--cols/--metric, gate rules. For config and metrics it is the
	// field's JSON path in run_args.json / metrics.json (nested keys joined by dots).
	Name string
	Kind ColumnKind
	// Header is the table heading, with the unit tables show; a byte column's
	// heading has none, since tables add the unit that suits their figures
	// ("peak reserved (MiB)").
	Header string
	Unit   Unit
	// Order lists an enumerated axis's values in display order.
	Order []string
	// CI names the Metrics.CI entry that bounds this figure, if any.
	CI string
	// Doc says what the field is, for `fsdpbench report --help` and COLUMNS docs.
	Doc string
	// text marks columns of text or flags: a non-ok run shows them as they are,
	// where a figure's cell shows the run's status.
	text bool
	// measuredDefault marks a default figure shown only where a measured run
	// (not the analytic model's prediction) has it: the sim predicts it for
	// every run, and a table of predictions stays as it was.
	measuredDefault bool
	get             func(*Run) any
}

// textual marks c as holding text or flags.
func textual(c Column) Column {
	c.text = true
	return c
}

// Value returns the run's value of the column: string, bool, int64 or float64 in the
// plain unit, or nil when unknown (never a zero standing in for unknown).
func (c Column) Value(r *Run) any { return c.get(r) }

// Text is the run's value as tables show it, in the display unit of the header
// (%), "-" when unknown; a byte figure in the unit that suits it, named ("412 MiB").
func (c Column) Text(r *Run) string {
	v := c.get(r)
	if n, ok := numberOf(v); ok && bytesColumn(&c) {
		return FormatBytes(n)
	}
	return displayValue(&c, v, GiB)
}

// Plain is the run's value as CSV holds it: plain units, empty when unknown.
func (c Column) Plain(r *Run) string { return plainValue(c.get(r)) }

func optF(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// machineF reads a figure of the run's machine state (Env.Machine).
func machineF(get func(*Machine) *float64) func(*Metrics) any {
	return func(m *Metrics) any {
		if m.Env.Machine == nil {
			return nil
		}
		return optF(get(m.Env.Machine))
	}
}

func optI(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func optS(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func optT(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339)
}

func nonZero(v int64) any {
	if v == 0 {
		return nil
	}
	return v
}

func quantile(get func(*Quantiles) float64) func(*Run) any {
	return func(r *Run) any {
		if r.Metrics.StepTimeS == nil {
			return nil
		}
		return get(r.Metrics.StepTimeS)
	}
}

func ciBound(name string, hi bool) func(*Run) any {
	return func(r *Run) any {
		iv, ok := r.Metrics.CI[name]
		if !ok {
			return nil
		}
		if hi {
			return iv.Hi
		}
		return iv.Lo
	}
}

func comm(get func(*CommBytes) int64) func(*Run) any {
	return func(r *Run) any {
		if r.Metrics.CommBytesPerStep == nil {
			return nil
		}
		return get(r.Metrics.CommBytesPerStep)
	}
}

func axis(name, doc string, get func(*sweeps.RunConfig) any) Column {
	return Column{Name: name, Kind: KindAxis, Header: name, Doc: doc, get: func(r *Run) any { return get(&r.Config) }}
}

func metric(name, header string, unit Unit, doc string, get func(*Metrics) any) Column {
	return Column{Name: name, Kind: KindMetric, Header: header, Unit: unit, Doc: doc,
		get: func(r *Run) any { return get(&r.Metrics) }}
}

// registry is every column, in the documented order (see Columns).
var registry = []Column{
	{Name: "id", Kind: KindID, Header: "run", Doc: "run ID: readable slug + hash of the training config", text: true,
		get: func(r *Run) any { return optS(r.Config.ID) }},

	axis("sweep", "sweep name", func(c *sweeps.RunConfig) any { return optS(c.Sweep) }),
	axis("backend", "backend that ran it", func(c *sweeps.RunConfig) any { return optS(c.Backend) }),
	axis("launcher", "local or slurm", func(c *sweeps.RunConfig) any { return optS(c.Launcher) }),
	axis("hardware", "hardware profile", func(c *sweeps.RunConfig) any { return optS(c.Hardware) }),
	axis("model", "model preset or config path", func(c *sweeps.RunConfig) any { return optS(c.Model) }),
	axis("seq_len", "sequence length (tokens)", func(c *sweeps.RunConfig) any { return int64(c.SeqLen) }),
	axis("steps", "measured steps", func(c *sweeps.RunConfig) any { return int64(c.Steps) }),
	axis("warmup_steps", "unmeasured warm-up steps", func(c *sweeps.RunConfig) any { return int64(c.WarmupSteps) }),
	axis("repeats", "whole-run repetitions asked for", func(c *sweeps.RunConfig) any { return int64(c.Repeats) }),
	axis("seed", "data and init seed", func(c *sweeps.RunConfig) any { return c.Seed }),
	axis("world_size", "ranks in all", func(c *sweeps.RunConfig) any { return int64(c.WorldSize) }),
	axis("nodes", "nodes", func(c *sweeps.RunConfig) any { return int64(c.Nodes) }),
	axis("gpus_per_node", "ranks per node", func(c *sweeps.RunConfig) any { return int64(c.GPUsPerNode) }),
	axis("batch_per_device", "micro-batch per rank (samples)", func(c *sweeps.RunConfig) any { return int64(c.BatchPerDevice) }),
	axis("grad_accum", "micro-steps per optimizer step", func(c *sweeps.RunConfig) any { return int64(c.GradAccum) }),
	axis("global_batch", "samples per optimizer step, all ranks", func(c *sweeps.RunConfig) any { return int64(c.GlobalBatch) }),
	{Name: "sharding", Kind: KindAxis, Header: "sharding", Order: sweeps.ShardingValues, Doc: "FSDP sharding strategy, or ddp",
		get: func(r *Run) any { return optS(r.Config.Sharding) }},
	axis("activation_checkpointing", "recompute each unit's forward in backward", func(c *sweeps.RunConfig) any { return c.ActivationCheckpointing }),
	{Name: "backward_prefetch", Kind: KindAxis, Header: "backward_prefetch", Order: sweeps.BackwardPrefetchValues, Doc: "when the next unit's all-gather is issued in backward",
		get: func(r *Run) any { return optS(r.Config.BackwardPrefetch) }},
	axis("forward_prefetch", "issue the next unit's all-gather in forward", func(c *sweeps.RunConfig) any { return c.ForwardPrefetch }),
	axis("cpu_offload", "sharded states in host memory", func(c *sweeps.RunConfig) any { return c.CPUOffload }),
	{Name: "mixed_precision", Kind: KindAxis, Header: "mixed_precision", Order: sweeps.MixedPrecisionValues, Doc: "compute precision",
		get: func(r *Run) any { return optS(r.Config.MixedPrecision) }},
	axis("wrap_policy", "FSDP unit boundaries", func(c *sweeps.RunConfig) any { return optS(c.WrapPolicy) }),
	axis("compile", "torch.compile", func(c *sweeps.RunConfig) any { return c.Compile }),
	axis("backend_options", "backend-specific options (JSON)", func(c *sweeps.RunConfig) any { return optS(optionsText(c.BackendOptions)) }),
	{Name: "checkpoint", Kind: KindAxis, Header: "checkpoint", Order: sweeps.CheckpointValues, Doc: "checkpoint kind: none, sharded (a file per rank) or full (rank 0)",
		get: func(r *Run) any { return optS(checkpointKind(&r.Config)) }},
	axis("checkpoint_every", "measured steps between checkpoints", func(c *sweeps.RunConfig) any { return nonZero(int64(c.CheckpointEvery)) }),
	axis("resume_check", "reload the first checkpoint and compare the resumed losses", func(c *sweeps.RunConfig) any { return c.ResumeCheck }),

	textual(metric("status", "status", UnitNone, "ok, oom, diverged, failed, timeout, canceled or infeasible", func(m *Metrics) any { return optS(string(m.Status)) })),
	textual(metric("error", "error", UnitNone, "why the run is not ok", func(m *Metrics) any { return optS(m.Error) })),
	textual(metric("predicted", "predicted", UnitNone, "figures come from the analytic model, not a measurement", func(m *Metrics) any { return m.Predicted })),
	metric("steps_measured", "steps", UnitNone, "measured steps per repeat", func(m *Metrics) any { return nonZero(int64(m.StepsMeasured)) }),
	metric("tokens_per_step", "tokens/step", UnitNone, "tokens per optimizer step, all ranks", func(m *Metrics) any { return nonZero(m.TokensPerStep) }),
	{Name: "step_time_s.median", Kind: KindMetric, Header: "step median (s)", Unit: UnitSeconds, CI: SampleStepTimeS,
		Doc: "median step time over the measured steps", get: quantile(func(q *Quantiles) float64 { return q.Median })},
	{Name: "step_time_s.p10", Kind: KindMetric, Header: "step p10 (s)", Unit: UnitSeconds,
		Doc: "10th percentile of step time", get: quantile(func(q *Quantiles) float64 { return q.P10 })},
	{Name: "step_time_s.p90", Kind: KindMetric, Header: "step p90 (s)", Unit: UnitSeconds,
		Doc: "90th percentile of step time", get: quantile(func(q *Quantiles) float64 { return q.P90 })},
	{Name: "tokens_per_s", Kind: KindMetric, Header: "tokens/s", Unit: UnitRate, CI: SampleTokensPerS,
		Doc: "tokens of all ranks / measured wall time (slowest rank)", get: func(r *Run) any { return optF(r.Metrics.TokensPerS) }},
	{Name: "tokens_per_s_per_rank", Kind: KindMetric, Header: "tokens/s/rank", Unit: UnitRate, CI: SampleTokensPerSPerRank,
		Doc: "tokens_per_s / world_size", get: func(r *Run) any { return optF(r.Metrics.TokensPerSPerRank) }},
	{Name: "ci.tokens_per_s_per_rank.lo", Kind: KindMetric, Header: "tokens/s/rank CI lo", Unit: UnitRate,
		Doc: "low end of the median's 95% CI over repeats", get: ciBound(SampleTokensPerSPerRank, false)},
	{Name: "ci.tokens_per_s_per_rank.hi", Kind: KindMetric, Header: "tokens/s/rank CI hi", Unit: UnitRate,
		Doc: "high end of the median's 95% CI over repeats", get: ciBound(SampleTokensPerSPerRank, true)},
	metric("model_flops_per_token", "FLOP/token", UnitRate, "6N + 12·L·H·Q·T (PaLM), no recompute", func(m *Metrics) any { return optF(m.ModelFlopsPerToken) }),
	{Name: "mfu", Kind: KindMetric, Header: "MFU (%)", Unit: UnitFraction, CI: SampleMFU,
		Doc: "model FLOPs utilization: flops/token x tokens/s/rank / peak", get: func(r *Run) any { return optF(r.Metrics.MFU) }},
	{Name: "tflops_per_rank", Kind: KindMetric, Header: "TFLOP/s/rank", Unit: UnitRate, CI: SampleTFLOPsPerRank,
		Doc: "model TFLOP/s per rank", get: func(r *Run) any { return optF(r.Metrics.TFLOPsPerRank) }},
	metric("peak_mem_allocated_bytes", "peak allocated", UnitBytes, "peak allocated device memory, max over ranks and repeats", func(m *Metrics) any { return optI(m.PeakMemAllocatedBytes) }),
	metric("peak_mem_reserved_bytes", "peak reserved", UnitBytes, "peak reserved (allocator) device memory, max over ranks and repeats", func(m *Metrics) any { return optI(m.PeakMemReservedBytes) }),
	metric("peak_device_mem_bytes", "peak device", UnitBytes, "peak device memory in use (NVML)", func(m *Metrics) any { return optI(m.PeakDeviceMemBytes) }),
	metric("peak_rss_bytes", "peak RSS", UnitBytes, "peak resident host memory of a rank", func(m *Metrics) any { return optI(m.PeakRSSBytes) }),
	metric("device_mem_bytes", "device memory", UnitBytes, "capacity of one device", func(m *Metrics) any { return optI(m.DeviceMemBytes) }),
	metric("loss_first", "loss first", UnitNone, "loss of the first measured step", func(m *Metrics) any { return optF(m.LossFirst) }),
	metric("loss_last", "loss last", UnitNone, "loss of the last measured step", func(m *Metrics) any { return optF(m.LossLast) }),
	{Name: "comm_bytes_per_step.all_gather", Kind: KindMetric, Header: "all-gather/step", Unit: UnitBytesMiB,
		Doc: "all-gather payload per step per rank", get: comm(func(c *CommBytes) int64 { return c.AllGather })},
	{Name: "comm_bytes_per_step.reduce_scatter", Kind: KindMetric, Header: "reduce-scatter/step", Unit: UnitBytesMiB,
		Doc: "reduce-scatter payload per step per rank", get: comm(func(c *CommBytes) int64 { return c.ReduceScatter })},
	{Name: "comm_bytes_per_step.all_reduce", Kind: KindMetric, Header: "all-reduce/step", Unit: UnitBytesMiB,
		Doc: "all-reduce payload per step per rank", get: comm(func(c *CommBytes) int64 { return c.AllReduce })},
	{Name: "comm_bytes_per_step.inter_node", Kind: KindMetric, Header: "inter-node/step", Unit: UnitBytesMiB,
		Doc: "payload per step the busiest rank sent to a rank on another node (all collectives)", get: func(r *Run) any {
			if c := r.Metrics.CommBytesPerStep; c != nil && c.InterNode != nil {
				return *c.InterNode
			}
			return nil
		}},
	textual(metric("env.gpu", "GPU", UnitNone, "device model", func(m *Metrics) any { return optS(m.Env.GPU) })),
	textual(metric("started", "started", UnitNone, "start of the first repeat (UTC, RFC 3339)", func(m *Metrics) any { return optT(m.Started) })),
	textual(metric("finished", "finished", UnitNone, "end of the last repeat (UTC, RFC 3339)", func(m *Metrics) any { return optT(m.Finished) })),
	{Name: "checkpoint_save_s", Kind: KindMetric, Header: "ckpt save (s)", Unit: UnitSeconds, CI: SampleCheckpointSaveS,
		Doc: "one checkpoint save, slowest rank (median over saves)", get: func(r *Run) any { return optF(r.Metrics.CheckpointSaveS) }},
	{Name: "checkpoint_load_s", Kind: KindMetric, Header: "ckpt load (s)", Unit: UnitSeconds, CI: SampleCheckpointLoadS,
		Doc: "the resume check's checkpoint load, slowest rank", get: func(r *Run) any { return optF(r.Metrics.CheckpointLoadS) }},
	metric("checkpoint_bytes", "ckpt", UnitBytesMiB, "one checkpoint's files, all ranks, metadata included", func(m *Metrics) any { return optI(m.CheckpointBytes) }),
	metric("checkpoint_bytes_per_rank", "ckpt/rank", UnitBytesMiB, "the largest rank's share of one checkpoint", func(m *Metrics) any { return optI(m.CheckpointBytesPerRank) }),
	metric("resume_exact", "resume exact", UnitNone, "1 when the resumed losses equal the uninterrupted ones bit for bit, else 0", resumeExactValue),
	textual(metric("whole_run_wall_time", "whole run", UnitNone, "throughput figures divide by the whole run's wall time (start-up and warm-up included), not the measured steps' (tables mark them †)",
		func(m *Metrics) any { return m.WholeRunWallTime })),
	breakdownRegistry[0], breakdownRegistry[1], breakdownRegistry[2], breakdownRegistry[3], breakdownRegistry[4],
	breakdownRegistry[5], breakdownRegistry[6], breakdownRegistry[7], breakdownRegistry[8],
	metric("env.machine.other_cpu_share", "other CPU (%)", UnitFraction, "share of the host's CPU other processes used while the run ran (median over repeats)",
		machineF(func(x *Machine) *float64 { return x.OtherCPUShare })),
	metric("env.machine.load1", "load1", UnitNone, "host's 1-minute load average at the end of a repeat (median over repeats)",
		machineF(func(x *Machine) *float64 { return x.Load1 })),
	metric("env.machine.cpu_mhz", "CPU MHz", UnitNone, "mean CPU clock (cpufreq) at the end of a repeat (median over repeats)",
		machineF(func(x *Machine) *float64 { return x.CPUMHz })),
	metric("env.machine.gpu_other_processes", "GPU others", UnitNone, "most processes seen on the run's GPUs that were not fsdpbench's (NVML)",
		func(m *Metrics) any {
			if x := m.Env.Machine; x != nil && x.GPUOtherProcesses != nil {
				return int64(*x.GPUOtherProcesses)
			}
			return nil
		}),
	metric("env.machine.gpu_sm_clock_mhz", "SM MHz", UnitNone, "median SM clock of the run's GPUs (NVML)",
		machineF(func(x *Machine) *float64 { return x.GPUSMClockMHz })),
	metric("env.machine.gpu_throttled_share", "GPU throttled (%)", UnitFraction, "share of GPU readings with the clocks held down by power, thermal or hardware slowdown (NVML)",
		machineF(func(x *Machine) *float64 { return x.GPUThrottledShare })),
	textual(metric("env.machine.gpu_throttle", "GPU throttle", UnitNone, "every reason NVML gave for holding the GPU clocks down",
		func(m *Metrics) any {
			if x := m.Env.Machine; x != nil && len(x.GPUThrottle) > 0 {
				return strings.Join(x.GPUThrottle, " ")
			}
			return nil
		})),
	textual(metric("warnings", "warnings", UnitNone, "what the backend found wrong with the run's figures, as a JSON list (tables mark the figures "+WarningMark+")",
		func(m *Metrics) any { return warningsText(m.Warnings) })),

	{Name: "scaling_efficiency", Kind: KindDerived, Header: "scaling eff. (%)", Unit: UnitFraction,
		Doc: "tokens/s/rank over that of the same config at the smallest world size",
		get: func(r *Run) any { return optF(r.Derived.ScalingEfficiency) }},
	{Name: "memory_saving", Kind: KindDerived, Header: "memory saving (%)", Unit: UnitFraction,
		Doc: "1 - peak / peak of no_shard (else ddp) at the same point",
		get: func(r *Run) any { return optF(r.Derived.MemorySaving) }},
	{Name: "model_state_bytes", Kind: KindDerived, Header: "model states", Unit: UnitBytes,
		Doc: "parameters + gradients + optimizer state of one rank, from mem_breakdown_bytes",
		get: func(r *Run) any { return optI(r.Derived.ModelStateBytes) }},
	{Name: "noise", Kind: KindDerived, Header: "noise", text: true,
		Doc: "why the run's timed figures are too noisy to trust (tables mark them " + NoiseMark + "); empty when they are not",
		get: func(r *Run) any { return optS(r.Derived.Noise) }},
	{Name: "scaling_efficiency_noise", Kind: KindDerived, Header: "scaling eff. noise", text: true,
		Doc: "why scaling_efficiency is too noisy to trust: its run's or its baseline's figures are",
		get: func(r *Run) any { return optS(r.Derived.ScalingEfficiencyNoise) }},
	{Name: "scaling_efficiency_warned", Kind: KindDerived, Header: "scaling eff. warned", text: true,
		Doc: "scaling_efficiency's run or baseline carries warnings (empty when there is no scaling_efficiency)",
		get: func(r *Run) any { return flagOf(r.Derived.ScalingEfficiency != nil, r.Derived.ScalingEfficiencyWarned) }},
	{Name: "memory_saving_warned", Kind: KindDerived, Header: "memory saving warned", text: true,
		Doc: "memory_saving's run or baseline carries warnings (empty when there is no memory_saving)",
		get: func(r *Run) any { return flagOf(r.Derived.MemorySaving != nil, r.Derived.MemorySavingWarned) }},
}

// flagOf is a derived figure's flag: nil (unknown) where the figure is absent.
func flagOf(known, v bool) any {
	if !known {
		return nil
	}
	return v
}

// warningsText is a run's warnings as one cell: a JSON list, so that a reader
// gets each back whatever it holds (commas, newlines); nil for none.
func warningsText(ws []string) any {
	if len(ws) == 0 {
		return nil
	}
	b, err := json.Marshal(ws)
	if err != nil {
		return nil // strings always marshal
	}
	return string(b)
}

var registryIndex = func() map[string]int {
	m := make(map[string]int, len(registry))
	for i, c := range registry {
		m[c.Name] = i
	}
	return m
}()

// Columns lists every column in the one documented order that CSV, JSON reports and
// tables follow:
//
//	id
//	axes:    sweep backend launcher hardware model seq_len steps warmup_steps repeats
//	         seed world_size nodes gpus_per_node batch_per_device grad_accum
//	         global_batch sharding activation_checkpointing backward_prefetch
//	         forward_prefetch cpu_offload mixed_precision wrap_policy compile
//	         backend_options checkpoint checkpoint_every resume_check
//	metrics: status error predicted steps_measured tokens_per_step
//	         step_time_s.median step_time_s.p10 step_time_s.p90 tokens_per_s
//	         tokens_per_s_per_rank ci.tokens_per_s_per_rank.lo
//	         ci.tokens_per_s_per_rank.hi model_flops_per_token mfu tflops_per_rank
//	         peak_mem_allocated_bytes peak_mem_reserved_bytes peak_device_mem_bytes
//	         peak_rss_bytes device_mem_bytes loss_first loss_last
//	         comm_bytes_per_step.all_gather comm_bytes_per_step.reduce_scatter
//	         comm_bytes_per_step.all_reduce comm_bytes_per_step.inter_node env.gpu
//	         started finished checkpoint_save_s checkpoint_load_s checkpoint_bytes
//	         checkpoint_bytes_per_rank resume_exact whole_run_wall_time
//	         step_breakdown.step_s step_breakdown.compute_s
//	         step_breakdown.collective_s step_breakdown.all_gather_s
//	         step_breakdown.reduce_scatter_s step_breakdown.all_reduce_s
//	         step_breakdown.exposed_comm_s step_breakdown.other_s
//	         step_breakdown.source
//	         env.machine.other_cpu_share env.machine.load1 env.machine.cpu_mhz
//	         env.machine.gpu_other_processes env.machine.gpu_sm_clock_mhz
//	         env.machine.gpu_throttled_share env.machine.gpu_throttle warnings
//	derived: scaling_efficiency memory_saving model_state_bytes noise
//	         scaling_efficiency_noise scaling_efficiency_warned memory_saving_warned
//
// New columns are appended within their kind; names never change once released.
func Columns() []Column { return append([]Column(nil), registry...) }

// ColumnsOf lists the columns of one kind, in registry order.
func ColumnsOf(kind ColumnKind) []Column {
	var out []Column
	for _, c := range registry {
		if c.Kind == kind {
			out = append(out, c)
		}
	}
	return out
}

// LookupColumn finds a column by name; the error lists the valid names of the kinds
// asked for (all kinds when none is given).
func LookupColumn(name string, kinds ...ColumnKind) (Column, error) {
	if _, ok := registryIndex[name]; !ok {
		if c, ok := dynamicColumn(name); ok && (len(kinds) == 0 || slices.Contains(kinds, KindAxis)) {
			return c, nil
		}
	}
	b, isBreakdown := breakdownColumn(name)
	if i, ok := registryIndex[name]; ok || predictedIndex[name] > 0 || isBreakdown {
		c := predictedColumn(name)
		if isBreakdown {
			c = b
		}
		if ok {
			c = registry[i]
		}
		if len(kinds) == 0 {
			return c, nil
		}
		for _, k := range kinds {
			if c.Kind == k {
				return c, nil
			}
		}
	}
	var valid []string
	for _, c := range registry {
		for _, k := range kinds {
			if c.Kind == k {
				valid = append(valid, c.Name)
			}
		}
		if len(kinds) == 0 {
			valid = append(valid, c.Name)
		}
	}
	what := make([]string, len(kinds))
	for i, k := range kinds {
		what[i] = k.String()
	}
	kind := "column"
	if len(what) > 0 {
		kind = strings.Join(what, " or ")
	}
	return Column{}, fmt.Errorf("unknown %s %q; valid names: %s", kind, name, strings.Join(valid, ", "))
}

// compareValues orders two values of column c: unknown last, enumerated axes in
// their declared order, numbers by value, false before true, text by name.
func compareValues(c *Column, a, b any) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return 1
	case b == nil:
		return -1
	}
	switch x := a.(type) {
	case int64:
		if y, ok := b.(int64); ok {
			return cmpOrdered(x, y)
		}
	case float64:
		if y, ok := b.(float64); ok {
			return cmpOrdered(x, y)
		}
	case bool:
		if y, ok := b.(bool); ok {
			return cmpOrdered(b01(x), b01(y))
		}
	case string:
		if y, ok := b.(string); ok {
			if len(c.Order) > 0 {
				if d := cmpOrdered(orderOf(c.Order, x), orderOf(c.Order, y)); d != 0 {
					return d
				}
			}
			return strings.Compare(x, y)
		}
	}
	return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func b01(b bool) int {
	if b {
		return 1
	}
	return 0
}

func orderOf(order []string, v string) int {
	for i, o := range order {
		if o == v {
			return i
		}
	}
	return len(order)
}
