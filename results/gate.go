package results

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// RuleKind is what a gate rule checks.
type RuleKind string

// Rule kinds: a relative change against the baseline in the bad direction, or an
// absolute bound on the current figure.
const (
	RuleDrop RuleKind = "drop" // METRIC:-5%   fails when the figure falls by more than 5%
	RuleRise RuleKind = "rise" // METRIC:+3%   fails when the figure rises by more than 3%
	RuleMin  RuleKind = "min"  // METRIC>=0.35 fails when the figure is below 0.35
	RuleMax  RuleKind = "max"  // METRIC<=8e10 fails when the figure is above 8e10
)

// DefaultRules guard the figures a nightly job cares about: throughput per rank and
// peak memory. They apply when no rule is given.
var DefaultRules = []string{"tokens_per_s_per_rank:-5%", "peak_mem_reserved_bytes:+3%", "peak_mem_allocated_bytes:+3%"}

// MaxRiseLimit bounds the limit of a relative rule (a fraction: 10,000 is a rise of
// 1,000,000%): a larger one could never fail.
const MaxRiseLimit = 1e4

// maxFractionBound bounds an absolute rule on a fraction column (mfu, memory_saving,
// scaling_efficiency): beyond it the bound was written as a percentage.
const maxFractionBound = 10

// ruleSyntax is the help every rule error ends with.
const ruleSyntax = "write METRIC:-5% (fail on a drop beyond 5%), METRIC:+3% (fail on a rise beyond 3%), METRIC>=0.35 or METRIC<=8e10"

// Rule is one gate rule.
type Rule struct {
	// Metric is a numeric metric or derived column (Columns).
	Metric string   `json:"metric"`
	Kind   RuleKind `json:"kind"`
	// Limit is the allowed change as a fraction (0.05 for 5%) for drop and rise, the
	// bound in the column's plain unit (bytes, fractions) for min and max.
	Limit float64 `json:"limit"`
	// From says where the rule came from: "default", "--rule", or file:line:col.
	From string `json:"from,omitempty"`
}

// String writes the rule as ParseRule reads it.
func (r Rule) String() string {
	lim := strconv.FormatFloat(r.Limit, 'g', -1, 64)
	switch r.Kind {
	case RuleDrop:
		return r.Metric + ":-" + strconv.FormatFloat(r.Limit*100, 'g', -1, 64) + "%"
	case RuleRise:
		return r.Metric + ":+" + strconv.FormatFloat(r.Limit*100, 'g', -1, 64) + "%"
	case RuleMin:
		return r.Metric + ">=" + lim
	default:
		return r.Metric + "<=" + lim
	}
}

// relative reports whether the rule compares with the baseline.
func (r Rule) relative() bool { return r.Kind == RuleDrop || r.Kind == RuleRise }

// ParseRule reads one rule: METRIC:-X% (fail on a drop beyond X%), METRIC:+X% (a
// rise beyond X%), METRIC>=V or METRIC<=V (absolute bounds, plain units). The metric
// must be a numeric column of the registry.
func ParseRule(s string) (Rule, error) {
	text := strings.TrimSpace(s)
	var r Rule
	var rest string
	if i := strings.Index(text, ">="); i >= 0 {
		r.Metric, r.Kind, rest = text[:i], RuleMin, text[i+2:]
	} else if i := strings.Index(text, "<="); i >= 0 {
		r.Metric, r.Kind, rest = text[:i], RuleMax, text[i+2:]
	} else if i := strings.LastIndex(text, ":"); i >= 0 {
		r.Metric, rest = text[:i], strings.TrimSpace(text[i+1:])
		switch {
		case strings.HasPrefix(rest, "-"):
			r.Kind = RuleDrop
		case strings.HasPrefix(rest, "+"):
			r.Kind = RuleRise
		default:
			return Rule{}, fmt.Errorf("rule %q: the change needs a direction, - (a drop fails) or + (a rise fails); %s", clip(s), ruleSyntax)
		}
		if !strings.HasSuffix(rest, "%") {
			return Rule{}, fmt.Errorf("rule %q: a relative threshold is a percentage, such as -5%%; %s", clip(s), ruleSyntax)
		}
		rest = strings.TrimSuffix(rest[1:], "%")
	} else {
		return Rule{}, fmt.Errorf("rule %q: no threshold; %s", clip(s), ruleSyntax)
	}
	r.Metric = strings.TrimSpace(r.Metric)
	if len(r.Metric) > 100 {
		return Rule{}, fmt.Errorf("rule %q: no metric has so long a name; %s", clip(s), ruleSyntax)
	}
	c, err := LookupColumn(r.Metric, KindMetric, KindDerived)
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %w", clip(s), err)
	}
	if c.text {
		return Rule{}, fmt.Errorf("rule %q: %s is text, not a figure; gate numeric metrics such as tokens_per_s_per_rank", clip(s), r.Metric)
	}
	num := strings.TrimSpace(rest)
	v, err := strconv.ParseFloat(num, 64)
	if errors.Is(err, strconv.ErrRange) {
		return Rule{}, fmt.Errorf("rule %q: %q is beyond the range of a number (about ±1.8e308); %s", clip(s), clip(num), ruleSyntax)
	}
	if err != nil {
		return Rule{}, fmt.Errorf("rule %q: %q is not a number; %s", clip(s), clip(num), ruleSyntax)
	}
	if mantissa, _, _ := strings.Cut(strings.ToLower(num), "e"); v == 0 && strings.ContainsAny(mantissa, "123456789") {
		// 1e-400 parses as 0 without an error: mfu>=1e-400 would silently be
		// mfu>=0, a bound that never fails.
		return Rule{}, fmt.Errorf("rule %q: %q is too small to tell from 0 (below about 1e-308); write 0 if that is meant", clip(s), clip(num))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		// Every comparison with NaN is false: the rule would never fail.
		return Rule{}, fmt.Errorf("rule %q: %q is not a finite number; %s", clip(s), clip(strings.TrimSpace(rest)), ruleSyntax)
	}
	if r.relative() {
		switch {
		case v < 0 || strings.HasPrefix(strings.TrimSpace(rest), "-") || strings.HasPrefix(strings.TrimSpace(rest), "+"):
			return Rule{}, fmt.Errorf("rule %q: give the threshold once, with its sign: -5%% or +3%%", clip(s))
		case r.Kind == RuleDrop && v >= 100:
			return Rule{}, fmt.Errorf("rule %q: a figure cannot drop by %g%% or more, so the rule would never fail; give a limit below 100%%, such as -5%%", clip(s), v)
		case v > MaxRiseLimit*100:
			return Rule{}, fmt.Errorf("rule %q: a limit of %g%% is beyond any change a run can show; give at most %g%%", clip(s), v, MaxRiseLimit*100)
		}
		v /= 100
	} else if c.Unit == UnitFraction && math.Abs(v) > maxFractionBound {
		return Rule{}, fmt.Errorf("rule %q: %s is a fraction (0.35 for 35%%), so the bound %g can never decide; write it as a fraction", clip(s), r.Metric, v)
	}
	r.Limit = v
	return r, nil
}

// ParseRules reads rules given as text (--rule flags), marking them as from.
func ParseRules(texts []string, from string) ([]Rule, error) {
	var out []Rule
	var errs []error
	for _, t := range texts {
		r, err := ParseRule(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r.From = from
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// LoadRules reads a rules file:
//
//	rules:
//	  - tokens_per_s_per_rank:-5%
//	  - peak_mem_reserved_bytes:+3%
//	  - mfu>=0.35
//
// Errors are *sweeps.SpecError values naming file:line:col.
func LoadRules(path string) ([]Rule, error) {
	data, err := input.ReadYAML(path, input.Rules)
	if err != nil {
		return nil, fmt.Errorf("rules file: %w", err)
	}
	return ParseRulesFile(path, data)
}

// rulesShape is the help every rules-file error ends with.
const rulesShape = "a rules file is `rules:` followed by a list such as `- tokens_per_s_per_rank:-5%`"

// ParseRulesFile reads the rules file held in data (LoadRules); path names it in errors.
//
// It reads the YAML syntax tree rather than decoding into a struct: the decoder
// panics on some malformed files (FuzzParseRulesFile), and a rules file needs no
// anchors, aliases or tags, which are refused (no alias can expand).
func ParseRulesFile(path string, data []byte) ([]Rule, error) {
	at := func(n ast.Node, format string, args ...any) *sweeps.SpecError {
		line, col := nodePos(n)
		if line == 0 {
			line, col = 1, 1
		}
		return &sweeps.SpecError{File: path, Line: line, Column: col, Msg: fmt.Sprintf(format, args...) + "; " + rulesShape}
	}
	file, err := parseYAML(path, data)
	if err != nil {
		return nil, err
	}
	var body ast.Node
	for _, d := range file.Docs {
		if d == nil || d.Body == nil {
			continue
		}
		if _, ok := d.Body.(*ast.CommentGroupNode); ok {
			continue
		}
		if body != nil {
			return nil, at(d.Body, "a second YAML document")
		}
		body = d.Body
	}
	var entries []*ast.MappingValueNode
	switch b := body.(type) {
	case nil:
	case *ast.MappingNode:
		entries = b.Values
	case *ast.MappingValueNode:
		entries = []*ast.MappingValueNode{b}
	default:
		return nil, at(body, "expected `rules:`, found %s", nodeKind(body))
	}
	var list *ast.SequenceNode
	seen := false
	for _, e := range entries {
		key, ok := e.Key.(*ast.StringNode)
		if !ok || key.Value != "rules" {
			return nil, at(e.Key, "unknown key %s", clip(strconv.Quote(keyText(e.Key))))
		}
		if seen {
			return nil, at(e.Key, "`rules` given twice")
		}
		seen = true
		switch v := e.Value.(type) {
		case nil, *ast.NullNode:
		case *ast.SequenceNode:
			list = v
		default:
			return nil, at(e.Value, "`rules` must be a list, found %s", nodeKind(e.Value))
		}
	}
	if list == nil || len(list.Values) == 0 {
		return nil, &sweeps.SpecError{File: path, Line: 1, Column: 1, Msg: "no rules; write `rules:` followed by a list such as `- tokens_per_s_per_rank:-5%`"}
	}
	var errs sweeps.SpecErrors
	var out []Rule
	for _, item := range list.Values {
		var text string
		switch v := item.(type) {
		case *ast.StringNode:
			text = v.Value
		case *ast.LiteralNode:
			text = v.Value.Value
		default:
			errs = append(errs, at(item, "a rule is text such as tokens_per_s_per_rank:-5%%, found %s", nodeKind(item)))
			continue
		}
		line, col := nodePos(item)
		r, err := ParseRule(text)
		if err != nil {
			errs = append(errs, &sweeps.SpecError{File: path, Line: line, Column: col, Msg: err.Error()})
			continue
		}
		r.From = fmt.Sprintf("%s:%d:%d", path, line, col)
		out = append(out, r)
	}
	switch len(errs) {
	case 0:
		return out, nil
	case 1:
		return nil, errs[0]
	}
	return nil, errs
}

// parseYAML parses data into its syntax tree; errors carry file:line:col. A panic of
// the parser on a malformed file is an error about the file, not a crash.
func parseYAML(path string, data []byte) (file *ast.File, err error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a UTF-8 byte order mark is no part of a key
	defer func() {
		if p := recover(); p != nil {
			file, err = nil, &sweeps.SpecError{File: path, Line: 1, Column: 1, Msg: "malformed YAML; " + rulesShape}
		}
	}()
	file, err = parser.ParseBytes(data, 0)
	if err != nil {
		se := &sweeps.SpecError{File: path, Line: 1, Column: 1, Msg: clip(yaml.FormatError(err, false, false)) + "; " + rulesShape, Err: err}
		var ye yaml.Error
		if errors.As(err, &ye) {
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				se.Line, se.Column = tk.Position.Line, tk.Position.Column
				se.Msg = clip(ye.GetMessage()) + "; " + rulesShape
			}
		}
		return nil, se
	}
	return file, nil
}

// nodeKind names what a YAML node is, for errors.
func nodeKind(n ast.Node) string {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.AnchorNode:
		return "an anchor (&), which a rules file does not use"
	case *ast.AliasNode:
		return "an alias (*), which a rules file does not use"
	case *ast.TagNode:
		return "a tag (!), which a rules file does not use"
	case *ast.NullNode:
		return "nothing"
	}
	return "the value " + clip(strconv.Quote(n.String()))
}

// keyText is a mapping key as written, for errors.
func keyText(k ast.MapKeyNode) string {
	if s, ok := k.(*ast.StringNode); ok {
		return s.Value
	}
	return k.String()
}

func nodePos(n ast.Node) (int, int) {
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line, tk.Position.Column
	}
	return 0, 0
}

// Outcome is a check's verdict.
type Outcome string

// Outcomes.
const (
	OutcomePass Outcome = "pass"
	OutcomeFail Outcome = "fail"
	OutcomeSkip Outcome = "skip" // nothing to check: the run is on one side only, or the figure unknown
	// OutcomeInconclusive (verdict.go): too noisy to tell, or measured under
	// different machine states.
)

// Check is one rule applied to one run.
type Check struct {
	Run     string  `json:"run"`
	Sweep   string  `json:"sweep"`
	Rule    Rule    `json:"rule"`
	Outcome Outcome `json:"outcome"`
	// Reason says why, in words: "-10.0% beyond -5% (p=0.002 n=6)".
	Reason         string `json:"reason"`
	BaselineStatus Status `json:"baseline_status,omitempty"`
	CurrentStatus  Status `json:"current_status,omitempty"`
	// Delta holds the figures compared (relative rules) or the current figure
	// (absolute rules, in Delta.Current).
	Delta Delta `json:"delta"`
	// BaselinePredicted and CurrentPredicted say that side's figure is the
	// analytic model's prediction, not a measurement (tables mark it *).
	BaselinePredicted bool `json:"baseline_predicted,omitempty"`
	CurrentPredicted  bool `json:"current_predicted,omitempty"`
	// BaselineWarnings and CurrentWarnings are that side's run's warnings
	// (Metrics.Warnings): a figure judged that carries some is not to be taken
	// at face value; Reason says so and tables mark it WarningMark.
	BaselineWarnings []string `json:"baseline_warnings,omitempty"`
	CurrentWarnings  []string `json:"current_warnings,omitempty"`
	// Differs names what the paired runs differ in that says they may not run
	// the same workload (sweeps.Differences); Reason ends with it.
	Differs []string `json:"differs,omitempty"`
	// backend of the predicted figures, for the footnote
	predictedBy string
	// renamed: the run's ID changed (GateReport.Renamed); its absent side
	// reads "renamed", not "missing"
	renamed bool
}

// GateOptions are the inputs of Gate besides the runs.
type GateOptions struct {
	// Rules to check; empty = DefaultRules.
	Rules []Rule
	// Alpha is the significance level; 0 = DefaultAlpha.
	Alpha float64
	// AllowMissing lets runs of the baseline be absent from the current results (a
	// partial night): they are listed and skipped. By default each fails every rule,
	// so a night that measured less than the baseline does not pass.
	AllowMissing bool
	// NoBaseline says there is no baseline at all (the first night of a history):
	// relative rules have nothing to compare with, and the gate checks that the
	// current results are complete and within the absolute rules.
	NoBaseline bool
	// BaselineName and CurrentName label the sides (the paths, as given).
	BaselineName, CurrentName string
	// Now stamps the JUnit report; zero = time.Now().
	Now time.Time
	// Inconclusive is what inconclusive checks make of the gate
	// (InconclusivePolicies); "" = InconclusiveReport.
	Inconclusive string
}

// GateReport is the outcome of Gate.
type GateReport struct {
	Baseline string  `json:"baseline"`
	Current  string  `json:"current"`
	Alpha    float64 `json:"alpha"`
	Rules    []Rule  `json:"rules"`
	Passed   bool    `json:"passed"`
	// Verdict is the gate's: pass, fail or inconclusive (no check failed, some were
	// inconclusive, and the policy leaves them so). Passed is Verdict == pass.
	Verdict  Outcome `json:"verdict"`
	Checks   []Check `json:"checks"`
	Failures int     `json:"failures"`
	Skipped  int     `json:"skipped"`
	// Inconclusive counts the inconclusive checks; InconclusivePolicy says what
	// they made of the verdict (InconclusivePolicies).
	Inconclusive       int       `json:"inconclusive"`
	InconclusivePolicy string    `json:"inconclusive_policy"`
	Missing            []string  `json:"missing"` // in the baseline, not now
	New                []string  `json:"new"`     // now, not in the baseline
	Time               time.Time `json:"time"`
	// NotBacked counts relative checks decided by the threshold alone (fewer than
	// MinStatRepeats repeats on a side).
	NotBacked int `json:"not_backed"`
	// Problems are the reasons the gate fails besides failed checks: nothing was
	// measured, every check was skipped, a rule decided nothing.
	Problems []string `json:"problems"`
	// Renamed lists, "old → new", the baseline runs stored under an ID from
	// before sweeps.WorkloadIDChange that the current results hold under its
	// new ID: neither missing nor new, their checks skipped, saying why.
	Renamed []string `json:"renamed,omitempty"`
}

// Gate checks current against baseline: runs are matched by run ID (MatchRuns) and
// every rule is applied to every run (Check). A relative rule fails when the change
// is beyond its threshold in the bad direction and, where both sides have at least
// MinStatRepeats repeats, resolved and significant (judgeChange: the interval the
// medians' 95% CIs allow for the change lies wholly beyond the limit, Mann-Whitney U
// p <= alpha, as benchstat); a change the spread cannot resolve, or that machine
// states differing materially could explain, is inconclusive (OutcomeInconclusive);
// with fewer repeats the threshold alone decides and the check says so. An absolute
// rule bounds the current headline figure (inconclusive when the bound lies inside
// the median's 95% CI).
//
// Verdict is fail when a check failed or a problem below holds, inconclusive when
// none did and some checks were inconclusive (with InconclusiveReport), else pass.
//
// The gate passes only when it checked something and found nothing wrong:
//   - the current results hold a finished run, and (with a baseline) at least one
//     check compared a figure; a gate whose every check was skipped fails;
//   - every run of the current results finished with a result (ok, oom, infeasible):
//     failed, timed out or canceled runs fail, on both sides or not;
//   - a run ok in the baseline is ok now, and every figure a rule reads that the
//     baseline knew is known now; an absolute rule's figure is known in every ok run;
//   - every rule given explicitly decided at least one check (a rule on a figure
//     that no run reports fails; a default rule whose figure no run reports is
//     only listed);
//   - every baseline run is in the current results, unless AllowMissing.
//
// Runs on one side only are listed in Missing and New.
func Gate(baseline, current []Run, opt GateOptions) (*GateReport, error) {
	alpha := opt.Alpha
	if alpha == 0 {
		alpha = DefaultAlpha
	}
	if !(alpha > 0 && alpha < 1) {
		return nil, fmt.Errorf("alpha %v: give a significance level between 0 and 1, such as 0.05", alpha)
	}
	policy, err := CheckInconclusivePolicy(opt.Inconclusive)
	if err != nil {
		return nil, err
	}
	rules := opt.Rules
	if len(rules) == 0 {
		var err error
		if rules, err = ParseRules(DefaultRules, "default"); err != nil {
			return nil, err
		}
	}
	now := opt.Now
	if now.IsZero() {
		now = time.Now()
	}
	g := &GateReport{Baseline: opt.BaselineName, Current: opt.CurrentName, Alpha: alpha, Rules: rules, Time: now,
		Missing: []string{}, New: []string{}, Problems: []string{}, InconclusivePolicy: policy}
	cols := make([]Column, len(rules))
	for i, r := range rules {
		c, err := LookupColumn(r.Metric, KindMetric, KindDerived)
		if err != nil {
			return nil, fmt.Errorf("rule %s: %w", r, err)
		}
		if c.text {
			return nil, fmt.Errorf("rule %s: %s is text, not a figure", r, c.Name)
		}
		if math.IsNaN(r.Limit) || math.IsInf(r.Limit, 0) || r.Limit < 0 && r.relative() {
			return nil, fmt.Errorf("rule %s: the limit must be a finite number (a relative one not negative)", r)
		}
		cols[i] = c
	}
	pairs, err := MatchRuns(baseline, current)
	if err != nil {
		return nil, err
	}
	decided := make([]int, len(rules))
	renamed, renamedList := renamedPairs(pairs)
	g.Renamed = renamedList
	for k, p := range pairs {
		why, isRenamed := renamed[k]
		switch {
		case isRenamed:
		case p.Current == nil:
			g.Missing = append(g.Missing, p.Key)
		case p.Baseline == nil:
			g.New = append(g.New, p.Key)
		}
		differs := pairDifferences(p)
		for i, r := range rules {
			ch := checkRule(&cols[i], r, p, alpha, opt)
			if isRenamed {
				ch.Outcome, ch.Reason, ch.renamed = OutcomeSkip, why, true
			}
			if len(differs) > 0 {
				ch.Differs = differs
				ch.Reason += "; " + differsMark + " " + differsText(differs)
			}
			if r.relative() && ch.Delta.Change != nil && !ch.Delta.Backed {
				g.NotBacked++
			}
			switch ch.Outcome {
			case OutcomeFail:
				g.Failures++
				decided[i]++
			case OutcomeSkip:
				g.Skipped++
			case OutcomeInconclusive:
				// It compared a figure: the rule decided something, just not
				// which way.
				g.Inconclusive++
				decided[i]++
			default:
				decided[i]++
			}
			g.Checks = append(g.Checks, ch)
		}
	}
	g.Problems = gateProblems(baseline, current, rules, decided, opt)
	g.Verdict = GateVerdict(g.Failures > 0 || len(g.Problems) > 0, g.Inconclusive, policy)
	g.Passed = g.Verdict == OutcomePass
	return g, nil
}

// gateProblems lists why the gate fails besides failed checks (GateReport.Problems).
func gateProblems(baseline, current []Run, rules []Rule, decided []int, opt GateOptions) []string {
	problems := []string{}
	if len(current) == 0 {
		return append(problems, "the current results hold no finished run (no metrics.json): nothing was measured")
	}
	ok := 0
	for i := range current {
		if current[i].Metrics.Status == StatusOK {
			ok++
		}
	}
	if ok == 0 {
		problems = append(problems, "no run of the current results is ok: nothing was measured")
	}
	if !opt.NoBaseline && len(baseline) == 0 {
		problems = append(problems, "the baseline holds no finished run: there is nothing to compare with")
	}
	total := 0
	for _, n := range decided {
		total += n
	}
	if total == 0 && len(problems) == 0 {
		if !opt.NoBaseline {
			problems = append(problems, "every check was skipped: no rule compared a figure (see why in the checks)")
		} else {
			for _, r := range rules {
				if !r.relative() {
					problems = append(problems, "every check was skipped: no rule checked a figure (see why in the checks)")
					break
				}
			}
		}
	}
	if total == 0 {
		return problems
	}
	for i, r := range rules {
		if decided[i] > 0 || r.From == "default" || (opt.NoBaseline && r.relative()) {
			continue
		}
		problems = append(problems, fmt.Sprintf("rule %s decided nothing: %s is unknown in every run it could check", r, r.Metric))
	}
	return problems
}

// checkRule applies rule r (on column c) to one matched run.
func checkRule(c *Column, r Rule, p Pair, alpha float64, opt GateOptions) Check {
	ch := Check{Run: p.Key, Rule: r}
	if p.Baseline != nil {
		ch.Sweep, ch.BaselineStatus = p.Baseline.Config.Sweep, p.Baseline.Metrics.Status
		if ch.BaselinePredicted = p.Baseline.Metrics.Predicted; ch.BaselinePredicted {
			ch.predictedBy = p.Baseline.Config.Backend
		}
		ch.BaselineWarnings = p.Baseline.Metrics.Warnings
	}
	if p.Current != nil {
		ch.Sweep, ch.CurrentStatus = p.Current.Config.Sweep, p.Current.Metrics.Status
		if ch.CurrentPredicted = p.Current.Metrics.Predicted; ch.CurrentPredicted {
			ch.predictedBy = p.Current.Config.Backend
		}
		ch.CurrentWarnings = p.Current.Metrics.Warnings
	}
	// What each side had, for the report, whatever the verdict.
	ch.Delta = Delta{Metric: c.Name, Baseline: sideStat(c, p.Baseline), Current: sideStat(c, p.Current)}
	verdict := func(o Outcome, format string, args ...any) Check {
		ch.Outcome, ch.Reason = o, fmt.Sprintf(format, args...)+gateWarningText(&ch)
		return ch
	}
	withError := func(msg string) string {
		if e := p.Current.Metrics.Error; e != "" {
			msg += ": " + clip(firstLine(e))
		}
		return msg
	}
	switch {
	case p.Current == nil && !opt.AllowMissing:
		return verdict(OutcomeFail, "missing: in the baseline, not in the current results")
	case p.Current == nil:
		return verdict(OutcomeSkip, "missing: in the baseline, not in the current results (allowed)")
	case ch.BaselineStatus == StatusOK && ch.CurrentStatus != StatusOK:
		return verdict(OutcomeFail, "%s", withError("was ok, now "+string(ch.CurrentStatus)))
	case ch.CurrentStatus != StatusOK && !ch.CurrentStatus.Final():
		// Failed, timed out, canceled (or a status no run should have): the run did
		// not give its result, whatever the baseline says.
		return verdict(OutcomeFail, "%s", withError("did not finish: "+string(ch.CurrentStatus)))
	case ch.CurrentStatus != StatusOK:
		if p.Baseline == nil {
			return verdict(OutcomeSkip, "new run, %s", ch.CurrentStatus)
		}
		return verdict(OutcomeSkip, "%s in both", ch.CurrentStatus)
	}

	if !r.relative() {
		ch.Delta.Baseline = nil // an absolute bound reads only the current figure
		if ch.Delta.Current == nil {
			return verdict(OutcomeFail, "%s unknown: the bound %g cannot be checked", c.Name, r.Limit)
		}
		// Plain units, enough digits to see which side of the bound the figure is;
		// bytes also in the unit that reads (a bound of 8e+10 is 74.5 GiB).
		v := ch.Delta.Current.Value
		fig, bound := fmt.Sprintf("%.4g", v), fmt.Sprintf("%g", r.Limit)
		if bytesColumn(c) {
			u := ByteUnitFor(math.Max(math.Abs(v), math.Abs(r.Limit)))
			fig, bound = u.WithName(v)+" ("+fig+")", u.WithName(r.Limit)+" ("+bound+")"
		}
		if why := judgeBound(r, ch.Delta.Current); why != "" {
			return verdict(OutcomeInconclusive, "%s, but %s", fig, why)
		}
		if (r.Kind == RuleMin && v < r.Limit) || (r.Kind == RuleMax && v > r.Limit) {
			return verdict(OutcomeFail, "%s, %s the bound %s", fig, map[RuleKind]string{RuleMin: "below", RuleMax: "above"}[r.Kind], bound)
		}
		return verdict(OutcomePass, "%s, within the bound %s", fig, bound)
	}

	switch {
	case opt.NoBaseline:
		return verdict(OutcomeSkip, "no baseline yet (first night): nothing to compare with")
	case p.Baseline == nil:
		return verdict(OutcomeSkip, "new run: no baseline to compare with")
	case ch.BaselineStatus != StatusOK:
		return verdict(OutcomeSkip, "now ok, was %s: no baseline figure", ch.BaselineStatus)
	case p.Baseline.Metrics.Predicted != p.Current.Metrics.Predicted:
		// A prediction says nothing about a measurement's regression (a nightly job
		// that ran sim instead of the trainer would otherwise pass or fail at random).
		was, now := measuredOrPredicted(p.Baseline), measuredOrPredicted(p.Current)
		return verdict(OutcomeFail, "the baseline was %s, the current figure is %s: they cannot be compared", was, now)
	}
	ch.Delta = compareMetric(c, p.Baseline, p.Current, alpha)
	d := ch.Delta
	switch {
	case d.Baseline == nil && d.Current == nil:
		return verdict(OutcomeSkip, "%s unknown on both sides", c.Name)
	case d.Baseline == nil:
		return verdict(OutcomeSkip, "%s unknown in the baseline", c.Name)
	case d.Current == nil:
		return verdict(OutcomeFail, "%s was known in the baseline, unknown now", c.Name)
	case d.Change == nil:
		return verdict(OutcomeSkip, "%s is 0 in the baseline: no relative change", c.Name)
	}
	o, why := judgeChange(r, d, p.Baseline.Metrics.Env.Machine, p.Current.Metrics.Env.Machine)
	return verdict(o, "%s", why)
}

func measuredOrPredicted(r *Run) string {
	if r.Metrics.Predicted {
		return "predicted by the analytic model"
	}
	return "measured"
}

func signed(r Rule) float64 {
	if r.Kind == RuleDrop {
		return -r.Limit
	}
	return r.Limit
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// Gate report formats (besides FormatTable, FormatMarkdown and FormatJSON).
const FormatJUnit = "junit"

// GateFormats lists the formats GateReport.Write accepts, the default first.
var GateFormats = []string{FormatTable, FormatMarkdown, FormatJUnit, FormatJSON}

// Write renders the report in one of GateFormats.
func (g *GateReport) Write(w io.Writer, format string) error {
	switch format {
	case "", FormatTable:
		return g.writeText(w, false)
	case FormatMarkdown:
		return g.writeText(w, true)
	case FormatJUnit:
		return g.WriteJUnit(w)
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(g)
	}
	return fmt.Errorf("unknown gate format %q; valid formats: %s", format, strings.Join(GateFormats, ", "))
}

// Headline is the one-line verdict: "gate passed: 12 checks, 3 skipped",
// "gate FAILED: 2 of 12 checks failed, in 2 of 4 runs", the problems, or "gate
// INCONCLUSIVE: 2 of 12 checks could not tell, none failed".
func (g *GateReport) Headline() string {
	runs := map[string]bool{}
	for _, c := range g.Checks {
		runs[c.Run] = true
	}
	// How inconclusive checks were counted, when there were any.
	counted := policyCounted(g.Inconclusive, g.InconclusivePolicy)
	switch {
	case g.Passed:
		return fmt.Sprintf("gate passed: %d checks on %d runs, %d skipped", len(g.Checks), len(runs), g.Skipped) + counted
	case g.Verdict == OutcomeInconclusive:
		return fmt.Sprintf("gate INCONCLUSIVE: %d of %d checks could not tell (too noisy, or measured under different machine states), none failed; measure again", g.Inconclusive, len(g.Checks))
	}
	failed := map[string]bool{}
	for _, c := range g.Checks {
		if c.Outcome == OutcomeFail {
			failed[c.Run] = true
		}
	}
	var parts []string
	if g.Failures > 0 || len(g.Problems) == 0 {
		what := fmt.Sprintf("%d of %d checks failed, in %d of %d runs", g.Failures, len(g.Checks), len(failed), len(runs))
		if n := g.failedOnPredictions(); n > 0 {
			// A prediction that moved is a model change, not a slower trainer.
			what += fmt.Sprintf(" (%d of them on figures predicted by the analytic model, not measured)", n)
		}
		parts = append(parts, what)
	}
	parts = append(parts, g.Problems...)
	return "gate FAILED: " + strings.Join(parts, "; ") + counted
}

// failedOnPredictions counts the failed checks whose figures were predicted.
func (g *GateReport) failedOnPredictions() int {
	n := 0
	for _, c := range g.Checks {
		if c.Outcome == OutcomeFail && (c.CurrentPredicted || c.BaselinePredicted && c.Rule.relative()) {
			n++
		}
	}
	return n
}

// checksGrid lays out checks as a table (one row per check).
func (g *GateReport) checksGrid(checks []Check, markdown bool) *grid {
	gr := &grid{cols: []gridCol{{key: "run", header: "run"}, {key: "rule", header: "rule"},
		{key: "baseline", header: "baseline", right: true}, {key: "current", header: "current", right: true},
		{key: "verdict", header: "verdict"}, {key: "reason", header: "why"}}}
	predicted := map[string]bool{}
	for _, c := range checks {
		col, _ := LookupColumn(c.Rule.Metric)
		// Each check reads its own metric: its two figures share the unit that
		// suits the larger.
		var vals []float64
		for _, side := range []struct {
			s  *SideStat
			st Status
		}{{c.Delta.Baseline, c.BaselineStatus}, {c.Delta.Current, c.CurrentStatus}} {
			if side.s != nil && side.st == StatusOK { // a run not ok shows its status
				vals = append(vals, side.s.Value, side.s.Center)
			}
		}
		bu := byteUnitOfValues(vals)
		base, cur := statText(&col, c.Delta.Baseline, c.BaselineStatus, bu), statText(&col, c.Delta.Current, c.CurrentStatus, bu)
		if c.renamed {
			base, cur = renamedSide(base, c.BaselineStatus), renamedSide(cur, c.CurrentStatus)
		}
		u := ""
		switch {
		case bytesColumn(&col):
			u = " " + bu.Name
		case col.Unit == UnitFraction:
			u = "%"
		}
		if u != "" {
			if c.Delta.Baseline != nil {
				base += u
			}
			if c.Delta.Current != nil {
				cur += u
			}
		}
		if c.BaselinePredicted && c.Delta.Baseline != nil {
			base += "*"
			predicted[c.predictedBy] = true
		}
		if c.CurrentPredicted && c.Delta.Current != nil {
			cur += "*"
			predicted[c.predictedBy] = true
		}
		base, cur = base+gateWarningMark(&c, true), cur+gateWarningMark(&c, false)
		if !c.Rule.relative() {
			base = "" // an absolute bound reads only the current figure
		}
		verdict := string(c.Outcome)
		if c.Outcome == OutcomeFail {
			verdict = "FAIL"
		}
		if markdown {
			verdict = map[Outcome]string{OutcomePass: "✅ pass", OutcomeFail: "❌ FAIL", OutcomeSkip: "➖ skip", OutcomeInconclusive: "❔ inconclusive"}[c.Outcome]
		}
		gr.rows = append(gr.rows, []gridCell{{text: c.Run}, {text: c.Rule.String()}, {text: base}, {text: cur},
			{text: verdict}, {text: c.Reason}})
	}
	gr.notes = append(predictedNote(predicted), gateWarningNotes(checks)...)
	return gr
}

func (g *GateReport) writeText(w io.Writer, markdown bool) error {
	var buf bytes.Buffer
	var failed, unsure []Check
	for _, c := range g.Checks {
		switch c.Outcome {
		case OutcomeFail:
			failed = append(failed, c)
		case OutcomeInconclusive:
			unsure = append(unsure, c)
		}
	}
	rules := make([]string, len(g.Rules))
	for i, r := range g.Rules {
		rules[i] = r.String()
	}
	code := func(s string) string {
		if markdown {
			return "`" + s + "`"
		}
		return s
	}
	if markdown {
		icon := "✅"
		switch g.Verdict {
		case OutcomeFail:
			icon = "❌"
		case OutcomeInconclusive:
			icon = "❔"
		}
		fmt.Fprintf(&buf, "### %s fsdpbench %s\n\n", icon, g.Headline())
	} else {
		fmt.Fprintf(&buf, "%s\n", g.Headline())
	}
	codes := make([]string, len(rules))
	for i, r := range rules {
		codes[i] = code(r)
	}
	fmt.Fprintf(&buf, "baseline %s, current %s; rules %s; alpha %g; inconclusive checks %s\n", code(sideLabel(g.Baseline, "baseline")),
		code(sideLabel(g.Current, "current")), strings.Join(codes, ", "), g.Alpha, PolicyText(g.InconclusivePolicy))
	if g.NotBacked > 0 {
		if markdown {
			buf.WriteByte('\n')
		}
		fmt.Fprintf(&buf, "%d of the relative checks are not statistically backed (fewer than %d repeats per side): the thresholds alone decided them.\n",
			g.NotBacked, MinStatRepeats)
	}
	section := func(title string) {
		if markdown {
			fmt.Fprintf(&buf, "\n#### %s\n\n", title)
		} else {
			fmt.Fprintf(&buf, "\n%s:\n", title)
		}
	}
	if len(g.Problems) > 0 {
		section("Why the gate failed besides the checks")
		for _, p := range g.Problems {
			fmt.Fprintf(&buf, "- %s\n", p)
		}
	}
	if len(failed) > 0 {
		section("Failed checks")
		if err := g.checksGrid(failed, markdown).writeTable(&buf, markdown); err != nil {
			return err
		}
	}
	if len(unsure) > 0 {
		section("Inconclusive checks (neither pass nor fail)")
		if err := g.checksGrid(unsure, markdown).writeTable(&buf, markdown); err != nil {
			return err
		}
	}
	if len(g.Renamed) > 0 {
		section("Run IDs changed in " + sweeps.WorkloadIDChange + " for runs with a user script, command or model file")
		for _, r := range g.Renamed {
			fmt.Fprintf(&buf, "- %s: not compared (the old ID cannot tell which script it ran); measure the baseline again with this version\n", code(r))
		}
	}
	if len(g.Missing)+len(g.New) > 0 {
		section("Unmatched runs")
		for _, id := range g.Missing {
			fmt.Fprintf(&buf, "- %s missing: in the baseline, not in the current results\n", code(id))
		}
		for _, id := range g.New {
			fmt.Fprintf(&buf, "- %s new: not in the baseline\n", code(id))
		}
	}
	if markdown {
		fmt.Fprintf(&buf, "\n<details><summary>All %d checks</summary>\n\n", len(g.Checks))
	} else {
		section("All checks")
	}
	if err := g.checksGrid(g.Checks, markdown).writeTable(&buf, markdown); err != nil {
		return err
	}
	if markdown {
		buf.WriteString("\n</details>\n")
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// JUnit XML (the schema CI systems read: testsuites > testsuite > testcase, with a
// failure or skipped element per test case).
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Skipped  int          `xml:"skipped,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	ID         int             `xml:"id,attr"`
	Package    string          `xml:"package,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Hostname   string          `xml:"hostname,attr"`
	Properties []junitProperty `xml:"properties>property"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	ClassName string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitFailure `xml:"failure,omitempty"`
	Skipped   *junitSkipped `xml:"skipped,omitempty"`
}

type junitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

type junitSkipped struct {
	Message string `xml:"message,attr"`
}

// WriteJUnit writes the report as JUnit XML: one test suite per sweep, one test case
// per run × rule (classname sweep.run, name the rule), failing with the reason.
func (g *GateReport) WriteJUnit(w io.Writer) error {
	hostname, _ := os.Hostname()
	if hostname == "" {
		hostname = "localhost"
	}
	root := junitSuites{Name: "fsdpbench gate", Time: "0"}
	at := map[string]int{}
	for _, c := range g.Checks {
		sweep := c.Sweep
		if sweep == "" {
			sweep = "fsdpbench"
		}
		i, ok := at[sweep]
		if !ok {
			i = len(root.Suites)
			at[sweep] = i
			root.Suites = append(root.Suites, junitSuite{Name: "fsdpbench gate " + sweep, ID: i, Package: "fsdpbench." + sweep,
				Time: "0", Timestamp: g.Time.UTC().Format("2006-01-02T15:04:05"), Hostname: hostname,
				Properties: []junitProperty{{"baseline", g.Baseline}, {"current", g.Current}, {"alpha", strconv.FormatFloat(g.Alpha, 'g', -1, 64)}}})
		}
		s := &root.Suites[i]
		tc := junitCase{Name: c.Rule.String(), ClassName: sweep + "." + c.Run, Time: "0"}
		switch c.Outcome {
		case OutcomeFail:
			tc.Failure = &junitFailure{Message: c.Reason, Type: "regression",
				Text: fmt.Sprintf("run %s, rule %s: %s\nbaseline status %s, current status %s\n", c.Run, c.Rule, c.Reason,
					orNone(c.BaselineStatus), orNone(c.CurrentStatus))}
			s.Failures++
			root.Failures++
		case OutcomeSkip:
			tc.Skipped = &junitSkipped{Message: c.Reason}
			s.Skipped++
			root.Skipped++
		case OutcomeInconclusive:
			// JUnit knows no third verdict: a failure where the policy counts it as
			// one, else a skipped case whose message says why.
			if g.InconclusivePolicy == InconclusiveFail {
				tc.Failure = &junitFailure{Message: "inconclusive: " + c.Reason, Type: "inconclusive",
					Text: fmt.Sprintf("run %s, rule %s: inconclusive: %s\n", c.Run, c.Rule, c.Reason)}
				s.Failures++
				root.Failures++
			} else {
				tc.Skipped = &junitSkipped{Message: "inconclusive: " + c.Reason}
				s.Skipped++
				root.Skipped++
			}
		}
		s.Tests++
		root.Tests++
		s.Cases = append(s.Cases, tc)
	}
	if len(g.Problems) > 0 {
		// A failure that is no single check still fails the CI report.
		s := junitSuite{Name: "fsdpbench gate", ID: len(root.Suites), Package: "fsdpbench", Time: "0",
			Timestamp: g.Time.UTC().Format("2006-01-02T15:04:05"), Hostname: hostname,
			Properties: []junitProperty{{"baseline", g.Baseline}, {"current", g.Current}}}
		for _, p := range g.Problems {
			s.Cases = append(s.Cases, junitCase{Name: p, ClassName: "fsdpbench.gate", Time: "0",
				Failure: &junitFailure{Message: p, Type: "gate", Text: p + "\n"}})
			s.Tests++
			s.Failures++
			root.Tests++
			root.Failures++
		}
		root.Suites = append(root.Suites, s)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(root); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}

func orNone(s Status) string {
	if s == "" {
		return "none (not in this set)"
	}
	return string(s)
}
