package torchrun

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/aclements/go-moremath/stats"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Figures a log extractor can read (backend_options.logs.metrics keys).
const (
	LogStepTime          = "step_time"             // per step; ms or s
	LogLoss              = "loss"                  // per step
	LogTokensPerS        = "tokens_per_s"          // all ranks; tokens/s or samples/s
	LogTokensPerSPerRank = "tokens_per_s_per_rank" // one rank; tokens/s or samples/s
	LogPeakAllocated     = "peak_mem_allocated"    // bytes, KiB, MiB, GiB, KB, MB, GB
	LogPeakReserved      = "peak_mem_reserved"
	LogMFU               = "mfu" // the script's own estimate, %: kept as extra.script_mfu
)

// Built-in extractors.
const (
	BuiltinIter      = "iter"       // "iter 100: loss 2.3100, time 45.21ms, mfu 38.12%" (nanoGPT)
	BuiltinHFTrainer = "hf_trainer" // the Hugging Face Trainer's log dicts
)

// logMetricUnits lists each figure's accepted units and their factor to the
// figure's base unit (seconds, tokens/s, bytes, fraction); samples/s is converted
// with the run's seq_len, so its factor is a placeholder.
var logMetricUnits = map[string]map[string]float64{
	LogStepTime:          {"s": 1, "ms": 1e-3},
	LogLoss:              {"": 1},
	LogTokensPerS:        {"tokens/s": 1, "samples/s": 1},
	LogTokensPerSPerRank: {"tokens/s": 1, "samples/s": 1},
	LogPeakAllocated:     memUnits,
	LogPeakReserved:      memUnits,
	LogMFU:               {"%": 0.01, "": 1},
}

var memUnits = map[string]float64{"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
	"KB": 1e3, "MB": 1e6, "GB": 1e9}

// Extractor reads one figure from the lines of a run's output.
type Extractor struct {
	Metric string
	Regex  *regexp.Regexp
	// Group is the one named group of Regex that holds the value.
	Group string
	Unit  string
	// Skip drops the first Skip matches (warm-up steps).
	Skip int
}

// LogOptions are backend_options.logs.
type LogOptions struct {
	// Builtin is "iter" or "hf_trainer", or empty.
	Builtin string
	// Extractors are the user's, one per metric.
	Extractors []Extractor
	// SkipSteps is the default Skip of every extractor.
	SkipSteps int
}

func (l *LogOptions) enabled() bool { return l != nil && (l.Builtin != "" || len(l.Extractors) > 0) }

// parseLogOptions reads
//
//	logs:
//	  builtin: iter | hf_trainer
//	  skip_steps: 1
//	  metrics:
//	    step_time: {regex: 'time (?P<ms>[\d.]+)ms', unit: ms, skip: 1}
//
// A string is the shorthand of {builtin: <string>}: logs: iter.
func parseLogOptions(v any) (*LogOptions, error) {
	if s, ok := v.(string); ok {
		v = map[string]any{"builtin": s}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be %s or %s (shorthand of {builtin: NAME}), or a mapping with builtin, skip_steps and metrics; got %T", BuiltinIter, BuiltinHFTrainer, v)
	}
	l := &LogOptions{}
	for _, k := range sortedKeys(m) {
		switch k {
		case "builtin":
			s, err := str(m[k])
			if err != nil {
				return nil, fmt.Errorf("builtin: %w", err)
			}
			if s != BuiltinIter && s != BuiltinHFTrainer {
				return nil, fmt.Errorf("builtin: unknown extractor %q; use %s or %s", s, BuiltinIter, BuiltinHFTrainer)
			}
			l.Builtin = s
		case "skip_steps":
			n, err := count(m[k])
			if err != nil {
				return nil, fmt.Errorf("skip_steps: %w", err)
			}
			l.SkipSteps = n
		case "metrics":
			mm, ok := m[k].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("metrics: must be a mapping of metric to {regex, unit, skip}, got %T", m[k])
			}
			for _, name := range sortedKeys(mm) {
				e, err := parseExtractor(name, mm[name])
				if err != nil {
					return nil, fmt.Errorf("metrics.%s: %w", name, err)
				}
				l.Extractors = append(l.Extractors, e)
			}
		default:
			return nil, fmt.Errorf("unknown key %q (known: builtin, skip_steps, metrics)", k)
		}
	}
	if !l.enabled() {
		return nil, fmt.Errorf("needs builtin or metrics")
	}
	for i := range l.Extractors {
		if l.Extractors[i].Skip < 0 {
			l.Extractors[i].Skip = l.SkipSteps
		}
	}
	return l, nil
}

func parseExtractor(name string, v any) (Extractor, error) {
	units, ok := logMetricUnits[name]
	if !ok {
		known := sortedKeys(logMetricUnits)
		hint := ""
		if c := sweeps.Closest(name, known); c != "" {
			hint = fmt.Sprintf(" (did you mean %s?)", c)
		}
		return Extractor{}, fmt.Errorf("unknown metric%s; known: %s", hint, strings.Join(known, ", "))
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Extractor{}, fmt.Errorf("must be a mapping {regex, unit, skip}, got %T", v)
	}
	e := Extractor{Metric: name, Skip: -1}
	for _, k := range sortedKeys(m) {
		switch k {
		case "regex":
			s, err := str(m[k])
			if err != nil {
				return e, fmt.Errorf("regex: %w", err)
			}
			re, err := regexp.Compile(s)
			if err != nil {
				return e, fmt.Errorf("regex: %w", err)
			}
			var groups []string
			for _, g := range re.SubexpNames() {
				if g != "" {
					groups = append(groups, g)
				}
			}
			if len(groups) != 1 {
				return e, fmt.Errorf("regex %q must have exactly one named group holding the value, like (?P<value>[0-9.]+); it has %d", s, len(groups))
			}
			e.Regex, e.Group = re, groups[0]
		case "unit":
			s, ok := m[k].(string)
			if !ok {
				return e, fmt.Errorf("unit: must be a string, got %T", m[k])
			}
			e.Unit = s
		case "skip":
			n, err := count(m[k])
			if err != nil {
				return e, fmt.Errorf("skip: %w", err)
			}
			e.Skip = n
		default:
			return e, fmt.Errorf("unknown key %q (known: regex, unit, skip)", k)
		}
	}
	if e.Regex == nil {
		return e, fmt.Errorf("regex is required")
	}
	if _, ok := units[e.Unit]; !ok {
		return e, fmt.Errorf("unknown unit %q for %s; use one of %s", e.Unit, name, strings.Join(quoted(sortedKeys(units)), ", "))
	}
	return e, nil
}

func quoted(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}

// maxSkip bounds the warm-up matches an extractor drops.
const maxSkip = 1 << 20

func count(v any) (int, error) {
	n, err := backends.WholeIn(v, 0, maxSkip)
	return int(n), err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// builtinExtractors are the regular-expression built-ins.
func builtinExtractors(name string, skip int) []Extractor {
	if name != BuiltinIter {
		return nil
	}
	num := `[-+]?(?:[0-9]*\.)?[0-9]+(?:[eE][-+]?[0-9]+)?`
	return []Extractor{
		{Metric: LogStepTime, Regex: regexp.MustCompile(`iter \d+: loss ` + num + `, time (?P<ms>` + num + `)ms`), Group: "ms", Unit: "ms", Skip: skip},
		{Metric: LogLoss, Regex: regexp.MustCompile(`iter \d+: loss (?P<loss>` + num + `)`), Group: "loss", Skip: skip},
		{Metric: LogMFU, Regex: regexp.MustCompile(`iter \d+: .*mfu (?P<mfu>` + num + `)%`), Group: "mfu", Unit: "%", Skip: skip},
	}
}

// logLines keeps the lines an extraction needs (and the first few, to quote when
// nothing matched), so a long run's output is not held in memory.
type logLines struct {
	lines []string
	// head holds the first lines of stdout and of stderr, apart: torchrun's
	// banner on stderr would otherwise hide the script's own first lines.
	head, errHead []string
	total         int
}

const logHead = 5

func (l *logLines) add(opts *LogOptions, line string, stderr bool) {
	l.total++
	if h := &l.head; !stderr && len(*h) < logHead {
		*h = append(*h, line)
	} else if h := &l.errHead; stderr && len(*h) < logHead {
		*h = append(*h, line)
	}
	keep := opts.Builtin == BuiltinHFTrainer && strings.Contains(line, "{'")
	for _, e := range append(builtinExtractors(opts.Builtin, opts.SkipSteps), opts.Extractors...) {
		keep = keep || e.Regex.MatchString(line)
	}
	if keep {
		l.lines = append(l.lines, line)
	}
}

// extracted is what the extractors read, in base units.
type extracted map[string][]float64

// extract runs every extractor over the kept lines.
func extract(opts *LogOptions, l *logLines, seqLen int) (extracted, error) {
	out := extracted{}
	exs := append(builtinExtractors(opts.Builtin, opts.SkipSteps), opts.Extractors...)
	for _, e := range exs {
		var vals []float64
		for _, line := range l.lines {
			m := e.Regex.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			s := m[e.Regex.SubexpIndex(e.Group)]
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("torchrun: backend_options.logs %s: group %q matched %q, which is not a number, in line %q", e.Metric, e.Group, s, line)
			}
			if e.Metric == LogMFU && opts.Builtin == BuiltinIter && v < 0 {
				// nanoGPT prints "mfu -100.00%" (its running_mfu's "not yet") until
				// it has timed a few iterations: unknown, not a figure.
				continue
			}
			v *= unitFactor(e.Metric, e.Unit, seqLen)
			if err := checkLogFigure(e.Metric, v); err != nil {
				return nil, fmt.Errorf("torchrun: backend_options.logs %s: group %q matched %q in line %q: %w", e.Metric, e.Group, s, line, err)
			}
			vals = append(vals, v)
		}
		if len(vals) == 0 {
			if e.Metric == LogMFU && opts.Builtin == BuiltinIter {
				continue // nanoGPT prints mfu only after a few iterations, and not at all in some forks
			}
			return nil, noMatch(e.Metric, e.Regex.String(), l)
		}
		if e.Skip >= len(vals) {
			return nil, fmt.Errorf("torchrun: backend_options.logs %s: %d values matched, all skipped as warm-up (skip %d); lower skip or run more steps", e.Metric, len(vals), e.Skip)
		}
		out[e.Metric] = append(out[e.Metric], vals[e.Skip:]...)
	}
	if opts.Builtin == BuiltinHFTrainer {
		if err := extractHF(out, l, seqLen, opts.SkipSteps); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// checkLogFigure checks a figure read from the log, in its base unit, as it
// enters. A loss may be anything: one that is not finite makes the run diverged.
func checkLogFigure(metric string, v float64) error {
	switch metric {
	case LogLoss:
		return nil
	case LogStepTime:
		return backends.CheckTime("step_time_s", v, backends.MaxStepTimeS)
	case LogTokensPerS, LogTokensPerSPerRank:
		return backends.CheckFigure(metric, v, 0, backends.MaxTokens, true)
	case LogPeakAllocated, LogPeakReserved:
		return backends.CheckFigure(metric+"_bytes", v, 0, backends.MaxBytes, false)
	}
	return backends.CheckFigure(metric, v, 0, math.MaxFloat64, false)
}

func unitFactor(metric, unit string, seqLen int) float64 {
	if unit == "samples/s" {
		return float64(seqLen)
	}
	return logMetricUnits[metric][unit]
}

func noMatch(metric, what string, l *logLines) error {
	begin := func(lines []string) string {
		if len(lines) == 0 {
			return "(nothing)"
		}
		return strings.Join(lines, "\n    ")
	}
	return fmt.Errorf("torchrun: backend_options.logs %s: %s matched no line of the run's output (%d lines; stdout.log and stderr.log); stdout began:\n    %s\nstderr began:\n    %s",
		metric, what, l.total, begin(l.head), begin(l.errHead))
}

// hfDict finds a Trainer log dict in a line: {'loss': 2.31, 'epoch': 0.1}.
var hfDict = regexp.MustCompile(`\{'[^{}]*\}`)

// extractHF reads the Trainer's per-logging-step losses and its final
// train_runtime / train_samples_per_second (all ranks, samples of seq_len tokens).
func extractHF(out extracted, l *logLines, seqLen, skip int) error {
	var losses []float64
	found := false
	for _, line := range l.lines {
		for _, d := range hfDict.FindAllString(line, -1) {
			// Python's repr of a dict of numbers is JSON but for the quotes (and nan/inf).
			js := strings.ReplaceAll(d, "'", `"`)
			js = strings.NewReplacer(": nan", ": NaN", ": inf", ": Infinity", ": -inf", ": -Infinity").Replace(js)
			var m map[string]any
			nonFinite, err := contract.DecodeJSON("log", []byte(js), &m)
			if err != nil {
				continue
			}
			if v, ok := m["loss"].(float64); ok {
				for _, nf := range nonFinite {
					if nf.Field == "loss" {
						v = nf.Value // a diverged run: fromLogs says so
					}
				}
				losses = append(losses, v)
			}
			if v, ok := m["train_samples_per_second"].(float64); ok {
				found = true
				if err := checkLogFigure(LogTokensPerS, v*float64(seqLen)); err != nil {
					return fmt.Errorf("torchrun: backend_options.logs hf_trainer: train_samples_per_second %v x seq_len %d in line %q: %w", v, seqLen, line, err)
				}
				out[LogTokensPerS] = append(out[LogTokensPerS], v*float64(seqLen))
				if r, ok := m["train_runtime"].(float64); ok {
					out["train_runtime_s"] = append(out["train_runtime_s"], r)
				}
			}
		}
	}
	if !found {
		return noMatch("hf_trainer", "the Trainer's final {'train_runtime': ..., 'train_samples_per_second': ...}", l)
	}
	if skip < len(losses) {
		out[LogLoss] = append(out[LogLoss], losses[skip:]...)
	}
	return nil
}

// fromLogs fills res from extracted figures: step times make the steps and the
// wall time (their sum); without them, the median throughput gives the wall time
// of the tokens it covers. Per-step values are summarized like the project
// script's (Normalize takes medians and p10/p90 over the steps).
func (c *collector) fromLogs(res *results.Result, x extracted) error {
	tps := c.rc.TokensPerStep()
	switch times := c.measuredTimes(res, x[LogStepTime]); {
	case len(times) > 0:
		res.Steps = make([]results.Step, len(times))
		for i, t := range times {
			res.Steps[i] = results.Step{Step: i + 1, StepTimeS: t, Tokens: tps}
			res.MeasuredWallS += t
		}
		if losses := x[LogLoss]; len(losses) > 0 {
			// Losses are aligned with the step times from the end: both lists end at
			// the last step, and a loss printed less often still marks the last ones.
			for i := range min(len(losses), len(times)) {
				v := losses[len(losses)-1-i]
				if math.IsNaN(v) || math.IsInf(v, 0) {
					continue // unknown; divergedLoss says it
				}
				res.Steps[len(times)-1-i].Loss = &v
			}
		}
	case len(x[LogTokensPerS]) > 0 || len(x[LogTokensPerSPerRank]) > 0:
		global, n := 0.0, 0
		if v := x[LogTokensPerS]; len(v) > 0 {
			global, n = stats.Sample{Xs: v}.Quantile(0.5), len(v)
		} else {
			v := x[LogTokensPerSPerRank]
			global, n = stats.Sample{Xs: v}.Quantile(0.5)*float64(c.rc.WorldSize), len(v)
		}
		if !(global > 0) {
			return fmt.Errorf("torchrun: backend_options.logs: the throughput read from the log is %g; it must be positive", global)
		}
		// n throughput readings stand for n steps of the run's global batch; each
		// rank did its share of them.
		res.MeasuredWallS = float64(tps) * float64(n) / global
		for r := range c.rc.WorldSize {
			res.PerRank = append(res.PerRank, results.RankResult{Rank: r, MeasuredWallS: res.MeasuredWallS,
				Tokens: tps * int64(n) / int64(c.rc.WorldSize)})
		}
		if losses := x[LogLoss]; len(losses) > 0 {
			if l := losses[len(losses)-1]; !math.IsNaN(l) && !math.IsInf(l, 0) {
				res.Extra = map[string]any{"log_loss_last": l}
			}
		}
	default:
		return fmt.Errorf("torchrun: backend_options.logs: no step_time, tokens_per_s or tokens_per_s_per_rank extractor: the throughput cannot be known; add one")
	}
	for _, k := range []struct {
		metric string
		dst    **int64
	}{{LogPeakAllocated, &res.PeakMemAllocatedBytes}, {LogPeakReserved, &res.PeakMemReservedBytes}} {
		if v := x[k.metric]; len(v) > 0 {
			peak := v[0]
			for _, y := range v {
				peak = max(peak, y)
			}
			*k.dst = results.I64(int64(math.Round(peak)))
		}
	}
	if msg := divergedLoss(x[LogLoss]); msg != "" {
		res.Status, res.Error = results.StatusDiverged, msg
	}
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	res.Extra["log_extractor"] = true
	// The script's own figures stay beside ours, as medians.
	for _, k := range []string{LogMFU, LogTokensPerS, LogTokensPerSPerRank, "train_runtime_s"} {
		if v := x[k]; len(v) > 0 {
			res.Extra["script_"+k] = stats.Sample{Xs: v}.Quantile(0.5)
		}
	}
	return nil
}

// measuredTimes are the step times of the measured steps among those read from
// the log (after skip_steps): the last rc.Steps of them. A script that ran
// warmup_steps + steps iterations has its first warmup_steps dropped as warm-up;
// any other count is measured as far as it goes, with a warning in the result
// that says what to change (nanoGPT runs max_iters + 1 iterations).
func (c *collector) measuredTimes(res *results.Result, times []float64) []float64 {
	n, want, warm := len(times), c.rc.Steps, c.rc.WarmupSteps
	if n == 0 || n == want || n == want+warm {
		return times[max(n-want, 0):]
	}
	skip := 0
	if c.o.Logs != nil {
		skip = c.o.Logs.SkipSteps
	}
	read := fmt.Sprintf("the log has %d step times (after skip_steps %d) where warmup_steps %d + steps %d = %d iterations were configured",
		n, skip, warm, want, warm+want)
	fix := "; nanoGPT runs max_iters + 1 iterations (iter 0 … iter max_iters): give it --max_iters={last_iter} (warmup_steps + steps - 1); a script that runs as many as it is told: {total_steps}"
	if n < want {
		c.warning(res, fmt.Sprintf("%s: only %d steps were measured (expected when the script logs every few iterations, as nanoGPT's log_interval > 1 does)%s", read, n, fix))
		return times
	}
	c.warning(res, fmt.Sprintf("%s: the last %d were measured and the first %d taken as warm-up%s", read, want, n-want, fix))
	return times[n-want:]
}

// warning records msg in the run's result (extra.warnings) and its stderr.log.
func (c *collector) warning(res *results.Result, msg string) {
	addWarning(res, msg)
	if c.warn != nil {
		c.warn("fsdpbench: warning: " + msg)
	}
}

// addWarning appends msg to res.Extra["warnings"], a list of strings.
func addWarning(res *results.Result, msg string) {
	if res.Extra == nil {
		res.Extra = map[string]any{}
	}
	list, _ := res.Extra["warnings"].([]string)
	res.Extra["warnings"] = append(list, msg)
}

// divergedLoss says where the first loss read from the log is NaN or infinite, or
// "" when none is.
func divergedLoss(losses []float64) string {
	for i, l := range losses {
		if math.IsNaN(l) || math.IsInf(l, 0) {
			return fmt.Sprintf("diverged: the loss read from the log is %v at its %d. reading of %d (backend_options.logs)", l, i+1, len(losses))
		}
	}
	return ""
}
