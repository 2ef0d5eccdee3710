package results

import (
	"math"

	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// ExtraRepeatsAuto is the key of Metrics.Extra that says, for a run of automatic
// repeats (repeats: {min, max, ci}), how its repeats stopped: min, max, the
// width asked for (ci_target, a fraction), the width reached (ci, absent when
// no interval could be computed), and whether it was within the target
// (reached; false when max ran out first). Metrics.Repeats says how many ran.
const ExtraRepeatsAuto = "repeats_auto"

// RepeatsCI is the half-width of the 95% confidence interval of the run's
// median throughput (tokens/s per rank, else the step time) relative to the
// median, as benchstat prints "± 2%"; ok is false with fewer than
// MinStatRepeats repeats or no such figure. It is what automatic repeats stop on.
func RepeatsCI(rc sweeps.RunConfig, repeats []Result) (width float64, ok bool) {
	m := Normalize(rc, repeats)
	xs := m.Samples[SampleTokensPerSPerRank]
	if len(xs) == 0 {
		xs = m.Samples[SampleStepTimeS]
	}
	return medianHalfWidth(xs)
}

func medianHalfWidth(xs []float64) (float64, bool) {
	if len(xs) < MinStatRepeats {
		return 0, false
	}
	s := benchmath.AssumeNothing.Summary(benchmath.NewSample(append([]float64(nil), xs...), &benchmath.DefaultThresholds), Confidence)
	if math.IsInf(s.Lo, 0) || math.IsInf(s.Hi, 0) || !(s.Center > 0) {
		return 0, false
	}
	return max(s.Hi-s.Center, s.Center-s.Lo) / s.Center, true
}

// EnoughRepeats reports whether a run of automatic repeats may stop after
// repeats (all ok): it has its min and its interval is within its ci.
func EnoughRepeats(rc sweeps.RunConfig, repeats []Result) bool {
	if rc.RepeatsCI <= 0 || len(repeats) < max(rc.RepeatsMin, MinStatRepeats) {
		return false
	}
	w, ok := RepeatsCI(rc, repeats)
	return ok && w <= rc.RepeatsCI
}

// NoteRepeatsAuto records in m.Extra how a run of automatic repeats stopped
// (ExtraRepeatsAuto); runs of a fixed count are left alone.
func NoteRepeatsAuto(rc sweeps.RunConfig, repeats []Result, m *Metrics) {
	if rc.RepeatsCI <= 0 {
		return
	}
	note := map[string]any{"min": rc.RepeatsMin, "max": rc.Repeats, "ci_target": rc.RepeatsCI, "reached": false}
	if w, ok := RepeatsCI(rc, repeats); ok {
		note["ci"] = w
		note["reached"] = w <= rc.RepeatsCI
	}
	if m.Extra == nil {
		m.Extra = map[string]any{}
	}
	m.Extra[ExtraRepeatsAuto] = note
}
