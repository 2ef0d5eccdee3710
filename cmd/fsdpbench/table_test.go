package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quickstartSpec is the example the README starts with (sim: instant).
func quickstartSpec(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../sweeps/examples/quickstart.yaml")
	require.NoError(t, err)
	return p
}

// widest is the widest line of out, in runes (the table's rules are one
// column each).
func widest(out string) int {
	w := 0
	for _, line := range strings.Split(out, "\n") {
		w = max(w, utf8.RuneCountInString(strings.TrimRight(line, "\r")))
	}
	return w
}

// TestRunTableFitsWidth runs the quickstart sweep and reports it at several
// widths, given by --width, $COLUMNS and a terminal's size: every line fits,
// sweep and report print the same table, and --wide and piped output are the
// whole table.
func TestRunTableFitsWidth(t *testing.T) {
	dir := t.TempDir()
	spec := quickstartSpec(t)
	res := fsdpbench(t, dir, "sweep", spec, "--results", "out", "--progress", "none", "--width", "80")
	require.Equal(t, 0, res.code, res.stderr)
	assert.LessOrEqual(t, widest(res.stdout), 80, res.stdout)
	assert.Contains(t, res.stdout, "not shown: run ID")
	sweepDir := filepath.Join("out", "quickstart")

	rep := fsdpbench(t, dir, "report", sweepDir, "--width", "80")
	require.Equal(t, 0, rep.code, rep.stderr)
	assert.Equal(t, res.stdout, rep.stdout, "sweep and report print one table")
	cmp := fsdpbench(t, dir, "compare", sweepDir, sweepDir, "--width", "80")
	require.Equal(t, 0, cmp.code, cmp.stderr)
	assert.LessOrEqual(t, widest(cmp.stdout), 80, cmp.stdout)
	assert.Contains(t, cmp.stdout, "ws1-bs4-shard_grad_op-ac0-pre ")

	for _, tt := range []struct {
		name  string
		env   []string
		args  []string
		fit   int  // the width the table must fit; 0: whole
		whole bool // the run IDs are shown
	}{
		{"width 120", nil, []string{"--width", "120"}, 120, false},
		{"COLUMNS", []string{"COLUMNS=100"}, nil, 100, false},
		{"narrow COLUMNS gets the least width", []string{"COLUMNS=12"}, nil, 40, false},
		{"wide", []string{"COLUMNS=80"}, []string{"--wide"}, 0, true},
		{"piped", nil, nil, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := command(dir, append([]string{"report", sweepDir}, tt.args...)...)
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.Output()
			require.NoError(t, err)
			if tt.fit > 0 {
				assert.LessOrEqual(t, widest(string(out)), tt.fit, "%s", out)
				assert.Greater(t, widest(string(out)), tt.fit/2, "the table uses the width: %s", out)
			}
			assert.Equal(t, tt.whole, strings.Contains(string(out), "ws1-bs4-ddp-ac0-pre-"), "%s", out)
		})
	}

	t.Run("terminal", func(t *testing.T) {
		scriptBin, err := exec.LookPath("script")
		require.NoError(t, err, "util-linux's script gives the test a terminal; install bsdutils")
		sh := "stty cols 90 rows 40 && exec " + bin + " report " + sweepDir
		cmd := exec.Command(scriptBin, "-qec", sh, "/dev/null")
		cmd.Dir = dir
		cmd.Env = withoutVar(os.Environ(), "COLUMNS")
		out, err := cmd.Output()
		require.NoError(t, err, "%s", out)
		assert.LessOrEqual(t, widest(string(out)), 90, "%s", out)
		assert.Contains(t, string(out), "not shown: run ID")
	})
}

// TestTableWidthErrors: bad widths are usage errors that say what to give.
func TestTableWidthErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"too narrow", nil, []string{"--width", "10"}, "--width 10: give 40 to 100000 columns"},
		{"both", nil, []string{"--wide", "--width", "100"}, "--wide and --width: give one"},
		{"bad COLUMNS", []string{"COLUMNS=wide"}, nil, `COLUMNS="wide" is not a positive number`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := command(dir, append([]string{"report", dir}, tt.args...)...)
			cmd.Env = append(cmd.Env, tt.env...)
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, ExitUsage, ee.ExitCode())
			assert.Contains(t, string(out), tt.want)
		})
	}
}

func withoutVar(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}
