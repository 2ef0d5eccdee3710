package results

import (
	"fmt"
	"slices"
	"strings"
)

// Columns of the spec's environment variables and varied backend options
// (issue 30): env.NAME and backend_options.NAME are axes whose names the
// registry cannot list, so they are made on demand: LookupColumn finds them
// by name, and DynamicColumns lists those a set of runs has.

// Prefixes of the dynamic axis columns.
const (
	EnvColumnPrefix    = "env."
	OptionColumnPrefix = "backend_options."
)

// dynamicColumn returns the axis column env.NAME or backend_options.NAME, or
// false when name is neither. An env column is the value the spec gave (empty
// for a run without it: the variable was inherited, not set); an option column
// the option's value, for any run that has it.
func dynamicColumn(name string) (Column, bool) {
	if v, ok := strings.CutPrefix(name, EnvColumnPrefix); ok && v != "" && strings.ToUpper(v) == v {
		return Column{Name: name, Kind: KindAxis, Header: name, Doc: "environment variable the spec gave the run",
			text: true, get: func(r *Run) any {
				if s, ok := r.Config.Env[v]; ok {
					return s
				}
				return nil
			}}, true
	}
	if v, ok := strings.CutPrefix(name, OptionColumnPrefix); ok && v != "" {
		return Column{Name: name, Kind: KindAxis, Header: name, Doc: "backend option",
			get: func(r *Run) any { return optionValue(r.Config.BackendOptions[v]) }}, true
	}
	return Column{}, false
}

// optionValue is an option's value as a column holds it: numbers as int64 or
// float64, text and booleans as they are, anything else as its text.
func optionValue(v any) any {
	switch x := v.(type) {
	case nil, string, bool, int64, float64:
		return x
	case int:
		return int64(x)
	case uint64:
		return float64(x)
	}
	return fmt.Sprint(v)
}

// DynamicColumns lists the env.NAME columns of the variables any of runs was
// given and the backend_options.NAME columns of the options any run varied
// as an axis, sorted by name: the columns exports add after Columns().
func DynamicColumns(runs []Run) []Column {
	seen := map[string]bool{}
	for i := range runs {
		for k := range runs[i].Config.Env {
			seen[EnvColumnPrefix+k] = true
		}
		for _, k := range runs[i].Config.OptionAxes {
			seen[OptionColumnPrefix+k] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]Column, 0, len(names))
	for _, n := range names {
		c, _ := dynamicColumn(n)
		out = append(out, c)
	}
	return out
}
