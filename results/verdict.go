package results

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/perf/benchmath"
)

// OutcomeInconclusive is a check that could not tell (issue 29): the spread of the
// repeats is too wide to resolve the rule's threshold, or the two sides were measured
// under materially different machine states (MachineDiff). It neither passes nor
// fails: the gate reports it with the reason and, by default, exits 3 so that CI can
// measure again.
const OutcomeInconclusive Outcome = "inconclusive"

// Inconclusive policies (GateOptions.Inconclusive): what an inconclusive check makes
// of the gate.
const (
	// InconclusiveReport: the gate is inconclusive (exit 3) when no check failed and
	// some were inconclusive. The default.
	InconclusiveReport = "report"
	// InconclusiveFail counts inconclusive checks as failures.
	InconclusiveFail = "fail"
	// InconclusivePass counts inconclusive checks as passing.
	InconclusivePass = "pass"
)

// InconclusivePolicies lists the policies, the default first.
var InconclusivePolicies = []string{InconclusiveReport, InconclusiveFail, InconclusivePass}

// CheckInconclusivePolicy returns policy, "" read as InconclusiveReport, or an
// error naming the policies. Both gates (the nightly one and gate --ab) take it.
func CheckInconclusivePolicy(policy string) (string, error) {
	if policy == "" {
		return InconclusiveReport, nil
	}
	if !slices.Contains(InconclusivePolicies, policy) {
		return "", fmt.Errorf("inconclusive policy %q: use %s", clip(policy), strings.Join(InconclusivePolicies, ", "))
	}
	return policy, nil
}

// GateVerdict is a gate's verdict under an inconclusive policy: fail when
// something failed (a check, or a problem that fails the gate), or when checks
// were inconclusive and the policy counts them as failures; inconclusive when
// some were and the policy reports them; else pass. The nightly gate and gate
// --ab both decide with it, so one policy reads the same on both.
func GateVerdict(failed bool, inconclusive int, policy string) Outcome {
	switch {
	case failed || (inconclusive > 0 && policy == InconclusiveFail):
		return OutcomeFail
	case inconclusive > 0 && (policy == InconclusiveReport || policy == ""):
		return OutcomeInconclusive
	}
	return OutcomePass
}

// PolicyText says in a report what inconclusive checks do to the verdict.
func PolicyText(policy string) string {
	switch policy {
	case InconclusiveFail:
		return "count as failures (--inconclusive=fail)"
	case InconclusivePass:
		return "count as passing (--inconclusive=pass)"
	}
	return "make the gate inconclusive (exit 3)"
}

// policyCounted says how a policy other than report counted n inconclusive
// checks ("; 2 inconclusive counted as failures (--inconclusive=fail)"), or "".
func policyCounted(n int, policy string) string {
	if n == 0 || policy == InconclusiveReport || policy == "" {
		return ""
	}
	as := map[string]string{InconclusiveFail: "failures", InconclusivePass: "passing"}[policy]
	return fmt.Sprintf("; %d inconclusive counted as %s (--inconclusive=%s)", n, as, policy)
}

// machineSensitive names the figures a busy machine changes: those measured in
// time. Memory, losses and counts do not depend on what else ran, so a different
// machine state makes no check of theirs inconclusive.
func machineSensitive(metric string) bool {
	c, err := LookupColumn(metric)
	if err != nil {
		return true // an unknown figure: assume the worst
	}
	if c.Unit == UnitSeconds {
		return true
	}
	return slices.Contains([]string{"tokens_per_s", "tokens_per_s_per_rank", "ci.tokens_per_s_per_rank.lo",
		"ci.tokens_per_s_per_rank.hi", "mfu", "tflops_per_rank", "scaling_efficiency"}, c.Name)
}

// JudgeSamples decides relative rule r (METRIC:-X% or METRIC:+X%) on each repeat's
// figure of the two sides (base, cur: per-repeat samples, as Metrics.Samples holds
// them) measured under the machine states baseM and curM (nil: unknown). It is the
// verdict the gate gives a run (gate --ab judges paired changes with GateAB, under
// the same machine rule, machineCouldExplain). The Delta holds the medians, their
// 95% CIs and the Mann-Whitney p-value (alpha: 0 = DefaultAlpha). An absolute rule, or a side without samples, is an error.
func JudgeSamples(r Rule, base, cur []float64, baseM, curM *Machine, alpha float64) (Outcome, string, Delta, error) {
	if !r.relative() {
		return "", "", Delta{}, fmt.Errorf("rule %s: only a relative rule compares two sides", r)
	}
	if len(base) == 0 || len(cur) == 0 {
		return "", "", Delta{}, fmt.Errorf("rule %s: each side needs at least one sample (%d and %d given)", r, len(base), len(cur))
	}
	for _, xs := range [][]float64{base, cur} {
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return "", "", Delta{}, fmt.Errorf("rule %s: %g is not a finite sample", r, x)
			}
		}
	}
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	d := deltaOf(r.Metric, sampleStat(base), sampleStat(cur), alpha)
	if d.Change == nil {
		return OutcomeSkip, fmt.Sprintf("%s is 0 in the baseline: no relative change", r.Metric), d, nil
	}
	o, why := judgeChange(r, d, baseM, curM)
	return o, why, d, nil
}

// sampleStat is the SideStat of per-repeat samples: their median as the figure.
func sampleStat(xs []float64) *SideStat {
	s := &SideStat{Value: median(append([]float64(nil), xs...))}
	withSamples(s, xs)
	return s
}

// withSamples fills s's N, Center, Lo and Hi from per-repeat samples xs: the median
// and its 95% CI (benchmath.AssumeNothing, as benchstat); no interval with fewer
// than MinStatRepeats samples.
func withSamples(s *SideStat, xs []float64) {
	s.Center, s.Lo, s.Hi = s.Value, s.Value, s.Value
	if len(xs) == 0 {
		return
	}
	s.sample = append([]float64(nil), xs...)
	s.N = len(xs)
	sum := benchmath.AssumeNothing.Summary(benchmath.NewSample(append([]float64(nil), xs...), &benchmath.DefaultThresholds), Confidence)
	s.Center, s.Lo, s.Hi = sum.Center, sum.Center, sum.Center
	if !math.IsInf(sum.Lo, 0) && !math.IsInf(sum.Hi, 0) {
		// Fewer than MinStatRepeats samples give an infinite interval, which says
		// nothing and which JSON cannot hold: no interval then.
		s.Lo, s.Hi = sum.Lo, sum.Hi
	}
}

// changeInterval bounds the change of the medians from the two sides' 95% CIs:
// the smallest and largest ratio the intervals allow, less 1. It is conservative
// (wider than the change's own 95% interval), so a check it resolves is resolved.
// ok is false when the baseline's interval reaches 0 or below, or the current's
// below 0: no ratio bounds the change then.
func changeInterval(d Delta) (lo, hi float64, ok bool) {
	b, c := d.Baseline, d.Current
	if b.Lo <= 0 || c.Lo < 0 {
		return 0, 0, false
	}
	return c.Lo/b.Hi - 1, c.Hi/b.Lo - 1, true
}

// judgeChange decides relative rule r on the change d (both sides known, a change
// computed), measured under machine states baseM and curM.
//
// The figures decide first. With at least MinStatRepeats repeats per side: fail
// when the whole interval the two medians' CIs allow for the change
// (changeInterval) is beyond the limit and the change is significant (Mann-Whitney
// U, as benchstat); pass when the whole interval is within the limit; else
// inconclusive: the spread is too wide to resolve the limit, or the change beyond
// it is not significant. With fewer repeats the spread cannot be judged: the
// threshold alone decides, and the reason says the check is not statistically
// backed.
//
// Then the machine, for a figure measured in time (machineSensitive), when the
// two states differ materially (MachineDiff): a verdict the difference could
// explain is inconclusive. A busier machine now could explain a failure, a quieter
// one a pass (it could hide a regression); differences that lean both ways could
// explain either. A failure measured on a quieter machine now, or a pass on a
// busier one, stands: the machine only made the verdict harder to reach.
func judgeChange(r Rule, d Delta, baseM, curM *Machine) (Outcome, string) {
	o, why := judgeFigures(r, d)
	if !machineSensitive(r.Metric) {
		return o, why
	}
	diff, lean := machineLean(baseM, curM, nightSides)
	if diff == "" {
		return o, why
	}
	change := fmt.Sprintf("%+.1f%%", *d.Change*100)
	limit := fmt.Sprintf("%+g%%", signed(r)*100)
	where := map[int]string{1: "a busier machine", -1: "a quieter machine"}[lean]
	switch {
	case o == OutcomeInconclusive:
		return o, why + "; and measured under different machine states: " + diff
	case !machineCouldExplain(r, o, lean):
		return o, fmt.Sprintf("%s, even on %s now (%s)", why, where, diff)
	case lean == 0:
		return OutcomeInconclusive, fmt.Sprintf("%s, measured under machine states that differ both ways, which could explain any change: %s", change, diff)
	case o == OutcomeFail:
		return OutcomeInconclusive, fmt.Sprintf("%s, beyond the %s limit, but measured on %s now, which could explain it: %s", change, limit, where, diff)
	}
	return OutcomeInconclusive, fmt.Sprintf("%s, within the %s limit, but measured on %s now, which could hide a regression: %s", change, limit, where, diff)
}

// machineCouldExplain reports whether machine states differing the way lean says
// (machineLean: +1 the current side, or B, ran on a busier or slower machine, -1
// on a quieter one, 0 both ways) could explain verdict o of rule r. A busier
// machine now could explain a failure, a quieter one a pass (it could hide a
// regression); differences both ways could explain either. A failure on a
// quieter machine, or a pass on a busier one, stands: the machine only made the
// verdict harder to reach. The nightly gate (judgeChange) and gate --ab
// (judgeABChange) both decide with it.
func machineCouldExplain(r Rule, o Outcome, lean int) bool {
	if o != OutcomeFail && o != OutcomePass {
		return false
	}
	if lean == 0 {
		return true
	}
	// Whether the current side's machine pushed the figure the way the rule fails.
	pushedBad := (lean > 0) == busierIsBad(r)
	return (o == OutcomeFail) == pushedBad
}

// busierIsBad reports whether a busier machine pushes rule r's figure the way the
// rule fails: a drop of a figure that a busy machine lowers (throughput, MFU), or a
// rise of one it raises (a time).
func busierIsBad(r Rule) bool {
	higherIsSlower := false
	if c, err := LookupColumn(r.Metric); err == nil {
		higherIsSlower = c.Unit == UnitSeconds
	}
	return (r.Kind == RuleDrop) != higherIsSlower
}

// judgeFigures is judgeChange's verdict from the figures alone.
func judgeFigures(r Rule, d Delta) (Outcome, string) {
	change := *d.Change
	limit := fmt.Sprintf("%+g%%", signed(r)*100)
	stat := " (not statistically backed)"
	if d.Backed {
		stat = fmt.Sprintf(" (p=%.3f n=%d+%d)", *d.P, d.Baseline.N, d.Current.N)
	}
	beyond := func(x float64) bool {
		if r.Kind == RuleDrop {
			return x < -r.Limit
		}
		return x > r.Limit
	}
	if !d.Backed {
		if beyond(change) {
			return OutcomeFail, fmt.Sprintf("%+.1f%%, beyond the %s limit%s", change*100, limit, stat)
		}
		return OutcomePass, fmt.Sprintf("%+.1f%%, within the %s limit%s", change*100, limit, stat)
	}
	if sameSamples(d.Baseline.sample, d.Current.sample) {
		// The same figures, repeat for repeat (a results directory gated
		// against a copy of itself): nothing changed, however wide the
		// repeats' spread. Two independent medians' intervals would call it
		// too noisy to tell (issue 37's byte-copy property). Worded as any
		// pass: the interval of the change is the single point 0.
		return OutcomePass, fmt.Sprintf("%+.1f%%, within the %s limit%s", change*100, limit, stat)
	}
	lo, hi, ok := changeInterval(d)
	if !ok {
		return OutcomeInconclusive, fmt.Sprintf("%+.1f%%, but the baseline's spread reaches 0: no interval bounds the change%s", change*100, stat)
	}
	// The end of the interval nearest the limit, and the one farthest from it.
	near, far := hi, lo
	if r.Kind == RuleRise {
		near, far = lo, hi
	}
	switch {
	case beyond(near) && d.Significant:
		return OutcomeFail, fmt.Sprintf("%+.1f%%, beyond the %s limit%s", change*100, limit, stat)
	case beyond(near):
		return OutcomeInconclusive, fmt.Sprintf("%+.1f%%, beyond the %s limit but not significant%s", change*100, limit, stat)
	case !beyond(far):
		return OutcomePass, fmt.Sprintf("%+.1f%%, within the %s limit%s", change*100, limit, stat)
	}
	return OutcomeInconclusive, fmt.Sprintf("%+.1f%%, too noisy to tell against the %s limit: the medians' 95%% CIs (± %s, ± %s) allow %+.0f%% to %+.0f%%%s",
		change*100, limit, d.Baseline.pctRange(), d.Current.pctRange(), lo*100, hi*100, stat)
}

// sameSamples reports whether two sides' per-repeat figures are the same
// multiset (the same measurements, in any order), with at least one figure.
func sameSamples(a, b []float64) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// judgeBound decides absolute rule r on the current figure s: inconclusive when the
// figure is the median of at least MinStatRepeats repeats and its 95% CI holds the
// bound (the spread cannot say which side of it the figure is on); else the figure
// decides. It returns "" when the bound alone decides.
func judgeBound(r Rule, s *SideStat) string {
	if !s.Backed() || !(s.Lo <= s.Value && s.Value <= s.Hi) {
		return "" // no interval, or the headline is no median (a peak is the maximum)
	}
	if s.Lo < r.Limit && r.Limit < s.Hi {
		return fmt.Sprintf("the median's 95%% CI (± %s over %d repeats) holds the bound %g: too noisy to tell", s.pctRange(), s.N, r.Limit)
	}
	return ""
}
