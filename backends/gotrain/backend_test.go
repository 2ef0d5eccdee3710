package gotrain

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// TestMain makes the test binary its own worker: the backend starts os.Executable()
// with the argument `worker`, as it starts `fsdpbench worker`.
func TestMain(m *testing.M) {
	if dir := os.Getenv(hostEnv); dir != "" {
		// The host of TestWorkersDieWithTheirHost: a long run whose workers sleep.
		rc := tinyRun(2, 1, sweeps.FullShard)
		rc.Steps, rc.BackendOptions = 1000, map[string]any{"step_delay": "60s"}
		_, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: dir}, nil)
		fmt.Fprintln(os.Stderr, "host: Run returned:", err)
		os.Exit(1)
	}
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		err := Worker(context.Background(), WorkerEnv{Getenv: os.Getenv, Stdout: os.Stdout, Stderr: os.Stderr})
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
		}
		os.Exit(ExitCode(err))
	}
	os.Exit(m.Run())
}

// hostEnv makes the test binary a host that runs a gotrain run until it is killed.
const hostEnv = "GOTRAIN_TEST_HOST_DIR"

// tinyRun is a small run of the tiny model.
func tinyRun(ws, nodes int, sharding string) sweeps.RunConfig {
	rc := sweeps.RunConfig{Backend: Name, Hardware: "cpu", Model: "tiny", SeqLen: 16, Steps: 3, WarmupSteps: 0,
		Seed: 1, Nodes: nodes, GPUsPerNode: ws / nodes, WorldSize: ws, BatchPerDevice: 1, GradAccum: 1,
		Sharding: sharding, BackwardPrefetch: sweeps.BackwardPre, MixedPrecision: sweeps.FP32}
	// The global batch is fixed across world sizes (grad accumulation makes up the
	// difference), so the same samples are trained on and the losses must agree.
	rc.GradAccum = 4 / ws
	rc.GlobalBatch = ws * rc.BatchPerDevice * rc.GradAccum
	rc.AssignID()
	return rc
}

// syncBuffer is a bytes.Buffer safe for the backend's concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRunLossesAgreeAcrossWorldSizesAndStrategies runs every strategy through real
// worker processes over both transports: the losses agree across world sizes and
// strategies within 1e-5, and between the TCP ring and shared memory bitwise (the
// same reductions in the same order).
func TestRunLossesAgreeAcrossWorldSizesAndStrategies(t *testing.T) {
	b := New()
	var ref []float64
	byTransport := map[string]map[string][]float64{} // case → transport → losses
	for _, tc := range []struct {
		ws, nodes int
		sharding  string
	}{
		{1, 1, sweeps.FullShard},
		{2, 1, sweeps.FullShard},
		{2, 1, sweeps.DDP},
		{2, 1, sweeps.ShardGradOp},
		{2, 1, sweeps.NoShard},
		{4, 1, sweeps.FullShard},
		{4, 2, sweeps.HybridShard}, // shard groups on shared memory, replicate groups on TCP
	} {
		for _, transport := range []string{comm.TransportTCP, comm.TransportAuto} {
			if tc.ws == 1 && transport == comm.TransportTCP {
				continue // a world of one has no transport
			}
			name := fmt.Sprintf("ws%d-n%d-%s", tc.ws, tc.nodes, tc.sharding)
			t.Run(name+"/"+transport, func(t *testing.T) {
				rc := tinyRun(tc.ws, tc.nodes, tc.sharding)
				rc.BackendOptions = map[string]any{"transport": transport}
				if tc.nodes == 1 && transport == comm.TransportAuto {
					rc.BackendOptions["transport"] = comm.TransportShm // fails rather than fall back to TCP
				}
				rc.AssignID()
				require.NoError(t, b.Validate(context.Background(), rc))
				var mu sync.Mutex
				var events []backends.Event
				var stdout, stderr syncBuffer
				res, err := b.Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir(), Stdout: &stdout, Stderr: &stderr},
					func(e backends.Event) { mu.Lock(); events = append(events, e); mu.Unlock() })
				require.NoError(t, err)
				require.Equal(t, results.StatusOK, res.Status, "error: %s\nstderr:\n%s", res.Error, stderr.String())

				require.Len(t, res.Steps, rc.Steps)
				var losses []float64
				var stepEvents int
				for _, e := range events {
					if e.Kind == backends.EventStep {
						stepEvents++
					}
				}
				assert.Equal(t, rc.Steps, stepEvents, "one step event per measured step")
				var wall float64
				for i, s := range res.Steps {
					require.NotNil(t, s.Loss)
					assert.Equal(t, i+1, s.Step)
					assert.Positive(t, s.StepTimeS)
					assert.Equal(t, rc.TokensPerStep(), s.Tokens)
					losses = append(losses, *s.Loss)
					wall += s.StepTimeS
				}
				if ref == nil {
					ref = losses
				} else {
					for i := range ref {
						assert.InEpsilon(t, ref[i], losses[i], 1e-5, "step %d loss", i+1)
					}
				}
				// The gather path the workers took: zero-copy on shared memory
				// (fp32, a sharded strategy; hybrid_shard's shard groups lie
				// within a node), copying on the TCP ring.
				want := fsdp.GathersCopy
				switch {
				case tc.ws == 1 || tc.sharding == sweeps.DDP || tc.sharding == sweeps.NoShard:
					want = fsdp.GathersNone
				case transport != comm.TransportTCP:
					want = fsdp.GathersZeroCopy
				}
				assert.Equal(t, want, res.Extra["gathers"], "metrics.json's extra.gathers")
				if byTransport[name] == nil {
					byTransport[name] = map[string][]float64{}
				}
				byTransport[name][transport] = losses
				if tcp, ok := byTransport[name][comm.TransportTCP]; ok && transport != comm.TransportTCP {
					assert.Equal(t, tcp, losses, "shared memory gives the TCP ring's losses bitwise")
				}
				shape, err := shapes.Lookup("tiny")
				require.NoError(t, err)
				assert.Equal(t, shape.FlopsPerToken(rc.SeqLen), res.ModelFlopsPerToken)
				assert.Positive(t, res.PeakFlopsPerS)
				assert.InDelta(t, wall, res.MeasuredWallS, wall, "slowest rank's wall is about the steps' sum")
				require.NotNil(t, res.PeakMemAllocatedBytes)
				require.NotNil(t, res.PeakRSSBytes)
				assert.Positive(t, *res.PeakMemAllocatedBytes)
				assert.Greater(t, *res.PeakRSSBytes, *res.PeakMemAllocatedBytes, "the process holds more than its tensors")
				for _, cat := range []string{"params", "grads", "optimizer", "activations"} {
					assert.Positive(t, res.MemBreakdownBytes[cat], cat)
				}
				// The normalized throughput counts each global batch once, however many
				// ranks shared it (ranks report their own share of the tokens).
				var rankTokens int64
				for _, pr := range res.PerRank {
					rankTokens += pr.Tokens
				}
				assert.Equal(t, rc.TokensPerStep()*int64(rc.Steps), rankTokens, "tokens of all ranks over the measured steps")
				m := results.Normalize(rc, []results.Result{res})
				require.NotNil(t, m.TokensPerS)
				assert.InEpsilon(t, float64(rc.TokensPerStep()*int64(rc.Steps))/res.MeasuredWallS, *m.TokensPerS, 1e-9)
				require.Len(t, res.PerRank, tc.ws)
				require.NotNil(t, res.CommBytesPerStep)
				if tc.ws > 1 {
					switch tc.sharding {
					case sweeps.DDP, sweeps.NoShard:
						assert.Positive(t, res.CommBytesPerStep.AllReduce)
						assert.Zero(t, res.CommBytesPerStep.AllGather)
					default:
						assert.Positive(t, res.CommBytesPerStep.AllGather)
						assert.Positive(t, res.CommBytesPerStep.ReduceScatter)
					}
				}
				assert.Contains(t, stdout.String(), "[rank 0] "+EventPrefix)
				// metrics.json says which BLAS ran and on how many threads: the
				// host's CPUs divided among the node's ranks unless OMP_NUM_THREADS says.
				// Without cgo, which loading OpenBLAS needs, gonum on GOMAXPROCS.
				if !cgoEnabled {
					assert.Regexp(t, `^gonum`, res.Env.BLAS)
				} else if assert.Regexp(t, `^OpenBLAS \d`, res.Env.BLAS) && os.Getenv(EnvThreads) == "" {
					assert.Equal(t, max(1, runtime.GOMAXPROCS(0)/(tc.ws/tc.nodes)), res.Env.BLASThreads)
				}
			})
		}
	}
}

// TestLossDoesNotDependOnBLAS trains the same run on OpenBLAS and on gonum: the
// losses agree as they do across world sizes.
func TestRankThreads(t *testing.T) {
	for _, tc := range []struct {
		name            string
		omp             string
		cpus, localRank int
		want            int
		err             string
	}{
		{"one rank takes the host", "", 2, 1, 2, ""},
		{"two ranks share it", "", 2, 2, 1, ""},
		{"more ranks than CPUs", "", 2, 4, 1, ""},
		{"a bigger host", "", 16, 4, 4, ""},
		{"uneven", "", 6, 4, 1, ""},
		{"OMP_NUM_THREADS wins", "3", 2, 2, 3, ""},
		{"OMP_NUM_THREADS with spaces", " 2 ", 16, 1, 2, ""},
		{"zero", "0", 2, 1, 0, `OMP_NUM_THREADS="0": give a whole number of threads from 1 to 1024`},
		{"huge", "100000", 2, 1, 0, "from 1 to 1024"},
		{"text", "all", 2, 2, 0, "or unset it to divide this host's 2 CPUs among its 2 ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == EnvThreads {
					return tc.omp
				}
				return ""
			}
			got, err := rankThreads(getenv, tc.cpus, tc.localRank)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*sweeps.RunConfig)
		want string
	}{
		{"fp16", func(rc *sweeps.RunConfig) { rc.MixedPrecision = sweeps.FP16 }, "fp16 training needs loss scaling"},
		{"offload", func(rc *sweeps.RunConfig) { rc.CPUOffload = true }, "cpu_offload"},
		{"compile", func(rc *sweeps.RunConfig) { rc.Compile = true }, "compile"},
		{"gpt2", func(rc *sweeps.RunConfig) { rc.Model = "gpt2-124m" }, "gpt2"},
		{"world", func(rc *sweeps.RunConfig) { rc.WorldSize = 3 }, "nodes 1 × gpus_per_node 2"},
		{"shm across nodes", func(rc *sweeps.RunConfig) {
			rc.Nodes, rc.GPUsPerNode, rc.BackendOptions = 2, 1, map[string]any{"transport": "shm"}
		}, "backend_options.transport shm: the world spans 2 nodes"},
		{"gpu hardware without a GPU", func(rc *sweeps.RunConfig) { rc.Hardware = "h100-sxm" },
			"hardware h100-sxm needs gotrain's cuda device, and this machine has none: no CUDA device: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := tinyRun(2, 1, sweeps.FullShard)
			tc.edit(&rc)
			err := New().Validate(context.Background(), rc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
			require.NoError(t, err)
			assert.Equal(t, results.StatusInfeasible, res.Status)
		})
	}
}

// readPIDs reads the backend's PIDFile once it lists every rank.
func readPIDs(t *testing.T, dir string, ws int) map[int]int {
	t.Helper()
	pids := map[int]int{}
	require.Eventually(t, func() bool {
		f, err := os.Open(filepath.Join(dir, PIDFile))
		if err != nil {
			return false
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) == 2 {
				r, _ := strconv.Atoi(fields[0])
				p, _ := strconv.Atoi(fields[1])
				pids[r] = p
			}
		}
		return len(pids) == ws
	}, 20*time.Second, 20*time.Millisecond)
	return pids
}

// gone reports whether no process with this pid exists (a zombie counts as gone:
// its parent, the backend, reaps it).
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesized command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestRunFailures(t *testing.T) {
	for _, tc := range []struct {
		name       string
		ws         int
		opts       map[string]any
		timeout    time.Duration // of the run's context; 0: none
		kill       func(pids map[int]int, cancel context.CancelFunc)
		wantStatus results.Status
		wantError  []string
	}{
		{name: "worker killed", kill: func(pids map[int]int, _ context.CancelFunc) {
			_ = syscall.Kill(pids[1], syscall.SIGKILL)
		}, wantStatus: results.StatusFailed, wantError: []string{"rank 1 exited: signal: killed"}},
		{name: "canceled", kill: func(_ map[int]int, cancel context.CancelFunc) { cancel() },
			wantStatus: results.StatusCanceled, wantError: []string{"canceled"}},
		// A rank that hangs is named by the rank after it once the collective timeout
		// passes, with the option that sets it; the ranks that exited because of it
		// are not blamed.
		{name: "worker stopped", ws: 4, opts: map[string]any{"collective_timeout": "2s"},
			kill:       func(pids map[int]int, _ context.CancelFunc) { _ = syscall.Kill(pids[1], syscall.SIGSTOP) },
			wantStatus: results.StatusFailed, wantError: []string{"rank 1 failed (it was stopped by a signal",
				"raise backend_options.collective_timeout if it is only slow"}},
		// Without the option, the collective timeout is half the run's, so the hung
		// rank is still named before the run times out.
		{name: "worker stopped, default timeout", ws: 3, timeout: 40 * time.Second,
			kill:       func(pids map[int]int, _ context.CancelFunc) { _ = syscall.Kill(pids[2], syscall.SIGSTOP) },
			wantStatus: results.StatusFailed, wantError: []string{"rank 2 failed (it was stopped by a signal"}},
		// A collective timeout longer than the run: the run times out, and says which
		// rank was stopped.
		{name: "worker stopped past the run's timeout", opts: map[string]any{"collective_timeout": "1h"}, timeout: 20 * time.Second,
			kill:       func(pids map[int]int, _ context.CancelFunc) { _ = syscall.Kill(pids[1], syscall.SIGSTOP) },
			wantStatus: results.StatusTimeout, wantError: []string{"rank 1 was stopped by a signal (SIGSTOP or SIGTSTP) and hung the run"}},
		// SIGHUP (a closed terminal) stops a worker cleanly, as SIGTERM does: it
		// exits on its own, saying why, rather than dying of the signal.
		{name: "worker hung up", kill: func(pids map[int]int, _ context.CancelFunc) {
			_ = syscall.Kill(pids[1], syscall.SIGHUP)
		}, wantStatus: results.StatusFailed, wantError: []string{"rank 1 ", "stopped by signal hangup"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := max(tc.ws, 2)
			rc := tinyRun(2, 1, sweeps.FullShard)
			rc.WorldSize, rc.GPUsPerNode, rc.GradAccum, rc.GlobalBatch = ws, ws, 1, ws
			rc.Steps = 1000
			rc.BackendOptions = map[string]any{"step_delay": "200ms"}
			for k, v := range tc.opts {
				rc.BackendOptions[k] = v
			}
			dir := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			if tc.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.timeout)
			}
			defer cancel()
			stepped := make(chan struct{})
			var once sync.Once
			type outcome struct {
				res results.Result
				err error
			}
			done := make(chan outcome, 1)
			go func() {
				res, err := New().Run(ctx, rc, backends.RunEnv{RunDir: dir}, func(e backends.Event) {
					if e.Kind == backends.EventStep {
						once.Do(func() { close(stepped) })
					}
				})
				done <- outcome{res, err}
			}()
			select {
			case <-stepped:
			case o := <-done:
				t.Fatalf("run ended before its first step: %+v %v", o.res, o.err)
			case <-time.After(30 * time.Second):
				t.Fatal("no step within 30 s")
			}
			pids := readPIDs(t, dir, rc.WorldSize)
			defer func() {
				for _, pid := range pids {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}()
			tc.kill(pids, cancel)
			var o outcome
			select {
			case o = <-done:
			case <-time.After(max(tc.timeout, 15*time.Second) + 15*time.Second):
				t.Fatal("the run did not end within 15 s of the failure")
			}
			require.NoError(t, o.err)
			assert.Equal(t, tc.wantStatus, o.res.Status, o.res.Error)
			for _, want := range tc.wantError {
				assert.Contains(t, o.res.Error, want)
			}
			for r, pid := range pids {
				assert.True(t, gone(pid), "rank %d (pid %d) is still running", r, pid)
			}
		})
	}
}

// TestWorkersDieWithTheirHost runs workers from a host process (this test binary
// again) and kills that host with SIGKILL while the workers sleep between steps:
// they must die with it, not at their next write.
func TestWorkersDieWithTheirHost(t *testing.T) {
	dir := t.TempDir()
	host := exec.Command(os.Args[0], "-test.run=^$")
	host.Env = append(os.Environ(), hostEnv+"="+dir)
	require.NoError(t, host.Start())
	t.Cleanup(func() { _ = host.Process.Kill() })
	pids := readPIDs(t, dir, 2)
	require.NoError(t, host.Process.Signal(syscall.SIGKILL))
	_ = host.Wait()
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}()
	assert.Eventually(t, func() bool {
		for _, pid := range pids {
			if !gone(pid) {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "workers %v outlived the process that ran them", pids)
}

func TestRunOOM(t *testing.T) {
	rc := tinyRun(2, 1, sweeps.FullShard)
	// Far less than the tiny model's parameters and optimizer state need.
	rc.BackendOptions = map[string]any{"mem_limit_bytes": 4096}
	res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
	require.NoError(t, err)
	assert.Equal(t, results.StatusOOM, res.Status, res.Error)
	assert.Contains(t, res.Error, "out of device memory")
}

func TestParseOptions(t *testing.T) {
	o, err := ParseOptions(map[string]any{"lr": 0.01, "step_delay": "5ms", "mem_limit_bytes": 1024, "grad_clip": 1, "collective_timeout": "90s", "transport": "shm"})
	require.NoError(t, err)
	assert.Equal(t, Options{LR: 0.01, WeightDecay: 0.01, GradClip: 1, StepDelay: 5 * time.Millisecond, MemLimitBytes: 1024,
		CollectiveTimeout: 90 * time.Second, Transport: "shm"}, o)
	o, err = ParseOptions(map[string]any{"lr": "0.5", "weight_decay": uint64(0)}) // --set passes strings
	require.NoError(t, err)
	assert.Equal(t, Options{LR: 0.5}, o)
}

// TestOptionErrors: every mistake in backend_options is a spec error (exit 2 before
// anything runs) that names the option and what it takes, never an infeasible run.
func TestOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts map[string]any
		want string
	}{
		{"misspelt", map[string]any{"lrr": 1.0}, `backend_options.lrr: gotrain has no such option (did you mean "lr"?)`},
		{"unknown", map[string]any{"x": 1}, "known: blas, collective_timeout, comm, data, grad_clip, lr, mem_limit_bytes, step_delay, transport, weight_decay"},
		{"unknown transport", map[string]any{"transport": "rdma"}, "backend_options.transport: must be one of [auto shm tcp], got rdma"},
		{"negative lr", map[string]any{"lr": -1.0}, "backend_options.lr: must be in (0, 10], got -1"},
		{"zero lr", map[string]any{"lr": 0}, "backend_options.lr: must be in (0, 10], got 0"},
		{"nan lr", map[string]any{"lr": math.NaN()}, "backend_options.lr: must be a finite number"},
		{"nan lr from --set", map[string]any{"lr": "NaN"}, "backend_options.lr: must be a finite number"},
		{"text lr", map[string]any{"lr": "x"}, `backend_options.lr: must be a number, got "x"`},
		{"huge weight decay", map[string]any{"weight_decay": 1e308}, "backend_options.weight_decay: must be in [0, 10]"},
		{"inf clip", map[string]any{"grad_clip": math.Inf(1)}, "backend_options.grad_clip: must be a finite number"},
		{"fractional bytes", map[string]any{"mem_limit_bytes": 10.5}, "backend_options.mem_limit_bytes: must be a whole number in [0, 1125899906842624], got 10.5"},
		{"exabytes", map[string]any{"mem_limit_bytes": 1e19}, "must be a whole number in [0, 1125899906842624], got 1e+19"},
		{"delay as number", map[string]any{"step_delay": 5}, `backend_options.step_delay: must be a duration such as "50ms"`},
		{"delay forever", map[string]any{"step_delay": "forever"}, `got "forever"`},
		{"delay negative", map[string]any{"step_delay": "-1s"}, "must be between 0s and 1h0m0s"},
		{"collective timeout as number", map[string]any{"collective_timeout": 30}, `backend_options.collective_timeout: must be a duration such as "50ms"`},
		{"collective timeout zero", map[string]any{"collective_timeout": "0s"}, "backend_options.collective_timeout: must be between 1s and 24h0m0s"},
		{"collective timeout a month", map[string]any{"collective_timeout": "720h"}, "must be between 1s and 24h0m0s, got \"720h\""},
		{"collective timeout text", map[string]any{"collective_timeout": "x"}, `backend_options.collective_timeout: must be a duration`},
		{"blas unknown", map[string]any{"blas": "mkl"}, `backend_options.blas: must be "auto", "openblas" or "gonum", got mkl`},
		{"blas number", map[string]any{"blas": 1}, `backend_options.blas: must be "auto", "openblas" or "gonum", got 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := tinyRun(2, 1, sweeps.FullShard)
			rc.BackendOptions = tc.opts
			err := New().Validate(context.Background(), rc)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, backends.IsSpecError(err), "%v is not a backends.SpecError", err)
			// Run refuses to start rather than recording an infeasible run.
			_, err = New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
			assert.True(t, backends.IsSpecError(err), "Run: %v", err)
		})
	}
}

// TestDescribeSaysWhyNoCUDA: on a machine without a GPU (CI, with the toolkit's
// real libcuda installed) `fsdpbench backends` shows why the cuda device cannot
// run, and offers only cpu and auto as hardware.
func TestDescribeSaysWhyNoCUDA(t *testing.T) {
	if _, err := os.Stat("/dev/nvidia0"); err == nil {
		t.Skip("this machine has a GPU")
	}
	d, err := New().Describe(context.Background())
	require.NoError(t, err)
	assert.True(t, d.Available, "the cpu device always runs")
	assert.True(t, strings.HasPrefix(d.Reason, "cuda device: no CUDA device: "), d.Reason)
	if !cgoEnabled {
		assert.Contains(t, d.Reason, "fsdpbench was built without cgo (CGO_ENABLED=0)")
	} else if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libcuda.so.1"); err == nil {
		assert.Contains(t, d.Reason, "cuInit: CUDA_ERROR_NO_DEVICE (100)")
	}
	assert.Equal(t, []string{"cpu", "auto"}, d.Axes["hardware"])
}

func TestCommFor(t *testing.T) {
	for _, tc := range []struct {
		comm  string
		onGPU bool
		want  string
	}{{"", false, CommTCP}, {"", true, CommNCCL}, {CommNCCL, false, CommNCCL}, {CommNCCL, true, CommNCCL}, {CommTCP, false, CommTCP}} {
		got, err := commFor(tc.comm, tc.onGPU)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%q on GPU %v", tc.comm, tc.onGPU)
	}
	_, err := commFor(CommTCP, true)
	require.ErrorContains(t, err, "set comm: nccl")
}

func TestRunProfile(t *testing.T) {
	for _, tc := range []struct {
		hw    string
		onGPU bool
		want  string
	}{{"cpu", false, "cpu"}, {"auto", false, "cpu"}, {"h100-sxm", true, "h100-sxm"}} {
		p, err := runProfile(tc.hw, tc.onGPU)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p.Name, tc.hw)
	}
	_, err := useCUDA("h100-sxmm")
	require.ErrorContains(t, err, `unknown hardware "h100-sxmm"`)
	gpu, err := useCUDA("cpu")
	require.NoError(t, err)
	assert.False(t, gpu)
}

func TestParseCommOptions(t *testing.T) {
	o, err := ParseOptions(map[string]any{"comm": "nccl", "collective_timeout": "90s"})
	require.NoError(t, err)
	assert.Equal(t, CommNCCL, o.Comm)
	assert.Equal(t, 90*time.Second, o.CollectiveTimeout)
	for _, tc := range []struct {
		opts map[string]any
		want string
	}{
		{map[string]any{"comm": "mpi"}, `backend_options.comm: must be "tcp" or "nccl"`},
		{map[string]any{"comm": 1}, `backend_options.comm: must be "tcp" or "nccl"`},
		{map[string]any{"collective_timeout": "0s"}, "must be between 1s and 24h0m0s"},
		{map[string]any{"collective_timeout": "25h"}, "must be between 1s and 24h0m0s"},
		{map[string]any{"collective_timeout": 30}, "must be a duration"},
	} {
		_, err := ParseOptions(tc.opts)
		assert.ErrorContains(t, err, tc.want, "%v", tc.opts)
	}
}

// A cancelled single-rank run stops at the next step: with no collective to fail
// and no step_delay to wait on, the worker trained on until SIGKILL came
// killGrace later (so a Ctrl-C took two seconds). It must exit on its own,
// saying why.
func TestCanceledWorkerStopsBetweenSteps(t *testing.T) {
	rc := tinyRun(1, 1, sweeps.FullShard)
	rc.Steps = 1_000_000
	rc.AssignID()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stepped := make(chan struct{})
	var once sync.Once
	stderr := &syncBuffer{}
	done := make(chan results.Result, 1)
	go func() {
		res, err := New().Run(ctx, rc, backends.RunEnv{RunDir: t.TempDir(), Stderr: stderr}, func(e backends.Event) {
			if e.Kind == backends.EventStep {
				once.Do(func() { close(stepped) })
			}
		})
		assert.NoError(t, err)
		done <- res
	}()
	select {
	case <-stepped:
	case <-time.After(60 * time.Second):
		t.Fatal("no step within 60 s")
	}
	cancel()
	select {
	case res := <-done:
		assert.Equal(t, results.StatusCanceled, res.Status, res.Error)
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end after it was cancelled")
	}
	assert.Contains(t, stderr.String(), "context canceled (stopped by signal terminated)",
		"the worker must stop on SIGTERM by itself, not be killed")
}
