package results

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aclements/go-moremath/stats"

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
	// AOnly and BOnly name the figures with per-repeat values on one side only
	// (abFigures): gate --ab fails a rule on a figure A measured and B did not,
	// as the nightly gate fails a figure the baseline knew and the current run
	// does not, and skips one on a figure only B has. Absent in files written
	// before they were recorded.
	AOnly []string `json:"a_only,omitempty"`
	BOnly []string `json:"b_only,omitempty"`
	// AMachine and BMachine summarize what the machine was doing while each side
	// ran (the runs' env.machine, without the per-repeat states: Pairs holds
	// those); nil where the harness read nothing (a prediction, an older run).
	AMachine *Machine `json:"a_machine,omitempty"`
	BMachine *Machine `json:"b_machine,omitempty"`
	// Pairs holds each pair's machine states, pair i being repeat i of each side,
	// and how they differed; empty when neither side read any.
	Pairs []ABPair `json:"pairs,omitempty"`
}

// ABPair is what the machine was doing during one pair's A and B repeats.
type ABPair struct {
	A Machine `json:"a"`
	B Machine `json:"b"`
	// MachineDiff says how A's and B's states differed materially
	// (MachineDiff's thresholds), "" when they did not. gate --ab works it out
	// again from A and B rather than trust it.
	MachineDiff string `json:"machine_diff,omitempty"`
}

// ABChange is B's change against A of one metric over the pairs: each pair's
// change b/a − 1, and the median of those with its confidence interval.
type ABChange struct {
	Metric string `json:"metric"`
	// Changes holds each pair's b/a − 1, in the order the pairs ran.
	Changes []float64 `json:"changes"`
	// Dropped lists the pairs (0-based) that have no change because a side's
	// figure was not positive and finite: Changes[j] is pair j plus the number of
	// dropped pairs before it.
	Dropped []int   `json:"dropped,omitempty"`
	AMedian float64 `json:"a_median"`
	BMedian float64 `json:"b_median"`
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
// ratios b/a − 1 with its equal-tailed confidence interval from order
// statistics (PairedInterval): pairing takes the machine's drift out (both
// sides of a pair ran within a minute), the ratio makes the change relative as
// gate's rules are, and a median with a distribution-free interval is robust to
// a pair that a disturbance hit. Pairs with a non-positive or non-finite side
// are dropped (listed in Dropped): they have no ratio; so are pairs whose
// change passes MaxABChange, which ReadAB would refuse.
//
// confidence is the interval's level (Confidence, 0.95, unless given).
func PairedChange(metric string, a, b []float64, confidence float64) ABChange {
	if !(confidence > 0 && confidence < 1) {
		confidence = Confidence
	}
	c := ABChange{Metric: metric, Changes: []float64{}}
	var as, bs []float64
	for i := range min(len(a), len(b)) {
		if !(a[i] > 0) || !(b[i] > 0) || math.IsInf(a[i], 0) || math.IsInf(b[i], 0) || b[i]/a[i]-1 > MaxABChange {
			c.Dropped = append(c.Dropped, i)
			continue
		}
		c.Changes = append(c.Changes, b[i]/a[i]-1)
		as, bs = append(as, a[i]), append(bs, b[i])
	}
	if len(c.Changes) == 0 {
		return c
	}
	c.AMedian, c.BMedian = median(slices.Clone(as)), median(slices.Clone(bs))
	c.Median, c.Lo, c.Hi, c.Backed = PairedInterval(c.Changes, confidence)
	return c
}

// MinPairs is the fewest pairs that give PairedInterval an interval at the
// given confidence level (6 at 95%, 8 at 99%): with fewer, even pairs that all
// moved one way could have done so by chance too often.
func MinPairs(confidence float64) int {
	for n := 1; n < MaxRepeats; n++ {
		if math.Pow(0.5, float64(n)) <= (1-confidence)/2 {
			return n
		}
	}
	return MaxRepeats
}

// PairedInterval returns the median of the pairs' changes xs and its
// distribution-free confidence interval at the given level: the order
// statistics [x(k), x(n+1−k)] with k the largest for which each tail's chance,
// P(Binomial(n, ½) < k), is at most (1 − confidence)/2. Without a k ≥ 1 (too
// few pairs for the level: fewer than 6 at 95%, 8 at 99%) ok is false and lo
// and hi are the median.
//
// The interval is equal-tailed on purpose. benchmath's (benchstat's) is the
// shortest that reaches the level, which for some n leans to one side: with 8
// pairs at 95% it is [x(1), x(7)], whose upper end lies below the true median
// 3.5% of the time, not 2.5%. A gate fails on one side of its interval only
// (a drop rule when the upper end is below −limit), so what bounds its false
// failures is that one tail: each is held to (1 − confidence)/2 here.
func PairedInterval(xs []float64, confidence float64) (med, lo, hi float64, ok bool) {
	if len(xs) == 0 {
		return 0, 0, 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	med = median(slices.Clone(s))
	lo, hi = med, med
	n := len(s)
	tail := (1 - confidence) / 2
	bin := stats.BinomialDist{N: n, P: 0.5}
	k := 0
	for k+1 <= (n+1)/2 && bin.CDF(float64(k)) <= tail {
		k++ // P(Binomial(n, ½) ≤ k−1+1) = P(< k+1) is within the tail
	}
	if k == 0 {
		return med, lo, hi, false
	}
	return med, s[k-1], s[n-k], true
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
	for _, f := range abFigures() {
		xa, xb := a.Metrics.Samples[f.sample], b.Metrics.Samples[f.sample]
		switch {
		case len(xa) == 0 && len(xb) == 0:
			continue
		case len(xb) == 0:
			p.AOnly = append(p.AOnly, f.metric)
			continue
		case len(xa) == 0:
			p.BOnly = append(p.BOnly, f.metric)
			continue
		}
		if len(xa) != len(xb) {
			p.Problems = append(p.Problems, fmt.Sprintf("%s: %d repeats of A and %d of B; compared as %d pairs", f.metric, len(xa), len(xb), min(len(xa), len(xb))))
		}
		p.Metrics = append(p.Metrics, PairedChange(f.metric, xa, xb, confidence))
	}
	p.AMachine, p.BMachine = sideMachine(a.Metrics.Env.Machine), sideMachine(b.Metrics.Env.Machine)
	p.Pairs = machinePairs(a.Metrics.Env.Machine, b.Metrics.Env.Machine)
	return p
}

// abFigure is a figure ab.json pairs: its metric (column) name and the key of
// its per-repeat values in Metrics.Samples.
type abFigure struct{ metric, sample string }

// abPeakFigures are the peak memory figures, which Normalize keeps per repeat
// (Samples) but whose columns carry no CI (a peak's headline is the maximum over
// repeats, not a median). ab.json pairs them too: without them gate --ab's
// default rules, two of which are on peak memory, could never be decided
// (issue 37: an A/A on the sim was inconclusive forever).
var abPeakFigures = []abFigure{
	{SamplePeakReserved, SamplePeakReserved},
	{SamplePeakAllocated, SamplePeakAllocated},
	{SamplePeakDevice, SamplePeakDevice},
	{SamplePeakRSS, SamplePeakRSS},
}

// abFigures lists the figures ab.json pairs: every metric column with a
// per-repeat interval (Column.CI), then the peak memory figures.
func abFigures() []abFigure {
	var out []abFigure
	for _, c := range Columns() {
		if c.Kind == KindMetric && c.CI != "" {
			out = append(out, abFigure{c.Name, c.CI})
		}
	}
	for _, f := range abPeakFigures {
		if !slices.ContainsFunc(out, func(g abFigure) bool { return g.metric == f.metric }) {
			out = append(out, f)
		}
	}
	return out
}

// sideMachine is a side's machine summary without its per-repeat states (the
// pairs hold those).
func sideMachine(m *Machine) *Machine {
	if m == nil {
		return nil
	}
	c := *m
	c.PerRepeat = nil
	return &c
}

// machinePairs pairs A's and B's per-repeat machine states, repeat i with
// repeat i, each with how they differ (MachineDiff in A/B words). A run of one
// repeat has its summary as its only repeat's state.
func machinePairs(a, b *Machine) []ABPair {
	if a == nil || b == nil {
		return nil
	}
	reps := func(m *Machine) []Machine {
		if len(m.PerRepeat) > 0 {
			return m.PerRepeat
		}
		return []Machine{*sideMachine(m)}
	}
	ra, rb := reps(a), reps(b)
	var out []ABPair
	for i := range min(len(ra), len(rb)) {
		p := ABPair{A: ra[i], B: rb[i]}
		p.MachineDiff, _ = machineLean(&p.A, &p.B, abSides)
		out = append(out, p)
	}
	return out
}

// pairOf returns the pair (0-based) whose change is c.Changes[j].
func (c *ABChange) pairOf(j int) int {
	i := j
	for _, d := range c.Dropped {
		if d <= i {
			i++
		}
	}
	return i
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
	if field, msg := checkAB(&r); field != "" {
		return ABResult{}, fmt.Errorf("%s: %s: %s (not as `fsdpbench ab` writes it: run ab again, or restore the file)", path, field, msg)
	}
	return r, nil
}

// Bounds of an ABFile read back (checkAB): those of what ab writes.
const (
	// MaxABPairs is the most pairs a point holds: ab --pairs stops at the
	// spec's bound on repeats.
	MaxABPairs = sweeps.MaxRepeats
	// MaxABChange bounds a pair's change b/a - 1 (a billion-fold): far beyond
	// any change two variants of one point make, and small enough that every
	// percentage printed from it is finite. PairedChange drops a pair past it
	// as it drops one with a side that is not positive and finite.
	MaxABChange = 1e9
	// maxABSettings bounds the --a and --b settings listed, and maxABText the
	// length of each string ab.json holds (a setting, a name, an error).
	maxABSettings = 1 << 10
	maxABText     = 1 << 16
)

// checkAB checks an ABFile read back as ab would have written it: every count
// within ab's bounds and agreeing with the others (the pairs of each metric,
// the machine states of each pair), every value finite and in range, no point
// or metric listed twice, names ab uses. A hand edit past them would otherwise
// reach the verdict: a million changes counted as a million pairs, a point
// counted twice, an interval ending at +Inf%. It returns the field (its JSON
// path) and why, or "", "".
func checkAB(r *ABResult) (field, msg string) {
	if !(r.Confidence >= MinABConfidence && r.Confidence <= MaxABConfidence) {
		return "confidence", fmt.Sprintf("%v is not between %g and %g", r.Confidence, MinABConfidence, MaxABConfidence)
	}
	if !slices.Contains(ABOrders, r.Order) {
		return "order", fmt.Sprintf("%s is not an order ab runs (%s)", input.Quote(r.Order, 64), strings.Join(ABOrders, ", "))
	}
	if len(r.Sweep) > maxABText {
		return "sweep", fmt.Sprintf("is %d bytes long, more than %d", len(r.Sweep), maxABText)
	}
	for _, side := range []struct {
		name string
		sets []string
	}{{"a", r.A}, {"b", r.B}} {
		if len(side.sets) > maxABSettings {
			return side.name, fmt.Sprintf("lists %d settings, more than %d", len(side.sets), maxABSettings)
		}
		for i, s := range side.sets {
			if len(s) > maxABText {
				return fmt.Sprintf("%s[%d]", side.name, i), fmt.Sprintf("is %d bytes long, more than %d", len(s), maxABText)
			}
		}
	}
	if len(r.Points) == 0 {
		// ab writes a point for every point of its spec, and a spec has one at
		// least: an empty list was cut or edited, and no rule can judge it.
		return "points", "is empty: the file holds no point to judge a change at, where ab writes one per point of its spec"
	}
	if len(r.Points) > sweeps.MaxRuns {
		return "points", fmt.Sprintf("holds %d points, more than %d", len(r.Points), sweeps.MaxRuns)
	}
	figures := abFigures()
	known := func(metric string) bool {
		return slices.ContainsFunc(figures, func(f abFigure) bool { return f.metric == metric })
	}
	// Each point is a pair of runs ab measured once: a run named twice is a
	// point listed twice, which would count twice in the verdict.
	runs := map[string]int{}
	for i := range r.Points {
		p := &r.Points[i]
		at := fmt.Sprintf("points[%d]", i)
		for _, t := range []struct{ name, s string }{{"point", p.Point}, {"a_run", p.ARun}, {"b_run", p.BRun}, {"a_error", p.AError}, {"b_error", p.BError}} {
			if len(t.s) > maxABText {
				return at + "." + t.name, fmt.Sprintf("is %d bytes long, more than %d", len(t.s), maxABText)
			}
		}
		var keys [][2]string // what names the point: its runs, else its name
		if p.ARun != "" {
			keys = append(keys, [2]string{"a " + p.ARun, "a_run"})
		}
		if p.BRun != "" {
			keys = append(keys, [2]string{"b " + p.BRun, "b_run"})
		}
		if len(keys) == 0 {
			keys = append(keys, [2]string{"point " + p.Point, "point"})
		}
		for _, k := range keys {
			if j, ok := runs[k[0]]; ok {
				return at, fmt.Sprintf("point %s is listed twice (points[%d] has the same %s): each point counts once", clip(p.Point), j, k[1])
			}
			runs[k[0]] = i
		}
		for _, st := range []struct {
			name string
			s    Status
		}{{"a_status", p.AStatus}, {"b_status", p.BStatus}} {
			if !st.s.Known() {
				return at + "." + st.name, fmt.Sprintf("%s is not a run status (%s)", input.Quote(string(st.s), 64), knownStatuses())
			}
		}
		if len(p.Problems) > len(figures) {
			return at + ".problems", fmt.Sprintf("lists %d problems, more than the %d figures ab pairs", len(p.Problems), len(figures))
		}
		for j, s := range p.Problems {
			if len(s) > maxABText {
				return fmt.Sprintf("%s.problems[%d]", at, j), fmt.Sprintf("is %d bytes long, more than %d", len(s), maxABText)
			}
		}
		// Each figure is paired once, or measured on one side only: never both.
		seen := map[string]string{}
		for _, l := range []struct {
			name  string
			names []string
		}{{"a_only", p.AOnly}, {"b_only", p.BOnly}} {
			for j, m := range l.names {
				f := fmt.Sprintf("%s.%s[%d]", at, l.name, j)
				if !known(m) {
					return f, fmt.Sprintf("%s is not a figure ab pairs", input.Quote(m, 64))
				}
				if prev, ok := seen[m]; ok {
					return f, fmt.Sprintf("%s is listed already (%s)", m, prev)
				}
				seen[m] = f
			}
		}
		if len(p.Metrics) > len(figures) {
			return at + ".metrics", fmt.Sprintf("holds %d metrics, more than the %d figures ab pairs", len(p.Metrics), len(figures))
		}
		pairs := 0 // the most pairs any metric of the point covers
		for j := range p.Metrics {
			c := &p.Metrics[j]
			f := fmt.Sprintf("%s.metrics[%d]", at, j)
			if !known(c.Metric) {
				return f + ".metric", fmt.Sprintf("%s is not a figure ab pairs", input.Quote(c.Metric, 64))
			}
			if prev, ok := seen[c.Metric]; ok {
				return f + ".metric", fmt.Sprintf("%s is listed already (%s): each figure is paired once", c.Metric, prev)
			}
			seen[c.Metric] = f
			if field, msg := checkABChange(c, r.Confidence); field != "" {
				return f + "." + field, fmt.Sprintf("%s: %s", c.Metric, msg)
			}
			pairs = max(pairs, len(c.Changes)+len(c.Dropped))
		}
		if len(p.Pairs) > MaxABPairs {
			return at + ".pairs", fmt.Sprintf("holds %d pairs' machine states, more than %d", len(p.Pairs), MaxABPairs)
		}
		if len(p.Pairs) > 0 && len(p.Pairs) < pairs {
			// ab keeps a state for every pair the runs measured (or none, where
			// neither side read any): a change without its pair's state would
			// escape the machine check.
			return at + ".pairs", fmt.Sprintf("holds %d pairs' machine states for %d pairs' changes: ab keeps one per pair", len(p.Pairs), pairs)
		}
		// A side's summary covers at most its run's repeats, one per pair; a
		// pair's state is one repeat's.
		sideRepeats := max(pairs, len(p.Pairs), 1)
		type state struct {
			name    string
			m       *Machine
			repeats int
		}
		states := []state{{"a_machine", p.AMachine, sideRepeats}, {"b_machine", p.BMachine, sideRepeats}}
		for k := range p.Pairs {
			if len(p.Pairs[k].A.PerRepeat)+len(p.Pairs[k].B.PerRepeat) > 0 {
				return fmt.Sprintf("%s.pairs[%d]", at, k), "a repeat's state holds no repeats"
			}
			if len(p.Pairs[k].MachineDiff) > maxABText {
				return fmt.Sprintf("%s.pairs[%d].machine_diff", at, k), fmt.Sprintf("is %d bytes long, more than %d", len(p.Pairs[k].MachineDiff), maxABText)
			}
			states = append(states, state{fmt.Sprintf("pairs[%d].a", k), &p.Pairs[k].A, 1}, state{fmt.Sprintf("pairs[%d].b", k), &p.Pairs[k].B, 1})
		}
		for _, st := range states {
			if st.m != nil && len(st.m.PerRepeat) > 0 && !strings.HasPrefix(st.name, "pairs") {
				return at + "." + st.name + ".per_repeat", "a side's summary holds no repeats: the pairs hold them"
			}
			if f, msg := checkMachine(st.m, st.repeats); f != "" {
				return at + "." + st.name + "." + f, msg
			}
		}
	}
	return "", ""
}

// checkABChange checks one metric's change as PairedChange makes it at the
// file's confidence level: at most MaxABPairs pairs, the dropped ones numbered
// in order among them, every change finite and between -100% and MaxABChange,
// the medians finite and positive (0 without a change), the interval holding
// the median, and backed only with the pairs that give an interval. It returns the
// field and why, or "", "".
func checkABChange(c *ABChange, confidence float64) (field, msg string) {
	n := len(c.Changes) + len(c.Dropped)
	if len(c.Changes) > MaxABPairs || len(c.Dropped) > MaxABPairs || n > MaxABPairs {
		return "changes", fmt.Sprintf("%d pairs' changes and %d dropped pairs, more than the %d pairs ab measures at most (--pairs)", len(c.Changes), len(c.Dropped), MaxABPairs)
	}
	for j, x := range c.Changes {
		if math.IsNaN(x) || x < -1 || x > MaxABChange {
			return fmt.Sprintf("changes[%d]", j), fmt.Sprintf("%g is not a pair's change from -100%% to %+g%%", x, 100*MaxABChange)
		}
	}
	for j, d := range c.Dropped {
		if d < 0 || d >= n || (j > 0 && d <= c.Dropped[j-1]) {
			return fmt.Sprintf("dropped[%d]", j), fmt.Sprintf("%d is not a pair number (0 to %d, each once, in order)", d, n-1)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"a_median", c.AMedian}, {"b_median", c.BMedian}} {
		if math.IsNaN(f.v) || f.v < 0 || f.v > math.MaxFloat64/4 {
			return f.name, fmt.Sprintf("%g is not a finite figure of at least 0", f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"median", c.Median}, {"lo", c.Lo}, {"hi", c.Hi}} {
		if math.IsNaN(f.v) || f.v < -1 || f.v > MaxABChange {
			return f.name, fmt.Sprintf("%g is not a change from -100%% to %+g%%", f.v, 100*MaxABChange)
		}
	}
	if c.Lo > c.Median || c.Median > c.Hi {
		return "lo", fmt.Sprintf("its interval [%g, %g] does not hold its median %g", c.Lo, c.Hi, c.Median)
	}
	if need := MinPairs(confidence); c.Backed && len(c.Changes) < need {
		return "backed", fmt.Sprintf("an interval over %d pairs: at a %g%% level, at least %d give one", len(c.Changes), 100*confidence, need)
	}
	return "", ""
}

// ABOrders are the orders ab runs its pairs in (ab --order).
var ABOrders = []string{"abba", "abab"}

// ABCheck is one rule checked at one point of an A/B result. Outcome is pass,
// fail or inconclusive, as the nightly gate's checks.
type ABCheck struct {
	Point   string  `json:"point"`
	Rule    string  `json:"rule"`
	Outcome Outcome `json:"outcome"`
	Why     string  `json:"why"`
	// MachinePairs lists the pairs (1-based, as the reasons count them) whose A
	// and B ran under materially different machine states (MachineDiff).
	MachinePairs []int `json:"machine_pairs,omitempty"`
}

// ABGateReport is gate --ab's outcome.
type ABGateReport struct {
	Sweep string   `json:"sweep"`
	A     []string `json:"a"`
	B     []string `json:"b"`
	// Verdict is pass, fail or inconclusive, decided from the checks under
	// InconclusivePolicy by GateVerdict, as the nightly gate's.
	Verdict            Outcome   `json:"verdict"`
	InconclusivePolicy string    `json:"inconclusive_policy"`
	Confidence         float64   `json:"confidence"`
	Checks             []ABCheck `json:"checks"`
	Failures           int       `json:"failures"`
	Inconclusive       int       `json:"inconclusive"`
	// SkippedChecks counts the checks skipped because the figure was not
	// measured at that point (neither side, or only B, has per-repeat values):
	// nothing was compared, so they are neither noise nor a verdict.
	SkippedChecks int `json:"skipped_checks"`
	// Skipped lists the rules that decided nothing, each with why: bound rules
	// (>=, <=), which judge one side, not a change, and default rules on a figure
	// no point measured on both sides.
	Skipped []ABSkippedRule `json:"skipped_rules,omitempty"`
}

// ABSkippedRule is a rule gate --ab did not apply, and why.
type ABSkippedRule struct {
	Rule string `json:"rule"`
	Why  string `json:"why"`
}

// ABRuleError is GateAB's error for a rule given explicitly (not a default)
// whose figure no point of the A/B result has on both sides: the user asked for
// a check that cannot be made, which is a usage error, not a verdict.
type ABRuleError struct {
	Rule Rule
	Why  string
}

func (e *ABRuleError) Error() string {
	from := e.Rule.From
	if from == "" {
		from = "given"
	}
	return fmt.Sprintf("rule %s (%s) cannot be checked: %s; drop the rule, or measure the figure", e.Rule, from, e.Why)
}

// GateAB applies the relative rules (METRIC:-X%, METRIC:+X%) to an A/B result,
// A being the baseline and B the change, and decides the verdict under the
// inconclusive policy (InconclusivePolicies; "" = report) as Gate does.
//
// Each check recomputes the interval from the pairs' changes (PairedInterval,
// at the result's confidence), so a verdict never rests on an interval edited
// in the file: it fails when B's change's whole interval lies beyond the rule's
// limit in the bad direction, passes when it lies wholly on the allowed side,
// and is inconclusive otherwise (the interval straddles the limit, or too few
// pairs give none). A verdict on a figure measured in time is also inconclusive
// when pairs whose A and B ran under materially different machine states
// (MachineDiff) could explain it and the other pairs do not reach it alone
// (judgeABChange). A point where B did not
// finish ok while A did fails; one where A did not finish is inconclusive.
//
// A figure that was not measured is no noise: more pairs would not measure it.
// Where neither side has per-repeat values of a rule's figure (the runs do not
// measure it, or ab.json predates its recording) the check is skipped with the
// reason; where A has them and B not, it fails (B lost a figure). A default rule
// whose figure no point has is listed in Skipped with the reason; a rule given
// explicitly is an *ABRuleError. Bound rules (>=, <=) judge one side, not a
// change, and are listed as skipped.
func GateAB(r ABResult, rules []Rule, policy string) (*ABGateReport, error) {
	policy, err := CheckInconclusivePolicy(policy)
	if err != nil {
		return nil, err
	}
	conf := r.Confidence
	if !(conf >= MinABConfidence && conf <= MaxABConfidence) {
		conf = Confidence
	}
	g := &ABGateReport{Sweep: r.Sweep, A: r.A, B: r.B, InconclusivePolicy: policy, Confidence: conf}
	for _, rule := range rules {
		if !rule.relative() {
			g.Skipped = append(g.Skipped, ABSkippedRule{Rule: rule.String(), Why: "a bound judges one side, not a change"})
		}
	}
	var byRule [][]ABCheck // each applied rule's check of every point
	for _, rule := range rules {
		if !rule.relative() {
			continue
		}
		var checks []ABCheck
		decided := false
		for _, p := range r.Points {
			ck := ABCheck{Point: p.Point, Rule: rule.String()}
			c := p.Change(rule.Metric)
			switch {
			case p.AStatus != StatusOK && p.BStatus == StatusOK:
				ck.Outcome, ck.Why = OutcomeInconclusive, fmt.Sprintf("A did not finish (%s): nothing to compare B with", p.AStatus)
			case p.BStatus != StatusOK && p.AStatus == StatusOK:
				ck.Outcome, ck.Why = OutcomeFail, fmt.Sprintf("B is %s where A was ok: %s", p.BStatus, clip(firstLine(p.BError)))
			case p.BStatus != StatusOK:
				ck.Outcome, ck.Why = OutcomeInconclusive, fmt.Sprintf("neither finished (A %s, B %s)", p.AStatus, p.BStatus)
			case slices.Contains(p.AOnly, rule.Metric):
				ck.Outcome, ck.Why = OutcomeFail, fmt.Sprintf("A measured %s in every repeat, B did not: B lost the figure", rule.Metric)
			case c == nil:
				ck.Outcome, ck.Why = OutcomeSkip, notMeasuredAB(rule.Metric, &p)
			case len(c.Changes) == 0:
				ck.Outcome, ck.Why = OutcomeSkip, fmt.Sprintf("no pair has a positive, finite %s on both sides: no change to judge", rule.Metric)
			default:
				ck.Outcome, ck.Why, ck.MachinePairs = judgeABChange(rule, c, p.Pairs, conf)
			}
			if ck.Outcome != OutcomeSkip {
				decided = true
			}
			checks = append(checks, ck)
		}
		if !decided && len(r.Points) > 0 {
			// Every point skipped the rule: its figure was measured nowhere.
			why := fmt.Sprintf("no point of the A/B result has per-repeat %s on both sides", rule.Metric)
			if slices.ContainsFunc(r.Points, func(p ABPoint) bool { return !slices.Contains(p.BOnly, rule.Metric) }) {
				why += ": " + unmeasuredCause
			}
			if rule.From != "default" {
				return nil, &ABRuleError{Rule: rule, Why: why}
			}
			g.Skipped = append(g.Skipped, ABSkippedRule{Rule: rule.String(), Why: why})
			continue
		}
		byRule = append(byRule, checks)
	}
	// Point by point, each point's rules together, as the table reads best.
	for i := range r.Points {
		for _, checks := range byRule {
			ck := checks[i]
			switch ck.Outcome {
			case OutcomeFail:
				g.Failures++
			case OutcomeInconclusive:
				g.Inconclusive++
			case OutcomeSkip:
				g.SkippedChecks++
			}
			g.Checks = append(g.Checks, ck)
		}
	}
	g.Verdict = GateVerdict(g.Failures > 0, g.Inconclusive, policy)
	return g, nil
}

// unmeasuredCause says why neither side of a point has a figure.
const unmeasuredCause = "the runs did not measure it (or an older fsdpbench wrote ab.json without it: run ab again)"

// notMeasuredAB says why point p has no per-repeat figure of metric.
func notMeasuredAB(metric string, p *ABPoint) string {
	if slices.Contains(p.BOnly, metric) {
		return fmt.Sprintf("A has no per-repeat %s (B has): nothing to compare B with", metric)
	}
	return fmt.Sprintf("neither A nor B has per-repeat %s: %s", metric, unmeasuredCause)
}

// judgeABFigures decides rule r on the pairs' changes xs at the confidence
// level: the interval's verdict (see GateAB) and the interval, in words.
func judgeABFigures(r Rule, xs []float64, conf float64) (Outcome, string) {
	med, lo, hi, ok := PairedInterval(xs, conf)
	if !ok {
		return OutcomeInconclusive, fmt.Sprintf("B vs A %+.1f%% over %d pairs: too few pairs for a %g%% confidence interval", 100*med, len(xs), 100*conf)
	}
	span := fmt.Sprintf("B vs A %+.1f%% [%+.1f%%, %+.1f%%] over %d pairs", 100*med, 100*lo, 100*hi, len(xs))
	lim := r.Limit
	if r.Kind == RuleDrop {
		switch {
		case hi < -lim:
			return OutcomeFail, span + fmt.Sprintf(": the whole interval is below -%g%%", 100*lim)
		case lo >= -lim:
			return OutcomePass, span + fmt.Sprintf(": the whole interval is above -%g%%", 100*lim)
		}
		return OutcomeInconclusive, span + fmt.Sprintf(": the interval straddles -%g%%; more pairs (--pairs) may decide", 100*lim)
	}
	switch {
	case lo > lim:
		return OutcomeFail, span + fmt.Sprintf(": the whole interval is above +%g%%", 100*lim)
	case hi <= lim:
		return OutcomePass, span + fmt.Sprintf(": the whole interval is below +%g%%", 100*lim)
	}
	return OutcomeInconclusive, span + fmt.Sprintf(": the interval straddles +%g%%; more pairs (--pairs) may decide", 100*lim)
}

// judgeABChange decides rule r on change c, whose pairs ran under the machine
// states pairs (pair i at index i; fewer or none where unknown), and returns
// the pairs (1-based) whose A and B ran under materially different states.
//
// The figures decide first (judgeABFigures). Then, for a figure measured in
// time, each pair whose A and B states differ materially (machineLean, as the
// nightly gate compares its two sides) and could explain the verdict
// (machineCouldExplain: B on a busier machine, a failure; on a quieter one, a
// pass; both ways, either) is a suspect: the verdict stands only if the other
// pairs reach it without the suspects. What differed between a suspect's A and
// B was the machine as well as the variant, so it says nothing reliable about
// the variant; the machine's disturbances do not depend on which variant ran,
// so the pairs left are a fair sample, just a smaller one (with fewer than
// MinPairs, no interval: inconclusive). A pair a disturbance hit on one side
// cannot make a verdict, and a verdict the other pairs carry is not given up
// for it.
func judgeABChange(r Rule, c *ABChange, pairs []ABPair, conf float64) (Outcome, string, []int) {
	o, why := judgeABFigures(r, c.Changes, conf)
	var differ, suspects []int
	var whys []string
	for j := range c.Changes {
		i := c.pairOf(j)
		if i >= len(pairs) {
			continue
		}
		diff, lean := machineLean(&pairs[i].A, &pairs[i].B, abSides)
		if diff == "" {
			continue
		}
		differ = append(differ, i+1)
		if machineSensitive(r.Metric) && machineCouldExplain(r, o, lean) {
			suspects = append(suspects, j)
			whys = append(whys, fmt.Sprintf("pair %d: %s", i+1, diff))
		}
	}
	if len(differ) == 0 {
		return o, why, nil
	}
	noted := fmt.Sprintf("; %d of %d pairs ran under different machine states between A and B (pairs %s)", len(differ), len(c.Changes), joinInts(differ))
	if len(suspects) == 0 {
		if o == OutcomeInconclusive || !machineSensitive(r.Metric) {
			return o, why + noted, differ
		}
		return o, why + noted + ", none of which could explain the verdict", differ
	}
	// The suspect pairs tell nothing about A against B (what differed between
	// their sides was the machine): the verdict stands if the other pairs
	// reach it on their own.
	rest := make([]float64, 0, len(c.Changes))
	for j, x := range c.Changes {
		if !slices.Contains(suspects, j) {
			rest = append(rest, x)
		}
	}
	if o2, _ := judgeABFigures(r, rest, conf); o2 == o {
		return o, why + noted + fmt.Sprintf("; the other %d pairs reach the verdict without the %d that could explain it", len(rest), len(suspects)), differ
	}
	what := map[Outcome]string{OutcomeFail: "the failure", OutcomePass: "the pass"}[o]
	return OutcomeInconclusive, fmt.Sprintf("%s, but %d of the pairs ran under machine states different between A and B that could explain %s: %s",
		why, len(suspects), what, strings.Join(whys, "; ")), differ
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// Headline is gate --ab's one-line verdict, with how inconclusive checks were
// counted under a policy other than report.
func (g *ABGateReport) Headline() string {
	counted := policyCounted(g.Inconclusive, g.InconclusivePolicy)
	// Said apart from the inconclusive ones: a figure not measured is no
	// noise, and measuring again would not decide it.
	skipped := ""
	if g.SkippedChecks > 0 {
		skipped += fmt.Sprintf(", %d skipped (not measured)", g.SkippedChecks)
	}
	switch len(g.Skipped) {
	case 0:
	case 1:
		skipped += "; rule " + g.Skipped[0].Rule + " skipped"
	default:
		skipped += fmt.Sprintf("; %d rules skipped", len(g.Skipped))
	}
	switch g.Verdict {
	case OutcomePass:
		return fmt.Sprintf("PASS: %d checks, %d failed, %d inconclusive%s%s", len(g.Checks), g.Failures, g.Inconclusive, skipped, counted)
	case OutcomeInconclusive:
		return fmt.Sprintf("INCONCLUSIVE: %d checks, none failed, %d inconclusive (too noisy, or measured under different machine states)%s; measure again, with more pairs", len(g.Checks), g.Inconclusive, skipped)
	}
	return fmt.Sprintf("FAIL: %d checks, %d failed, %d inconclusive%s%s", len(g.Checks), g.Failures, g.Inconclusive, skipped, counted)
}
