package contract

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestStepLinesRefusesRepeatsAndRanksOutsideTheWorld (issue 39, item 4): the
// same step printed five times was five good steps, and a record of rank 99 in
// a world of 1 a good step; each is now a broken line that says why, while the
// ranks' good lines, shared lines included, are read as before.
func TestStepLinesRefusesRepeatsAndRanksOutsideTheWorld(t *testing.T) {
	c := NewStepLines(1)
	var good []StepLine
	var errs []error
	for range 5 {
		sts, es := c.Parse(`FSDPBENCH {"step": 1, "loss": 5.0, "step_time_s": 0.1}`)
		good, errs = append(good, sts...), append(errs, es...)
	}
	require.Len(t, good, 1, "one step 1")
	require.Len(t, errs, 4)
	for _, err := range errs {
		assert.Contains(t, err.Error(), "step line: rank 0 reported step 1 twice: each measured step is reported once")
		assert.Contains(t, err.Error(), `"FSDPBENCH {\"step\": 1`, "the error quotes the line")
	}

	c = NewStepLines(1)
	for s := 1; s <= 5; s++ {
		sts, es := c.Parse(`FSDPBENCH {"step": ` + string(rune('0'+s)) + `, "step_time_s": 0.1, "rank": 99}`)
		assert.Empty(t, sts)
		require.Len(t, es, 1)
		assert.Contains(t, es[0].Error(), "step line: rank is 99 but the run has 1 rank (ranks 0 to 0)")
	}

	// Out of order is a repeat too; other ranks keep their own count, and a
	// shared line's records are checked one by one.
	c = NewStepLines(2)
	sts, es := c.Parse(`FSDPBENCH {"step": 1, "step_time_s": 0.1, "rank": 0}FSDPBENCH {"step": 1, "step_time_s": 0.1, "rank": 1}`)
	assert.Len(t, sts, 2)
	assert.Empty(t, es)
	sts, es = c.Parse(`FSDPBENCH {"step": 3, "step_time_s": 0.1, "rank": 0}`)
	assert.Len(t, sts, 1)
	assert.Empty(t, es)
	sts, es = c.Parse(`FSDPBENCH {"step": 2, "step_time_s": 0.1, "rank": 0}FSDPBENCH {"step": 2, "step_time_s": 0.1, "rank": 1}FSDPBENCH {"step": 2, "step_time_s": 0.1, "rank": 2}`)
	require.Len(t, sts, 1)
	assert.Equal(t, 1, sts[0].Rank)
	require.Len(t, es, 2)
	assert.Contains(t, es[0].Error(), "rank 0 reported step 2 after step 3")
	assert.Contains(t, es[1].Error(), "rank is 2 but the run has 2 ranks (ranks 0 to 1)")

	// A broken record is still a broken record.
	_, es = c.Parse(`FSDPBENCH {"step": 4,, "step_time_s": 0.1}`)
	require.Len(t, es, 1)
	assert.Contains(t, es[0].Error(), "invalid character ','")
}

// TestStepLineWithoutStepTimeSaysMissing (issue 39, item 12): a step line
// without step_time_s said "step_time_s is 0", as if the script had measured 0.
func TestStepLineWithoutStepTimeSaysMissing(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`FSDPBENCH {"step": 1, "loss": 5.0}`, "step line: step_time_s is missing: give the step's time in seconds"},
		{`FSDPBENCH {"step": 1, "step_time_s": null}`, "step_time_s is missing"},
		{`FSDPBENCH {"loss": 5.0, "step_time_s": 0.1}`, "step line: step is missing: give the measured step's number, from 1"},
	} {
		_, ok, err := ParseStepLine(tc.line)
		assert.False(t, ok, tc.line)
		require.Error(t, err, tc.line)
		assert.Contains(t, err.Error(), tc.want, tc.line)
		assert.NotContains(t, err.Error(), "is 0", tc.line)
		assert.True(t, strings.HasSuffix(err.Error(), `"`+strings.ReplaceAll(tc.line, `"`, `\"`)+`"`), "the error quotes the line: %v", err)
	}
}

// TestRankFileWithoutStepTimeSaysMissing (issue 39, item 12): a rank file's
// step without step_time_s says it is missing, as a step line does; one that
// gives 0 still says 0.
func TestRankFileWithoutStepTimeSaysMissing(t *testing.T) {
	rc := sweeps.RunConfig{WorldSize: 1, Steps: 2, GlobalBatch: 2, SeqLen: 8}
	for _, tc := range []struct{ body, want string }{
		{`{"rank": 0, "steps": [{"step": 1, "step_time_s": 0.5}, {"step": 2, "loss": 2.0}]}`, "steps[1].step_time_s is missing: each step gives its time in seconds"},
		{`{"rank": 0, "steps": [{"step": 1, "step_time_s": 0.5}, {"step": 2, "step_time_s": null}]}`, "steps[1].step_time_s is missing"},
		{`{"rank": 0, "steps": [{"step": 1, "step_time_s": 0.5}, {"step": 2, "step_time_s": 0}]}`, "steps[1].step_time_s is 0; a time must be"},
	} {
		dir := t.TempDir()
		path := writeRank(t, dir, 0, tc.body)
		var res results.Result
		err := ReadRanks(&res, rc, dir, "test")
		require.Error(t, err, tc.body)
		assert.Contains(t, err.Error(), "test: rank 0's report "+path+": "+tc.want, tc.body)
	}
}
