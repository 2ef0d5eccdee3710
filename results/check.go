package results

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// Bounds of CheckMetrics. They are far above any real run, so that they only catch
// figures that no measurement can give: an overflowed counter, a plugin's garbage, a
// hand edit. Every figure below its bound stays finite through every derived column
// (ratios, sums, geometric means).
const (
	// MaxMemBytes bounds any memory figure of one rank, and each collective's payload
	// per step: 1 PiB.
	MaxMemBytes = int64(1) << 50
	// MaxStepTimeS bounds a step time, and a measured wall time: 30 days.
	MaxStepTimeS = 30 * 24 * 3600.0
	// MinStepTimeS is the shortest step time taken as measured (1 ns): below it a
	// clock did not tick, and throughput would overflow.
	MinStepTimeS = 1e-9
	// MaxTokensPerS bounds the throughput of a whole run (a million ranks at ten
	// million tokens per second each).
	MaxTokensPerS = 1e13
	// MinTokensPerS is the smallest throughput above 0 taken as measured (a token in
	// 11 days): below it, ratios (scaling efficiency) leave every bound.
	MinTokensPerS = 1e-6
	// MaxFlopsPerToken bounds model_flops_per_token (6N for a 10^17-parameter model).
	MaxFlopsPerToken = 1e18
	// MaxTFLOPsPerRank bounds tflops_per_rank (an exaFLOP/s per device).
	MaxTFLOPsPerRank = 1e6
	// MaxMFU bounds mfu. A real MFU is below 1; up to MaxMFU is a wrong peak (the run's
	// hardware profile), which a report shows rather than hides.
	MaxMFU = 100.0
	// MaxLoss bounds the absolute value of a loss.
	MaxLoss = 1e12
	// MaxRepeats bounds the repeats of a run (and the samples of a figure).
	MaxRepeats = 1 << 20
	// MaxWorldSize bounds world_size, nodes and gpus_per_node.
	MaxWorldSize = 1 << 24
	// MaxSteps bounds steps_measured where the run's config is not known.
	MaxSteps = 1 << 40
)

// InvalidRunError says which figure of which run is invalid, and where the run is
// stored when it was read from a file.
type InvalidRunError struct {
	// Run is the run's ID (or its directory name); Path the file read, if any.
	Run, Path string
	// Field is the metrics.json name of the figure (or run_args.json's, for the ID).
	Field string
	Msg   string
	// Hint says what to do; empty: rerun the run or delete its directory.
	Hint string
}

// Error names the file (or run), the field and what is wrong with it, and says what
// to do.
func (e *InvalidRunError) Error() string {
	where := "run " + e.Run
	if e.Path != "" {
		where = e.Path
		if e.Run != "" {
			where += " (run " + e.Run + ")"
		}
	}
	hint := e.Hint
	if hint == "" {
		hint = "rerun it (fsdpbench sweep --rerun) or delete the run's directory"
	}
	return fmt.Sprintf("%s: invalid run: %s %s; %s", where, e.Field, e.Msg, hint)
}

// Known reports whether s is one of the run statuses of the schema. Load refuses a
// run with any other status: an unknown status must never read as passing.
func (s Status) Known() bool {
	_, ok := statusSeverity[s]
	return ok
}

// knownStatuses lists the statuses for error messages, best first.
func knownStatuses() string {
	var ss []Status
	for s := range statusSeverity {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i].Severity() < ss[j].Severity() })
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// CheckMetrics checks every figure of m: a known status, a world size of at least 1,
// figures finite, non-negative where they must be and below the bounds above,
// quantiles in order, steps_measured no more than rc configured, tokens_per_s equal
// to tokens_per_s_per_rank × world_size, per-rank entries within the world, and
// m.RunID equal to rc.ID. rc may be nil where the config is not known; the checks
// that need it are then left out. The error is an *InvalidRunError naming the run
// and the field. Load applies it to every run it reads and WriteMetrics to every run
// it writes, so a figure that passes never breaks a reporter (+Inf in a derived
// column, a JSON export that cannot be encoded).
func CheckMetrics(rc *sweeps.RunConfig, m *Metrics) error {
	id := m.RunID
	if rc != nil && rc.ID != "" {
		id = rc.ID
	}
	bad := func(field, format string, args ...any) error {
		return &InvalidRunError{Run: id, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if m.Status == "" {
		return bad("status", "is missing (a run records ok, oom, failed, ...)")
	}
	if !m.Status.Known() {
		return bad("status", "%s is not a run status (%s)", input.Quote(string(m.Status), 64), knownStatuses())
	}
	if rc != nil && rc.ID != "" && m.RunID != "" && m.RunID != rc.ID {
		return bad("run_id", "%s is not the run's ID %q (run_args.json)", input.Quote(m.RunID, 64), rc.ID)
	}
	if m.WorldSize < 1 || m.WorldSize > MaxWorldSize {
		return bad("world_size", "%d is not between 1 and %d", m.WorldSize, MaxWorldSize)
	}
	if rc != nil && rc.WorldSize > 0 && m.WorldSize != rc.WorldSize {
		return bad("world_size", "%d is not the run's world_size %d (run_args.json)", m.WorldSize, rc.WorldSize)
	}
	if m.Nodes < 0 || m.Nodes > m.WorldSize {
		return bad("nodes", "%d is not between 0 and world_size %d", m.Nodes, m.WorldSize)
	}
	if m.GPUsPerNode < 0 || m.GPUsPerNode > m.WorldSize {
		return bad("gpus_per_node", "%d is not between 0 and world_size %d", m.GPUsPerNode, m.WorldSize)
	}
	if m.Repeats < 0 || m.Repeats > MaxRepeats {
		return bad("repeats", "%d is not between 0 and %d", m.Repeats, MaxRepeats)
	}
	maxSteps := MaxSteps
	if rc != nil && rc.Steps > 0 {
		maxSteps = rc.Steps
	}
	if m.StepsMeasured < 0 || m.StepsMeasured > maxSteps {
		return bad("steps_measured", "%d is not between 0 and the %d steps configured", m.StepsMeasured, maxSteps)
	}
	if m.TokensPerStep < 0 {
		return bad("tokens_per_step", "%d is negative", m.TokensPerStep)
	}
	if q := m.StepTimeS; q != nil {
		for _, f := range []struct {
			name string
			v    float64
		}{{"step_time_s.p10", q.P10}, {"step_time_s.median", q.Median}, {"step_time_s.p90", q.P90}} {
			if err := inRange(f.v, MinStepTimeS, MaxStepTimeS); err != "" {
				return bad(f.name, "%s", err)
			}
		}
		if !(q.P10 <= q.Median && q.Median <= q.P90) {
			return bad("step_time_s", "quantiles out of order: p10 %g, median %g, p90 %g", q.P10, q.Median, q.P90)
		}
	}
	for _, f := range []struct {
		name    string
		v       *float64
		lo, hi  float64
		nonzero bool
	}{
		{"tokens_per_s", m.TokensPerS, 0, MaxTokensPerS, false},
		{"tokens_per_s_per_rank", m.TokensPerSPerRank, 0, MaxTokensPerS, false},
		{"model_flops_per_token", m.ModelFlopsPerToken, 0, MaxFlopsPerToken, false},
		{"mfu", m.MFU, 0, MaxMFU, false},
		{"tflops_per_rank", m.TFLOPsPerRank, 0, MaxTFLOPsPerRank, false},
		{"loss_first", m.LossFirst, -MaxLoss, MaxLoss, false},
		{"loss_last", m.LossLast, -MaxLoss, MaxLoss, false},
	} {
		if f.v == nil {
			continue
		}
		if err := inRange(*f.v, f.lo, f.hi); err != "" {
			return bad(f.name, "%s", err)
		}
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"tokens_per_s", m.TokensPerS}, {"tokens_per_s_per_rank", m.TokensPerSPerRank}} {
		if f.v != nil && *f.v > 0 && *f.v < MinTokensPerS {
			return bad(f.name, "%g is above 0 but below %g: no run measures so little", *f.v, MinTokensPerS)
		}
	}
	if m.TokensPerS != nil && m.TokensPerSPerRank != nil {
		want := *m.TokensPerSPerRank * float64(m.WorldSize)
		if math.Abs(want-*m.TokensPerS) > 1e-6*math.Max(math.Abs(want), math.Abs(*m.TokensPerS)) {
			return bad("tokens_per_s", "%g is not tokens_per_s_per_rank %g × world_size %d", *m.TokensPerS, *m.TokensPerSPerRank, m.WorldSize)
		}
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{
		{"peak_mem_allocated_bytes", m.PeakMemAllocatedBytes}, {"peak_mem_reserved_bytes", m.PeakMemReservedBytes},
		{"peak_device_mem_bytes", m.PeakDeviceMemBytes}, {"peak_rss_bytes", m.PeakRSSBytes}, {"device_mem_bytes", m.DeviceMemBytes},
	} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxMemBytes) {
			return bad(f.name, "%d is not between 0 and %d (1 PiB)", *f.v, MaxMemBytes)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.MemBreakdownBytes)) {
		if v := m.MemBreakdownBytes[k]; v < 0 || v > MaxMemBytes {
			return bad("mem_breakdown_bytes."+clip(k), "%d is not between 0 and %d (1 PiB)", v, MaxMemBytes)
		}
	}
	if c := m.CommBytesPerStep; c != nil {
		for _, f := range []struct {
			name string
			v    int64
		}{{"all_gather", c.AllGather}, {"reduce_scatter", c.ReduceScatter}, {"all_reduce", c.AllReduce}, {"inter_node", ptrOr(c.InterNode, 0)}} {
			if f.v < 0 || f.v > MaxMemBytes {
				return bad("comm_bytes_per_step."+f.name, "%d is not between 0 and %d (1 PiB)", f.v, MaxMemBytes)
			}
		}
	}
	if len(m.PerRank) > m.WorldSize {
		return bad("per_rank", "has %d entries for world_size %d", len(m.PerRank), m.WorldSize)
	}
	for i, pr := range m.PerRank {
		field := fmt.Sprintf("per_rank[%d]", i)
		if pr.Rank < 0 || pr.Rank >= m.WorldSize {
			return bad(field+".rank", "%d is not a rank of world_size %d", pr.Rank, m.WorldSize)
		}
		if err := inRange(pr.MeasuredWallS, 0, MaxStepTimeS*float64(MaxRepeats)); err != "" {
			return bad(field+".measured_wall_s", "%s", err)
		}
		if pr.Tokens < 0 {
			return bad(field+".tokens", "%d is negative", pr.Tokens)
		}
		for _, f := range []struct {
			name string
			v    *int64
		}{{"peak_mem_allocated_bytes", pr.PeakMemAllocatedBytes}, {"peak_mem_reserved_bytes", pr.PeakMemReservedBytes},
			{"peak_device_mem_bytes", pr.PeakDeviceMemBytes}, {"peak_rss_bytes", pr.PeakRSSBytes}} {
			if f.v != nil && (*f.v < 0 || *f.v > MaxMemBytes) {
				return bad(field+"."+f.name, "%d is not between 0 and %d (1 PiB)", *f.v, MaxMemBytes)
			}
		}
		if pr.LossLast != nil {
			if err := inRange(*pr.LossLast, -MaxLoss, MaxLoss); err != "" {
				return bad(field+".loss_last", "%s", err)
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m.Samples)) {
		xs := m.Samples[k]
		if len(xs) > MaxRepeats {
			return bad("samples."+clip(k), "has %d values, more than %d repeats", len(xs), MaxRepeats)
		}
		for i, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > math.MaxFloat64/4 {
				return bad(fmt.Sprintf("samples.%s[%d]", clip(k), i), "%g is not a finite figure", x)
			}
		}
	}
	if field, msg := checkCheckpoint(m); field != "" {
		return bad(field, "%s", msg)
	}
	if field, msg := checkBreakdown(m); field != "" {
		return bad(field, "%s", msg)
	}
	if field, msg := checkMachine(m.Env.Machine, max(m.Repeats, 1)); field != "" {
		return bad("env.machine."+field, "%s", msg)
	}
	if err := checkSamples(m); err != nil {
		return bad(err[0], "%s", err[1])
	}
	for _, k := range slices.Sorted(maps.Keys(m.CI)) {
		iv := m.CI[k]
		for _, x := range []float64{iv.Lo, iv.Center, iv.Hi} {
			if math.IsNaN(x) || math.IsInf(x, 0) || math.Abs(x) > math.MaxFloat64/4 {
				return bad("ci."+clip(k), "%g is not a finite figure", x)
			}
		}
		if !(iv.Lo <= iv.Center && iv.Center <= iv.Hi) {
			return bad("ci."+clip(k), "is not an interval around its centre (lo %g, center %g, hi %g)", iv.Lo, iv.Center, iv.Hi)
		}
	}
	return nil
}

// CheckRun checks a run about to be reported: its metrics (CheckMetrics, against
// its config) and its derived figures. The error names the run and the field, so a
// reporter that cannot render a figure says which run holds it.
func CheckRun(r *Run) error {
	if err := CheckMetrics(&r.Config, &r.Metrics); err != nil {
		return err
	}
	if field, msg := checkDerived(&r.Derived); field != "" {
		return &InvalidRunError{Run: r.Config.ID, Field: "derived." + field, Msg: msg}
	}
	return nil
}

// checkSamples checks that the per-repeat samples say what the headline figures
// say (Normalize makes a headline the median of its samples, a peak their maximum):
// a comparison with enough repeats reads the samples, a report the headline, so
// the two must not disagree. It returns the field and why, or nil.
func checkSamples(m *Metrics) []string {
	for _, k := range slices.Sorted(maps.Keys(m.Samples)) {
		if n := len(m.Samples[k]); n > max(m.Repeats, 1) {
			return []string{"samples." + clip(k), fmt.Sprintf("has %d values for %d repeats", n, m.Repeats)}
		}
	}
	headline := []struct {
		name string
		v    *float64
		peak bool
	}{
		{SampleTokensPerS, m.TokensPerS, false}, {SampleTokensPerSPerRank, m.TokensPerSPerRank, false},
		{SampleMFU, m.MFU, false}, {SampleTFLOPsPerRank, m.TFLOPsPerRank, false},
		{SampleLossFirst, m.LossFirst, false}, {SampleLossLast, m.LossLast, false},
		{SamplePeakAllocated, i64f(m.PeakMemAllocatedBytes), true}, {SamplePeakReserved, i64f(m.PeakMemReservedBytes), true},
		{SamplePeakDevice, i64f(m.PeakDeviceMemBytes), true}, {SamplePeakRSS, i64f(m.PeakRSSBytes), true},
	}
	for _, h := range headline {
		xs := m.Samples[h.name]
		if len(xs) == 0 {
			continue
		}
		if h.v == nil {
			return []string{"samples." + h.name, "has values but " + h.name + " is unknown"}
		}
		want, what := median(xs), "median"
		if h.peak {
			want, what = slices.Max(xs), "maximum"
		}
		if math.Abs(want-*h.v) > 1e-9*math.Max(math.Abs(want), math.Abs(*h.v)) {
			return []string{h.name, fmt.Sprintf("%g is not the %s %g of its samples", *h.v, what, want)}
		}
	}
	return nil
}

func i64f(p *int64) *float64 {
	if p == nil {
		return nil
	}
	return F64(float64(*p))
}

// inRange says why v is not a finite figure in [lo, hi]; "" when it is.
func inRange(v, lo, hi float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Sprintf("%g is not a finite figure", v)
	case v < lo || v > hi:
		return fmt.Sprintf("%g is not between %g and %g", v, lo, hi)
	}
	return ""
}

// clip shortens text from a file for an error message: a hostile or damaged file
// must not fill the terminal.
// clip shows text from a results file in a message: escaped and cut to 64
// characters, so a hostile file cannot garble the terminal.
func clip(s string) string { return input.Clip(s, 64) }

// Checked returns m when it passes CheckMetrics against rc, else InvalidMetrics:
// what a writer stores for a run whose backend reported a figure no run can have.
func Checked(rc sweeps.RunConfig, m Metrics) Metrics {
	if err := CheckMetrics(&rc, &m); err != nil {
		return InvalidMetrics(rc, m, err)
	}
	return m
}

// InvalidMetrics is what the harness stores for a run whose metrics fail
// CheckMetrics: the run failed, with the reason, and none of its figures (which
// would fail every later Load).
func InvalidMetrics(rc sweeps.RunConfig, m Metrics, err error) Metrics {
	out := Normalize(rc, nil)
	out.Error = err.Error()
	var ie *InvalidRunError
	if errors.As(err, &ie) {
		out.Error = fmt.Sprintf("the backend reported an invalid figure: %s %s", ie.Field, ie.Msg)
	}
	out.Repeats, out.Env, out.Started, out.Finished = min(max(m.Repeats, 0), MaxRepeats), m.Env, m.Started, m.Finished
	return out
}

// checkDerived checks derived figures read from a file (an export): finite, and
// within what Derive can give for runs that pass CheckMetrics. It returns the
// field that is wrong and why, or "", "".
func checkDerived(d *Derived) (field, msg string) {
	if d.ScalingEfficiency != nil {
		if err := inRange(*d.ScalingEfficiency, 0, MaxTokensPerS/MinTokensPerS); err != "" {
			return "scaling_efficiency", err
		}
	}
	if d.MemorySaving != nil {
		if err := inRange(*d.MemorySaving, -float64(MaxMemBytes), 1); err != "" {
			return "memory_saving", err
		}
	}
	if d.ModelStateBytes != nil && (*d.ModelStateBytes < 0 || *d.ModelStateBytes > 3*MaxMemBytes) {
		return "model_state_bytes", fmt.Sprintf("%d is not between 0 and %d", *d.ModelStateBytes, 3*MaxMemBytes)
	}
	return "", ""
}

// ptrOr is *p, or def when p is nil.
func ptrOr[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// maxConfigText bounds each name in run_args.json (model, hardware, backend, ...):
// far past any real one, short enough that a report column stays a column.
const maxConfigText = 1024

// CheckRunArgs checks a run's stored config (run_args.json), as CheckMetrics checks
// its figures: every count within the bounds a plan may hold (sweeps' Max*), world
// size equal to nodes × gpus_per_node, every enumerated axis one of its values and
// names bounded. Load applies it to every run it reads, and a resumed sweep to every
// run it would skip, so a damaged or hand-edited file is neither reported as it is
// (world_size -3, sharding "banana") nor kept as a finished run. The error is an
// *InvalidRunError naming the run and the field.
func CheckRunArgs(rc *sweeps.RunConfig) error {
	bad := func(field, format string, args ...any) error {
		return &InvalidRunError{Run: rc.ID, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	for _, c := range []struct {
		field   string
		v       int64
		lo, hi  int64
		absent0 bool // 0 is what a config stored before the field was added holds
	}{
		{"world_size", int64(rc.WorldSize), 1, sweeps.MaxWorldSize, false},
		// Derived from world_size, nodes and gpus_per_node may pass the bounds a
		// spec gives them (sweeps.MaxNodes, MaxGPUsPerNode) up to world_size's:
		// such a run is stored, infeasible (it does not fit the host).
		{"nodes", int64(rc.Nodes), 1, sweeps.MaxWorldSize, false},
		{"gpus_per_node", int64(rc.GPUsPerNode), 1, sweeps.MaxWorldSize, false},
		{"batch_per_device", int64(rc.BatchPerDevice), 1, sweeps.MaxBatchPerDevice, false},
		{"grad_accum", int64(rc.GradAccum), 1, sweeps.MaxGradAccum, false},
		{"global_batch", int64(rc.GlobalBatch), 1, sweeps.MaxGlobalBatch, false},
		{"seq_len", int64(rc.SeqLen), 1, sweeps.MaxSeqLen, false},
		{"steps", int64(rc.Steps), 1, sweeps.MaxSteps, false},
		{"warmup_steps", int64(rc.WarmupSteps), 0, sweeps.MaxSteps, false},
		{"repeats", int64(rc.Repeats), 1, sweeps.MaxRepeats, true},
		{"seed", rc.Seed, 0, sweeps.MaxSeed, false},
		{"checkpoint_every", int64(rc.CheckpointEvery), 1, sweeps.MaxSteps, true},
		{"timeout", int64(time.Duration(rc.Timeout) / time.Second), 0, int64(sweeps.MaxTimeout / time.Second), false},
	} {
		if c.absent0 && c.v == 0 {
			continue
		}
		if c.v < c.lo || c.v > c.hi {
			return bad(c.field, "%d is not between %d and %d", c.v, c.lo, c.hi)
		}
	}
	if int64(rc.Nodes)*int64(rc.GPUsPerNode) != int64(rc.WorldSize) {
		return bad("world_size", "%d is not nodes %d × gpus_per_node %d", rc.WorldSize, rc.Nodes, rc.GPUsPerNode)
	}
	for _, c := range []struct {
		field, v string
		values   []string
		absent   bool // "" is allowed: a config stored before the field was added
	}{
		{"sharding", rc.Sharding, sweeps.ShardingValues, false},
		{"mixed_precision", rc.MixedPrecision, sweeps.MixedPrecisionValues, false},
		{"backward_prefetch", rc.BackwardPrefetch, sweeps.BackwardPrefetchValues, true},
		{"checkpoint", rc.Checkpoint, sweeps.CheckpointValues, true},
		{"launcher", rc.Launcher, sweeps.LauncherValues, true},
	} {
		if (c.absent && c.v == "") || slices.Contains(c.values, c.v) {
			continue
		}
		return bad(c.field, "%q is not one of %s", clip(c.v), strings.Join(c.values, ", "))
	}
	for _, c := range []struct{ field, v string }{
		{"id", rc.ID}, {"slug", rc.Slug}, {"sweep", rc.Sweep}, {"backend", rc.Backend},
		{"hardware", rc.Hardware}, {"model", rc.Model}, {"wrap_policy", rc.WrapPolicy},
		{"search", rc.Search}, {"search_group", rc.SearchGroup},
	} {
		if len(c.v) > maxConfigText {
			return bad(c.field, "is %d bytes long, more than %d", len(c.v), maxConfigText)
		}
	}
	return nil
}
