package results

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Limits past which a run's timed figures (tokens/s, step time, MFU, the step
// breakdown, and what is derived from them) are marked too noisy to trust:
// tables put NoiseMark after them with a footnote saying why, CSV and JSON hold
// the reason in derived.noise (the `noise` column). They are wide on purpose: a
// figure marked is one whose spread could make a table's comparison say the
// opposite, not one a careful benchmark would rerun.
const (
	// NoisyStepSpread: the measured steps' p90 − p10 over their median step time.
	// A GPU run's steps agree within a few percent and a quiet CPU's within
	// 10–20%; steps of 3.9 to 87 ms (issue 37) are a machine busy with other work.
	NoisyStepSpread = 0.5
	// NoisyRepeatSpread: the repeats' spread of tokens/s per rank, as a fraction of
	// its median: the 95% interval's wider half with six or more repeats (as the
	// tables' ±), else half the range of two to five. Past ±10% a 10% difference
	// between two rows is inside it.
	NoisyRepeatSpread = 0.10
	// NoisyWholeVsMedian: how far the whole-run throughput (tokens over the
	// measured wall time) and the median step's (tokens per step over the median
	// step time) may disagree, as a ratio − 1 either way. They differ by the
	// steps' skew only; a 1.7× gap means a few steps took most of the time, so
	// neither figure describes the run.
	NoisyWholeVsMedian = 0.25
)

// ProfilerOverheadAlpha is the chance ProfilerOverheadResolved accepts of
// calling noise a profiler's cost.
const ProfilerOverheadAlpha = 0.05

// ExtraProfilerOverhead is the Result.Extra (and metrics.json extra) key of the
// profiler's cost, median profiled step / median measured step − 1, kept only
// when ProfilerOverheadResolved; ExtraProfilerOverheadUnresolved holds the
// same ratio otherwise, so that no reader takes noise for the profiler's cost
// (issue 37: 5.28 on one busy run, −0.03 on quiet ones).
const (
	ExtraProfilerOverhead           = "profiler_overhead"
	ExtraProfilerOverheadUnresolved = "profiler_overhead_unresolved"
)

// ProfilerOverheadResolved reports whether the profiled steps' times differ
// from the measured steps' beyond the steps' own noise: every profiled step is
// slower than the slowest measured one (or faster than the fastest), and that
// is unlikely by chance. Were the k profiled and n measured steps alike, all k
// would fall beyond all n with probability 2 / C(n+k, k) (k! n! / (n+k)! each
// way); it must be at most ProfilerOverheadAlpha (3 profiled steps need 5
// measured: 2/56 = 3.6%).
func ProfilerOverheadResolved(profiled, measured []float64) bool {
	if len(profiled) == 0 || len(measured) == 0 {
		return false
	}
	n, k := len(measured), len(profiled)
	combos := 1.0 // C(n+k, k), grown until it is large enough
	for i := 1; i <= k && 2/combos > ProfilerOverheadAlpha; i++ {
		combos = combos * float64(n+i) / float64(i)
	}
	if 2/combos > ProfilerOverheadAlpha {
		return false
	}
	return slices.Min(profiled) > slices.Max(measured) || slices.Max(profiled) < slices.Min(measured)
}

// Marks of tables (after the predicted * and the whole-run †).
const (
	// NoiseMark follows a timed figure whose run is too noisy to trust (Noise).
	NoiseMark = "?"
	// WarningMark follows a figure of a run that carries warnings
	// (Metrics.Warnings), or a derived figure built on such a run's.
	WarningMark = "!"
)

// noteLimit is how many runs a footnote names before it sends the reader to
// the CSV/JSON columns, so that a large sweep's table is not buried under it.
const noteLimit = 10

// Noise says why the run's timed figures are too noisy to trust, "" when none of
// the limits (NoisyStepSpread, NoisyRepeatSpread, NoisyWholeVsMedian) is passed
// or the run has no figures (not ok). Several reasons are joined with "; ".
func Noise(m *Metrics) string {
	if m.Status != StatusOK {
		return ""
	}
	var why []string
	if q := m.StepTimeS; q != nil && q.Median > 0 && m.StepsMeasured > 1 {
		if s := (q.P90 - q.P10) / q.Median; s > NoisyStepSpread {
			why = append(why, fmt.Sprintf("step times spread %s to %s (p10 to p90), %.0f%% of the median step (limit %.0f%%)",
				secondsShort(q.P10), secondsShort(q.P90), 100*s, 100*NoisyStepSpread))
		}
	}
	if xs := m.Samples[SampleTokensPerSPerRank]; len(xs) > 1 {
		med, half, how := median(xs), 0.0, "half their range"
		if iv, ok := m.CI[SampleTokensPerSPerRank]; ok {
			med, half, how = iv.Center, math.Max(iv.Hi-iv.Center, iv.Center-iv.Lo), "the 95% interval"
		} else {
			half = (slices.Max(xs) - slices.Min(xs)) / 2
		}
		if med > 0 && half/med > NoisyRepeatSpread {
			why = append(why, fmt.Sprintf("tokens/s/rank over %d repeats ±%.0f%% of the median (%s; limit ±%.0f%%)",
				len(xs), 100*half/med, how, 100*NoisyRepeatSpread))
		}
	}
	if m.TokensPerS != nil && m.TokensPerStep > 0 && m.StepTimeS != nil && m.StepTimeS.Median > 0 && !m.WholeRunWallTime {
		// A whole-run wall time is below the steps' by design (marked † already).
		whole, med := *m.TokensPerS, float64(m.TokensPerStep)/m.StepTimeS.Median
		if r := math.Max(whole/med, med/whole); whole > 0 && r > 1+NoisyWholeVsMedian {
			why = append(why, fmt.Sprintf("tokens/s %s over the measured wall time but %s from the median step: %.2f× apart (limit %.2f×)",
				fourDigits(whole), fourDigits(med), r, 1+NoisyWholeVsMedian))
		}
	}
	return strings.Join(why, "; ")
}

// secondsShort is a step time with three figures in a fitting unit.
func secondsShort(s float64) string {
	switch {
	case s >= 1:
		return fmt.Sprintf("%.3g s", s)
	case s >= 1e-3:
		return fmt.Sprintf("%.3g ms", s*1e3)
	}
	return fmt.Sprintf("%.3g µs", s*1e6)
}

// timedColumn reports whether column c is a figure of time (a rate, a step time,
// the step breakdown): the ones a noisy run's spread makes untrustworthy. Memory,
// loss and counts are not timed; scaling_efficiency is marked by its own reason
// (Derived.ScalingEfficiencyNoise).
func timedColumn(c *Column) bool {
	if c.text {
		return false
	}
	switch c.Name {
	case "tokens_per_s", "tokens_per_s_per_rank", "ci.tokens_per_s_per_rank.lo", "ci.tokens_per_s_per_rank.hi",
		"mfu", "tflops_per_rank", "overlap", ColumnExposedCommShare:
		return true
	}
	return strings.HasPrefix(c.Name, "step_time_s.") || strings.HasPrefix(c.Name, "step_breakdown.")
}

// noisyFigure reports whether column c of run r is marked NoiseMark, and the
// reason.
func noisyFigure(c *Column, r *Run) (bool, string) {
	switch {
	case c.Name == "scaling_efficiency":
		return r.Derived.ScalingEfficiencyNoise != "", r.Derived.ScalingEfficiencyNoise
	case timedColumn(c):
		return r.Derived.Noise != "", r.Derived.Noise
	}
	return false, ""
}

// warnedFigure reports whether column c of run r is marked WarningMark: every
// figure of a run with warnings, and a derived figure whose baseline has some.
func warnedFigure(c *Column, r *Run) bool {
	if c.text {
		return false
	}
	switch c.Name {
	case "scaling_efficiency":
		return r.Derived.ScalingEfficiencyWarned
	case "memory_saving":
		return r.Derived.MemorySavingWarned
	}
	return len(r.Metrics.Warnings) > 0
}

// markNoise fills the noise marks of Derived from the runs' metrics: each run's
// own (Noise), and a scaling efficiency's from its run and its baseline; and the
// warnings a derived figure inherits from its baseline. Derive calls it once the
// baselines are known; byID maps run IDs to indices.
func markNoise(runs []Run, byID map[string]int) {
	for i := range runs {
		runs[i].Derived.Noise = Noise(&runs[i].Metrics)
	}
	for i := range runs {
		d := &runs[i].Derived
		warned := len(runs[i].Metrics.Warnings) > 0
		if d.ScalingEfficiency != nil {
			var why []string
			if d.Noise != "" {
				why = append(why, "this run's figures: "+d.Noise)
			}
			b, ok := byID[d.ScalingBaseline]
			if ok && b != i && runs[b].Derived.Noise != "" {
				why = append(why, "its baseline "+d.ScalingBaseline+"'s: "+runs[b].Derived.Noise)
			}
			d.ScalingEfficiencyNoise = strings.Join(why, "; ")
			d.ScalingEfficiencyWarned = warned || ok && len(runs[b].Metrics.Warnings) > 0
		}
		if d.MemorySaving != nil {
			b, ok := byID[d.MemoryBaseline]
			d.MemorySavingWarned = warned || ok && len(runs[b].Metrics.Warnings) > 0
		}
	}
}

// marksNotes are a grid's footnotes for its NoiseMark and WarningMark cells:
// what each mark means, then per run (up to noteLimit) why.
func marksNotes(g *grid) []string {
	var notes []string
	noisy, warned := map[cellNoise]bool{}, map[string][]string{}
	// A run is listed once, whichever cells (its own, a scaling efficiency
	// over it) are marked on its account.
	var noisyOrder []cellNoise
	var warnedOrder []string
	for _, row := range g.rows {
		for _, c := range row {
			for _, n := range c.noise {
				if !noisy[n] {
					noisy[n] = true
					noisyOrder = append(noisyOrder, n)
				}
			}
			for _, w := range c.warnings {
				if _, seen := warned[w.id]; !seen {
					warned[w.id] = w.warnings
					warnedOrder = append(warnedOrder, w.id)
				}
			}
		}
	}
	if len(noisyOrder) > 0 {
		notes = append(notes, fmt.Sprintf("%s too noisy to trust (limits: steps' p10 to p90 within %.0f%% of the median step, "+
			"repeats within ±%.0f%%, whole-run and median-step tokens/s within %.2f×; a scaling efficiency built on such a figure too):",
			NoiseMark, 100*NoisyStepSpread, 100*NoisyRepeatSpread, 1+NoisyWholeVsMedian))
		for k, n := range noisyOrder {
			if k == noteLimit {
				notes = append(notes, fmt.Sprintf("  ... and %d more (CSV/JSON: the noise columns)", len(noisyOrder)-noteLimit))
				break
			}
			notes = append(notes, "  "+n.id+": "+n.why)
		}
	}
	if len(warnedOrder) > 0 {
		notes = append(notes, WarningMark+" the run (or the baseline a derived figure divides by) carries warnings:")
		for k, id := range warnedOrder {
			if k == noteLimit {
				notes = append(notes, fmt.Sprintf("  ... and %d more runs (CSV/JSON: the warnings column)", len(warnedOrder)-noteLimit))
				break
			}
			notes = append(notes, "  "+id+": "+strings.Join(warned[id], " | "))
		}
	}
	return notes
}

// cellNoise and cellWarnings are the runs behind a marked cell, with why, for
// the footnotes.
type (
	cellNoise struct {
		id, why string
	}
	cellWarnings struct {
		id       string
		warnings []string
	}
)

// markCell adds the noise and warning marks of column c of run r to cell, with
// the runs behind them; lookup finds a derived figure's baseline by ID (nil
// when it is not among the runs).
func markCell(cell *gridCell, c *Column, r *Run, lookup func(id string) *Run) {
	if ok, why := noisyFigure(c, r); ok {
		cell.text += NoiseMark
		cell.noisy = true
		switch {
		case c.Name != "scaling_efficiency":
			cell.noise = append(cell.noise, cellNoise{r.Config.ID, why})
		case lookup(r.Derived.ScalingBaseline) != nil:
			// The runs it rests on, each listed once with its own reason.
			if r.Derived.Noise != "" {
				cell.noise = append(cell.noise, cellNoise{r.Config.ID, r.Derived.Noise})
			}
			if b := lookup(r.Derived.ScalingBaseline); b.Derived.Noise != "" {
				cell.noise = append(cell.noise, cellNoise{b.Config.ID, b.Derived.Noise})
			}
		default: // the baseline is not among the runs shown (compare)
			cell.noise = append(cell.noise, cellNoise{r.Config.ID, "scaling eff.: " + why})
		}
	}
	if warnedFigure(c, r) {
		cell.text += WarningMark
		cell.warned = true
		if len(r.Metrics.Warnings) > 0 {
			cell.warnings = append(cell.warnings, cellWarnings{r.Config.ID, r.Metrics.Warnings})
		}
		base := ""
		switch c.Name {
		case "scaling_efficiency":
			base = r.Derived.ScalingBaseline
		case "memory_saving":
			base = r.Derived.MemoryBaseline
		}
		if b := lookup(base); base != "" && b != nil && len(b.Metrics.Warnings) > 0 {
			cell.warnings = append(cell.warnings, cellWarnings{b.Config.ID, b.Metrics.Warnings})
		}
	}
}

// marksText is a marked cell's marks as CSV and JSON reports hold them, in the
// column after the figure's (key + MarksSuffix): "noisy", "warning" or both;
// nil when the cell has none.
func marksText(c *gridCell) any {
	var out []string
	if c.noisy {
		out = append(out, "noisy")
	}
	if c.warned {
		out = append(out, "warning")
	}
	if len(out) == 0 {
		return nil
	}
	return strings.Join(out, ",")
}

// MarksSuffix names the column that a CSV or JSON report adds after a figure
// some of whose cells are marked: "tokens_per_s_per_rank.marks".
const MarksSuffix = ".marks"

// gateWarned reports whether the gate check's baseline (or current) figure
// carries warnings: that side's run has some and the check read its figure
// (an absolute bound reads only the current one).
func gateWarned(ch *Check, baseline bool) bool {
	if baseline {
		return len(ch.BaselineWarnings) > 0 && ch.Delta.Baseline != nil && ch.Rule.relative()
	}
	return len(ch.CurrentWarnings) > 0 && ch.Delta.Current != nil
}

// gateWarningMark is WarningMark for a gate table's figure that carries
// warnings, else "".
func gateWarningMark(ch *Check, baseline bool) string {
	if gateWarned(ch, baseline) {
		return WarningMark
	}
	return ""
}

// gateWarningText is what a gate check's reason ends with when a figure it
// judged carries warnings: which side's, and the first warning (the rest are
// in the check's JSON and the table's footnote).
func gateWarningText(ch *Check) string {
	var sides []string
	var first string
	if gateWarned(ch, false) {
		sides, first = append(sides, "current"), ch.CurrentWarnings[0]
	}
	if gateWarned(ch, true) {
		sides = append(sides, "baseline")
		if first == "" {
			first = ch.BaselineWarnings[0]
		}
	}
	if len(sides) == 0 {
		return ""
	}
	return fmt.Sprintf("; %s the %s figure carries a warning: %s", WarningMark, strings.Join(sides, " and "), cutText(firstLine(first), 160))
}

// cutText is s cut to at most n characters, with "…" where it was cut.
func cutText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// gateWarningNotes are a gate table's footnotes for its WarningMark figures:
// each warned run's warnings, once.
func gateWarningNotes(checks []Check) []string {
	seen := map[string]bool{}
	var lines []string
	for i := range checks {
		c := &checks[i]
		for _, side := range []struct {
			baseline bool
			ws       []string
			what     string
		}{{false, c.CurrentWarnings, "current"}, {true, c.BaselineWarnings, "baseline"}} {
			key := side.what + " " + c.Run
			if !gateWarned(c, side.baseline) || seen[key] {
				continue
			}
			seen[key] = true
			lines = append(lines, "  "+c.Run+" ("+side.what+"): "+strings.Join(side.ws, " | "))
		}
	}
	if len(lines) == 0 {
		return nil
	}
	if len(lines) > noteLimit {
		lines = append(lines[:noteLimit], fmt.Sprintf("  ... and %d more (gate --format json: baseline_warnings, current_warnings)", len(lines)-noteLimit))
	}
	return append([]string{WarningMark + " the figure's run carries warnings (its figures stand, but not at face value):"}, lines...)
}

// figureMarks say, for a compare row, which side's figures are too noisy to
// trust (Derived.Noise) or carry warnings (Metrics.Warnings): tables mark them
// NoiseMark and WarningMark with report's footnotes, and JSON holds the reasons.
type figureMarks struct {
	BaselineNoise    string   `json:"baseline_noise,omitempty"`
	CurrentNoise     string   `json:"current_noise,omitempty"`
	BaselineWarnings []string `json:"baseline_warnings,omitempty"`
	CurrentWarnings  []string `json:"current_warnings,omitempty"`
	// the two runs, for the marks of each column (a scaling efficiency's are its own)
	baselineRun, currentRun *Run
}

// marksOfPair is the figureMarks of a compare row.
func marksOfPair(p Pair) figureMarks {
	m := figureMarks{baselineRun: p.Baseline, currentRun: p.Current}
	if p.Baseline != nil {
		m.BaselineNoise, m.BaselineWarnings = p.Baseline.Derived.Noise, p.Baseline.Metrics.Warnings
	}
	if p.Current != nil {
		m.CurrentNoise, m.CurrentWarnings = p.Current.Derived.Noise, p.Current.Metrics.Warnings
	}
	return m
}

// mark adds the marks of column c to a compare row's baseline and current
// cells (sides[0], sides[1]), where that side's figure is shown.
func (m *figureMarks) mark(sides []gridCell, c *Column, d Delta) {
	for i, side := range []struct {
		r     *Run
		shown bool
	}{{m.baselineRun, d.Baseline != nil}, {m.currentRun, d.Current != nil}} {
		if side.r != nil && side.shown && side.r.Metrics.Status == StatusOK {
			markCell(&sides[i], c, side.r, func(string) *Run { return nil })
		}
	}
}
