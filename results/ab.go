package results

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"golang.org/x/perf/benchmath"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// ABFile is the file `fsdpbench ab` writes into its sweep's directory, and
// `fsdpbench gate --ab` reads.
const ABFile = "ab.json"

// ABKind marks an ABFile, so that gate refuses any other JSON given as one.
const ABKind = "fsdpbench-ab"

// Bounds of an A/B comparison's confidence level (ab --confidence).
const (
	MinABConfidence = 0.5
	MaxABConfidence = 0.999
)

// ABResult is the outcome of an A/B comparison: two variants of one spec (A and
// B, each a list of KEY=VALUE settings as sweep --set takes them) measured
// alternately on one machine in one window, in pairs of adjacent repeats.
type ABResult struct {
	Kind  string `json:"kind"`
	Sweep string `json:"sweep"`
	// Order is abab (A first in every pair) or abba (A first in even pairs, B in
	// odd ones, which cancels a linear drift and any advantage of going first).
	Order string `json:"order"`
	// Confidence is the level of every interval (0.95 unless ab --confidence).
	A          []string  `json:"a"`
	B          []string  `json:"b"`
	Confidence float64   `json:"confidence"`
	Points     []ABPoint `json:"points"`
}

// ABPoint is one point of the spec measured as A and as B.
type ABPoint struct {
	// Point names the point: A's run slug.
	Point    string     `json:"point"`
	ARun     string     `json:"a_run"`
	BRun     string     `json:"b_run"`
	AStatus  Status     `json:"a_status"`
	BStatus  Status     `json:"b_status"`
	AError   string     `json:"a_error,omitempty"`
	BError   string     `json:"b_error,omitempty"`
	Metrics  []ABChange `json:"metrics,omitempty"`
	Problems []string   `json:"problems,omitempty"`
}

// ABChange is B's change against A of one metric over the pairs: each pair's
// change b/a − 1, and the median of those with its confidence interval.
type ABChange struct {
	Metric string `json:"metric"`
	// Changes holds each pair's b/a − 1, in the order the pairs ran.
	Changes []float64 `json:"changes"`
	AMedian float64   `json:"a_median"`
	BMedian float64   `json:"b_median"`
	// Median is the median of Changes; Lo and Hi bound its confidence interval
	// (benchmath.AssumeNothing: the distribution-free interval of a median from
	// order statistics, as benchstat). Backed is false with fewer than
	// MinStatRepeats pairs, which give no finite interval: Lo and Hi are then the
	// median and say nothing.
	Median float64 `json:"median"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
	Backed bool    `json:"backed"`
}

// PairedChange computes B's change against A from per-pair figures a[i] and
// b[i] measured side by side. The statistic is the median of the per-pair
// ratios b/a − 1 with its 95% interval from order statistics: pairing takes the
// machine's drift out (both sides of a pair ran within a minute), the ratio makes
// the change relative as gate's rules are, and a median with a distribution-free
// interval is what the rest of fsdpbench uses (benchstat's method), robust to a
// pair that a disturbance hit. Pairs with a non-positive or non-finite side are
// dropped: they have no ratio.
//
// confidence is the interval's level (Confidence, 0.95, unless given).
func PairedChange(metric string, a, b []float64, confidence float64) ABChange {
	if !(confidence > 0 && confidence < 1) {
		confidence = Confidence
	}
	c := ABChange{Metric: metric, Changes: []float64{}}
	var as, bs []float64
	for i := range min(len(a), len(b)) {
		if !(a[i] > 0) || !(b[i] > 0) || math.IsInf(a[i], 0) || math.IsInf(b[i], 0) {
			continue
		}
		c.Changes = append(c.Changes, b[i]/a[i]-1)
		as, bs = append(as, a[i]), append(bs, b[i])
	}
	if len(c.Changes) == 0 {
		return c
	}
	median := func(xs []float64) benchmath.Summary {
		return benchmath.AssumeNothing.Summary(benchmath.NewSample(append([]float64(nil), xs...), &benchmath.DefaultThresholds), confidence)
	}
	c.AMedian, c.BMedian = median(as).Center, median(bs).Center
	s := median(c.Changes)
	c.Median, c.Lo, c.Hi = s.Center, s.Center, s.Center
	if len(c.Changes) >= MinStatRepeats && !math.IsInf(s.Lo, 0) && !math.IsInf(s.Hi, 0) {
		c.Lo, c.Hi, c.Backed = s.Lo, s.Hi, true
	}
	return c
}

// ABPointOf compares the runs a and b (one point as A and as B) on every metric
// both have per-repeat samples of, pair i being repeat i of each, with
// intervals at the given confidence.
func ABPointOf(a, b *Run, confidence float64) ABPoint {
	p := ABPoint{Point: a.Config.Slug, ARun: a.Config.ID, BRun: b.Config.ID,
		AStatus: a.Metrics.Status, BStatus: b.Metrics.Status, AError: a.Metrics.Error, BError: b.Metrics.Error}
	if p.Point == "" {
		p.Point = a.Config.ID
	}
	for _, c := range Columns() {
		if c.Kind != KindMetric || c.CI == "" {
			continue
		}
		xa, xb := a.Metrics.Samples[c.CI], b.Metrics.Samples[c.CI]
		if len(xa) == 0 || len(xb) == 0 {
			continue
		}
		if len(xa) != len(xb) {
			p.Problems = append(p.Problems, fmt.Sprintf("%s: %d repeats of A and %d of B; compared as %d pairs", c.Name, len(xa), len(xb), min(len(xa), len(xb))))
		}
		p.Metrics = append(p.Metrics, PairedChange(c.Name, xa, xb, confidence))
	}
	return p
}

// Change returns the point's change of metric, or nil.
func (p *ABPoint) Change(metric string) *ABChange {
	for i := range p.Metrics {
		if p.Metrics[i].Metric == metric {
			return &p.Metrics[i]
		}
	}
	return nil
}

// WriteAB stores r as dir/ABFile.
func WriteAB(dir string, r ABResult) error {
	r.Kind = ABKind
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", ABFile, err)
	}
	return WriteFileAtomic(filepath.Join(dir, ABFile), append(b, '\n'))
}

// ReadAB reads an ABFile, or the ABFile of a directory.
func ReadAB(path string) (ABResult, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ABFile)
	}
	b, err := input.ReadJSON(path, input.Metrics)
	if err != nil {
		return ABResult{}, err
	}
	var r ABResult
	if err := json.Unmarshal(b, &r); err != nil {
		return ABResult{}, fmt.Errorf("%s: %w (not a file `fsdpbench ab` wrote)", path, err)
	}
	if r.Kind != ABKind {
		return ABResult{}, fmt.Errorf("%s: not an A/B result (its kind is %q, not %q): give the %s that `fsdpbench ab` wrote, or its results directory", path, r.Kind, ABKind, ABFile)
	}
	if !(r.Confidence >= MinABConfidence && r.Confidence <= MaxABConfidence) {
		return ABResult{}, fmt.Errorf("%s: confidence %v is not between %g and %g", path, r.Confidence, MinABConfidence, MaxABConfidence)
	}
	if len(r.Points) > sweeps.MaxRuns {
		return ABResult{}, fmt.Errorf("%s: %d points, more than %d", path, len(r.Points), sweeps.MaxRuns)
	}
	for _, p := range r.Points {
		for _, c := range p.Metrics {
			if len(c.Changes) > MaxRepeats {
				return ABResult{}, fmt.Errorf("%s: point %s: %s has %d pairs, more than %d", path, p.Point, c.Metric, len(c.Changes), MaxRepeats)
			}
			for _, x := range []float64{c.Median, c.Lo, c.Hi, c.AMedian, c.BMedian} {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return ABResult{}, fmt.Errorf("%s: point %s: %s holds a value that is not a finite number", path, p.Point, c.Metric)
				}
			}
			if c.Lo > c.Median || c.Median > c.Hi {
				return ABResult{}, fmt.Errorf("%s: point %s: %s: its interval [%g, %g] does not hold its median %g", path, p.Point, c.Metric, c.Lo, c.Hi, c.Median)
			}
		}
	}
	return r, nil
}

// ABOutcome is gate's verdict on one rule at one point of an A/B result.
type ABOutcome string

// A/B verdicts.
const (
	ABPass         ABOutcome = "pass"
	ABFail         ABOutcome = "FAIL"
	ABInconclusive ABOutcome = "inconclusive"
)

// ABCheck is one rule checked at one point.
type ABCheck struct {
	Point   string    `json:"point"`
	Rule    string    `json:"rule"`
	Outcome ABOutcome `json:"outcome"`
	Why     string    `json:"why"`
}

// GateAB applies the relative rules (METRIC:-X%, METRIC:+X%) to an A/B result,
// A being the baseline and B the change: a check fails when B's change's whole
// interval lies beyond the rule's limit in the bad direction, passes when it
// lies wholly on the allowed side, and is inconclusive otherwise (the interval
// straddles the limit, or fewer than MinStatRepeats pairs give none): noise is
// not taken for a verdict either way. A point where B did not finish ok while A
// did fails; one where A did not finish is inconclusive (nothing to compare).
// Bound rules (>=, <=) judge one side, not a change, and are listed as skipped.
func GateAB(r ABResult, rules []Rule) (checks []ABCheck, skipped []string) {
	for _, rule := range rules {
		if rule.Kind != RuleDrop && rule.Kind != RuleRise {
			skipped = append(skipped, rule.String())
		}
	}
	for _, p := range r.Points {
		for _, rule := range rules {
			if rule.Kind != RuleDrop && rule.Kind != RuleRise {
				continue
			}
			ck := ABCheck{Point: p.Point, Rule: rule.String()}
			c := p.Change(rule.Metric)
			switch {
			case p.AStatus != StatusOK && p.BStatus == StatusOK:
				ck.Outcome, ck.Why = ABInconclusive, fmt.Sprintf("A did not finish (%s): nothing to compare B with", p.AStatus)
			case p.BStatus != StatusOK && p.AStatus == StatusOK:
				ck.Outcome, ck.Why = ABFail, fmt.Sprintf("B is %s where A was ok: %s", p.BStatus, p.BError)
			case p.BStatus != StatusOK:
				ck.Outcome, ck.Why = ABInconclusive, fmt.Sprintf("neither finished (A %s, B %s)", p.AStatus, p.BStatus)
			case c == nil:
				ck.Outcome, ck.Why = ABInconclusive, fmt.Sprintf("no per-repeat %s on both sides", rule.Metric)
			default:
				ck.Outcome, ck.Why = judgeAB(rule, c)
			}
			checks = append(checks, ck)
		}
	}
	return checks, skipped
}

func judgeAB(rule Rule, c *ABChange) (ABOutcome, string) {
	span := fmt.Sprintf("B vs A %+.1f%% [%+.1f%%, %+.1f%%] over %d pairs", 100*c.Median, 100*c.Lo, 100*c.Hi, len(c.Changes))
	if !c.Backed {
		return ABInconclusive, fmt.Sprintf("B vs A %+.1f%% over %d pairs: fewer than %d pairs give no confidence interval", 100*c.Median, len(c.Changes), MinStatRepeats)
	}
	lim := rule.Limit
	if rule.Kind == RuleDrop {
		switch {
		case c.Hi < -lim:
			return ABFail, span + fmt.Sprintf(": the whole interval is below -%g%%", 100*lim)
		case c.Lo >= -lim:
			return ABPass, span + fmt.Sprintf(": the whole interval is above -%g%%", 100*lim)
		}
		return ABInconclusive, span + fmt.Sprintf(": the interval straddles -%g%%; more pairs (--pairs) may decide", 100*lim)
	}
	switch {
	case c.Lo > lim:
		return ABFail, span + fmt.Sprintf(": the whole interval is above +%g%%", 100*lim)
	case c.Hi <= lim:
		return ABPass, span + fmt.Sprintf(": the whole interval is below +%g%%", 100*lim)
	}
	return ABInconclusive, span + fmt.Sprintf(": the interval straddles +%g%%; more pairs (--pairs) may decide", 100*lim)
}
