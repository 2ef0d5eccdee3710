package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// metavar is a value name a usage string may choose by back-quoting it
// (pflag's convention: "`FILE` to read"): upper case, as DIR and FILE.
var metavar = regexp.MustCompile(`^[A-Z][A-Z0-9_]*(\.\.\.)?$`)

// typeNames are the value names pflag prints for a flag whose usage names none.
var typeNames = map[string]bool{
	"string": true, "strings": true, "stringArray": true, "int": true, "ints": true, "uint": true,
	"int64": true, "uint64": true, "float": true, "float64": true, "duration": true, "stringToString": true,
}

// allCommands is the command tree below root, root included, depth first.
func allCommands(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, allCommands(c)...)
	}
	return out
}

// TestHelpValueNames walks every command's flags: pflag takes the first
// back-quoted word of a usage string as the flag's value name and drops the
// quotes, so "history directory of `fsdpbench gate --history`" printed as
// "--history fsdpbench   gate --history". A back-quote may only name a value
// (`FILE`); then each command's --help, from the binary, shows every flag with
// a type or an upper-case value name, never a word of its sentence.
func TestHelpValueNames(t *testing.T) {
	t.Parallel()
	cmds := allCommands(newRootCmd())
	require.Greater(t, len(cmds), 10)
	flags := 0
	for _, c := range cmds {
		check := func(f *pflag.Flag) {
			flags++
			name, usage := pflag.UnquoteUsage(f)
			if strings.Contains(f.Usage, "`") {
				assert.Regexp(t, metavar, name, "%s --%s: a back-quoted word in the usage becomes the value name: %q", c.CommandPath(), f.Name, f.Usage)
			}
			assert.NotContains(t, usage, "`", "%s --%s: %q", c.CommandPath(), f.Name, f.Usage)
		}
		c.LocalFlags().VisitAll(check)
	}
	require.Greater(t, flags, 50, "every command's flags were visited")

	// pflag's lines: "  -x, --name VALUE   usage" or "      --name   usage".
	line := regexp.MustCompile(`^\s+(?:-\w, )?--([\w-]+)( .*)$`)
	rest := regexp.MustCompile(`^(?: (\S+))?\s{2,}\S`)
	for _, c := range cmds {
		path := strings.Fields(c.CommandPath())[1:]
		res := fsdpbench(t, t.TempDir(), append(path, "--help")...)
		require.Equal(t, 0, res.code, "%v --help: %s", path, res.stderr)
		seen := 0
		for _, l := range strings.Split(res.stdout, "\n") {
			m := line.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			seen++
			r := rest.FindStringSubmatch(m[2])
			if !assert.NotNil(t, r, "fsdpbench %s --help: --%s is followed by more than a value name: %s", strings.Join(path, " "), m[1], l) {
				continue
			}
			if v := r[1]; v != "" {
				assert.True(t, typeNames[v] || metavar.MatchString(v), "fsdpbench %s --help: --%s shows %q as its value name: %s", strings.Join(path, " "), m[1], v, l)
			}
		}
		assert.Positive(t, seen, "fsdpbench %s --help lists its flags: %s", strings.Join(path, " "), res.stdout)
	}

	// A date format written as a date reads like a default value.
	gate := fsdpbench(t, t.TempDir(), "gate", "--help")
	require.Equal(t, 0, gate.code, gate.stderr)
	for _, l := range strings.Split(gate.stdout, "\n") {
		if strings.Contains(l, "--date") {
			assert.NotContains(t, l, "2006-01-02", "gate --date names its format, not Go's reference date: %s", l)
		}
		if regexp.MustCompile(`^\s{2,}--date\b`).MatchString(l) { // the flag's own line
			assert.Contains(t, l, "YYYY-MM-DD", l)
		}
	}
}
