package sweeps

import (
	"fmt"
	"strings"
)

// SpecError is a problem in a sweep spec or in a --set flag, at the position where
// it was found. For a --set flag, File is "--set", Line is the flag's 1-based index
// among the --set flags and Column the 1-based byte position inside the flag.
type SpecError struct {
	File   string
	Line   int
	Column int
	Msg    string
	// Err is the underlying error where there is one (a goccy/go-yaml error for
	// malformed YAML); errors.As reaches it through Unwrap.
	Err error
}

// Error formats the error as "file:line:col: msg", as compilers do.
func (e *SpecError) Error() string {
	if e.Line <= 0 {
		return e.File + ": " + e.Msg
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// Unwrap returns the underlying error, if any.
func (e *SpecError) Unwrap() error { return e.Err }

// SpecErrors is several problems found in one spec, in the order found. Parse
// returns it when there is more than one; errors.As finds the first *SpecError.
type SpecErrors []*SpecError

// Error lists the problems, one per line.
func (es SpecErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap exposes every problem to errors.Is and errors.As.
func (es SpecErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// pos is a position in a spec file or a --set flag.
type pos struct {
	file      string
	line, col int
}

func (p pos) String() string {
	if p.line <= 0 {
		return p.file
	}
	if p.file == setFile {
		return fmt.Sprintf("--set #%d column %d", p.line, p.col)
	}
	return fmt.Sprintf("%d:%d", p.line, p.col)
}

func (p pos) errorf(format string, args ...any) *SpecError {
	return &SpecError{File: p.file, Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

// maxErrors bounds how many problems one Parse reports; past that, fixing the first
// ones is the better next step.
const maxErrors = 20

// errs collects the problems of one Parse, so a user sees every typo at once.
type errs struct {
	list SpecErrors
}

func (e *errs) add(se *SpecError) {
	if len(e.list) < maxErrors {
		e.list = append(e.list, se)
	}
}

func (e *errs) at(p pos, format string, args ...any) {
	e.add(p.errorf(format, args...))
}

func (e *errs) failed() bool { return len(e.list) > 0 }

func (e *errs) err() error {
	switch len(e.list) {
	case 0:
		return nil
	case 1:
		return e.list[0]
	default:
		return e.list
	}
}

// Closest returns the candidate nearest to s (case-insensitive, optimal string
// alignment distance), or "" when none is near enough to be a likely typo. A
// candidate that s is a prefix of ("gpt2" for "gpt2-124m") is a likely intent even
// when far in edits. Every "did you mean" in fsdpbench (spec keys and values, model
// presets, hardware profiles, backend options) comes from here, so all suggest alike.
func Closest(s string, candidates []string) string {
	ls := strings.ToLower(s)
	best, bestD := "", 1<<30
	prefix, prefixD := "", 1<<30
	for _, c := range candidates {
		lc := strings.ToLower(c)
		d := editDistance(ls, lc)
		if d < bestD {
			best, bestD = c, d
		}
		if ls != "" && ls != lc && strings.HasPrefix(lc, ls) && d < prefixD {
			prefix, prefixD = c, d
		}
	}
	if prefix != "" {
		return prefix
	}
	limit := max(2, len(s)/3)
	if bestD > limit || (bestD == 0 && best == s) {
		return ""
	}
	// A short word within 2 edits of a short candidate is often unrelated ("ws" vs
	// "cpu"); ask for at least half of the characters to agree.
	if bestD*2 > len(best) {
		return ""
	}
	return best
}

// editDistance is the optimal string alignment distance: insertions, deletions,
// substitutions and transpositions of adjacent characters ("shrad" -> "shard") cost 1.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 20 // long strings are never typos of our short names
	}
	var rows [3][65]int
	prev2, prev, cur := rows[0][:len(b)+1], rows[1][:len(b)+1], rows[2][:len(b)+1]
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// didYouMean formats the suggestion part of an error: "; did you mean X?" or "".
func didYouMean(s string, candidates []string) string {
	if c := Closest(s, candidates); c != "" {
		return "; did you mean " + c + "?"
	}
	return ""
}
