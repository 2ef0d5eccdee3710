package results

import (
	"fmt"
	"math"
	"sort"
)

// Step-time breakdown figures (issue 27), as metrics.json and gate rules name them.
const (
	SampleComputeS     = "compute_s"
	SampleCollectiveS  = "collective_s"
	SampleExposedCommS = "exposed_comm_s"
	SampleOtherS       = "other_s"
)

// MaxBreakdownStepS bounds one step's time in a breakdown: a day, as a step line's.
const MaxBreakdownStepS = 24 * 3600.0

// breakdownTolerance is how far compute + exposed + other may be from the step
// time: the larger of 1 µs and 1e-6 of the step (clock reads and float sums).
func breakdownTolerance(stepS float64) float64 { return math.Max(1e-6, 1e-6*stepS) }

// StepBreakdown is where one step's wall time went, as measured by the engine
// (gotrain's own timestamps or CUDA events, torch.profiler's trace) or predicted
// by the sim. The parts are wall-time intervals, not sums of op times:
//
//   - ComputeS: time in which computation ran (kernels, GEMMs, the optimizer);
//   - CollectiveS: time in which any collective ran or was waited on (the union
//     of their intervals); AllGatherS, ReduceScatterS and AllReduceS the union of
//     each kind's own intervals, so they may add up to more than CollectiveS when
//     two kinds run at once (a prefetched all-gather beside a reduce-scatter);
//   - ExposedCommS: time in which a collective ran or was waited on and no
//     computation ran: what the overlap did not hide;
//   - OtherS: the rest (host overhead, data, launch gaps).
//
// By construction ComputeS + ExposedCommS + OtherS = StepS, and ExposedCommS ≤
// CollectiveS. A breakdown is one step's (the step with the median step time,
// so the identity holds exactly), never a field-by-field median of many steps.
type StepBreakdown struct {
	StepS          float64  `json:"step_s"`
	ComputeS       float64  `json:"compute_s"`
	CollectiveS    float64  `json:"collective_s"`
	AllGatherS     *float64 `json:"all_gather_s,omitempty"`
	ReduceScatterS *float64 `json:"reduce_scatter_s,omitempty"`
	AllReduceS     *float64 `json:"all_reduce_s,omitempty"`
	ExposedCommS   float64  `json:"exposed_comm_s"`
	OtherS         float64  `json:"other_s"`
	// Source says how the figures were obtained: "gotrain" (the engine's own
	// timestamps), "cuda-events", "torch.profiler", "sim" (predicted).
	Source string `json:"source,omitempty"`
}

// Overlap is 1 − exposed ÷ collective: the share of the collectives' time the
// computation hid; nil when no collective ran.
func (b *StepBreakdown) Overlap() *float64 {
	if b == nil || b.CollectiveS <= 0 {
		return nil
	}
	return F64(1 - b.ExposedCommS/b.CollectiveS)
}

// ExposedShare is exposed communication as a share of the step (the table's
// "exposed comm %" column, as a fraction); nil when the step time is zero.
func (b *StepBreakdown) ExposedShare() *float64 {
	if b == nil || b.StepS <= 0 {
		return nil
	}
	return F64(b.ExposedCommS / b.StepS)
}

// Check bounds a breakdown where it enters: every part finite, ≥ 0 and at most
// a day; exposed ≤ collective; each kind ≤ collective; the parts sum to the
// step. It returns the field and why, or "".
func (b *StepBreakdown) Check() (string, string) {
	for _, f := range []struct {
		name string
		v    *float64
	}{{"step_s", &b.StepS}, {"compute_s", &b.ComputeS}, {"collective_s", &b.CollectiveS},
		{"all_gather_s", b.AllGatherS}, {"reduce_scatter_s", b.ReduceScatterS}, {"all_reduce_s", b.AllReduceS},
		{"exposed_comm_s", &b.ExposedCommS}, {"other_s", &b.OtherS}} {
		if f.v == nil {
			continue
		}
		if err := inRange(*f.v, 0, MaxBreakdownStepS); err != "" {
			return f.name, err
		}
	}
	tol := breakdownTolerance(b.StepS)
	if b.ExposedCommS > b.CollectiveS+tol {
		return "exposed_comm_s", fmt.Sprintf("%g s is more than the collectives' %g s: exposed communication is part of it", b.ExposedCommS, b.CollectiveS)
	}
	for _, k := range []struct {
		name string
		v    *float64
	}{{"all_gather_s", b.AllGatherS}, {"reduce_scatter_s", b.ReduceScatterS}, {"all_reduce_s", b.AllReduceS}} {
		if k.v != nil && *k.v > b.CollectiveS+tol {
			return k.name, fmt.Sprintf("%g s is more than all collectives' %g s", *k.v, b.CollectiveS)
		}
	}
	if sum := b.ComputeS + b.ExposedCommS + b.OtherS; math.Abs(sum-b.StepS) > tol {
		return "step_s", fmt.Sprintf("compute %g + exposed communication %g + other %g = %g s, not the step's %g s",
			b.ComputeS, b.ExposedCommS, b.OtherS, sum, b.StepS)
	}
	if b.CollectiveS > b.StepS+tol {
		return "collective_s", fmt.Sprintf("%g s is more than the step's %g s (it is a union of intervals within the step)", b.CollectiveS, b.StepS)
	}
	return "", ""
}

// MedianBreakdown is the breakdown of the step with the median step time (the
// lower median for an even count), so its parts still sum to its step; nil for
// none.
func MedianBreakdown(steps []StepBreakdown) *StepBreakdown {
	if len(steps) == 0 {
		return nil
	}
	idx := make([]int, len(steps))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return steps[idx[a]].StepS < steps[idx[b]].StepS })
	b := steps[idx[(len(idx)-1)/2]]
	return &b
}

// breakdownOf is a repeat's breakdown: the one the backend reported for the run
// (Result.StepBreakdown), else the slowest rank's (the rank whose step time the
// run's throughput is made of).
func breakdownOf(r Result) *StepBreakdown {
	if r.StepBreakdown != nil {
		return r.StepBreakdown
	}
	var slow *StepBreakdown
	for i := range r.PerRank {
		if b := r.PerRank[i].StepBreakdown; b != nil && (slow == nil || b.StepS > slow.StepS) {
			slow = b
		}
	}
	return slow
}

// normalizeBreakdown sets the run's breakdown to the ok repeat with the median
// step time's (so the parts keep their identity), and records each part's
// samples over repeats for confidence intervals and gates.
func normalizeBreakdown(m *Metrics, ok []Result, samples map[string][]float64) {
	var bs []StepBreakdown
	for _, r := range ok {
		if b := breakdownOf(r); b != nil {
			bs = append(bs, *b)
		}
	}
	m.StepBreakdown = MedianBreakdown(bs)
	if len(bs) == 0 {
		return
	}
	for _, s := range []struct {
		name string
		get  func(*StepBreakdown) float64
	}{
		{SampleComputeS, func(b *StepBreakdown) float64 { return b.ComputeS }},
		{SampleCollectiveS, func(b *StepBreakdown) float64 { return b.CollectiveS }},
		{SampleExposedCommS, func(b *StepBreakdown) float64 { return b.ExposedCommS }},
		{SampleOtherS, func(b *StepBreakdown) float64 { return b.OtherS }},
	} {
		xs := make([]float64, len(bs))
		for i := range bs {
			xs[i] = s.get(&bs[i])
		}
		samples[s.name] = xs
	}
}

// checkBreakdown bounds metrics.json's breakdowns (the run's and each rank's);
// it returns the field and why, or "".
func checkBreakdown(m *Metrics) (string, string) {
	if b := m.StepBreakdown; b != nil {
		if f, msg := b.Check(); f != "" {
			return "step_breakdown." + f, msg
		}
	}
	for i, pr := range m.PerRank {
		if b := pr.StepBreakdown; b != nil {
			if f, msg := b.Check(); f != "" {
				return fmt.Sprintf("per_rank[%d].step_breakdown.%s", i, f), msg
			}
		}
	}
	return "", ""
}

// ColumnExposedCommShare is the column of exposed communication as a share of
// the step: the default table's "exposed comm (%)", shown when a run measured
// its breakdown (measuredDefault).
const ColumnExposedCommShare = "exposed_comm_share"

// breakdownPart reads one figure of the run's breakdown; nil when it has none.
func breakdownPart(get func(*StepBreakdown) *float64) func(*Run) any {
	return func(r *Run) any {
		if b := r.Metrics.StepBreakdown; b != nil {
			return optF(get(b))
		}
		return nil
	}
}

// breakdownRegistry are the step breakdown's figures as metrics.json holds
// them (step_breakdown.*), in registry order after the checkpoint figures: CSV
// exports carry them.
var breakdownRegistry = []Column{
	{Name: "step_breakdown.step_s", Kind: KindMetric, Header: "breakdown step (s)", Unit: UnitSeconds,
		Doc: "the step the breakdown is of: the median step of the repeat with the median step time",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return &b.StepS })},
	{Name: "step_breakdown.compute_s", Kind: KindMetric, Header: "compute (s)", Unit: UnitSeconds, CI: SampleComputeS,
		Doc: "time of that step in which computation ran (kernels, GEMMs, the optimizer); also named compute_s",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return &b.ComputeS })},
	{Name: "step_breakdown.collective_s", Kind: KindMetric, Header: "collective (s)", Unit: UnitSeconds, CI: SampleCollectiveS,
		Doc: "time of that step in which a collective ran or was waited on (union of their intervals); also named collective_s",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return &b.CollectiveS })},
	{Name: "step_breakdown.all_gather_s", Kind: KindMetric, Header: "all-gather (s)", Unit: UnitSeconds,
		Doc: "time of that step in which an all-gather ran or was waited on",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return b.AllGatherS })},
	{Name: "step_breakdown.reduce_scatter_s", Kind: KindMetric, Header: "reduce-scatter (s)", Unit: UnitSeconds,
		Doc: "time of that step in which a reduce-scatter ran or was waited on",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return b.ReduceScatterS })},
	{Name: "step_breakdown.all_reduce_s", Kind: KindMetric, Header: "all-reduce (s)", Unit: UnitSeconds,
		Doc: "time of that step in which an all-reduce ran or was waited on",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return b.AllReduceS })},
	{Name: "step_breakdown.exposed_comm_s", Kind: KindMetric, Header: "exposed comm (s)", Unit: UnitSeconds, CI: SampleExposedCommS,
		Doc: "time of that step in which a collective ran or was waited on and no computation ran; also named exposed_comm_s",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return &b.ExposedCommS })},
	{Name: "step_breakdown.other_s", Kind: KindMetric, Header: "other (s)", Unit: UnitSeconds, CI: SampleOtherS,
		Doc: "the rest of that step: host overhead, data, launch gaps (step = compute + exposed comm + other); also named other_s",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return &b.OtherS })},
	textual(metric("step_breakdown.source", "breakdown source", UnitNone, "how the breakdown was obtained: gotrain, cuda-events, torch.profiler, or sim (predicted)",
		func(m *Metrics) any {
			if m.StepBreakdown == nil {
				return nil
			}
			return optS(m.StepBreakdown.Source)
		})),
}

// breakdownColumns are the breakdown's figures by their short names (the
// samples' names, which gate rules use: exposed_comm_s:+10%) and the shares
// computed from them. They are looked up by name (report --metric, compare
// --metric, gate rules, the default table's exposed_comm_share) but stay out of
// Columns, as predictedColumns do: metrics.json holds no such key.
var breakdownColumns = []Column{
	shortName(SampleComputeS, 1), shortName(SampleCollectiveS, 2),
	shortName(SampleExposedCommS, 6), shortName(SampleOtherS, 7),
	{Name: "overlap", Kind: KindMetric, Header: "overlap (%)", Unit: UnitFraction,
		Doc: "1 - exposed_comm_s / collective_s: the share of the collectives' time computation hid",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return b.Overlap() })},
	{Name: ColumnExposedCommShare, Kind: KindMetric, Header: "exposed comm (%)", Unit: UnitFraction, measuredDefault: true,
		Doc: "exposed_comm_s / the breakdown's step time (in the default table when a measured run has it)",
		get: breakdownPart(func(b *StepBreakdown) *float64 { return b.ExposedShare() })},
}

// shortName is breakdownRegistry[i] under its sample's name. exposed_comm_s is
// among DefaultCompareMetrics only where a measured run has it.
func shortName(name string, i int) Column {
	c := breakdownRegistry[i]
	c.Name = name
	c.measuredDefault = name == SampleExposedCommS
	return c
}

// breakdownColumn returns the lookup-only breakdown column named name.
func breakdownColumn(name string) (Column, bool) {
	for _, c := range breakdownColumns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}
