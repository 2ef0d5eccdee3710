package torchrun

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// nanoGPTLike is the fixture that behaves like nanoGPT's train.py in its
// single-process mode (testdata/nanogpt_like.py says how).
const nanoGPTLike = "testdata/nanogpt_like.py"

// nanoGPTRun is a one-rank run of the fixture, with its flags mapped from the
// run's axes and its figures read by the iter extractor.
func nanoGPTRun(launcher string, command []any) sweeps.RunConfig {
	rc := runConfig(1, sweeps.DDP)
	rc.Steps, rc.WarmupSteps = 8, 0
	rc.BackendOptions = map[string]any{
		"launcher": launcher,
		"script":   nanoGPTLike,
		"args": []any{"--device=cpu", "--max_iters={total_steps}", "--batch_size={batch_per_device}",
			"--block_size={seq_len}", "--seed={seed}", "--out_dir={output_dir}/out"},
		"logs": map[string]any{"builtin": "iter"},
	}
	if command != nil {
		rc.BackendOptions["command"] = command
	}
	return rc
}

// iterLine is nanoGPT's iteration line, parsed here on its own so the test does
// not check the extractor against itself.
var iterLine = regexp.MustCompile(`^iter (\d+): loss ([0-9.]+), time ([0-9.]+)ms, mfu (-?[0-9.]+)%$`)

// TestLaunchersReadNanoGPTLines runs the nanoGPT-like fixture through launcher
// python and launcher command, and requires the figures of the result to be
// those of its log lines: one step per iter line, its loss and time, and the
// median of its mfu (the -100% of the first iterations being "not yet").
func TestLaunchersReadNanoGPTLines(t *testing.T) {
	needTorch(t)
	tests := []struct {
		name     string
		launcher string
		command  []any
	}{
		{"python", LauncherPython, nil},
		{"command", LauncherCommand, []any{"{python}", "{script}", "{script_args}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.launcher == LauncherPython {
				// As when fsdpbench itself runs under torchrun: the fixture would take
				// its DDP path if the one process inherited RANK.
				t.Setenv("RANK", "3")
			}
			rc := nanoGPTRun(tt.launcher, tt.command)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			b := New()
			require.NoError(t, b.Validate(ctx, rc))
			var stdout, stderr strings.Builder
			res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stdout: &stdout, Stderr: &stderr}, nil)
			require.NoError(t, err)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())

			var losses, times, mfus []float64
			for _, line := range strings.Split(stdout.String(), "\n") {
				m := iterLine.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				f := func(s string) float64 {
					v, err := strconv.ParseFloat(s, 64)
					require.NoError(t, err)
					return v
				}
				losses, times = append(losses, f(m[2])), append(times, f(m[3])/1000)
				if v := f(m[4]); v >= 0 {
					mfus = append(mfus, v/100)
				}
			}
			require.Len(t, losses, rc.WarmupSteps+rc.Steps, "iter lines in:\n%s", stdout.String())
			require.Len(t, res.Steps, len(losses))
			wall := 0.0
			for i, st := range res.Steps {
				require.NotNil(t, st.Loss, "step %d", i+1)
				assert.InDelta(t, losses[i], *st.Loss, 1e-12, "step %d loss", i+1)
				assert.InDelta(t, times[i], st.StepTimeS, 1e-12, "step %d time", i+1)
				wall += times[i]
			}
			assert.InDelta(t, wall, res.MeasuredWallS, 1e-9)
			assert.Less(t, losses[len(losses)-1], losses[0], "the fixture trains: its loss falls")
			require.NotEmpty(t, mfus)
			sort.Float64s(mfus)
			assert.InDelta(t, mfus[len(mfus)/2], res.Extra["script_mfu"], 1e-12, "the script's mfu is the median of its non-negative readings")
			assert.Zero(t, res.ModelFlopsPerToken, "the user's script trains a model of its own: no FLOPs from the model axis")
		})
	}
}

// TestCommandKeepsShellMetacharactersInOneArgument: values with a shell's
// metacharacters (the run directory here) reach the program as one argument
// each, exactly, and nothing of them is run.
func TestCommandKeepsShellMetacharactersInOneArgument(t *testing.T) {
	needTorch(t)
	base := t.TempDir()
	runDir := filepath.Join(base, "run $(touch PWNED1) `touch PWNED2`; touch PWNED3 | cat & echo > PWNED4 'q' \"d\" *")
	rc := nanoGPTRun(LauncherCommand, []any{"{python}", "{script}", "--out_dir={output_dir}", "--device=cpu",
		"--max_iters={total_steps}", "--batch_size={batch_per_device}", "--block_size={seq_len}"})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	b := New()
	require.NoError(t, b.Validate(ctx, rc))
	var stdout, stderr strings.Builder
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir, Stdout: &stdout, Stderr: &stderr}, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())

	var argv []string
	for _, line := range strings.Split(stdout.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "argv "); ok {
			require.NoError(t, json.Unmarshal([]byte(rest), &argv))
		}
	}
	require.NotEmpty(t, argv, "the fixture prints its argv first; stdout:\n%s", stdout.String())
	assert.Equal(t, "--out_dir="+filepath.Join(runDir, "output"), argv[0])
	assert.Len(t, argv, 5)
	assert.DirExists(t, filepath.Join(runDir, "output"))
	for _, dir := range []string{base, runDir, filepath.Join(runDir, "output"), "."} {
		matches, err := filepath.Glob(filepath.Join(dir, "PWNED*"))
		require.NoError(t, err)
		assert.Empty(t, matches, "a shell ran part of a value")
	}
}

// TestLaunchersMatchTorchrun runs the project's script under the torchrun
// launcher and under the others: at world size 2 (DDP over gloo) a command
// that starts python -m torch.distributed.run itself, at world size 1 launcher
// python (the script alone). Each pair must train to the same losses.
func TestLaunchersMatchTorchrun(t *testing.T) {
	needTorch(t)
	command := []any{"{python}", "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "{gpus_per_node}",
		"--rdzv_backend", "c10d", "--rdzv_endpoint", "{rdzv_endpoint}", "--rdzv_id", "{run_id}",
		"--redirects", "2", "--tee", "2", "--log_dir", "{run_dir}/torchelastic", "{script}", "{script_args}"}
	b := New()
	run := func(t *testing.T, ws int, launcher string) (losses []float64, argv []string) {
		rc := runConfig(ws, sweeps.DDP)
		rc.BackendOptions = map[string]any{"launcher": launcher}
		if launcher == LauncherCommand {
			rc.BackendOptions["command"] = command
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		require.NoError(t, b.Validate(ctx, rc), launcher)
		var stderr strings.Builder
		runDir := t.TempDir()
		res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir, Stderr: &stderr}, nil)
		require.NoError(t, err)
		require.Equal(t, results.StatusOK, res.Status, "%s: error %q; stderr:\n%s", launcher, res.Error, stderr.String())
		require.Len(t, res.PerRank, ws, launcher)
		require.Len(t, res.Steps, rc.Steps, launcher)
		data, err := os.ReadFile(filepath.Join(runDir, "command.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(data, &argv))
		for _, st := range res.Steps {
			require.NotNil(t, st.Loss)
			losses = append(losses, *st.Loss)
		}
		return losses, argv
	}
	for _, tt := range []struct {
		ws       int
		launcher string
		started  string // in the launcher's argv
	}{
		{2, LauncherCommand, "torch.distributed.run"},
		{1, LauncherPython, "--model-json"},
	} {
		t.Run(tt.launcher, func(t *testing.T) {
			want, _ := run(t, tt.ws, LauncherTorchrun)
			got, argv := run(t, tt.ws, tt.launcher)
			assert.Contains(t, argv, tt.started)
			if tt.launcher == LauncherPython {
				assert.NotContains(t, argv, "torch.distributed.run")
			}
			assert.Equal(t, want, got, "the same script, seed and world size train alike whoever starts it")
		})
	}
}

// TestCommandLeavesNoProcess: what a command leaves behind (a daemon in a
// session of its own) is gone when the run ends.
func TestCommandLeavesNoProcess(t *testing.T) {
	needTorch(t)
	rc := runConfig(1, sweeps.DDP)
	rc.BackendOptions = map[string]any{"launcher": LauncherCommand, "command": []any{"/bin/sh", "-c",
		`setsid sleep 60 </dev/null >/dev/null 2>&1 & echo $! > "$FSDPBENCH_RUN_DIR/daemon.pid"; exit 0`}}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	b := New()
	require.NoError(t, b.Validate(ctx, rc))
	runDir := t.TempDir()
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusFailed, res.Status, "the command reported nothing")
	assert.Contains(t, res.Error, "reported nothing")
	data, err := os.ReadFile(filepath.Join(runDir, "daemon.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	gone := func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }
	deadline := time.Now().Add(5 * time.Second)
	for !gone() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !gone() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command's daemon %d outlived the run", pid)
	}
}

// TestCommandStopsOnTimeout: a command still running when the run's time is
// up is stopped within seconds, all of it, and the run is a timeout.
func TestCommandStopsOnTimeout(t *testing.T) {
	needTorch(t)
	rc := runConfig(1, sweeps.DDP)
	rc.BackendOptions = map[string]any{"launcher": LauncherCommand, "command": []any{"/bin/sh", "-c",
		`sleep 60 & echo $! > "$FSDPBENCH_RUN_DIR/child.pid"; wait`}}
	b := New()
	require.NoError(t, b.Validate(context.Background(), rc))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	runDir := t.TempDir()
	begin := time.Now()
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusTimeout, res.Status)
	t.Logf("stopped %v after the start", time.Since(begin))
	assert.Less(t, time.Since(begin), 2*time.Second+killGrace+5*time.Second)
	data, err := os.ReadFile(filepath.Join(runDir, "child.pid"))
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	require.NoError(t, err)
	if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the command's child %d outlived the run", pid)
	}
}

// TestCommandArgv covers the template: one element per element, the script's
// arguments spliced where "{script_args}" stands, values never split, the
// launch's own variables, and errors that name the element.
func TestCommandArgv(t *testing.T) {
	o, err := ParseOptions(map[string]any{"launcher": LauncherCommand, "command": "x"})
	require.NoError(t, err)
	vars := contract.Vars(runConfig(2, sweeps.DDP), contract.Paths{RunDir: "/r;rm -rf ~", OutputDir: "/o $(id)"})
	node := &Node{Nodes: 1, Rank: "0", Endpoint: "127.0.0.1:4242"}
	tests := []struct {
		name    string
		command []string
		want    []string
		err     string
	}{
		{"deepspeed", []string{"deepspeed", "--num_gpus", "{gpus_per_node}", "--master_port", "{master_port}", "{script}", "{script_args}"},
			[]string{"deepspeed", "--num_gpus", "2", "--master_port", "4242", "/s.py", "--a", "b c", "$(x)"}, ""},
		{"metacharacters stay one element", []string{"{python}", "--dir={run_dir}", "{output_dir}"},
			[]string{"/usr/bin/python3", "--dir=/r;rm -rf ~", "/o $(id)"}, ""},
		{"conditional dropped", []string{"tune", "run", "{activation_checkpointing?--ac}", "{master_addr}:{node_rank}"},
			[]string{"tune", "run", "127.0.0.1:0"}, ""},
		{"script_args only as a whole element", []string{"x", "--args={script_args}"}, nil, "unknown placeholder {script_args}"},
		{"unknown", []string{"srun", "{world}"}, nil, `backend_options.command[1] "{world}"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o.Command = tt.command
			got, err := CommandArgv(o, vars, node, "/s.py", []string{"--a", "b c", "$(x)"})
			if tt.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// TestCommandStringIsSplitBeforeSubstitution: the one-string form of command
// is cut at spaces first; a value with spaces substituted after stays whole.
func TestCommandStringIsSplitBeforeSubstitution(t *testing.T) {
	o, err := ParseOptions(map[string]any{"launcher": LauncherCommand, "command": "srun --chdir={run_dir} {python} {script} {script_args}"})
	require.NoError(t, err)
	require.Equal(t, []string{"srun", "--chdir={run_dir}", "{python}", "{script}", "{script_args}"}, o.Command)
	vars := contract.Vars(runConfig(1, sweeps.DDP), contract.Paths{RunDir: "/runs/a b; c"})
	got, err := CommandArgv(o, vars, nil, "/s.py", []string{"--x", "y z"})
	require.NoError(t, err)
	assert.Equal(t, []string{"srun", "--chdir=/runs/a b; c", DefaultPython, "/s.py", "--x", "y z"}, got)
}

// TestLauncherOptionErrors: what the launchers refuse, as spec errors naming
// the option.
func TestLauncherOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts map[string]any
		ws   int
		want string
	}{
		{"python needs world size 1", map[string]any{"launcher": LauncherPython, "script": nanoGPTLike}, 2, "world_size is 2"},
		{"command needs a command", map[string]any{"launcher": LauncherCommand}, 1, "needs backend_options.command"},
		{"command only with launcher command", map[string]any{"command": []any{"deepspeed"}}, 1, "set backend_options.launcher: command"},
		{"empty command", map[string]any{"launcher": LauncherCommand, "command": []any{}}, 1, "is empty"},
		{"unknown launcher", map[string]any{"launcher": "mpirun"}, 1, "use torchrun, accelerate, python, command"},
		{"bad placeholder", map[string]any{"launcher": LauncherCommand, "command": []any{"srun", "{nprocs}"}}, 1, "unknown placeholder {nprocs}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := runConfig(tt.ws, sweeps.DDP)
			rc.BackendOptions = tt.opts
			err := New().Validate(context.Background(), rc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			var se *backends.SpecError
			assert.True(t, errors.As(err, &se), "a spec error: %v", err)
		})
	}
}
