package sweeps

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEnvNotUTF8Refused is issue 37 §3: env values whose bytes are not UTF-8
// were read as U+FFFD, so "x\xff\xfe" and "x\xfe\xff" got one run ID and the
// second sweep was skipped as done. Each way such bytes come in is refused at
// file:line:col.
func TestEnvNotUTF8Refused(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		sets       []string
		want       string
	}{
		{name: "raw bytes in a quoted value", spec: "name: a\nenv: {A: \"x\xff\xfe\"}\n", want: "s.yaml:2:12: byte 0xff is not UTF-8"},
		{name: "raw bytes, other order", spec: "name: a\nenv: {A: \"x\xfe\xff\"}\n", want: "s.yaml:2:12: byte 0xfe is not UTF-8"},
		{name: "raw bytes in a plain value", spec: "name: a\nenv:\n  A: x\xfe\xff\n", want: "s.yaml:3:7: byte 0xfe"},
		{name: "after a multi-byte character", spec: "name: a\nenv: {A: \"é\xff\"}\n", want: "s.yaml:2:12: byte 0xff"},
		{name: "in a comment", spec: "name: a # \xff\n", want: "s.yaml:1:11: byte 0xff"},
		{name: "surrogate escape", spec: "name: a\nenv: {A: \"x\\udc80\"}\n", want: `s.yaml:2:12: the escape \udc80 names no Unicode character`},
		{name: "escape past U+10FFFF", spec: "name: a\nenv: {A: \"x\\U00110000\"}\n", want: `the escape \U00110000 names no Unicode character`},
		{name: "--set env value", spec: "name: a\n", sets: []string{"env.A=x\xff\xfe"}, want: "--set:1:8: byte 0xff is not UTF-8"},
		{name: "--set env value, other order", spec: "name: a\n", sets: []string{"env.A=x\xfe\xff"}, want: "--set:1:8: byte 0xfe"},
		{name: "--set option", spec: "name: a\n", sets: []string{"seq_len=64", "backend_options.script=a\xff"}, want: "--set:2:25: byte 0xff"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.spec), "s.yaml", Options{Set: tc.sets})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Characters written as YAML escapes of real code points stay distinct runs.
	a, err := Parse([]byte("name: a\nenv: {A: \"x\\xff\\xfe\"}\n"), "s.yaml", Options{})
	require.NoError(t, err)
	b, err := Parse([]byte("name: a\nenv: {A: \"x\\xfe\\xff\"}\n"), "s.yaml", Options{})
	require.NoError(t, err)
	assert.Equal(t, "x\u00ff\u00fe", a.Runs[0].Env["A"])
	assert.NotEqual(t, a.Runs[0].ID, b.Runs[0].ID)
	// Escaped backslashes are not escapes: "\\udc80" is six characters.
	c, err := Parse([]byte("name: a\nenv: {A: \"x\\\\udc80\"}\n"), "s.yaml", Options{})
	require.NoError(t, err)
	assert.Equal(t, `x\udc80`, c.Runs[0].Env["A"])
	// A program that builds a RunConfig's env (not through a spec) is checked too.
	assert.Contains(t, checkEnvValue("A", "x\xff"), "not UTF-8")
}
