package rendezvous

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxHosts bounds ExpandHostlist (far above any real allocation), so that a list such
// as "n[0-999999999]" is an error rather than billions of names.
const MaxHosts = 1 << 16

// ExpandHostlist expands a Slurm host list ("node[01-04,07],gpu5",
// "rack[1-2]-n[1-2]") into host names, in Slurm's order: items left to right, and
// inside an item the bracket groups like nested loops, the last varying fastest.
// A range keeps the width of its lower bound ("[08-10]" gives 08, 09, 10).
func ExpandHostlist(list string) ([]string, error) {
	items, err := parseHostlist(list)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, it := range items {
		n := it.count()
		if n > MaxHosts-total {
			return nil, fmt.Errorf("host list %q names more than %d hosts", list, MaxHosts)
		}
		total += n
	}
	hosts := make([]string, 0, total)
	for _, it := range items {
		hosts = it.expand(hosts)
	}
	return hosts, nil
}

// FirstHost is the first host of a Slurm host list, without expanding the rest: the
// host where rank 0 runs when tasks are placed in node order (Slurm's default).
func FirstHost(list string) (string, error) {
	items, err := parseHostlist(list)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range items[0] {
		if p.ranges == nil {
			b.WriteString(p.text)
		} else {
			b.WriteString(p.ranges[0].format(p.ranges[0].lo))
		}
	}
	return b.String(), nil
}

// hostItem is one comma-separated entry: literal text and bracket groups in order.
type hostItem []hostPart

// hostPart is either literal text (ranges == nil) or a bracket group.
type hostPart struct {
	text   string
	ranges []numRange
}

type numRange struct {
	lo, hi uint64
	width  int
}

func (r numRange) format(v uint64) string {
	s := strconv.FormatUint(v, 10)
	if len(s) < r.width {
		s = strings.Repeat("0", r.width-len(s)) + s
	}
	return s
}

func (p hostPart) count() int {
	if p.ranges == nil {
		return 1
	}
	n := 0
	for _, r := range p.ranges {
		span := r.hi - r.lo + 1
		if span > MaxHosts || n+int(span) > MaxHosts {
			return MaxHosts + 1
		}
		n += int(span)
	}
	return n
}

// count is the number of hosts the item expands to, saturating above MaxHosts.
func (it hostItem) count() int {
	n := 1
	for _, p := range it {
		c := p.count()
		if c > MaxHosts || n > MaxHosts/c {
			return MaxHosts + 1
		}
		n *= c
	}
	return n
}

func (it hostItem) expand(out []string) []string {
	prefixes := []string{""}
	for _, p := range it {
		if p.ranges == nil {
			for i := range prefixes {
				prefixes[i] += p.text
			}
			continue
		}
		next := make([]string, 0, len(prefixes)*p.count())
		for _, pre := range prefixes {
			for _, r := range p.ranges {
				for v := r.lo; ; v++ {
					next = append(next, pre+r.format(v))
					if v == r.hi {
						break
					}
				}
			}
		}
		prefixes = next
	}
	return append(out, prefixes...)
}

func parseHostlist(list string) ([]hostItem, error) {
	var items []hostItem
	var cur hostItem
	var text strings.Builder
	flushText := func() {
		if text.Len() > 0 {
			cur = append(cur, hostPart{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(list); i++ {
		switch c := list[i]; c {
		case ',':
			flushText()
			if len(cur) > 0 {
				items = append(items, cur)
			}
			cur = nil
		case '[':
			end := strings.IndexByte(list[i+1:], ']')
			if end < 0 {
				return nil, fmt.Errorf("host list %q: '[' at offset %d is never closed", list, i)
			}
			body := list[i+1 : i+1+end]
			if strings.IndexByte(body, '[') >= 0 {
				return nil, fmt.Errorf("host list %q: nested '[' at offset %d", list, i)
			}
			ranges, err := parseRanges(body)
			if err != nil {
				return nil, fmt.Errorf("host list %q: bracket at offset %d: %w", list, i, err)
			}
			flushText()
			cur = append(cur, hostPart{ranges: ranges})
			i += end + 1
		case ']':
			return nil, fmt.Errorf("host list %q: ']' at offset %d without '['", list, i)
		case ' ', '\t', '\n', '\r':
			return nil, fmt.Errorf("host list %q: whitespace at offset %d (host lists are comma-separated, without spaces)", list, i)
		default:
			text.WriteByte(c)
		}
	}
	flushText()
	if len(cur) > 0 {
		items = append(items, cur)
	}
	if len(items) == 0 {
		return nil, errors.New("host list is empty")
	}
	return items, nil
}

// maxRangeDigits keeps bounds inside uint64 and widths sensible.
const maxRangeDigits = 18

func parseRanges(body string) ([]numRange, error) {
	if body == "" {
		return nil, errors.New("empty brackets")
	}
	var out []numRange
	for _, part := range strings.Split(body, ",") {
		loS, hiS, isRange := strings.Cut(part, "-")
		lo, err := parseBound(loS)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", part, err)
		}
		r := numRange{lo: lo, hi: lo, width: len(loS)}
		if isRange {
			hi, err := parseBound(hiS)
			if err != nil {
				return nil, fmt.Errorf("range %q: %w", part, err)
			}
			if hi < lo {
				return nil, fmt.Errorf("range %q runs backwards", part)
			}
			r.hi = hi
		}
		out = append(out, r)
	}
	return out, nil
}

func parseBound(s string) (uint64, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	if len(s) > maxRangeDigits {
		return 0, fmt.Errorf("%q has more than %d digits", s, maxRangeDigits)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number", s)
		}
	}
	return strconv.ParseUint(s, 10, 64)
}

// TasksOnNode reads Slurm's compressed tasks-per-node list ("2(x3),1": two tasks on
// each of the first three nodes, one on the fourth) and returns the count for node
// (0-based, as SLURM_NODEID).
func TasksOnNode(spec string, node int) (int, error) {
	if node < 0 {
		return 0, fmt.Errorf("node index %d is negative", node)
	}
	if strings.TrimSpace(spec) == "" {
		return 0, errors.New("tasks-per-node list is empty")
	}
	seen := 0
	for _, item := range strings.Split(spec, ",") {
		tasks, reps, err := parseTaskItem(item)
		if err != nil {
			return 0, err
		}
		if node-seen < reps {
			return tasks, nil
		}
		seen += reps
	}
	return 0, fmt.Errorf("lists %d nodes, but this is node %d", seen, node)
}

func parseTaskItem(item string) (tasks, reps int, err error) {
	countS, rest, hasReps := strings.Cut(item, "(")
	tasks, err = strconv.Atoi(countS)
	if err != nil || tasks < 1 {
		return 0, 0, fmt.Errorf("entry %q: %q is not a positive task count", item, countS)
	}
	if !hasReps {
		return tasks, 1, nil
	}
	repS, ok := strings.CutPrefix(rest, "x")
	if ok {
		repS, ok = strings.CutSuffix(repS, ")")
	}
	if !ok {
		return 0, 0, fmt.Errorf("entry %q: want COUNT or COUNT(xNODES)", item)
	}
	reps, err = strconv.Atoi(repS)
	if err != nil || reps < 1 {
		return 0, 0, fmt.Errorf("entry %q: %q is not a positive node count", item, repS)
	}
	return tasks, reps, nil
}
