package torchrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestLegacyMetricsFileFigures: a metrics.json of the existing scripts' kind is
// read with Python's bare NaN/Infinity, and every figure is checked where it
// enters, with the file, position and key named.
func TestLegacyMetricsFileFigures(t *testing.T) {
	rc := runConfig(2, sweeps.DDP)
	for _, tc := range []struct{ name, body, want string }{
		{"NaN wall", "{\"world_size\": 2,\n \"wall_time_s\": NaN, \"approx_tokens_per_rank\": 5120}", "metrics.json:2:17: wall_time_s is NaN; it must be a finite number"},
		{"negative wall", `{"wall_time_s": -4.7, "approx_tokens_per_rank": 5120}`, "wall_time_s is -4.7; it must be in [0, 1e+07]"},
		{"zero wall", `{"wall_time_s": 0, "approx_tokens_per_rank": 5120}`, "wall_time_s is 0; a time must be a number of seconds from 1e-09 to 1e+07; a throughput needs a positive wall time"},
		{"absurd tokens", `{"wall_time_s": 4.7, "approx_tokens_per_rank": 1e300}`, "approx_tokens_per_rank is 1e+300"},
		{"tokens as text", `{"wall_time_s": 4.7, "approx_tokens_per_rank": "5120"}`, "approx_tokens_per_rank must be a number, got 5120"},
		{"fractional world", `{"wall_time_s": 4.7, "approx_tokens_per_rank": 5120, "world_size": 2.5}`, "world_size is 2.5 but the run has 2 ranks"},
		{"not an object", `[1, 2]`, "metrics.json:1:1: the value must be an object, got a JSON array"},
		{"syntax", "{\"wall_time_s\": 4.7,\n\"x\": }", "metrics.json:2:6: invalid character '}'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "metrics.json")
			require.NoError(t, os.WriteFile(path, []byte(tc.body), 0o644))
			_, err := LegacyResult(rc, path, false, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}

	// Non-finite values in the script's own keys are kept as Python wrote them.
	path := filepath.Join(t.TempDir(), "metrics.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"wall_time_s": 4.7, "approx_tokens_per_rank": 5120, "final_loss": NaN, "hist": {"max": Infinity}}`), 0o644))
	res, err := LegacyResult(rc, path, false, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOK, res.Status)
	assert.Equal(t, "NaN", res.Extra["final_loss"])
	assert.Equal(t, []string{"hist.max=+Inf"}, res.Extra["non_finite"])
}

// logReport feeds lines to a Report as a run's stdout.
func logReport(t *testing.T, opts map[string]any, lines ...string) (*Report, Options) {
	t.Helper()
	o, err := ParseOptions(opts)
	require.NoError(t, err)
	rep := &Report{logs: o.Logs}
	for _, l := range lines {
		rep.Stdout(l)
	}
	return rep, o
}

// finish collects a finished run's report as the backend does, in a fresh run
// directory that holds no rank files or metrics.json.
func finish(t *testing.T, rc sweeps.RunConfig, o Options, rep *Report) results.Result {
	t.Helper()
	dir := t.TempDir()
	j := &Job{rc: rc, o: o, script: "train.py", Paths: contract.Paths{RunDir: dir, MetricsDir: filepath.Join(dir, "ranks"), OutputDir: filepath.Join(dir, "output")}}
	require.NoError(t, os.MkdirAll(j.Paths.OutputDir, 0o755))
	var res results.Result
	j.Finish(&res, rep, nil, func(string) {})
	return res
}

// TestLogFiguresAreChecked: figures read by log extractors and from FSDPBENCH
// lines are checked as they enter; a NaN loss makes the run diverged.
func TestLogFiguresAreChecked(t *testing.T) {
	rc := runConfig(1, sweeps.DDP)
	rc.Steps = 3
	timeRegex := map[string]any{"metrics": map[string]any{"step_time": map[string]any{"regex": `time (?P<ms>-?[0-9.]+)ms`, "unit": "ms"}}}

	rep, o := logReport(t, map[string]any{"logs": timeRegex}, "step 1 time 40ms", "step 2 time -40ms")
	res := finish(t, rc, o, rep)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, `backend_options.logs step_time: group "ms" matched "-40" in line "step 2 time -40ms": step_time_s is -0.04; a time must be a number of seconds from 1e-09 to`)

	rep, o = logReport(t, map[string]any{"logs": map[string]any{"builtin": "hf_trainer"}},
		"{'loss': 2.5, 'epoch': 0.1}", "{'loss': nan, 'epoch': 0.2}",
		"{'train_runtime': 2.0, 'train_samples_per_second': 8.0, 'epoch': 1.0}")
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusDiverged, res.Status, res.Error)
	assert.Equal(t, "diverged: the loss read from the log is NaN at its 2. reading of 2 (backend_options.logs)", res.Error)

	rep, o = logReport(t, map[string]any{"logs": map[string]any{"builtin": "hf_trainer"}},
		"{'train_runtime': 2.0, 'train_samples_per_second': 1e308, 'epoch': 1.0}")
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "train_samples_per_second 1e+308 x seq_len 16")

	// FSDPBENCH lines alone.
	rep, o = logReport(t, nil, `FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": 0.5}`, `FSDPBENCH {"step": 2, "loss": NaN, "step_time_s": 0.5}`)
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusDiverged, res.Status, res.Error)
	assert.Equal(t, "diverged: loss is NaN at step 2 (rank 0's step line, step line:1:31)", res.Error)

	rep, o = logReport(t, nil, `FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": -0.5}`)
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "torchrun: the script printed a broken FSDPBENCH line: step line: step_time_s is -0.5; a time must be a number of seconds from 1e-09 to")

	var lines []string
	for s := 1; s <= 5; s++ {
		lines = append(lines, fmt.Sprintf(`FSDPBENCH {"step": %d, "loss": 2.5, "step_time_s": 0.5}`, s))
	}
	rep, o = logReport(t, nil, lines...)
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "printed 5 FSDPBENCH step lines but the run measures 3 steps")

	rep, o = logReport(t, nil, `FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": 0.5}`, `FSDPBENCH {"step": 2, "loss": 2.4, "step_time_s": 0.25}`)
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.InDelta(t, 0.75, res.MeasuredWallS, 1e-12)

	// Rank 1's text written between rank 0's record and its newline (print
	// writes them apart) leaves the step whole.
	rep, o = logReport(t, nil, `FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": 0.5}rank 1: warming up`, "",
		`FSDPBENCH {"step": 2, "loss": 2.4, "step_time_s": 0.25}`)
	res = finish(t, rc, o, rep)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Len(t, res.Steps, 2)
	assert.InDelta(t, 0.75, res.MeasuredWallS, 1e-12)
}

// TestStepLinesRepeatedOrOutsideTheWorldFailTheRun (issue 39, item 4): the
// same step line printed five times, or five steps of rank 99 in a world of 1,
// were five good steps; the run now fails with the first broken line, saying
// which rank and step, and a run's own lines still read as before.
func TestStepLinesRepeatedOrOutsideTheWorldFailTheRun(t *testing.T) {
	rc := runConfig(1, sweeps.DDP)
	rc.Steps = 5
	o, err := ParseOptions(nil)
	require.NoError(t, err)
	feed := func(lines ...string) results.Result {
		rep := (&Job{rc: rc, o: o}).NewReport()
		for _, l := range lines {
			rep.Stdout(l)
		}
		return finish(t, rc, o, rep)
	}
	var same, rank99, good []string
	for s := 1; s <= 5; s++ {
		same = append(same, `FSDPBENCH {"step": 1, "loss": 2.5, "step_time_s": 0.5}`)
		rank99 = append(rank99, fmt.Sprintf(`FSDPBENCH {"step": %d, "loss": 2.5, "step_time_s": 0.5, "rank": 99}`, s))
		good = append(good, fmt.Sprintf(`[0]:FSDPBENCH {"step": %d, "loss": 2.5, "step_time_s": 0.5, "rank": 0}`, s))
	}
	res := feed(same...)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "torchrun: the script printed a broken FSDPBENCH line: step line: rank 0 reported step 1 twice: each measured step is reported once")
	res = feed(rank99...)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "torchrun: the script printed a broken FSDPBENCH line: step line: rank is 99 but the run has 1 rank (ranks 0 to 0)")
	res = feed(good...)
	assert.Equal(t, results.StatusOK, res.Status, res.Error)
	assert.Len(t, res.Steps, 5)
}

// TestReportReadsTorch2Prefixes: torch 2.x's --tee writes "[default0]:" before
// each line of local rank 0 and the rank's traceback lines carry "[rank0]: " as
// well; the exception is still the reason (an H100 run once failed with "no
// error line on stderr" because of this).
func TestReportReadsTorch2Prefixes(t *testing.T) {
	for _, tc := range []struct {
		lines []string
		want  string
	}{
		{[]string{
			`[default0]:[rank0]: Traceback (most recent call last):`,
			`[default0]:[rank0]:   File "fsdpbench_train.py", line 181, in attention`,
			`[default0]:[rank0]: RuntimeError: expected self and mask to be on the same device, but got mask on cpu and self on cuda:0`,
			`torch.distributed.elastic.multiprocessing.errors.ChildFailedError: `,
		}, "RuntimeError: expected self and mask to be on the same device, but got mask on cpu and self on cuda:0"},
		{[]string{`[1]:ValueError: bad batch`}, "ValueError: bad batch"},
		{[]string{`[not a prefix because it has spaces]: KeyError: x`}, "no error line on stderr; it ended with: [not a prefix because it has spaces]: KeyError: x"},
		// A bare assert: the exception has no message, so where it was raised is
		// the reason; rank 1's interleaved lines are not rank 0's traceback.
		{[]string{
			`[0]:Traceback (most recent call last):`,
			`[1]:Traceback (most recent call last):`,
			`[0]:  File "train.py", line 9, in <module>`,
			`[1]:  File "other.py", line 3, in <module>`,
			`[0]:    assert world % 2 == 0`,
			`[0]:AssertionError`,
			`torch.distributed.elastic.multiprocessing.errors.ChildFailedError: `,
		}, `AssertionError, raised at File "train.py", line 9, in <module> | assert world % 2 == 0`},
		// A rank that exits with sys.exit("message") under torchrun: the ranks'
		// own last lines, not torchrun's summary.
		{[]string{
			`WARNING:__main__:`,
			`[default0]:loading`,
			`[default0]:data/train.bin not found`,
			`[default1]:loading`,
			`ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 7358) of binary: /usr/bin/python3`,
			`  File "/usr/lib/python3/dist-packages/torch/distributed/launcher/api.py", line 246, in launch_agent`,
			`torch.distributed.elastic.multiprocessing.errors.ChildFailedError: `,
			`[0]:`,
			`  exitcode  : 1 (pid: 6783)`,
		}, "no error line on stderr; the ranks' last lines: [default0]:loading | [default0]:data/train.bin not found | [default1]:loading"},
		// A line is quoted up to 300 bytes, cut at a rune.
		{[]string{strings.Repeat("é", 400)}, "no error line on stderr; it ended with: " + strings.Repeat("é", 150) + "…"},
	} {
		rep := &Report{}
		for _, l := range tc.lines {
			rep.Stderr(l)
		}
		rep.mu.Lock()
		got := rep.reason()
		rep.mu.Unlock()
		assert.Equal(t, tc.want, got, "%q", tc.lines)
	}
}
