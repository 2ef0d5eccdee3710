package backends

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fsdpbench/fsdpbench/sweeps"
)

// SpecError is a mistake in what the spec asks of a backend (a misspelt or invalid
// backend option or launcher option, a plugin that may not run, a backend that
// cannot run under the spec's launcher), as opposed to a real configuration the
// backend cannot run (infeasible, a result). Validate returns it, wrapped or not;
// the sweep and plan commands validate every run before anything runs and exit 2
// on the first one, since every run would be refused the same way.
type SpecError struct {
	// Err says what is wrong and what to write instead.
	Err error
}

// Error returns the underlying message.
func (e *SpecError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *SpecError) Unwrap() error { return e.Err }

// SpecErr marks err as a spec error (nil stays nil; one already marked is kept).
func SpecErr(err error) error {
	if err == nil || IsSpecError(err) {
		return err
	}
	return &SpecError{Err: err}
}

// SpecErrorf is SpecErr(fmt.Errorf(format, args...)).
func SpecErrorf(format string, args ...any) error {
	return &SpecError{Err: fmt.Errorf(format, args...)}
}

// IsSpecError reports whether err is, or wraps, a *SpecError.
func IsSpecError(err error) bool {
	var se *SpecError
	return errors.As(err, &se)
}

// Number reads a numeric option as the YAML and JSON decoders deliver it (int,
// int64, uint64, float64) or as --set passes it (a string), and refuses NaN and
// ±Inf, which no option means. Errors say what was given.
func Number(v any) (float64, error) {
	var f float64
	switch x := v.(type) {
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case uint64:
		f = float64(x)
	case float64:
		f = x
	case string:
		var err error
		if f, err = parseNumber(x); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("must be a number, got %s", describeValue(v))
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("must be a finite number, got %v", v)
	}
	return f, nil
}

// NumberIn is Number bounded to [lo, hi]; open makes the lower bound exclusive
// (for options where 0 means nothing, such as a bandwidth or a learning rate).
func NumberIn(v any, lo, hi float64, open bool) (float64, error) {
	f, err := Number(v)
	if err != nil {
		return 0, err
	}
	if f > hi || f < lo || (open && f == lo) {
		bound := "["
		if open {
			bound = "("
		}
		return 0, fmt.Errorf("must be in %s%g, %g], got %v", bound, lo, hi, v)
	}
	return f, nil
}

// WholeIn is NumberIn for an option that counts something: it must be a whole
// number in [lo, hi].
func WholeIn(v any, lo, hi int64) (int64, error) {
	f, err := Number(v)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || f < float64(lo) || f > float64(hi) {
		return 0, fmt.Errorf("must be a whole number in [%d, %d], got %v", lo, hi, v)
	}
	return int64(f), nil
}

func parseNumber(s string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("must be a number, got %s", describeValue(s))
	}
	return f, nil
}

// DurationIn reads a duration option: a Go duration string ("50ms", "2s") in
// [lo, hi]. A bare number is refused: its unit would be a guess.
func DurationIn(v any, lo, hi time.Duration) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("must be a duration such as \"50ms\" or \"2s\", got %s", describeValue(v))
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("must be a duration such as \"50ms\" or \"2s\", got %s", describeValue(v))
	}
	if d < lo || d > hi {
		return 0, fmt.Errorf("must be between %s and %s, got %q", lo, hi, s)
	}
	return d, nil
}

// Bool reads a true/false option (a string "true"/"false" too, as --set passes it).
func Bool(v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(x)) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, fmt.Errorf("must be true or false, got %s", describeValue(v))
}

// UnknownOption is the error for an option name the backend does not know: it
// suggests the closest known one and lists them all.
func UnknownOption(section, backend, name string, known []string) error {
	msg := fmt.Sprintf("%s.%s: %s has no such option", section, name, backend)
	if c := sweeps.Closest(name, known); c != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", c)
	}
	if len(known) == 0 {
		return SpecErrorf("%s; it takes none", msg)
	}
	return SpecErrorf("%s; known: %s", msg, strings.Join(known, ", "))
}

// describeValue names a value's kind for an error, without echoing a large one.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nothing (null)"
	case bool:
		return fmt.Sprintf("%v (a boolean)", x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return fmt.Sprintf("%q", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}
