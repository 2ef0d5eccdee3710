package sweeps

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Automatic repeats: `repeats: auto`, or a mapping
//
//	repeats: {min: 6, max: 20, ci: 2%}
//
// repeats a run until the 95% confidence interval of its median throughput is
// within ±ci of the median (as benchstat prints it, and as pyperf and criterion
// calibrate their sample counts), at least min and at most max times.
const (
	// AutoRepeatsMin is the default and least min: fewer repeats give no 95%
	// interval of a median (results.MinStatRepeats).
	AutoRepeatsMin = 6
	// AutoRepeatsMax is the default max.
	AutoRepeatsMax = 20
	// AutoRepeatsCI is the default ci: ±5%, the default gate rule's limit.
	AutoRepeatsCI = 0.05
	// MinRepeatsCI bounds ci from below (0.01%): a run's median is never known
	// closer than that, so a smaller width would only run max repeats.
	MinRepeatsCI = 0.0001
)

// autoRepeats is the parsed mapping, carried in value.raw.
type autoRepeats struct {
	min, max int
	ci       float64 // a fraction: 0.02 for ±2%
}

func (a autoRepeats) String() string {
	return fmt.Sprintf("{min: %d, max: %d, ci: %s%%}", a.min, a.max, strconv.FormatFloat(100*a.ci, 'g', -1, 64))
}

// autoRepeatsKeys are what the repeats mapping takes.
var autoRepeatsKeys = []string{"min", "max", "ci"}

// readAutoRepeats reads `repeats: auto` or the repeats mapping; errors name the
// line and column of the value at fault.
func (p *parsing) readAutoRepeats(d *keyDef, n *node) (value, bool) {
	v := value{f: d.f, pos: n.pos}
	a := autoRepeats{min: AutoRepeatsMin, max: AutoRepeatsMax, ci: AutoRepeatsCI}
	ok := true
	if n.kind == mapNode {
		var minPos, maxPos pos
		for _, e := range n.entries {
			switch e.key {
			case "min", "max":
				i, isInt := e.val.val.(int64)
				if e.val.kind != scalarNode || !isInt || i < 1 || i > MaxRepeats {
					p.e.at(e.val.pos, "repeats.%s must be a positive integer (at most %d), got %s", e.key, MaxRepeats, e.val.describe())
					ok = false
					continue
				}
				if e.key == "min" {
					a.min, minPos = int(i), e.val.pos
				} else {
					a.max, maxPos = int(i), e.val.pos
				}
			case "ci":
				ci, msg := readPercent(e.val)
				if msg != "" {
					p.e.at(e.val.pos, "repeats.ci %s", msg)
					ok = false
					continue
				}
				a.ci = ci
			default:
				p.e.at(e.keyPos, "unknown key %s under repeats (allowed: %s; repeats: {min: 6, max: 20, ci: 2%%} repeats a run until the 95%% interval of its median is within ±2%%)%s",
					q(e.key), strings.Join(autoRepeatsKeys, ", "), didYouMean(e.key, autoRepeatsKeys))
				ok = false
			}
		}
		if ok && a.min < AutoRepeatsMin {
			p.e.at(minPos, "repeats.min must be at least %d: fewer repeats give no 95%% confidence interval to stop on", AutoRepeatsMin)
			ok = false
		}
		if ok && a.max < a.min {
			at := maxPos
			if at == (pos{}) {
				at = n.pos
			}
			p.e.at(at, "repeats.max (%d) is below repeats.min (%d): give a max of at least %d", a.max, a.min, a.min)
			ok = false
		}
	}
	v.i, v.raw = int64(a.max), a
	v.s = a.String()
	return v, ok
}

// repeatsHint completes the error of a repeats value that is no count (d is
// the key, n the value): the other forms repeats takes, which the message of an
// integer key does not name, and lower case where auto was written in another
// (the spec's keywords are case-sensitive, as YAML is). "" for any other key.
func repeatsHint(d *keyDef, n *node) string {
	if d.f != fRepeats {
		return ""
	}
	forms := fmt.Sprintf("repeats: auto repeats a run until the 95%% interval of its median is within ±%g%%, %d to %d times; repeats: {min: %d, max: %d, ci: 2%%} sets those",
		100*AutoRepeatsCI, AutoRepeatsMin, AutoRepeatsMax, AutoRepeatsMin, AutoRepeatsMax)
	if s, isStr := n.val.(string); isStr && n.kind == scalarNode && strings.EqualFold(strings.TrimSpace(s), "auto") {
		return " (write auto in lower case: " + forms + ")"
	}
	return " (or auto, or {min, max, ci}: " + forms + ")"
}

// readPercent reads a width such as 2% (or 0.5%) as a fraction.
func readPercent(n *node) (float64, string) {
	s, isStr := n.val.(string)
	if n.kind != scalarNode || !isStr || !strings.HasSuffix(strings.TrimSpace(s), "%") {
		hint := ""
		if f, isNum := numberOf(n.val); isNum && f/100 >= MinRepeatsCI && f < 100 {
			// Only a width the percentage form would take: "write NaN%" would
			// advise a value refused in turn (issue 39 item 8).
			hint = fmt.Sprintf(" (write %g%% for ±%g%%)", f, f)
		} else if isNum {
			hint = fmt.Sprintf(" (a width above %g%% and below 100%%)", 100*MinRepeatsCI)
		}
		return 0, fmt.Sprintf("must be a percentage such as 2%%, got %s%s", n.describe(), hint)
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || math.IsNaN(f) || f/100 < MinRepeatsCI || f >= 100 {
		return 0, fmt.Sprintf("must be a percentage above %g%% and below 100%%, got %s", 100*MinRepeatsCI, q(s))
	}
	return f / 100, ""
}

func numberOf(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}
