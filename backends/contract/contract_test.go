package contract

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

func TestReadRanks(t *testing.T) {
	dir := t.TempDir()
	rc := sweeps.RunConfig{WorldSize: 2, Steps: 2, GlobalBatch: 4, SeqLen: 8}
	loss := 2.5
	for r, wall := range []float64{1.0, 1.5} {
		f := RankFile{Rank: r, Tokens: 16, MeasuredWallS: wall, Device: "cpu", Torch: "1.13",
			Steps:                 []results.Step{{Step: 1, StepTimeS: wall / 2}, {Step: 2, StepTimeS: wall / 2, Loss: &loss}},
			PeakMemAllocatedBytes: results.I64(int64(100 * (r + 1)))}
		data, err := json.Marshal(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "rank-"+string(rune('0'+r))+".json"), data, 0o644))
	}
	has, err := HasRankFiles(dir)
	require.NoError(t, err)
	assert.True(t, has)
	var res results.Result
	require.NoError(t, ReadRanks(&res, rc, dir, "test"))
	assert.Equal(t, 1.5, res.MeasuredWallS, "the slowest rank's wall time")
	assert.Equal(t, 0.75, res.Steps[0].StepTimeS, "each step as the slowest rank saw it")
	assert.Equal(t, int64(32), res.Steps[0].Tokens, "the global batch's tokens")
	assert.Equal(t, int64(200), *res.PeakMemAllocatedBytes, "the highest rank's peak")
	require.Len(t, res.PerRank, 2)
	assert.Equal(t, "cpu", res.Env.Hardware)

	rc.Steps = 3
	assert.ErrorContains(t, ReadRanks(&res, rc, dir, "test"), "test: rank 0's report "+filepath.Join(dir, "rank-0.json")+": steps holds 2 measured steps, want 3")
	rc.Steps, rc.WorldSize = 2, 3
	assert.ErrorContains(t, ReadRanks(&res, rc, dir, "test"), "rank 2 exited cleanly but its report is missing")
}

func TestParseStepLine(t *testing.T) {
	st, ok, err := ParseStepLine(`[0]:FSDPBENCH {"step": 3, "loss": 1.5, "step_time_s": 0.2, "rank": 0}`)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, 3, st.Step.Step)
	assert.Equal(t, 0.2, st.StepTimeS)
	assert.Empty(t, st.Diverged)

	for _, other := range []string{"iter 1: loss 2", "FSDPBENCH done", "no FSDPBENCH_METRICS_DIR set", ""} {
		_, ok, err := ParseStepLine(other)
		assert.False(t, ok, other)
		assert.NoError(t, err, "%q is no step line", other)
	}

	// A NaN loss (Python's json.dumps of a diverged run) is a result, not an error.
	st, ok, err = ParseStepLine(`FSDPBENCH {"step": 4, "loss": NaN, "step_time_s": 0.2, "rank": 0}`)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Nil(t, st.Loss)
	assert.Equal(t, "loss is NaN at step 4 (rank 0's step line, step line:1:31)", st.Diverged)
	st, ok, err = ParseStepLine(`FSDPBENCH {"step": 4, "loss": -Infinity, "step_time_s": 0.2}`)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Contains(t, st.Diverged, "loss is -Inf at step 4")
}

// TestParseStepLinesReadsRanksThatShareALine: the ranks share the launcher's
// stdout and Python's print writes the text and the newline apart, so two ranks
// printing at once give one line with both records (CI read this line and
// dropped both steps as a broken line), and a record can be followed by another
// rank's text.
func TestParseStepLinesReadsRanksThatShareALine(t *testing.T) {
	sts, errs := ParseStepLines(`FSDPBENCH {"step": 1, "loss": 5.0, "step_time_s": 0.1, "rank": 0}FSDPBENCH {"step": 1, "loss": 5.0, "step_time_s": 0.1, "rank": 1}`)
	require.Empty(t, errs)
	require.Len(t, sts, 2)
	assert.Equal(t, []int{0, 1}, []int{sts[0].Rank, sts[1].Rank})
	assert.Equal(t, 1, sts[1].Step.Step)

	sts, errs = ParseStepLines(`[0]:FSDPBENCH {"step": 2, "step_time_s": 0.25}iter 7: loss 2.1 FSDPBENCH done`)
	require.Empty(t, errs)
	require.Len(t, sts, 1, "the other rank's text after the record is no part of it")
	assert.Equal(t, 0.25, sts[0].StepTimeS)
	st, ok, err := ParseStepLine(`FSDPBENCH {"step": 2, "step_time_s": 0.25} and more`)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, 2, st.Step.Step)

	// A broken record among good ones fails alone, and says where in the whole line.
	sts, errs = ParseStepLines(`FSDPBENCH {"step": 3, "step_time_s": 0.1}FSDPBENCH {"step": 0, "step_time_s": 0.1}FSDPBENCH {"step": 4,, "step_time_s": 0.1}`)
	require.Len(t, sts, 1)
	assert.Equal(t, 3, sts[0].Step.Step)
	require.Len(t, errs, 2)
	assert.Contains(t, errs[0].Error(), "step is 0")
	assert.Contains(t, errs[1].Error(), "step line:1:104: invalid character ','")

	sts, errs = ParseStepLines("no step here")
	assert.Empty(t, sts)
	assert.Empty(t, errs)

	// A line as long as a line may be, all records, is read record by record
	// (each record reading the whole line made this one 27,000 reads of 1 MiB).
	rec := `FSDPBENCH {"step": 1, "step_time_s": 1}`
	long := strings.Repeat(rec, MaxLineBytes/len(rec))
	sts, errs = ParseStepLines(long)
	assert.Empty(t, errs)
	assert.Len(t, sts, MaxLineBytes/len(rec))
}

// TestParseStepLineRefusesBrokenLines: a step line that is broken says where and
// why (it used to be dropped without a word, or taken with a negative step time).
func TestParseStepLineRefusesBrokenLines(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`FSDPBENCH {`, "step line:1:11: unexpected end of JSON input"},
		{`[1]:FSDPBENCH {"step": 1, "loss": 2,, "step_time_s": 1}`, "step line:1:37: invalid character ','"},
		{`FSDPBENCH {"step": 0, "step_time_s": 0.1}`, "step is 0; measured steps count from 1"},
		{`FSDPBENCH {"step": "one"}`, "step line:1:20: step must be a whole number, got a JSON string"},
		{`FSDPBENCH {"step": 1, "step_time_s": -0.5}`, "step_time_s is -0.5; a time must be a number of seconds from 1e-09 to"},
		{`FSDPBENCH {"step": 1, "step_time_s": 0}`, "step_time_s is 0; a time must be a number of seconds from 1e-09 to"},
		{`FSDPBENCH {"step": 1, "step_time_s": 1e300}`, "step_time_s is 1e+300; a time must be a number of seconds from 1e-09 to 1e+06"},
		{`FSDPBENCH {"step": 1, "step_time_s": NaN}`, "step line:1:38: step_time_s is NaN; it must be a finite number"},
		{`FSDPBENCH {"step": 1, "step_time_s": 0.1, "tokens": -5}`, "tokens is -5"},
		{`FSDPBENCH {"step": 1, "step_time_s": 0.1, "rank": -1}`, "rank is -1"},
	} {
		_, ok, err := ParseStepLine(tc.line)
		assert.False(t, ok, tc.line)
		require.Error(t, err, tc.line)
		assert.Contains(t, err.Error(), tc.want, tc.line)
		assert.Contains(t, err.Error(), `"`+tc.line[:9], "the error quotes the line")
	}
}

// writeRank writes a rank file as a script would, verbatim.
func writeRank(t *testing.T, dir string, r int, body string) string {
	t.Helper()
	path := filepath.Join(dir, "rank-"+string(rune('0'+r))+".json")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	return path
}

// TestReadRanksRefusesBadFigures: every figure of a rank file is checked where it
// enters, and the error names the file, the position and the field.
func TestReadRanksRefusesBadFigures(t *testing.T) {
	rc := sweeps.RunConfig{WorldSize: 1, Steps: 2, GlobalBatch: 4, SeqLen: 8}
	good := `"steps": [{"step": 1, "step_time_s": 0.5}, {"step": 2, "step_time_s": 0.5}]`
	for _, tc := range []struct{ name, body, want string }{
		{"negative step time", `{"rank": 0, "tokens": 8, "measured_wall_s": 1,
"steps": [{"step": 1, "step_time_s": -0.5}, {"step": 2, "step_time_s": 0.5}]}`, "rank-0.json: steps[0].step_time_s is -0.5; a time must be a number of seconds from 1e-09 to"},
		{"zero step time", `{"rank": 0, "steps": [{"step": 1, "step_time_s": 0.5}, {"step": 2, "step_time_s": 0}]}`, "steps[1].step_time_s is 0"},
		{"NaN step time", "{\"rank\": 0,\n \"steps\": [{\"step\": 1, \"step_time_s\": NaN}, {\"step\": 2, \"step_time_s\": 0.5}]}",
			"rank-0.json:2:39: steps[0].step_time_s is NaN; it must be a finite number"},
		{"Infinity wall", `{"rank": 0, "measured_wall_s": Infinity, ` + good + `}`, "rank-0.json:1:32: measured_wall_s is +Inf"},
		{"negative wall", `{"rank": 0, "measured_wall_s": -3, ` + good + `}`, "measured_wall_s is -3"},
		{"negative tokens", `{"rank": 0, "tokens": -8, ` + good + `}`, "tokens is -8"},
		{"negative peak", `{"rank": 0, "peak_mem_allocated_bytes": -1, ` + good + `}`, "peak_mem_allocated_bytes is -1"},
		{"absurd flops", `{"rank": 0, "model_flops_per_token": 1e30, ` + good + `}`, "model_flops_per_token is 1e+30"},
		{"another world", `{"rank": 0, "world_size": 8, ` + good + `}`, "world_size is 8 but the run has 1 ranks"},
		{"another rank", `{"rank": 3, ` + good + `}`, "rank is 3, but the file is rank 0's"},
		{"3,000,000 steps is not 2", `{"rank": 0, "steps": [` + strings.Repeat(`{"step": 1, "step_time_s": 0.1},`, 50) + `{"step": 1, "step_time_s": 0.1}]}`, "steps holds 51 measured steps, want 2"},
		{"a host name of a megabyte", `{"rank": 0, "host": "` + strings.Repeat("h", 1<<20) + `", ` + good + `}`, "host is 1048576 bytes long; a name holds at most 256"},
		{"type error", "{\"rank\": 0,\n  \"tokens\": \"many\"}", "rank-0.json:2:13: tokens must be a whole number, got a JSON string"},
		{"syntax error", "{\"rank\": 0,\n  \"tokens\": 8,,}", "rank-0.json:2:15: invalid character ','"},
		{"not JSON", "\x00\x01garbage", "rank-0.json:1:1: invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeRank(t, dir, 0, tc.body)
			var res results.Result
			err := ReadRanks(&res, rc, dir, "test")
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), "test: rank 0's report "+dir)
		})
	}
}

// TestReadRanksDiverged: a loss that is NaN or infinite, as Python's json.dump
// writes it, makes the run diverged with the loss shown and placed; it used to
// fail with "invalid character 'N'" and no position.
func TestReadRanksDiverged(t *testing.T) {
	dir := t.TempDir()
	rc := sweeps.RunConfig{WorldSize: 2, Steps: 3, GlobalBatch: 4, SeqLen: 8}
	steps := func(l2, l3 string) string {
		return `"steps": [{"step": 1, "loss": 2.5, "step_time_s": 0.1}, {"step": 2, "loss": ` + l2 +
			`, "step_time_s": 0.1},` + "\n" + ` {"step": 3, "loss": ` + l3 + `, "step_time_s": 0.1}]`
	}
	writeRank(t, dir, 0, `{"rank": 0, "tokens": 12, "measured_wall_s": 0.3, `+steps("2.25", "NaN")+`}`)
	p1 := writeRank(t, dir, 1, `{"rank": 1, "tokens": 12, "measured_wall_s": 0.3, `+steps("Infinity", "NaN")+`}`)
	var res results.Result
	require.NoError(t, ReadRanks(&res, rc, dir, "test"))
	assert.Equal(t, results.StatusDiverged, res.Status)
	assert.Equal(t, "diverged: rank 1's loss is +Inf at measured step 2 of 3 (steps[1].loss, "+p1+":1:127); the last finite loss was 2.5 at step 1", res.Error)
	require.Len(t, res.Steps, 3)
	assert.Nil(t, res.Steps[2].Loss, "NaN cannot be stored in JSON: the loss is unknown, the error says it")
	require.NotNil(t, res.Steps[1].Loss)
	assert.Equal(t, 2.25, *res.Steps[1].Loss)
	assert.Nil(t, res.PerRank[0].LossLast)
	_, err := json.Marshal(res)
	assert.NoError(t, err, "the result must be storable")
}

func TestDecodeJSON(t *testing.T) {
	var v map[string]any
	bad, err := DecodeJSON("f.json", []byte(`{"a": "NaN and -Infinity stay text", "b": [1, NaN, {"c": -Infinity}], "d\"NaN": Infinity}`), &v)
	require.NoError(t, err)
	assert.Equal(t, "NaN and -Infinity stay text", v["a"])
	require.Len(t, bad, 3)
	assert.Equal(t, "b[1]", bad[0].Field)
	assert.True(t, math.IsNaN(bad[0].Value))
	assert.Equal(t, "f.json:1:47", bad[0].Pos)
	assert.Equal(t, "b[2].c", bad[1].Field)
	assert.Equal(t, math.Inf(-1), bad[1].Value)
	assert.Equal(t, `d"NaN`, bad[2].Field)
	assert.Equal(t, math.Inf(1), bad[2].Value)

	bad, err = DecodeJSON("f.json", []byte(`NaN`), &v)
	require.Error(t, err, "a NaN where an object belongs is a type error")
	assert.Empty(t, bad)
	var x float64
	bad, err = DecodeJSON("f.json", []byte(` NaN `), &x)
	require.NoError(t, err)
	require.Len(t, bad, 1)
	assert.Equal(t, ".", bad[0].Field)
	assert.Equal(t, "f.json:1:2", bad[0].Pos)
	_, err = DecodeJSON("f.json", []byte("[1,\n NaNa]"), &v)
	assert.ErrorContains(t, err, "f.json:2:2: invalid character 'N'")
}

func TestVisibleDevices(t *testing.T) {
	assert.Equal(t, "0,1", VisibleDevices([]int{0, 1}, ""))
	assert.Equal(t, "2,3", VisibleDevices([]int{0, 1}, "2,3"), "fsdpbench's own device 0 is physical GPU 2")
	assert.Equal(t, "GPU-abc,GPU-def", VisibleDevices([]int{1, 2}, "GPU-xyz, GPU-abc,GPU-def"))
}
