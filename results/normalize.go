package results

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/aclements/go-moremath/stats"
	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Confidence is the level of the intervals in Metrics.CI (as benchstat's default).
const Confidence = 0.95

// statusSeverity orders statuses from best (0) to worst. A run's status is the worst
// of its repeats':
//
//	ok < infeasible < oom < diverged < canceled < timeout < failed
//
// failed is worst because it needs a fix; timeout and canceled mean the figure was
// never measured and resume must run it again; oom and infeasible are results (the
// memory wall), and so is diverged (the loss became NaN), so they only lose to
// statuses that say the run did not finish.
// A status no backend should report (empty or unknown) counts as failed.
var statusSeverity = map[Status]int{
	StatusOK:         0,
	StatusInfeasible: 1,
	StatusOOM:        2,
	StatusDiverged:   3,
	StatusCanceled:   4,
	StatusTimeout:    5,
	StatusFailed:     6,
}

// Severity ranks a status from best (0, ok) to worst (failed, or anything unknown).
func (s Status) Severity() int {
	if v, ok := statusSeverity[s]; ok {
		return v
	}
	return statusSeverity[StatusFailed]
}

// Names of the per-repeat figures: keys of Metrics.Samples and Metrics.CI. They are
// the metrics.json names of the figures (step_time_s is each repeat's median).
const (
	SampleTokensPerS        = "tokens_per_s"
	SampleTokensPerSPerRank = "tokens_per_s_per_rank"
	SampleStepTimeS         = "step_time_s"
	SampleMFU               = "mfu"
	SampleTFLOPsPerRank     = "tflops_per_rank"
	SamplePeakAllocated     = "peak_mem_allocated_bytes"
	SamplePeakReserved      = "peak_mem_reserved_bytes"
	SamplePeakDevice        = "peak_device_mem_bytes"
	SamplePeakRSS           = "peak_rss_bytes"
	SampleLossFirst         = "loss_first"
	SampleLossLast          = "loss_last"
)

// repeatFigures are one repeat's figures; nil = unknown.
type repeatFigures struct {
	tokensPerS, tokensPerSPerRank, stepMedian, mfu, tflops, lossFirst, lossLast *float64
	peaks                                                                       peaks
}

type peaks struct{ allocated, reserved, device, rss *int64 }

// Normalize turns the repeats of one run into its metrics (metrics.json).
//
// Per repeat: tokens = the tokens of all ranks over the measured steps (the sum of
// per_rank tokens when every rank reports them, else tokens_per_step x measured
// steps); wall = measured_wall_s (the slowest rank), else the slowest rank's
// measured_wall_s in per_rank, else the sum of step times; tokens_per_s = tokens /
// wall; tokens_per_s_per_rank = tokens_per_s / world_size; tflops_per_rank =
// model_flops_per_token x tokens_per_s_per_rank / 1e12; mfu = the same over
// peak_flops_per_s (absent when either is unknown; recompute is not counted).
//
// Over repeats: the run's status is the worst repeat's (Status.Severity), its error
// that repeat's. Throughput, step time and loss come from the ok repeats only, and a
// figure's headline value is the median over them; peak memory is the maximum over
// every repeat and every rank (an OOM's peak is worth knowing). step_time_s {median,
// p10, p90} pools the measured steps of all ok repeats, so p10/p90 describe
// step-to-step spread; Samples["step_time_s"] holds each repeat's median instead,
// and its CI is about the repeat-to-repeat spread. With more than one repeat,
// Samples holds every repeat's value of each figure and CI the median's 95%
// interval (benchmath.AssumeNothing, as benchstat); an interval needs at least 6
// repeats to be finite, so CI leaves out figures with fewer samples than that.
func Normalize(rc sweeps.RunConfig, repeats []Result) Metrics {
	m := Metrics{
		RunID:         rc.ID,
		Repeats:       len(repeats),
		WorldSize:     rc.WorldSize,
		Nodes:         rc.Nodes,
		GPUsPerNode:   rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(),
	}
	if len(repeats) == 0 {
		m.Status = StatusFailed
		m.Error = "no repeat of the run was recorded; rerun it (fsdpbench sweep --rerun)"
		return m
	}
	first := repeats[0]
	if m.WorldSize == 0 {
		m.WorldSize = first.WorldSize
	}
	if m.Nodes == 0 {
		m.Nodes = first.Nodes
	}
	if m.GPUsPerNode == 0 {
		m.GPUsPerNode = first.GPUsPerNode
	}
	if first.TokensPerStep > 0 {
		// The backend knows what it ran (a script may use its own batch or sequence).
		m.TokensPerStep = first.TokensPerStep
	}

	decider := 0
	m.Status = statusOf(first)
	for i, r := range repeats {
		if s := statusOf(r); s.Severity() > m.Status.Severity() {
			m.Status, decider = s, i
		}
		m.Predicted = m.Predicted || r.Predicted
		m.WholeRunWallTime = m.WholeRunWallTime || r.WholeRunWallTime
		if m.ModelFlopsPerToken == nil && r.ModelFlopsPerToken > 0 {
			m.ModelFlopsPerToken = F64(r.ModelFlopsPerToken)
		}
		if m.DeviceMemBytes == nil && r.DeviceMemBytes != nil {
			m.DeviceMemBytes = I64(*r.DeviceMemBytes)
		}
		if m.CommBytesPerStep == nil && r.CommBytesPerStep != nil {
			c := *r.CommBytesPerStep
			m.CommBytesPerStep = &c
		}
		if !r.Started.IsZero() && (m.Started.IsZero() || r.Started.Before(m.Started)) {
			m.Started = r.Started
		}
		if r.Finished.After(m.Finished) {
			m.Finished = r.Finished
		}
	}
	d := repeats[decider]
	m.Error = d.Error
	if statusOf(d) != d.Status {
		m.Error = joinErr(fmt.Sprintf("the backend reported status %q, which is not a known status", d.Status), d.Error)
	}
	if len(repeats) > 1 && m.Error != "" {
		m.Error = fmt.Sprintf("repeat %d of %d: %s", decider+1, len(repeats), m.Error)
	}
	m.Env = d.Env
	m.Env.Machine = SummarizeMachine(repeats)
	m.PerRank = d.PerRank
	m.MemBreakdownBytes = d.MemBreakdownBytes
	m.Extra = d.Extra
	m.Warnings = collectWarnings(repeats)

	all := make([]repeatFigures, len(repeats))
	var figs []repeatFigures
	var okRes []Result
	var pooled []float64
	var pk peaks
	for i, r := range repeats {
		f := figuresOf(r, m.WorldSize, m.TokensPerStep)
		all[i] = f
		pk = maxPeaks(pk, f.peaks)
		if statusOf(r) != StatusOK {
			continue
		}
		figs = append(figs, f)
		okRes = append(okRes, r)
		if m.StepsMeasured == 0 {
			m.StepsMeasured = len(r.Steps)
		}
		for _, s := range r.Steps {
			pooled = append(pooled, s.StepTimeS)
		}
	}
	m.PeakMemAllocatedBytes, m.PeakMemReservedBytes = pk.allocated, pk.reserved
	m.PeakDeviceMemBytes, m.PeakRSSBytes = pk.device, pk.rss
	if len(pooled) > 0 {
		s := stats.Sample{Xs: pooled}.Copy().Sort()
		m.StepTimeS = &Quantiles{Median: s.Quantile(0.5), P10: s.Quantile(0.1), P90: s.Quantile(0.9)}
	}

	samples := map[string][]float64{}
	collect := func(name string, get func(repeatFigures) *float64) *float64 {
		var xs []float64
		for _, f := range figs {
			if v := get(f); v != nil {
				xs = append(xs, *v)
			}
		}
		if len(xs) == 0 {
			return nil
		}
		samples[name] = xs
		return F64(median(xs))
	}
	m.TokensPerS = collect(SampleTokensPerS, func(f repeatFigures) *float64 { return f.tokensPerS })
	m.TokensPerSPerRank = collect(SampleTokensPerSPerRank, func(f repeatFigures) *float64 { return f.tokensPerSPerRank })
	collect(SampleStepTimeS, func(f repeatFigures) *float64 { return f.stepMedian })
	m.MFU = collect(SampleMFU, func(f repeatFigures) *float64 { return f.mfu })
	m.TFLOPsPerRank = collect(SampleTFLOPsPerRank, func(f repeatFigures) *float64 { return f.tflops })
	m.LossFirst = collect(SampleLossFirst, func(f repeatFigures) *float64 { return f.lossFirst })
	m.LossLast = collect(SampleLossLast, func(f repeatFigures) *float64 { return f.lossLast })
	normalizeCheckpoint(&m, okRes, samples)
	normalizeBreakdown(&m, okRes, samples)

	if len(repeats) > 1 {
		peakSample := func(name string, get func(peaks) *int64) {
			var xs []float64
			for _, f := range all {
				if v := get(f.peaks); v != nil {
					xs = append(xs, float64(*v))
				}
			}
			if len(xs) > 0 {
				samples[name] = xs
			}
		}
		peakSample(SamplePeakAllocated, func(p peaks) *int64 { return p.allocated })
		peakSample(SamplePeakReserved, func(p peaks) *int64 { return p.reserved })
		peakSample(SamplePeakDevice, func(p peaks) *int64 { return p.device })
		peakSample(SamplePeakRSS, func(p peaks) *int64 { return p.rss })
		m.Samples = samples
		m.CI = intervals(samples)
		if len(m.Samples) == 0 {
			m.Samples = nil
		}
	}
	return m
}

// collectWarnings gathers every repeat's warnings, Result.Warnings and the
// extra.warnings backends write (a []string in process, []any once it has been
// JSON, as from a plugin), each once in the order first seen; nil for none.
func collectWarnings(repeats []Result) []string {
	var out []string
	seen := map[string]bool{}
	dropped := 0
	add := func(w string) {
		w = cutText(w, MaxWarningChars)
		switch {
		case w == "" || seen[w]:
		case len(out) == MaxWarnings:
			dropped++
		default:
			seen[w] = true
			out = append(out, w)
		}
	}
	for _, r := range repeats {
		for _, w := range r.Warnings {
			add(w)
		}
		switch ws := r.Extra["warnings"].(type) {
		case []string:
			for _, w := range ws {
				add(w)
			}
		case []any:
			for _, w := range ws {
				if s, ok := w.(string); ok {
					add(s)
				}
			}
		}
	}
	if dropped > 0 {
		out[len(out)-1] = fmt.Sprintf("%d more warnings (the first %d are kept; see the runs' stderr.log)", dropped+1, MaxWarnings-1)
	}
	return out
}

// Bounds of a run's warnings (Metrics.Warnings): what a backend or plugin
// reports enters tables and footnotes, so it is cut where it enters.
const (
	MaxWarnings     = 32
	MaxWarningChars = 2000
)

// statusOf is the repeat's status, with one that is empty or unknown read as failed.
func statusOf(r Result) Status {
	if _, ok := statusSeverity[r.Status]; ok {
		return r.Status
	}
	return StatusFailed
}

func joinErr(a, b string) string {
	if b == "" {
		return a
	}
	return a + ": " + b
}

// figuresOf computes one repeat's figures (see Normalize for the definitions).
func figuresOf(r Result, worldSize int, tokensPerStep int64) repeatFigures {
	var f repeatFigures
	f.peaks = peaks{r.PeakMemAllocatedBytes, r.PeakMemReservedBytes, r.PeakDeviceMemBytes, r.PeakRSSBytes}
	for _, pr := range r.PerRank {
		f.peaks = maxPeaks(f.peaks, peaks{pr.PeakMemAllocatedBytes, pr.PeakMemReservedBytes, pr.PeakDeviceMemBytes, pr.PeakRSSBytes})
	}

	var tokens int64
	if worldSize > 0 && len(r.PerRank) == worldSize {
		for _, pr := range r.PerRank {
			if pr.Tokens <= 0 {
				tokens = 0
				break
			}
			tokens += pr.Tokens
		}
	}
	if tokens == 0 && tokensPerStep > 0 {
		tokens = tokensPerStep * int64(len(r.Steps))
	}

	wall := r.MeasuredWallS
	if wall <= 0 {
		for _, pr := range r.PerRank {
			wall = math.Max(wall, pr.MeasuredWallS)
		}
	}
	if wall <= 0 && len(r.Steps) > 0 {
		for _, s := range r.Steps {
			if s.StepTimeS <= 0 {
				wall = 0
				break
			}
			wall += s.StepTimeS
		}
	}

	if tokens > 0 && wall > 0 {
		f.tokensPerS = F64(float64(tokens) / wall)
		if worldSize > 0 {
			f.tokensPerSPerRank = F64(*f.tokensPerS / float64(worldSize))
			if r.ModelFlopsPerToken > 0 {
				flops := r.ModelFlopsPerToken * *f.tokensPerSPerRank
				f.tflops = F64(flops / 1e12)
				if r.PeakFlopsPerS > 0 {
					f.mfu = F64(flops / r.PeakFlopsPerS)
				}
			}
		}
	}
	if len(r.Steps) > 0 {
		xs := make([]float64, len(r.Steps))
		for i, s := range r.Steps {
			xs[i] = s.StepTimeS
		}
		f.stepMedian = F64(median(xs))
	}
	for _, s := range r.Steps {
		if s.Loss != nil {
			if f.lossFirst == nil {
				f.lossFirst = F64(*s.Loss)
			}
			f.lossLast = F64(*s.Loss)
		}
	}
	if f.lossLast == nil {
		// Backends that only report the final loss report it per rank; rank 0's is the
		// one a training script prints.
		for _, pr := range r.PerRank {
			if pr.Rank == 0 && pr.LossLast != nil {
				f.lossLast = F64(*pr.LossLast)
			}
		}
	}
	return f
}

func maxPeaks(a, b peaks) peaks {
	return peaks{maxI64(a.allocated, b.allocated), maxI64(a.reserved, b.reserved),
		maxI64(a.device, b.device), maxI64(a.rss, b.rss)}
}

func maxI64(a, b *int64) *int64 {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		return I64(*b)
	case b == nil || *a >= *b:
		return I64(*a)
	default:
		return I64(*b)
	}
}

// intervals computes the median's confidence interval of every sample the way
// benchstat does; samples too small for a finite interval are left out, since JSON
// cannot hold an infinite bound and a half-open interval says nothing useful.
func intervals(samples map[string][]float64) map[string]Interval {
	ci := map[string]Interval{}
	for name, xs := range samples {
		if len(xs) < 2 {
			continue
		}
		s := benchmath.NewSample(append([]float64(nil), xs...), &benchmath.DefaultThresholds)
		sum := benchmath.AssumeNothing.Summary(s, Confidence)
		if math.IsInf(sum.Lo, 0) || math.IsInf(sum.Hi, 0) || math.IsNaN(sum.Center) {
			continue
		}
		ci[name] = Interval{Center: sum.Center, Lo: sum.Lo, Hi: sum.Hi}
	}
	if len(ci) == 0 {
		return nil
	}
	return ci
}

// StepsCSV writes steps.csv: a header row, then one row per measured step with
// step, loss, step_time_s and tokens. An unknown loss is an empty cell.
func StepsCSV(w io.Writer, steps []Step) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"step", "loss", "step_time_s", "tokens"}); err != nil {
		return err
	}
	for _, s := range steps {
		loss := ""
		if s.Loss != nil {
			loss = strconv.FormatFloat(*s.Loss, 'g', -1, 64)
		}
		rec := []string{strconv.Itoa(s.Step), loss, strconv.FormatFloat(s.StepTimeS, 'g', -1, 64),
			strconv.FormatInt(s.Tokens, 10)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// median is the sample median (moremath's quantile, the one benchmath's CI centres on).
func median(xs []float64) float64 {
	return stats.Sample{Xs: xs}.Copy().Sort().Quantile(0.5)
}
