package sweeps

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAutoRepeatsSpec: repeats: auto and repeats: {min, max, ci} give each run
// a maximum, a minimum and a width to stop at; a fixed count leaves them zero.
func TestAutoRepeatsSpec(t *testing.T) {
	for _, tt := range []struct {
		repeats       string
		n, min        int
		ci            float64
		resolvedShows string
	}{
		{"6", 6, 0, 0, "repeats: 6"},
		{"auto", AutoRepeatsMax, AutoRepeatsMin, AutoRepeatsCI, "repeats: auto"},
		{"{max: 30, ci: 2%}", 30, AutoRepeatsMin, 0.02, "ci: 2%"},
		{"{min: 8, max: 12, ci: 0.5%}", 12, 8, 0.005, "min: 8"},
	} {
		plan, err := Parse([]byte("name: x\nrepeats: "+tt.repeats+"\n"), "spec.yaml", Options{})
		require.NoError(t, err, tt.repeats)
		for _, rc := range plan.Runs {
			assert.Equal(t, tt.n, rc.Repeats, tt.repeats)
			assert.Equal(t, tt.min, rc.RepeatsMin, tt.repeats)
			assert.InDelta(t, tt.ci, rc.RepeatsCI, 1e-12, tt.repeats)
		}
		assert.Contains(t, string(plan.Resolved), tt.resolvedShows)
	}
	plan, err := Parse([]byte("name: x\nrepeats: 6\n"), "spec.yaml", Options{Set: []string{"repeats=auto"}})
	require.NoError(t, err)
	assert.Equal(t, AutoRepeatsMax, plan.Runs[0].Repeats)
}

// TestAutoRepeatsSpecErrors: each mistake is named at its line and column,
// with what to write instead.
func TestAutoRepeatsSpecErrors(t *testing.T) {
	for _, tt := range []struct {
		repeats   string
		line, col int
		want      string
	}{
		{"{max: 12, ci: 2}", 2, 24, "repeats.ci must be a percentage such as 2%, got 2 (write 2% for ±2%)"},
		{"{max: 12, ci: 0%}", 2, 24, "repeats.ci must be a percentage above 0.01% and below 100%"},
		{"{mx: 12}", 2, 11, `unknown key "mx" under repeats (allowed: min, max, ci;`},
		{"{min: 3, max: 12}", 2, 16, "repeats.min must be at least 6"},
		{"{min: 8, max: 7}", 2, 24, "repeats.max (7) is below repeats.min (8)"},
		{"{max: 5000}", 2, 16, "repeats.max must be a positive integer (at most 1000)"},
		{"autoo", 2, 10, "repeats must be"},
	} {
		se := specError(t, "name: x\nrepeats: "+tt.repeats+"\n", Options{})
		assert.Equal(t, tt.line, se.Line, tt.repeats)
		assert.Equal(t, tt.col, se.Column, tt.repeats)
		assert.Contains(t, se.Msg, tt.want, tt.repeats)
	}
}

// TestRepeatsMessagesSayWhatToWrite (issue 39 item 8): ci: .nan advised
// "write NaN%", which was refused in turn; repeats: AUTO did not name auto or
// the {min, max, ci} form; --set repeats={min: 6, max: 7, ci: 50%} said "takes
// one value, not a list" of what is a mapping, which --set cannot take.
func TestRepeatsMessagesSayWhatToWrite(t *testing.T) {
	se := specError(t, "name: x\nrepeats: {min: 6, max: 20, ci: .nan}\n", Options{})
	assert.Equal(t, 2, se.Line)
	assert.Equal(t, 32, se.Column)
	assert.Equal(t, "repeats.ci must be a percentage such as 2%, got the number .nan (a width above 0.01% and below 100%)", se.Msg)
	for _, ci := range []string{".inf", "-2", "500"} {
		se := specError(t, "name: x\nrepeats: {min: 6, max: 20, ci: "+ci+"}\n", Options{})
		assert.NotContains(t, se.Msg, "write", "no advice the reader refuses: ci %s", ci)
	}

	se = specError(t, "name: x\nrepeats: AUTO\n", Options{})
	assert.Equal(t, 10, se.Column)
	assert.Equal(t, `repeats must be a positive integer (at most 1000), got the string "AUTO" (write auto in lower case: repeats: auto repeats a run until the 95% interval of its median is within ±5%, 6 to 20 times; repeats: {min: 6, max: 20, ci: 2%} sets those)`, se.Msg)
	se = specError(t, "name: x\nrepeats: many\n", Options{})
	assert.Contains(t, se.Msg, `got the string "many" (or auto, or {min, max, ci}: repeats: auto repeats`)

	se = specError(t, "name: x\nrepeats: 6\n", Options{Set: []string{"repeats={min: 6, max: 7, ci: 50%}"}})
	assert.Equal(t, "--set", se.File)
	assert.Equal(t, 9, se.Column, "at the mapping")
	assert.Equal(t, "--set cannot take the repeats mapping {min, max, ci}: a --set value is one value or a comma-separated list. Give --set repeats=auto (until the 95% interval of the median is within ±5%, 6 to 20 repeats) or --set repeats=N, or write repeats: {min: 6, max: 20, ci: 2%} in the spec", se.Msg)
	se = specError(t, "name: x\n", Options{Set: []string{"steps={a: 1}"}})
	assert.Equal(t, "--set cannot take a mapping: a --set value is one value or a comma-separated list; write steps: {...} in the spec", se.Msg)
	plan, err := Parse([]byte("name: x\nrepeats: 6\n"), "spec.yaml", Options{Set: []string{"repeats=auto"}})
	require.NoError(t, err, "the form --set takes")
	assert.Equal(t, AutoRepeatsMax, plan.Runs[0].Repeats)
}
