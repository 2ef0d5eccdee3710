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
