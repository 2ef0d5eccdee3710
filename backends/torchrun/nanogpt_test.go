package torchrun

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// nanoGPTExample is the example spec that runs nanoGPT's train.py.
const nanoGPTExample = "../../sweeps/examples/nanogpt-cpu.yaml"

// metaPickle is pickle.dumps({'vocab_size': 65}, protocol=2): nanoGPT's
// data/shakespeare_char/meta.pkl as its prepare.py writes it.
const metaPickle = "\x80\x02}q\x00X\n\x00\x00\x00vocab_sizeq\x01KAs."

// writeNanoGPT lays out a nanoGPT checkout in a new directory, as a user has it
// after `python data/shakespeare_char/prepare.py`: the fixture's train.py and
// configurator.py (testdata/nanogpt: the same command line and output as
// karpathy/nanoGPT's, which CI cannot fetch) and data/shakespeare_char/ with
// train.bin, val.bin (uint16 tokens below 65) and meta.pkl. It returns the
// path of train.py.
func writeNanoGPT(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nanoGPT")
	data := filepath.Join(dir, "data", "shakespeare_char")
	require.NoError(t, os.MkdirAll(data, 0o755))
	for _, f := range []string{"train.py", "configurator.py"} {
		src, err := os.ReadFile(filepath.Join("testdata", "nanogpt", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), src, 0o644))
	}
	for split, n := range map[string]int{"train": 20000, "val": 2000} {
		buf := make([]byte, 2*n)
		for i := range n {
			binary.LittleEndian.PutUint16(buf[2*i:], uint16((i*i+7*i)%65)) // a learnable, fixed sequence
		}
		require.NoError(t, os.WriteFile(filepath.Join(data, split+".bin"), buf, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(data, "meta.pkl"), []byte(metaPickle), 0o644))
	return filepath.Join(dir, "train.py")
}

// runOne validates and runs rc, and returns its result and stderr.
func runOne(t *testing.T, rc sweeps.RunConfig) (results.Result, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	b := New()
	require.NoError(t, b.Validate(ctx, rc))
	var stderr strings.Builder
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, nil)
	require.NoError(t, err)
	return res, stderr.String()
}

// nanoGPTArgs are the example's flags for a tiny model, with max_iters and the
// accumulation as given.
func nanoGPTArgs(maxIters, accum string, extra ...string) []any {
	args := []any{"--device=cpu", "--compile=False", "--dataset=shakespeare_char", "--out_dir={output_dir}/out",
		"--eval_iters=2", "--n_layer=1", "--n_embd=32", "--batch_size={batch_per_device}", "--block_size={seq_len}",
		"--gradient_accumulation_steps=" + accum, "--max_iters=" + maxIters}
	for _, e := range extra {
		args = append(args, e)
	}
	return args
}

// nanoGPTRC is a one-process run of the fixture at script.
func nanoGPTRC(script string, opts map[string]any) sweeps.RunConfig {
	rc := runConfig(1, sweeps.DDP)
	rc.Steps, rc.WarmupSteps, rc.SeqLen, rc.BatchPerDevice, rc.GlobalBatch = 3, 1, 16, 2, 2
	rc.BackendOptions = map[string]any{"launcher": LauncherPython, "script": script, "working_dir": "{script_dir}",
		"logs": map[string]any{"builtin": BuiltinIter}, "args": nanoGPTArgs("{last_iter}", "{grad_accum_global}")}
	for k, v := range opts {
		rc.BackendOptions[k] = v
	}
	rc.AssignID()
	return rc
}

// checkMetrics is the harness's check of a finished run (the one that failed
// nanoGPT's N+1 iterations with "steps_measured ... is not between").
func checkMetrics(t *testing.T, rc sweeps.RunConfig, res results.Result) results.Metrics {
	t.Helper()
	m := results.Normalize(rc, []results.Result{res})
	require.NoError(t, results.CheckMetrics(&rc, &m))
	return m
}

// TestNanoGPTExample runs every run of sweeps/examples/nanogpt-cpu.yaml against
// the nanoGPT fixture, as a user runs it against a clone: train.py in its own
// folder (working_dir), --key=value flags, {last_iter} iterations, the
// accumulation's global count, logs: iter. Each run must measure exactly its
// steps, with no warning, and the script's tokens per iteration must be the
// run's.
func TestNanoGPTExample(t *testing.T) {
	needTorch(t)
	script := writeNanoGPT(t)
	plan, err := sweeps.Load(nanoGPTExample, sweeps.Options{Set: []string{"backend_options.script=" + script}})
	require.NoError(t, err)
	require.NotEmpty(t, plan.Runs)
	for _, rc := range plan.Runs {
		t.Run(rc.ID, func(t *testing.T) {
			res, stderr := runOne(t, rc)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr)
			assert.Nil(t, res.Extra["warnings"], "stderr:\n%s", stderr)
			require.Len(t, res.Steps, rc.Steps)
			for _, st := range res.Steps {
				require.NotNil(t, st.Loss)
				assert.Equal(t, rc.TokensPerStep(), st.Tokens)
			}
			assert.Equal(t, rc.TokensPerStep(), res.Extra["script_tokens_per_step"], "nanoGPT's own count")
			checkMetrics(t, rc, res)
		})
	}
}

// TestNanoGPTIterations: nanoGPT runs iter 0 … iter max_iters, so
// --max_iters={total_steps} prints one line more than configured. The run is
// measured (the last steps), with a warning in its result that names
// {last_iter}; it used to fail the harness's check with "steps_measured 4 is
// not between 0 and the 3 steps configured". With {last_iter} there is none.
func TestNanoGPTIterations(t *testing.T) {
	needTorch(t)
	script := writeNanoGPT(t)
	for _, tt := range []struct {
		maxIters string
		warning  bool
	}{{"{total_steps}", true}, {"{last_iter}", false}} {
		t.Run(tt.maxIters, func(t *testing.T) {
			rc := nanoGPTRC(script, map[string]any{"args": nanoGPTArgs(tt.maxIters, "{grad_accum_global}")})
			res, stderr := runOne(t, rc)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr)
			require.Len(t, res.Steps, rc.Steps)
			checkMetrics(t, rc, res)
			if !tt.warning {
				assert.Nil(t, res.Extra["warnings"])
				return
			}
			w, _ := res.Extra["warnings"].([]string)
			require.Len(t, w, 1, "extra: %v", res.Extra)
			assert.Contains(t, w[0], "the log has 5 step times (after skip_steps 0) where warmup_steps 1 + steps 3 = 4 iterations were configured")
			assert.Contains(t, w[0], "--max_iters={last_iter}")
			assert.Contains(t, stderr, "fsdpbench: warning: the log has 5 step times")
		})
	}
}

// TestNanoGPTTokensPerIteration runs the fixture under torchrun on 2 ranks
// (DDP on gloo) with grad_accum 2: nanoGPT's gradient_accumulation_steps is the
// count of all ranks, so {grad_accum_global} trains the run's tokens, and
// {grad_accum} half of them, which its "tokens per iteration will be: N" line
// shows and the result must warn of.
func TestNanoGPTTokensPerIteration(t *testing.T) {
	needTorch(t)
	script := writeNanoGPT(t)
	for _, tt := range []struct {
		accum   string
		printed int64
	}{{"{grad_accum_global}", 128}, {"{grad_accum}", 64}} {
		t.Run(tt.accum, func(t *testing.T) {
			rc := runConfig(2, sweeps.DDP)
			rc.Steps, rc.WarmupSteps, rc.SeqLen, rc.BatchPerDevice, rc.GradAccum, rc.GlobalBatch = 2, 1, 16, 2, 2, 8
			rc.BackendOptions = map[string]any{"script": script, "working_dir": "{script_dir}", "logs": map[string]any{"builtin": "iter"},
				"args": nanoGPTArgs("{last_iter}", tt.accum, "--backend=gloo")}
			rc.AssignID()
			res, stderr := runOne(t, rc)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr)
			assert.Equal(t, tt.printed, res.Extra["script_tokens_per_step"])
			if tt.printed == rc.TokensPerStep() {
				assert.Nil(t, res.Extra["warnings"])
				return
			}
			w, _ := res.Extra["warnings"].([]string)
			require.Len(t, w, 1, "extra: %v", res.Extra)
			assert.Contains(t, w[0], `the script printed "tokens per iteration will be: 64" but the run's step is 128 tokens`)
			assert.Contains(t, w[0], "--gradient_accumulation_steps={grad_accum_global}")
		})
	}
}

// TestNanoGPTWorkingDir: train.py reads configurator.py and data/ from the
// directory it runs in. By default that is the run's output directory, where
// they are not, and the run fails saying which file was missing; working_dir
// "{script_dir}" runs it in its own folder; a working_dir that does not exist
// is refused before anything runs.
func TestNanoGPTWorkingDir(t *testing.T) {
	needTorch(t)
	script := writeNanoGPT(t)
	rc := nanoGPTRC(script, nil)
	delete(rc.BackendOptions, "working_dir")
	res, _ := runOne(t, rc)
	assert.Equal(t, results.StatusFailed, res.Status)
	assert.Contains(t, res.Error, "FileNotFoundError")
	assert.Contains(t, res.Error, "configurator.py")

	// The default is unchanged: the run's output/ directory.
	probe := filepath.Join(t.TempDir(), "cwd.py")
	require.NoError(t, os.WriteFile(probe, []byte("import os\nopen('cwd.txt', 'w').write(os.getcwd())\n"), 0o644))
	rc = nanoGPTRC(probe, map[string]any{"args": []any{}})
	delete(rc.BackendOptions, "working_dir")
	runDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	_, err := New().Run(ctx, rc, backends.RunEnv{RunDir: runDir}, nil)
	require.NoError(t, err)
	cwd, err := os.ReadFile(filepath.Join(runDir, "output", "cwd.txt"))
	require.NoError(t, err, "the script ran in the run's output/ directory")
	assert.Equal(t, filepath.Join(runDir, "output"), string(cwd))

	rc = nanoGPTRC(script, map[string]any{"working_dir": filepath.Dir(script)})
	res, stderr := runOne(t, rc)
	require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr)

	rc = nanoGPTRC(script, map[string]any{"working_dir": filepath.Join(filepath.Dir(script), "nope")})
	err = New().Validate(context.Background(), rc)
	require.Error(t, err)
	assert.True(t, backends.IsSpecError(err), "%v", err)
	assert.Contains(t, err.Error(), "backend_options.working_dir")
	assert.Contains(t, err.Error(), "no such file or directory")
}

// TestFailureSaysWhy: a failed run's error says what went wrong when the last
// stderr line is no "Error: message" line: nanoGPT's configurator asserting on
// "--batch_size 4" (a bare AssertionError, with where it was raised and how to
// write the arguments), a script that prints no error line (its last lines),
// and a command whose program does not exist (refused before it runs).
func TestFailureSaysWhy(t *testing.T) {
	needTorch(t)
	script := writeNanoGPT(t)
	t.Run("configurator", func(t *testing.T) {
		rc := nanoGPTRC(script, map[string]any{"args": []any{"--device=cpu", "--batch_size", "{batch_per_device}"}})
		res, _ := runOne(t, rc)
		assert.Equal(t, results.StatusFailed, res.Status)
		assert.Contains(t, res.Error, "AssertionError, raised at File ")
		assert.Contains(t, res.Error, "configurator.py")
		assert.Contains(t, res.Error, `backend_options.args has "--batch_size", "{batch_per_device}" as two arguments; write "--batch_size={batch_per_device}"`)
	})
	t.Run("no error line", func(t *testing.T) {
		quiet := filepath.Join(t.TempDir(), "quiet.py")
		require.NoError(t, os.WriteFile(quiet, []byte("import sys\nprint('loading data', file=sys.stderr)\nprint('data/train.bin missing, giving up', file=sys.stderr)\nsys.exit(2)\n"), 0o644))
		rc := nanoGPTRC(quiet, map[string]any{"args": []any{}})
		res, _ := runOne(t, rc)
		assert.Equal(t, results.StatusFailed, res.Status)
		assert.Contains(t, res.Error, "no error line on stderr; it ended with: loading data | data/train.bin missing, giving up")
	})
	t.Run("missing program", func(t *testing.T) {
		for _, prog := range []string{"fsdpbench-no-such-launcher", "./no/such/launcher.sh"} {
			rc := nanoGPTRC(script, map[string]any{"launcher": LauncherCommand, "command": []any{prog, "{script}", "{script_args}"}})
			err := New().Validate(context.Background(), rc)
			require.Error(t, err, prog)
			assert.True(t, backends.IsSpecError(err), "%v", err)
			assert.Contains(t, err.Error(), `backend_options.command: cannot run "`+prog+`"`)
		}
	})
}

// TestLogsShorthand: backend_options.logs: iter is {builtin: iter}; anything
// else that is not a mapping says what is accepted.
func TestLogsShorthand(t *testing.T) {
	o, err := ParseOptions(map[string]any{"logs": "iter"})
	require.NoError(t, err)
	require.NotNil(t, o.Logs)
	assert.Equal(t, BuiltinIter, o.Logs.Builtin)
	_, err = ParseOptions(map[string]any{"logs": 3})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "must be iter or hf_trainer (shorthand of {builtin: NAME})")
	_, err = ParseOptions(map[string]any{"logs": "nanogpt"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `unknown extractor "nanogpt"`)
}
