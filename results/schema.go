// Package results holds the one schema every backend reports in, the run-directory
// store, normalization (tokens/s, MFU, scaling efficiency, memory saving) and the
// reporters (tables, CSV, JSON). Normalization computes; reporters only format.
package results

import "time"

// Status is the outcome of a run.
type Status string

// Run statuses (DESIGN.md). oom and infeasible are results, not failures: a sweep
// that finds the memory wall has succeeded. diverged is a result too: the run ran
// and its loss became NaN or infinite (the error says where); a gate that had it
// ok fails.
const (
	StatusOK         Status = "ok"
	StatusOOM        Status = "oom"
	StatusDiverged   Status = "diverged"
	StatusFailed     Status = "failed"
	StatusTimeout    Status = "timeout"
	StatusCanceled   Status = "canceled"
	StatusInfeasible Status = "infeasible"
)

// Final reports whether a run with this status is finished for good: resume skips it.
func (s Status) Final() bool {
	return s == StatusOK || s == StatusOOM || s == StatusInfeasible || s == StatusDiverged
}

// Fits reports whether the run's configuration fit in memory and ran.
func (s Status) Fits() bool { return s == StatusOK }

// Step is one measured optimizer step (warm-up steps are not reported).
type Step struct {
	Step      int      `json:"step"`
	Loss      *float64 `json:"loss,omitempty"`
	StepTimeS float64  `json:"step_time_s"`
	Tokens    int64    `json:"tokens"`
}

// CommBytes is the payload each collective moved per step, per rank.
type CommBytes struct {
	AllGather     int64 `json:"all_gather"`
	ReduceScatter int64 `json:"reduce_scatter"`
	AllReduce     int64 `json:"all_reduce"`
	// InterNode is the part of the three that went to a rank on another node (the
	// busiest rank's), so a multi-node run shows what crossed the slow link; absent
	// where the backend cannot tell.
	InterNode *int64 `json:"inter_node,omitempty"`
}

// Env describes where a run executed.
type Env struct {
	Hosts       []string `json:"hosts,omitempty"`
	GPU         string   `json:"gpu,omitempty"`
	Driver      string   `json:"driver,omitempty"`
	CUDA        string   `json:"cuda,omitempty"`
	NCCL        string   `json:"nccl,omitempty"`
	CUBLAS      string   `json:"cublas,omitempty"`
	Torch       string   `json:"torch,omitempty"`
	Go          string   `json:"go,omitempty"`
	Fsdpbench   string   `json:"fsdpbench,omitempty"`
	Commit      string   `json:"commit,omitempty"`
	Hardware    string   `json:"hardware,omitempty"` // the hardware profile the figures refer to
	ModelParams int64    `json:"model_params,omitempty"`
	// BLAS is the CPU BLAS a run's GEMMs ran on, with its version and build
	// ("OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY SkylakeX MAX_THREADS=64"), and
	// BLASThreads the threads each rank gave it.
	BLAS        string `json:"blas,omitempty"`
	BLASThreads int    `json:"blas_threads,omitempty"`
	// GivenEnv is the environment the spec gave the run (env:, env.NAME axes);
	// InheritedEnv the variables that tune training (NCCL_*, OMP_*, PYTORCH_*,
	// CUDA_*, ...) the run's processes inherited from fsdpbench's environment
	// without the spec giving them. Kept apart, so a table can tell what the
	// sweep chose from what the machine happened to have.
	GivenEnv     map[string]string `json:"given_env,omitempty"`
	InheritedEnv map[string]string `json:"inherited_env,omitempty"`
	// Machine is what the machine was doing while the run measured (load, other
	// processes, clocks); nil when the harness did not read it.
	Machine *Machine `json:"machine,omitempty"`
}

// RankResult is what one rank reported.
type RankResult struct {
	Rank                  int      `json:"rank"`
	Host                  string   `json:"host,omitempty"`
	MeasuredWallS         float64  `json:"measured_wall_s,omitempty"`
	Tokens                int64    `json:"tokens,omitempty"`
	PeakMemAllocatedBytes *int64   `json:"peak_mem_allocated_bytes,omitempty"`
	PeakMemReservedBytes  *int64   `json:"peak_mem_reserved_bytes,omitempty"`
	PeakDeviceMemBytes    *int64   `json:"peak_device_mem_bytes,omitempty"`
	PeakRSSBytes          *int64   `json:"peak_rss_bytes,omitempty"`
	LossLast              *float64 `json:"loss_last,omitempty"`
	// CheckpointBytes is what this rank wrote for one checkpoint (its shard files,
	// or the whole model on rank 0 of a full checkpoint); CheckpointSaveS its time
	// for one save (median over the run's saves).
	CheckpointBytes *int64   `json:"checkpoint_bytes,omitempty"`
	CheckpointSaveS *float64 `json:"checkpoint_save_s,omitempty"`
	// StepBreakdown is where this rank's median step went (compute, collectives,
	// exposed communication, other); nil when the backend did not measure it.
	StepBreakdown *StepBreakdown `json:"step_breakdown,omitempty"`
}

// Result is what a backend reports for one execution (one repeat) of one run.
// Figures that are unknown stay nil; they are never reported as zero.
type Result struct {
	Status Status `json:"status"`
	Error  string `json:"error,omitempty"`
	// Predicted marks figures that come from the analytic model, not a measurement.
	Predicted bool `json:"predicted,omitempty"`
	// WholeRunWallTime marks a MeasuredWallS that covers the whole run (start-up,
	// warm-up, data loading) rather than the measured steps: the throughput made of
	// it is below the steady state a sweep measures or the sim predicts.
	WholeRunWallTime bool `json:"whole_run_wall_time,omitempty"`

	WorldSize     int   `json:"world_size"`
	Nodes         int   `json:"nodes,omitempty"`
	GPUsPerNode   int   `json:"gpus_per_node,omitempty"`
	TokensPerStep int64 `json:"tokens_per_step,omitempty"`

	// Steps are the measured steps as seen by the slowest rank.
	Steps []Step `json:"steps,omitempty"`
	// MeasuredWallS is the wall time of the measured steps on the slowest rank.
	MeasuredWallS float64 `json:"measured_wall_s,omitempty"`

	// ModelFlopsPerToken is PaLM's 6N + 12·L·H·Q·T (no recompute); PeakFlopsPerS is one
	// rank's dense peak at the run's precision. Together they give MFU.
	ModelFlopsPerToken float64 `json:"model_flops_per_token,omitempty"`
	PeakFlopsPerS      float64 `json:"peak_flops_per_s,omitempty"`

	PeakMemAllocatedBytes *int64 `json:"peak_mem_allocated_bytes,omitempty"`
	PeakMemReservedBytes  *int64 `json:"peak_mem_reserved_bytes,omitempty"`
	PeakDeviceMemBytes    *int64 `json:"peak_device_mem_bytes,omitempty"`
	PeakRSSBytes          *int64 `json:"peak_rss_bytes,omitempty"`
	// DeviceMemBytes is the capacity of one device, when known (for the OOM margin).
	DeviceMemBytes *int64 `json:"device_mem_bytes,omitempty"`

	// MemBreakdownBytes is, per category (params, grads, optimizer,
	// activations, logits, buffers, ...), the peak of the rank with the highest
	// peak, when the backend knows it. Each category's own peak: they need not
	// fall at the same moment, so they may sum to more than the rank's peak
	// (gotrain's tracker also knows what was live at the peak, Stats.AtPeak,
	// which the sim's replay of gotrain checks itself against).
	MemBreakdownBytes map[string]int64 `json:"mem_breakdown_bytes,omitempty"`

	PerRank          []RankResult `json:"per_rank,omitempty"`
	CommBytesPerStep *CommBytes   `json:"comm_bytes_per_step,omitempty"`
	// StepBreakdown is where the run's step went, when the backend measured (or
	// the sim predicted) it; nil = unknown, never zeros. When nil, the slowest
	// rank's PerRank breakdown stands for the run. TimelinePath is the run's
	// Chrome Trace Event file (timeline.json), relative to the repeat's
	// directory, when the backend wrote one.
	StepBreakdown *StepBreakdown `json:"step_breakdown,omitempty"`
	TimelinePath  string         `json:"timeline_path,omitempty"`
	Env           Env            `json:"env"`

	// Checkpoint figures, when the run checkpointed (sweeps' checkpoint axis):
	// CheckpointSaveS is one save's wall time on the slowest rank (median over the
	// run's saves), CheckpointLoadS the resume check's load, CheckpointBytes one
	// checkpoint's files over all ranks (metadata included), CheckpointBytesPerRank
	// the largest rank's share, ResumeExact whether the losses after resuming
	// equal the uninterrupted run's bit for bit (with resume_check).
	CheckpointSaveS        *float64 `json:"checkpoint_save_s,omitempty"`
	CheckpointLoadS        *float64 `json:"checkpoint_load_s,omitempty"`
	CheckpointBytes        *int64   `json:"checkpoint_bytes,omitempty"`
	CheckpointBytesPerRank *int64   `json:"checkpoint_bytes_per_rank,omitempty"`
	ResumeExact            *bool    `json:"resume_exact,omitempty"`

	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`

	// Warnings say what the backend found wrong with the repeat's figures while
	// they stand (a script that counts other tokens than the run's step, fewer
	// steps logged than configured); a backend may also list them in
	// Extra["warnings"], which Normalize reads as well.
	Warnings []string `json:"warnings,omitempty"`

	// Extra keeps backend-specific keys as they were reported.
	Extra map[string]any `json:"extra,omitempty"`
}

// Quantiles summarizes a distribution of per-step (or per-repeat) values.
type Quantiles struct {
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
}

// Interval is a median with its 95% confidence interval (benchmath, as benchstat).
type Interval struct {
	Center float64 `json:"center"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
}

// Metrics is the normalized record of one run (over all its repeats): the content of
// metrics.json. Units are in the names; nil means unknown, never zero.
type Metrics struct {
	RunID     string `json:"run_id"`
	Status    Status `json:"status"`
	Error     string `json:"error,omitempty"`
	Predicted bool   `json:"predicted,omitempty"`
	Repeats   int    `json:"repeats"`

	// WholeRunWallTime: the throughput figures (tokens/s, MFU, TFLOP/s) divide by
	// the whole run's wall time, not the measured steps' (Result.WholeRunWallTime).
	WholeRunWallTime bool `json:"whole_run_wall_time,omitempty"`

	WorldSize     int   `json:"world_size"`
	Nodes         int   `json:"nodes"`
	GPUsPerNode   int   `json:"gpus_per_node"`
	TokensPerStep int64 `json:"tokens_per_step,omitempty"`
	StepsMeasured int   `json:"steps_measured"`

	StepTimeS          *Quantiles `json:"step_time_s,omitempty"`
	TokensPerS         *float64   `json:"tokens_per_s,omitempty"`
	TokensPerSPerRank  *float64   `json:"tokens_per_s_per_rank,omitempty"`
	ModelFlopsPerToken *float64   `json:"model_flops_per_token,omitempty"`
	MFU                *float64   `json:"mfu,omitempty"`
	TFLOPsPerRank      *float64   `json:"tflops_per_rank,omitempty"`

	PeakMemAllocatedBytes *int64 `json:"peak_mem_allocated_bytes,omitempty"`
	PeakMemReservedBytes  *int64 `json:"peak_mem_reserved_bytes,omitempty"`
	PeakDeviceMemBytes    *int64 `json:"peak_device_mem_bytes,omitempty"`
	PeakRSSBytes          *int64 `json:"peak_rss_bytes,omitempty"`
	DeviceMemBytes        *int64 `json:"device_mem_bytes,omitempty"`

	MemBreakdownBytes map[string]int64 `json:"mem_breakdown_bytes,omitempty"`
	PerRank           []RankResult     `json:"per_rank,omitempty"`
	LossFirst         *float64         `json:"loss_first,omitempty"`
	LossLast          *float64         `json:"loss_last,omitempty"`
	CommBytesPerStep  *CommBytes       `json:"comm_bytes_per_step,omitempty"`
	// StepBreakdown is the median repeat's breakdown of its median step (see
	// StepBreakdown); the samples compute_s, collective_s, exposed_comm_s and
	// other_s hold each repeat's.
	StepBreakdown *StepBreakdown `json:"step_breakdown,omitempty"`
	Env           Env            `json:"env"`

	// Checkpoint figures, when the run checkpointed (sweeps' checkpoint axis):
	// CheckpointSaveS is one save's wall time on the slowest rank (median over the
	// run's saves), CheckpointLoadS the resume check's load, CheckpointBytes one
	// checkpoint's files over all ranks (metadata included), CheckpointBytesPerRank
	// the largest rank's share, ResumeExact whether the losses after resuming
	// equal the uninterrupted run's bit for bit (with resume_check).
	CheckpointSaveS        *float64 `json:"checkpoint_save_s,omitempty"`
	CheckpointLoadS        *float64 `json:"checkpoint_load_s,omitempty"`
	CheckpointBytes        *int64   `json:"checkpoint_bytes,omitempty"`
	CheckpointBytesPerRank *int64   `json:"checkpoint_bytes_per_rank,omitempty"`
	ResumeExact            *bool    `json:"resume_exact,omitempty"`

	// With repeats > 1: every repeat's value of each figure, and the median's 95% CI.
	Samples map[string][]float64 `json:"samples,omitempty"`
	CI      map[string]Interval  `json:"ci,omitempty"`

	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`

	// Warnings are every repeat's warnings (Result.Warnings and extra.warnings),
	// each once, in the order first seen: the figures stand, but not at face
	// value. Tables mark the run's figures with WarningMark and list these under
	// them; CSV has them as the warnings column; gate says so of a figure it judges.
	Warnings []string `json:"warnings,omitempty"`

	Extra map[string]any `json:"extra,omitempty"`
}

// F64 returns a pointer to v, for optional figures.
func F64(v float64) *float64 { return &v }

// I64 returns a pointer to v, for optional figures.
func I64(v int64) *int64 { return &v }
