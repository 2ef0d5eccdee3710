package torchrun

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// runConfig is tiny at global batch 4 on ws ranks: batch_per_device 4/ws, so every
// world size trains on the same samples.
func runConfig(ws int, sharding string) sweeps.RunConfig {
	return sweeps.RunConfig{Backend: Name, Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 3, WarmupSteps: 1,
		Seed: 7, Nodes: 1, GPUsPerNode: ws, WorldSize: ws, BatchPerDevice: 4 / ws, GradAccum: 1, GlobalBatch: 4,
		Sharding: sharding, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.FP32}
}

// goLosses trains rc's model with the Go trainer in-process on one rank at the same
// global batch and returns the losses of every step, warmup included.
func goLosses(t *testing.T, rc sweeps.RunConfig, o Options) []float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	shape, err := shapes.Lookup(rc.Model)
	require.NoError(t, err)
	cfg := fsdp.Config{Shape: shape, Sharding: sweeps.NoShard, BatchPerDevice: rc.GlobalBatch, SeqLen: rc.SeqLen,
		Seed: uint64(rc.Seed), LR: o.LR, WeightDecay: o.WeightDecay}
	tr, err := fsdp.New(ctx, cpu.New(cpu.Options{}), oneRankWorld(ctx, t), cfg)
	require.NoError(t, err)
	defer tr.Close()
	var losses []float64
	for range rc.WarmupSteps + rc.Steps {
		rep, err := tr.Step(ctx)
		require.NoError(t, err)
		losses = append(losses, rep.Loss)
	}
	return losses
}

// TestRunMatchesGoTrainer runs the backend under real torchrun (DDP over gloo) at
// world sizes 1 and 2 and requires the Go trainer's loss at every measured step,
// and every reported figure.
func TestRunMatchesGoTrainer(t *testing.T) {
	needTorch(t)
	opts, err := ParseOptions(nil)
	require.NoError(t, err)
	want := goLosses(t, runConfig(1, sweeps.DDP), opts)
	b := New()
	for _, ws := range []int{1, 2} {
		t.Run(fmt.Sprintf("ws%d", ws), func(t *testing.T) {
			rc := runConfig(ws, sweeps.DDP)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			require.NoError(t, b.Validate(ctx, rc))
			var stepEvents int
			var stderr strings.Builder
			res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &stderr}, func(e backends.Event) {
				if e.Kind == backends.EventStep {
					stepEvents++
				}
			})
			require.NoError(t, err)
			require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())
			require.Len(t, res.Steps, rc.Steps)
			assert.Equal(t, rc.Steps, stepEvents)
			for i, st := range res.Steps {
				require.NotNil(t, st.Loss)
				g := want[rc.WarmupSteps+i]
				assert.InDelta(t, 0, math.Abs(*st.Loss-g)/g, 1e-4, "step %d: torch %.7f, go %.7f", i+1, *st.Loss, g)
				assert.Positive(t, st.StepTimeS)
				assert.Equal(t, rc.TokensPerStep(), st.Tokens)
			}
			require.Len(t, res.PerRank, ws)
			var tokens int64
			for _, r := range res.PerRank {
				tokens += r.Tokens
				require.NotNil(t, r.PeakRSSBytes)
				assert.Positive(t, *r.PeakRSSBytes)
				assert.LessOrEqual(t, r.MeasuredWallS, res.MeasuredWallS)
			}
			assert.Equal(t, rc.TokensPerStep()*int64(rc.Steps), tokens, "the ranks' tokens must add up to the global batch's")
			shape, err := shapes.Lookup(rc.Model)
			require.NoError(t, err)
			assert.Equal(t, shape.FlopsPerToken(rc.SeqLen), res.ModelFlopsPerToken)
			assert.Positive(t, res.PeakFlopsPerS)
			assert.NotEmpty(t, res.Env.Torch)
		})
	}
}

// TestValidateRefusesWhatCPUTorchCannotRun covers the infeasible combinations.
func TestValidateRefusesWhatCPUTorchCannotRun(t *testing.T) {
	needTorch(t)
	b := New()
	info, err := b.torch(context.Background(), DefaultPython)
	require.NoError(t, err)
	tests := []struct {
		name string
		edit func(*sweeps.RunConfig)
		want string
	}{
		{"full_shard on cpu", func(rc *sweeps.RunConfig) { rc.Sharding = sweeps.FullShard }, "cannot run FSDP"},
		{"bf16", func(rc *sweeps.RunConfig) { rc.MixedPrecision = sweeps.BF16 }, "fp32 on CPU"},
		{"offload with ddp", func(rc *sweeps.RunConfig) { rc.CPUOffload = true }, "offload needs a sharded strategy"},
		{"unknown option", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"nope": 1} }, "backend_options.nope: torchrun has no such option"},
		{"two nodes", func(rc *sweeps.RunConfig) { rc.Nodes, rc.GPUsPerNode = 2, 1 }, "use launcher: slurm"},
		{"bad template", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"args": "--bs {batch_per_devce}"} },
			"did you mean {batch_per_device}"},
		{"missing script", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"script": "/nonexistent/train.py"} },
			"backend_options.script"},
		{"gpt2 on the built-in model", func(rc *sweeps.RunConfig) { rc.Model = "gpt2-124m" }, "model_impl: transformers"},
		{"python typo", func(rc *sweeps.RunConfig) { rc.BackendOptions = map[string]any{"python": "/usr/bin/pythn3"} },
			"torchrun: backend_options.python: torchrun: /usr/bin/pythn3 cannot import torch"},
		{"accelerate missing", func(rc *sweeps.RunConfig) {
			rc.BackendOptions = map[string]any{"launcher": "accelerate"}
		}, "backend_options.launcher accelerate: /usr/bin/python3 has no accelerate package"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rc := runConfig(2, sweeps.DDP)
			tc.edit(&rc)
			err := b.Validate(context.Background(), rc)
			if (tc.name == "full_shard on cpu" || tc.name == "bf16") && info.CUDA {
				require.NoError(t, err)
				return
			}
			if tc.name == "accelerate missing" && info.Accelerate {
				return // this python can run it
			}
			require.ErrorContains(t, err, tc.want)
			// The spec's own mistakes are spec errors (exit 2); the rest are verdicts.
			spec := tc.name == "unknown option" || tc.name == "bad template" || tc.name == "missing script" ||
				tc.name == "python typo" || tc.name == "accelerate missing"
			assert.Equal(t, spec, backends.IsSpecError(err), "%s: %v", tc.name, err)
		})
	}
}

// TestRunOutcomes runs fixture scripts under real torchrun (two ranks) that end the
// ways real runs do, and checks each status and the reason it gives.
func TestRunOutcomes(t *testing.T) {
	needTorch(t)
	b := New()
	tests := []struct {
		mode   string
		status results.Status
		err    string
	}{
		{"crash", results.StatusFailed, "ValueError: boom on rank 1"},
		{"crash_secondary_first", results.StatusFailed, "ValueError: boom on rank 1"},
		{"daemon", results.StatusOK, ""},
		{"oom", results.StatusOOM, "CUDA out of memory. Tried to allocate 20.00 GiB"},
		{"nothing", results.StatusFailed, "reported nothing"},
		{"badjson", results.StatusFailed, "metrics.json:1:2: invalid character 'n' looking for beginning of object key string (a metrics.json must be one JSON object)"},
		{"mismatch", results.StatusFailed, "world_size is 3 but the run has 2 ranks"},
		{"steplines", results.StatusOK, ""},
		{"diverged", results.StatusDiverged, "diverged: rank 0's loss is +Inf at measured step 2 of 3 (steps[1].loss, "},
		{"negative", results.StatusFailed, "torchrun: the script printed a broken FSDPBENCH line: step line: step_time_s is -0.5"},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			rc := runConfig(2, sweeps.DDP)
			marker := fmt.Sprintf("fsdpbench-outcome-%d", time.Now().UnixNano())
			rc.BackendOptions = map[string]any{"script": "testdata/faulty.py", "args": []any{"--mode", tc.mode, "--marker", marker}}
			require.NoError(t, b.Validate(context.Background(), rc))
			ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
			defer cancel()
			var stderr strings.Builder
			res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: &lockedWriter{w: &stderr}}, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.status, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())
			assert.Contains(t, res.Error, tc.err)
			out, _ := exec.Command("pgrep", "-f", marker).Output()
			assert.Empty(t, strings.TrimSpace(string(out)), "processes of the run outlived it")
			if tc.mode == "steplines" || tc.mode == "daemon" {
				require.Len(t, res.Steps, 3)
				assert.InDelta(t, 1.5, res.MeasuredWallS, 1e-9, "the wall time is the sum of the step times")
				assert.Zero(t, res.ModelFlopsPerToken, "a user's script's model is unknown unless it says so")
			}
		})
	}
}

// TestRunWritesNothingOutsideItsRunDirectory points TMPDIR at an empty directory
// and runs a script that writes a temporary file, under torchrun (whose
// --redirects/--tee otherwise leave $TMPDIR/torchelastic_* behind): the directory
// must stay empty.
func TestRunWritesNothingOutsideItsRunDirectory(t *testing.T) {
	needTorch(t)
	b := New()
	rc := runConfig(2, sweeps.DDP)
	rc.BackendOptions = map[string]any{"script": "testdata/faulty.py", "args": []any{"--mode", "tmpfile"}}
	require.NoError(t, b.Validate(context.Background(), rc))
	runDir, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	var stderr strings.Builder
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir, Stderr: &lockedWriter{w: &stderr}}, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, stderr.String())
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.Empty(t, names, "the run wrote into $TMPDIR")
	logs, _ := filepath.Glob(filepath.Join(runDir, "torchelastic", "*"))
	assert.NotEmpty(t, logs, "torchrun's logs are kept in the run directory")
}

// TestRunStartsAgainWhenTheRendezvousPortIsTaken hands a run a rendezvous port
// that another process holds, as happens when something binds it between
// LocalNode's check and torchrun's: the agent fails at once, and the run starts
// again on another port and ends ok.
func TestRunStartsAgainWhenTheRendezvousPortIsTaken(t *testing.T) {
	needTorch(t)
	held, err := net.Listen("tcp", ":0")
	require.NoError(t, err)
	defer held.Close()
	taken := "127.0.0.1:" + strconv.Itoa(held.Addr().(*net.TCPAddr).Port)
	b := New()
	var endpoints []string
	b.localNode = func(id string) (*Node, error) {
		n, err := LocalNode(id)
		if len(endpoints) == 0 {
			n.Endpoint = taken
		}
		endpoints = append(endpoints, n.Endpoint)
		return n, err
	}
	rc := runConfig(2, sweeps.DDP)
	rc.BackendOptions = map[string]any{"script": "testdata/faulty.py", "args": []any{"--mode", "tmpfile"}}
	require.NoError(t, b.Validate(context.Background(), rc))
	ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
	defer cancel()
	var stderr strings.Builder
	lw := &lockedWriter{w: &stderr}
	runDir := t.TempDir()
	res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: runDir, Stderr: lw}, nil)
	require.NoError(t, err)
	require.Equal(t, results.StatusOK, res.Status, "error %q; stderr:\n%s", res.Error, lw.String())
	require.Len(t, endpoints, 2, "one start on the taken port, one on another")
	assert.NotEqual(t, taken, endpoints[1])
	assert.Contains(t, lw.String(), "rendezvous port "+taken+" was taken by another process; starting the run again on another port (attempt 2 of 3)")
	argv, err := os.ReadFile(filepath.Join(runDir, "command.json"))
	require.NoError(t, err)
	assert.Contains(t, string(argv), endpoints[1], "command.json is the command that ran")
}

// TestRunCancelStopsEveryRank cancels a run whose ranks hang and requires the run
// to end canceled within seconds with none of its processes left.
func TestRunCancelStopsEveryRank(t *testing.T) {
	needTorch(t)
	b := New()
	marker := fmt.Sprintf("fsdpbench-hang-%d", time.Now().UnixNano())
	rc := runConfig(2, sweeps.DDP)
	rc.BackendOptions = map[string]any{"script": "testdata/faulty.py", "args": []any{"--mode", "hang", "--marker", marker}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stepped := make(chan struct{}, 1)
	emit := func(ev backends.Event) {
		if ev.Kind == backends.EventStep {
			select {
			case stepped <- struct{}{}:
			default:
			}
		}
	}
	type ran struct {
		res results.Result
		err error
	}
	done := make(chan ran, 1)
	// Every line the backend read, with when: a run that fails here says whether
	// the step line never arrived, arrived late, or was not taken as a step.
	var stderr, stdout strings.Builder
	begun := time.Now()
	lw := &lockedWriter{w: &stderr, stamp: begun}
	ow := &lockedWriter{w: &stdout, stamp: begun}
	go func() {
		res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: lw, Stdout: ow}, emit)
		done <- ran{res, err}
	}()
	// The step line must come within 2*testTimeout of the run's last sign of
	// progress (any line it wrote; its first within 3*testTimeout of the start,
	// torchrun's agent importing torch is silent), and within maxWait in all. On
	// a loaded 2-core CI machine (load 15: parallel packages compiling and
	// running torch) a deadline of 2*testTimeout counted from the start failed
	// runs whose ranks reported importing torch in a second, i.e. they had only
	// just started: what was slow was the launch before them. A rank that hangs
	// or a line that is lost still fails, after 2*testTimeout of silence.
	const maxWait = 6 * testTimeout
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-stepped:
			break wait
		case r := <-done:
			t.Fatalf("the run ended before the hanging script printed its step line: %+v %v; stderr:\n%s", r.res, r.err, lw.String())
		case <-tick.C:
			last := begun.Add(testTimeout) // the first line: 3*testTimeout
			for _, w := range []*lockedWriter{lw, ow} {
				if l := w.Last(); l.After(last) {
					last = l
				}
			}
			if time.Since(last) < 2*testTimeout && time.Since(begun) < maxWait {
				continue
			}
			// Before canceling, the ranks print where they are (faulty.py's
			// SIGUSR1 handler) so that a real hang shows its stack.
			dumpStacks(t, marker)
			cancel()
			r := <-done
			verdict := "no rank wrote it (no \"step line written\" line on stderr)"
			switch {
			case len(stepped) > 0:
				verdict = "it was read during the stack dump: late, not lost"
			case strings.Contains(lw.String(), "step line written"):
				verdict = "a rank wrote it (its \"step line written\" line says when, and to which pipe) but the backend never read it as a step"
			}
			t.Fatalf("the hanging script's step line did not come within %v of the run's last line (%v since the start): %s (%+v %v); the run started at unix %.3f; stdout as read, with seconds since the start:\n%s\nstderr:\n%s",
				2*testTimeout, time.Since(begun).Round(time.Second), verdict, r.res, r.err, float64(begun.UnixNano())/1e9, ow.String(), lw.String())
		}
	}
	t.Logf("first step line after %v; stderr so far:\n%s", time.Since(begun).Round(time.Millisecond), lw.String())
	start := time.Now()
	cancel()
	var r ran
	select {
	case r = <-done:
	case <-time.After(killGrace + 10*time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	require.NoError(t, r.err)
	assert.Equal(t, results.StatusCanceled, r.res.Status)
	t.Logf("stopped %v after cancel", time.Since(start).Round(time.Millisecond))
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	assert.Empty(t, strings.TrimSpace(string(out)), "processes of the canceled run are still alive")
}

// dumpStacks sends SIGUSR1 to the ranks of faulty.py running with marker (not to
// torchrun's agent, which has no handler and would die of it) and gives them a
// moment to write their stacks to stderr.
func dumpStacks(t *testing.T, marker string) {
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	// Where each of the run's processes writes its stdout, and whether this test
	// process reads that pipe: a rank whose step line went nowhere shows it here.
	ours := map[string]bool{}
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		for _, fd := range fds {
			if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil {
				ours[l] = true
			}
		}
	}
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		fd1, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid))
		t.Logf("process %d (%.80s): stdout %s (read by this test: %v)", pid, strings.ReplaceAll(string(cmdline), "\x00", " "), fd1, ours[fd1])
		if strings.Contains(string(cmdline), "faulty.py") && !strings.Contains(string(cmdline), "torch.distributed.run") &&
			!strings.Contains(string(cmdline), "fsdpbench-run-reaper") {
			t.Logf("SIGUSR1 to rank process %d", pid)
			_ = syscall.Kill(pid, syscall.SIGUSR1)
		}
	}
	time.Sleep(2 * time.Second)
}

// lockedWriter serializes writes from the backend's reader goroutines; with stamp
// set, each write is prefixed by the seconds since stamp.
type lockedWriter struct {
	mu    sync.Mutex
	w     io.Writer
	stamp time.Time
	last  time.Time // of the last write
}

// Last is when the last write came (zero before the first).
func (l *lockedWriter) Last() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// String returns what was written so far (w must be a *strings.Builder).
func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(*strings.Builder).String()
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = time.Now()
	if !l.stamp.IsZero() {
		if _, err := fmt.Fprintf(l.w, "[%.3fs] ", time.Since(l.stamp).Seconds()); err != nil {
			return 0, err
		}
	}
	return l.w.Write(p)
}

// TestLogExtractors runs fixture scripts that only print progress lines (nanoGPT's
// "iter N: loss X, time Yms") or the Hugging Face Trainer's log dicts, under real
// torchrun at two ranks, and requires the figures read from those lines.
func TestLogExtractors(t *testing.T) {
	needTorch(t)
	b := New()
	run := func(t *testing.T, opts map[string]any) (results.Result, string) {
		t.Helper()
		rc := runConfig(2, sweeps.DDP)
		rc.SeqLen, rc.BatchPerDevice, rc.GlobalBatch, rc.Steps, rc.WarmupSteps = 64, 4, 8, 10, 0
		rc.BackendOptions = opts
		require.NoError(t, b.Validate(context.Background(), rc))
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		defer cancel()
		var stdout, stderr strings.Builder
		res, err := b.Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stdout: &lockedWriter{w: &stdout}, Stderr: &lockedWriter{w: &stderr}}, nil)
		require.NoError(t, err)
		return res, stdout.String()
	}

	t.Run("iter lines", func(t *testing.T) {
		res, out := run(t, map[string]any{"script": "testdata/progress_lines.py",
			"args": "--batch_size {batch_per_device} --block_size {seq_len} --max_iters {steps}",
			"logs": map[string]any{"builtin": "iter", "skip_steps": 1}})
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		// The expected figures, read from the log independently of the extractor.
		var times, losses []float64
		for _, line := range strings.Split(out, "\n") {
			var it int
			var loss, ms float64
			if _, err := fmt.Sscanf(stripRankPrefix(line), "iter %d: loss %g, time %gms", &it, &loss, &ms); err == nil && it >= 1 {
				times, losses = append(times, ms/1000), append(losses, loss)
			}
		}
		require.Len(t, times, 9, "10 iterations, the first skipped as warm-up:\n%s", out)
		require.Len(t, res.Steps, 9)
		wall := 0.0
		for i, st := range res.Steps {
			assert.InDelta(t, times[i], st.StepTimeS, 1e-12)
			require.NotNil(t, st.Loss)
			assert.InDelta(t, losses[i], *st.Loss, 1e-12)
			wall += times[i]
		}
		assert.InDelta(t, wall, res.MeasuredWallS, 1e-9)
		assert.InDelta(t, 0.0123, res.Extra["script_mfu"], 1e-12, "nanoGPT's own mfu is kept beside ours")
		assert.Nil(t, res.StepBreakdown, "a script that writes no profiler trace has no breakdown: absent, not zero")
		assert.Empty(t, res.TimelinePath)
	})

	t.Run("a user's script's profiler trace", func(t *testing.T) {
		res, _ := run(t, map[string]any{"script": "testdata/progress_lines.py",
			"args": "--batch_size {batch_per_device} --block_size {seq_len} --max_iters {steps} --profile",
			"logs": map[string]any{"builtin": "iter", "skip_steps": 1}})
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		// The figures come from the log lines, which have no ranks: the run's
		// breakdown is the slowest rank's trace's.
		require.NotNil(t, res.StepBreakdown, "extra: %v", res.Extra)
		f, msg := res.StepBreakdown.Check()
		assert.Empty(t, f, msg)
		assert.Positive(t, res.StepBreakdown.CollectiveS)
		assert.Equal(t, TimelineFile, res.TimelinePath)
	})

	t.Run("hf trainer dicts", func(t *testing.T) {
		res, out := run(t, map[string]any{"script": "testdata/hf_trainer_logs.py",
			"args": "--per_device_train_batch_size {batch_per_device} --max_seq_length {seq_len} --max_steps {steps}",
			"logs": map[string]any{"builtin": "hf_trainer"}})
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		i := strings.Index(out, "'train_samples_per_second': ")
		require.GreaterOrEqual(t, i, 0, out)
		var sps float64
		_, err := fmt.Sscanf(out[i+len("'train_samples_per_second': "):], "%g", &sps)
		require.NoError(t, err)
		m := results.Normalize(runConfig(2, sweeps.DDP), []results.Result{res})
		require.NotNil(t, m.TokensPerS)
		assert.InEpsilon(t, sps*64, *m.TokensPerS, 1e-9, "samples/s x seq_len")
		assert.NotNil(t, res.Extra["log_loss_last"])
	})

	t.Run("custom regex in samples per second", func(t *testing.T) {
		res, _ := run(t, map[string]any{"script": "testdata/hf_trainer_logs.py",
			"args": "--per_device_train_batch_size {batch_per_device} --max_seq_length {seq_len} --max_steps {steps}",
			"logs": map[string]any{"metrics": map[string]any{
				"tokens_per_s": map[string]any{"regex": `'train_samples_per_second': (?P<sps>[0-9.]+)`, "unit": "samples/s"}}}})
		require.Equal(t, results.StatusOK, res.Status, res.Error)
		assert.InEpsilon(t, res.Extra["script_tokens_per_s"], float64(8*64*1)/res.MeasuredWallS, 1e-9)
	})

	t.Run("regex that matches nothing", func(t *testing.T) {
		res, _ := run(t, map[string]any{"script": "testdata/progress_lines.py", "args": "--max_iters 3",
			"logs": map[string]any{"metrics": map[string]any{
				"step_time": map[string]any{"regex": `step took (?P<s>[0-9.]+)s`, "unit": "s"}}}})
		assert.Equal(t, results.StatusFailed, res.Status)
		assert.Contains(t, res.Error, "step_time: step took (?P<s>[0-9.]+)s matched no line of the run's output")
		assert.Contains(t, res.Error, "iter 0: loss", "quotes how the log began")
	})
}

// TestLogOptionErrors covers bad extractor settings, refused before anything runs.
func TestLogOptionErrors(t *testing.T) {
	for want, logs := range map[string]any{
		"must have exactly one named group":                      map[string]any{"metrics": map[string]any{"loss": map[string]any{"regex": `loss ([0-9.]+)`}}},
		`unknown unit "furlongs" for step_time; use one of "ms"`: map[string]any{"metrics": map[string]any{"step_time": map[string]any{"regex": `(?P<t>\d+)`, "unit": "furlongs"}}},
		"unknown metric (did you mean step_time?)":               map[string]any{"metrics": map[string]any{"step_tme": map[string]any{"regex": `(?P<t>\d+)`}}},
		"regex: error parsing regexp":                            map[string]any{"metrics": map[string]any{"loss": map[string]any{"regex": `(?P<x>[`}}},
		`builtin: unknown extractor "megatron"`:                  map[string]any{"builtin": "megatron"},
		"needs builtin or metrics":                               map[string]any{},
	} {
		_, err := ParseOptions(map[string]any{"logs": logs})
		require.Error(t, err, want)
		assert.Contains(t, err.Error(), "backend_options.logs: ")
		assert.Contains(t, err.Error(), want)
	}
}

// TestTorchProbeIsNotHeldByAChildOfPython: the probe returns once python has
// exited, though a process it left keeps python's stdout open.
func TestTorchProbeIsNotHeldByAChildOfPython(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	t.Setenv("PROBE_DAEMON_PID", pidFile)
	python, err := filepath.Abs("testdata/python_leaves_a_child.sh")
	require.NoError(t, err)
	defer func() {
		if data, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(data))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}()
	begin := time.Now()
	info, err := New().torch(context.Background(), python)
	require.NoError(t, err)
	assert.Equal(t, "2.5.0", info.Version)
	assert.Less(t, time.Since(begin), probeWaitDelay+5*time.Second)
}
