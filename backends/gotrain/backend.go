// Package gotrain is the Go trainer as a backend: Run starts one worker process per
// rank (this executable's `worker` subcommand, torchrun's environment), each
// training the model with fsdp/ on the cpu device over comm/'s communicator (shared
// memory within a node, the TCP ring between nodes), and turns
// what the workers print and write into a results.Result. A rank that dies takes
// the others down with it: every worker has its own process group, and the backend
// kills every group (SIGTERM, then SIGKILL) on the first failure or cancellation.
package gotrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/model"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// Name is the backend's name in specs and the registry.
const Name = "gotrain"

// PIDFile is the file in the run directory where Run lists its workers, one
// "rank pid" line each, so that an operator (or a test) can find them.
const PIDFile = "workers.pid"

// configFile is the RunConfig the workers read, in the run directory.
const configFile = "gotrain-run-config.json"

// killGrace is how long a worker has between SIGTERM and SIGKILL.
const killGrace = 2 * time.Second

// stderrTail is how many of a rank's last stderr lines a failure reports.
const stderrTail = 5

// Options are the gotrain backend_options.
type Options struct {
	// LR, WeightDecay and GradClip are AdamW's and the clipping norm (torch's
	// defaults: lr 1e-3, weight_decay 0.01; no clipping).
	LR          float64
	WeightDecay float64
	GradClip    float64
	// StepDelay sleeps before each step (outside its timing), so a run lasts long
	// enough to be interrupted in tests.
	StepDelay time.Duration
	// MemLimitBytes caps each rank's device memory (0: none), so out-of-memory is
	// reproducible on cpu.
	MemLimitBytes int64
	// Comm is the communicator: CommTCP (the TCP ring) or CommNCCL
	// (libnccl.so.2; on the cpu device only a host-memory NCCL such as the
	// tests' fake accepts the buffers). Empty is the device's own: tcp on cpu,
	// nccl on the cuda device (commFor).
	Comm string
	// CollectiveTimeout is how long a rank waits for a peer inside one collective
	// before it names that peer as hung and the run fails. 0: the default, 10
	// minutes (torch's NCCL default), or half the run's timeout when that is
	// shorter, so that a hung rank is named before the run times out.
	CollectiveTimeout time.Duration
	// BLAS is the cpu device's GEMM library: BLASAuto or empty (OpenBLAS when it
	// loads, else gonum's pure Go), BLASOpenBLAS (fail when it does not load) or
	// BLASGonum.
	BLAS string
	// Data is the synthetic data set the model trains on: model.DataRandom
	// (the default, empty too: random tokens, whose loss stays near
	// ln(vocab)) or model.DataRepeat (a repeated sequence it learns, so the
	// loss falls).
	Data string
	// Transport is how the tcp communicator's ranks on one node exchange data:
	// comm.TransportAuto (empty too: shared memory within a node, TCP between
	// nodes), comm.TransportShm (shared memory, one node only) or
	// comm.TransportTCP (the TCP ring everywhere, to compare).
	Transport string
}

// BLAS libraries for Options.BLAS.
const (
	BLASAuto     = "auto"
	BLASOpenBLAS = "openblas"
	BLASGonum    = "gonum"
)

// Communicators for Options.Comm.
const (
	CommTCP  = "tcp"
	CommNCCL = "nccl"
)

// optionNames are the backend_options gotrain knows, for errors.
var optionNames = []string{"blas", "collective_timeout", "comm", "data", "grad_clip", "lr", "mem_limit_bytes", "step_delay", "transport", "weight_decay"}

// Bounds of the options: anything past them is a typo, not an experiment.
const (
	maxLR          = 10
	maxWeightDecay = 10
	maxGradClip    = 1e6
	maxStepDelay   = time.Hour
	maxMemLimit    = 1 << 50 // 1 PiB
)

// Bounds of backend_options.collective_timeout.
const (
	MinCollectiveTimeout = time.Second
	MaxCollectiveTimeout = 24 * time.Hour
)

// collectiveTimeoutOption is the option's name in messages.
const collectiveTimeoutOption = "backend_options.collective_timeout"

// ParseOptions reads backend_options: lr, weight_decay, grad_clip, step_delay (a
// duration such as "200ms"), mem_limit_bytes, comm (tcp | nccl), transport (auto
// | shm | tcp), collective_timeout (a duration, MinCollectiveTimeout to
// MaxCollectiveTimeout), blas (auto | openblas | gonum) and data (random |
// repeat: model.DataKinds), each bounded. Errors are
// *backends.SpecError values naming the option; unknown keys suggest a known one.
func ParseOptions(m map[string]any) (Options, error) {
	o := Options{LR: 1e-3, WeightDecay: 0.01}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same error first on every run
	for _, k := range keys {
		v := m[k]
		var err error
		switch k {
		case "lr":
			o.LR, err = backends.NumberIn(v, 0, maxLR, true)
		case "weight_decay":
			o.WeightDecay, err = backends.NumberIn(v, 0, maxWeightDecay, false)
		case "grad_clip":
			o.GradClip, err = backends.NumberIn(v, 0, maxGradClip, false)
		case "mem_limit_bytes":
			o.MemLimitBytes, err = backends.WholeIn(v, 0, maxMemLimit)
		case "collective_timeout":
			o.CollectiveTimeout, err = backends.DurationIn(v, MinCollectiveTimeout, MaxCollectiveTimeout)
		case "step_delay":
			o.StepDelay, err = backends.DurationIn(v, 0, maxStepDelay)
		case "comm":
			c, _ := v.(string)
			if c != CommTCP && c != CommNCCL {
				err = fmt.Errorf("must be %q or %q, got %v", CommTCP, CommNCCL, v)
			}
			o.Comm = c
		case "blas":
			o.BLAS, _ = v.(string)
			if o.BLAS != BLASAuto && o.BLAS != BLASOpenBLAS && o.BLAS != BLASGonum {
				err = fmt.Errorf("must be %q, %q or %q, got %v", BLASAuto, BLASOpenBLAS, BLASGonum, v)
			}
		case "data":
			o.Data, _ = v.(string)
			if !slices.Contains(model.DataKinds, o.Data) {
				err = fmt.Errorf("must be one of %v (random: tokens no model can predict, the loss stays near ln(vocab); repeat: a repeated sequence the model learns), got %v", model.DataKinds, v)
			}
		case "transport":
			tr, _ := v.(string)
			if !slices.Contains(comm.Transports, tr) {
				err = fmt.Errorf("must be one of %v, got %v", comm.Transports, v)
			}
			o.Transport = tr
		default:
			return o, backends.UnknownOption("backend_options", "gotrain", k, optionNames)
		}
		if err != nil {
			return o, backends.SpecErrorf("gotrain: backend_options.%s: %w", k, err)
		}
	}
	return o, nil
}

// Backend runs the Go trainer in worker processes on this host.
type Backend struct {
	// executable returns the program started as the workers, with `worker` as its
	// argument: os.Executable by default.
	executable func() (string, error)
}

// New returns the gotrain backend.
func New() *Backend { return &Backend{executable: os.Executable} }

var _ backends.Backend = (*Backend)(nil)

// Name returns "gotrain".
func (*Backend) Name() string { return Name }

// Describe says the backend trains here in fp32, on the cpu device and, where
// this machine has a GPU, on the cuda device; Reason says why the cuda device
// cannot run here.
func (*Backend) Describe(context.Context) (backends.Description, error) {
	hw := []string{"cpu", hardware.Auto}
	reason := cudaReason()
	if reason == "" {
		for _, n := range hardware.Names() {
			if p, err := hardware.Lookup(n); err == nil && p.IsGPU {
				hw = append(hw, n)
			}
		}
	}
	return backends.Description{
		Name: Name,
		Summary: "the Go trainer: one worker process per rank on this host, FSDP strategies and DDP " +
			"over a TCP ring (or NCCL with comm: nccl), on the cpu device or the cuda device (NCCL)",
		Available: true,
		Reason:    reason,
		Axes: map[string][]string{
			"mixed_precision": {sweeps.FP32, sweeps.BF16},
			"hardware":        hw,
		},
		Source: "builtin",
	}, nil
}

// Validate refuses what the cpu trainer cannot run: a model that is not a llama-arch
// shape the model package builds, any precision but fp32, cpu_offload, compile, a
// world size that is not nodes × gpus_per_node, and a library the options ask for
// (comm: nccl, blas: openblas) that does not load. An OpenBLAS that blas: openblas
// asks for, or that FSDPBENCH_LIBOPENBLAS names, and that does not load is a
// *backends.SpecError: a problem of this host's environment, not a verdict on the
// run, so the sweep refuses to start (exit 2) instead of storing every run as
// infeasible, which a resume would then skip as done.
func (*Backend) Validate(_ context.Context, rc sweeps.RunConfig) error {
	opts, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return err
	}
	gpu, err := useCUDA(rc.Hardware)
	if err != nil {
		return err
	}
	if c, err := commFor(opts.Comm, gpu); err != nil {
		return err
	} else if c == CommNCCL {
		if _, err := nccl.Load(); err != nil {
			return fmt.Errorf("gotrain: backend_options.comm nccl: %w", err)
		}
	}
	if !gpu {
		// Refused here, before the sweep starts, rather than by every rank of
		// every run (openCPU says the same where a worker finds it missing).
		if err := checkBLAS(opts.BLAS); err != nil {
			return err
		}
	}
	switch rc.MixedPrecision {
	case sweeps.FP32, sweeps.BF16: // bf16: FSDP2's MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)
	case sweeps.FP16:
		return errors.New("mixed_precision fp16: fp16 training needs loss scaling (torch's ShardedGradScaler), which the Go trainer does not have (set mixed_precision: bf16 or fp32)")
	default:
		return fmt.Errorf("mixed_precision %q: the Go trainer trains in fp32 or bf16 (set mixed_precision: bf16 or fp32)", rc.MixedPrecision)
	}
	if rc.CPUOffload {
		return errors.New("cpu_offload: the cpu device already holds everything in host memory; there is nothing to offload (set cpu_offload: false)")
	}
	if rc.Compile {
		return errors.New("compile: the Go trainer has no compiler (torch.compile is a torchrun feature; set compile: false)")
	}
	if err := rc.CheckCheckpoint(); err != nil {
		return fmt.Errorf("gotrain: %w", err)
	}
	if rc.WorldSize <= 0 || rc.Nodes <= 0 || rc.GPUsPerNode <= 0 || rc.Nodes*rc.GPUsPerNode != rc.WorldSize {
		return fmt.Errorf("world_size %d must be nodes %d × gpus_per_node %d (gotrain runs every rank on this host)", rc.WorldSize, rc.Nodes, rc.GPUsPerNode)
	}
	if opts.Transport == comm.TransportShm && rc.Nodes > 1 {
		return fmt.Errorf("backend_options.transport shm: the world spans %d nodes, and shared memory joins the ranks of one (set transport: auto for shared memory within each node and TCP between)", rc.Nodes)
	}
	if rc.SeqLen <= 0 || rc.BatchPerDevice <= 0 || rc.Steps <= 0 || rc.WarmupSteps < 0 {
		return fmt.Errorf("seq_len %d, batch_per_device %d and steps %d must be positive, warmup_steps %d not negative",
			rc.SeqLen, rc.BatchPerDevice, rc.Steps, rc.WarmupSteps)
	}
	shape, err := shapes.Lookup(rc.Model)
	if err != nil {
		return err
	}
	if _, err := model.Layout(shape); err != nil {
		return fmt.Errorf("gotrain: model %s: %w", rc.Model, err)
	}
	if shape.MaxPositions > 0 && rc.SeqLen > shape.MaxPositions {
		return fmt.Errorf("seq_len %d exceeds model %s's max_positions %d", rc.SeqLen, rc.Model, shape.MaxPositions)
	}
	return nil
}

// worker is one started rank.
type worker struct {
	rank int
	cmd  *exec.Cmd
	mu   sync.Mutex
	tail []string // the last stderr lines
}

func (w *worker) addTail(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tail = append(w.tail, line)
	if len(w.tail) > stderrTail {
		w.tail = w.tail[len(w.tail)-stderrTail:]
	}
}

func (w *worker) lastLines() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.tail, "\n")
}

// exit is how one worker ended.
type exit struct {
	rank int
	err  error
	// killed is true when the backend had already signalled every worker.
	killed bool
}

// Run starts world_size workers, waits for them and builds the Result. A worker
// that fails (or the context ending) kills every worker's process group.
func (b *Backend) Run(ctx context.Context, rc sweeps.RunConfig, env backends.RunEnv, emit func(backends.Event)) (results.Result, error) {
	res := newResult(rc)
	if host, err := os.Hostname(); err == nil {
		res.Env.Hosts = []string{host}
	}
	if err := b.Validate(ctx, rc); err != nil {
		if backends.IsSpecError(err) {
			return res, err // bad options: the backend's failure to run, not a verdict on rc
		}
		res.Status, res.Error, res.Finished = results.StatusInfeasible, err.Error(), time.Now()
		return res, nil
	}
	if emit == nil {
		emit = func(backends.Event) {}
	}
	stdout, stderr := env.Stdout, env.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	exe, err := b.executable()
	if err != nil {
		return res, fmt.Errorf("gotrain: find this executable to start the workers: %w", err)
	}
	if err := os.MkdirAll(env.RunDir, 0o755); err != nil {
		return res, fmt.Errorf("gotrain: %w", err)
	}
	cfgPath, err := writeRunConfig(rc, env.RunDir)
	if err != nil {
		return res, err
	}
	port, err := freePort()
	if err != nil {
		return res, fmt.Errorf("gotrain: find a free port for the rendezvous: %w", err)
	}
	opts, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return res, err
	}
	collTimeout := collectiveTimeout(ctx, opts)

	var outMu sync.Mutex // one line at a time into each shared writer
	writeLine := func(w io.Writer, rank int, line string) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(w, "[rank %d] %s\n", rank, line)
	}
	var steps []results.Step
	var badEvent string // the first broken FSDPBENCH line, which fails the run
	var stepsMu sync.Mutex
	// blamed holds what the ranks said about a failed peer, by the peer's rank.
	blamed := map[int]string{}
	var blamedOrder []int

	workers := make([]*worker, 0, rc.WorldSize)
	exits := make(chan exit, rc.WorldSize)
	var killOnce sync.Once
	killed := make(chan struct{})
	killAll := func() {
		killOnce.Do(func() {
			close(killed)
			for _, w := range workers {
				_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGTERM)
			}
		})
	}
	var pids strings.Builder
	var readers sync.WaitGroup
	var releases []func() // of the threads the workers were forked from (contract.Tie)
	defer func() {
		for _, r := range releases {
			r()
		}
	}()
	for r := 0; r < rc.WorldSize; r++ {
		cmd := exec.Command(exe, "worker")
		// A worker dies with this process, even by SIGKILL: nothing else would stop
		// it before its next write, or before the rendezvous times out.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		// The spec's variables (env:) on top of what this process inherited; the
		// harness's own come after them (a spec cannot name those).
		cmd.Env = append(contract.WithEnv(os.Environ(), rc.Env),
			"MASTER_ADDR=127.0.0.1",
			"MASTER_PORT="+strconv.Itoa(port),
			"RANK="+strconv.Itoa(r),
			"WORLD_SIZE="+strconv.Itoa(rc.WorldSize),
			"LOCAL_RANK="+strconv.Itoa(r%rc.GPUsPerNode),
			"LOCAL_WORLD_SIZE="+strconv.Itoa(rc.GPUsPerNode),
			"GROUP_RANK="+strconv.Itoa(r/rc.GPUsPerNode),
			EnvRunConfig+"="+cfgPath,
			EnvCollectiveTimeout+"="+collTimeout.String(),
		)
		outPipe, err := cmd.StdoutPipe()
		if err == nil {
			var errPipe io.ReadCloser
			errPipe, err = cmd.StderrPipe()
			if err == nil {
				var release func()
				release, err = contract.Tie(cmd.Start)
				releases = append(releases, release)
			}
			if err == nil {
				w := &worker{rank: r, cmd: cmd}
				workers = append(workers, w)
				fmt.Fprintf(&pids, "%d %d\n", r, cmd.Process.Pid)
				readers.Add(1)
				go func() {
					defer readers.Done()
					var wg sync.WaitGroup
					wg.Add(2)
					go func() {
						defer wg.Done()
						// contract.ScanLines bounds each line and reads on past a long
						// one, as torchrun's output is read.
						_ = contract.ScanLines(errPipe, func(line string) {
							w.addTail(line)
							writeLine(stderr, w.rank, line)
						})
						_, _ = io.Copy(io.Discard, errPipe)
					}()
					go func() {
						defer wg.Done()
						_ = contract.ScanLines(outPipe, func(line string) {
							writeLine(stdout, w.rank, line)
							we, ok, err := stepEvent(line)
							if err != nil {
								stepsMu.Lock()
								if badEvent == "" {
									badEvent = fmt.Sprintf("rank %d: %v", w.rank, err)
								}
								stepsMu.Unlock()
							}
							if we.Event == "peer_failed" && we.Peer != nil {
								stepsMu.Lock()
								if _, seen := blamed[*we.Peer]; !seen {
									blamed[*we.Peer] = we.Reason
									blamedOrder = append(blamedOrder, *we.Peer)
								}
								stepsMu.Unlock()
								return
							}
							if !ok {
								return
							}
							loss := we.Loss
							stepsMu.Lock()
							steps = append(steps, results.Step{Step: len(steps) + 1, Loss: &loss, StepTimeS: we.StepTimeS, Tokens: we.Tokens})
							n := len(steps)
							stepsMu.Unlock()
							emit(backends.Event{Kind: backends.EventStep, Time: time.Now(), Rank: w.rank,
								Step: n, Loss: &loss, StepTimeS: we.StepTimeS, Tokens: we.Tokens})
						})
						_, _ = io.Copy(io.Discard, outPipe)
					}()
					wg.Wait()
					err := w.cmd.Wait()
					select {
					case <-killed:
						exits <- exit{rank: w.rank, err: err, killed: true}
					default:
						exits <- exit{rank: w.rank, err: err}
					}
				}()
			}
		}
		if err != nil {
			killAll()
			b.reap(workers, exits, len(workers))
			return res, fmt.Errorf("gotrain: start rank %d (%s worker): %w", r, exe, err)
		}
	}
	_ = os.WriteFile(filepath.Join(env.RunDir, PIDFile), []byte(pids.String()), 0o644)
	emit(backends.Event{Kind: backends.EventStarted, Time: time.Now()})

	var first *exit // the first worker to end badly on its own
	oom, diverged := -1, -1
	canceled := false
	// stopped lists the ranks found stopped (SIGSTOP, SIGTSTP, a tracer) when the
	// run began to end: such a rank hangs its peers, and is the one to name.
	var stopped []int
	findStopped := func() {
		if stopped != nil {
			return
		}
		stopped = []int{}
		for _, w := range workers {
			if contract.Stopped(w.cmd.Process.Pid) {
				stopped = append(stopped, w.rank)
			}
		}
	}
	done := 0
	var hardKill <-chan time.Time
	ctxDone := ctx.Done()
	for done < rc.WorldSize {
		select {
		case e := <-exits:
			done++
			if e.err == nil {
				continue
			}
			var ee *exec.ExitError
			if errors.As(e.err, &ee) && ee.ExitCode() == ExitOOM && oom < 0 {
				oom = e.rank
			}
			if errors.As(e.err, &ee) && ee.ExitCode() == ExitDiverged && diverged < 0 {
				diverged = e.rank
			}
			if first == nil && !e.killed {
				first = &e
			} else if !e.killed && first != nil && !signaled(first.err) && signaled(e.err) {
				// A rank killed from outside is the cause; a rank that exited with an
				// error on its own at about the same time most likely lost that peer.
				first = &e
			}
			if hardKill == nil {
				findStopped()
				killAll()
				hardKill = time.After(killGrace)
			}
		case <-ctxDone:
			ctxDone = nil // a closed channel would spin this loop
			if hardKill == nil {
				findStopped()
				canceled = true
				killAll()
				hardKill = time.After(killGrace)
			}
		case <-hardKill:
			for _, w := range workers {
				_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			}
			hardKill = nil
		}
	}
	// A worker's own children (none today) die with its group.
	for _, w := range workers {
		_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
	readers.Wait()
	res.Finished = time.Now()
	switch {
	case oom >= 0:
		res.Status = results.StatusOOM
		res.Error = fmt.Sprintf("rank %d ran out of device memory", oom)
		if tail := workers[oom].lastLines(); tail != "" {
			res.Error += ":\n" + tail
		}
	case diverged >= 0:
		res.Status = results.StatusDiverged
		res.Error = divergedError(diverged, workers[diverged].lastLines())
	case first != nil && !signaled(first.err) && len(blamedOrder) > 0:
		// The ranks that exited on their own did so because of a peer, which they
		// name: that peer (hung, stopped or dead) is the cause, whoever exited first.
		peer := blamedOrder[0]
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("rank %d failed%s: %s", peer, stoppedNote(stopped, peer), blamed[peer])
		if peer >= 0 && peer < len(workers) {
			if tail := workers[peer].lastLines(); tail != "" {
				res.Error += "; its last stderr lines:\n" + tail
			}
		}
	case first != nil:
		res.Status = results.StatusFailed
		res.Error = fmt.Sprintf("rank %d exited: %v", first.rank, first.err)
		if tail := workers[first.rank].lastLines(); tail != "" {
			res.Error += "; its last stderr lines:\n" + tail
		}
	case canceled:
		res.Status = results.StatusCanceled
		res.Error = fmt.Sprintf("canceled: %v; every worker was stopped", context.Cause(ctx))
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Status = results.StatusTimeout
			res.Error = "timed out; every worker was stopped"
		}
		if len(stopped) > 0 {
			res.Error = fmt.Sprintf("rank %d was stopped by a signal (SIGSTOP or SIGTSTP) and hung the run; %s", stopped[0], res.Error)
		} else if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			res.Error = fmt.Sprintf("no rank reported a hung peer within %s (%v); %s", collectiveTimeoutOption, collTimeout, res.Error)
		}
	case badEvent != "":
		res.Status, res.Error = results.StatusFailed, "gotrain: a worker printed a broken FSDPBENCH line: "+badEvent
	default:
		if err := b.collect(&res, rc, env.RunDir, steps); err != nil {
			res.Status, res.Error = results.StatusFailed, err.Error()
		}
	}
	emit(backends.Event{Kind: backends.EventFinished, Time: time.Now(), Status: res.Status})
	return res, nil
}

// stoppedNote says that rank was found stopped, if it was.
func stoppedNote(stopped []int, rank int) string {
	if slices.Contains(stopped, rank) {
		return " (it was stopped by a signal: SIGSTOP or SIGTSTP)"
	}
	return ""
}

// defaultCollectiveShare is the part of the run's remaining time that the default
// collective timeout may take: a hung rank must be named before the run times out.
const defaultCollectiveShare = 2

// collectiveTimeout is the workers' collective timeout: the option when set, else
// comm's default or half the time ctx has left, whichever is shorter (no less than
// MinCollectiveTimeout).
func collectiveTimeout(ctx context.Context, o Options) time.Duration {
	if o.CollectiveTimeout > 0 {
		return o.CollectiveTimeout
	}
	t := comm.DefaultOpTimeout
	if d, ok := ctx.Deadline(); ok {
		t = min(t, max(time.Until(d)/defaultCollectiveShare, MinCollectiveTimeout))
	}
	return t
}

// newResult is a Result with what rc says before anything runs.
func newResult(rc sweeps.RunConfig) results.Result {
	res := results.Result{WorldSize: rc.WorldSize, Nodes: rc.Nodes, GPUsPerNode: rc.GPUsPerNode,
		TokensPerStep: rc.TokensPerStep(), Started: time.Now()}
	res.Env.Go = runtime.Version()
	res.Env.Hardware = "cpu"
	return res
}

// writeRunConfig writes rc where the workers read it, in runDir, and clears the
// previous repeat's rank reports; it returns the file's path.
func writeRunConfig(rc sweeps.RunConfig, runDir string) (string, error) {
	cfgPath := filepath.Join(runDir, configFile)
	data, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return "", fmt.Errorf("gotrain: encode the run config: %w", err)
	}
	if err := os.WriteFile(cfgPath, data, 0o644); err != nil {
		return "", fmt.Errorf("gotrain: %w", err)
	}
	_ = os.RemoveAll(filepath.Join(runDir, "ranks"))
	return cfgPath, nil
}

// reap waits for n started workers after killAll, with SIGKILL after the grace.
func (b *Backend) reap(workers []*worker, exits <-chan exit, n int) {
	deadline := time.After(killGrace)
	for n > 0 {
		select {
		case <-exits:
			n--
		case <-deadline:
			for _, w := range workers {
				_ = syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
			}
			deadline = nil
		}
	}
}

// signaled reports whether err is the exit of a process killed by a signal.
func signaled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled()
}

// collect fills res from the ranks' files.
func (b *Backend) collect(res *results.Result, rc sweeps.RunConfig, runDir string, steps []results.Step) error {
	files := make([]RankFile, rc.WorldSize)
	for r := range files {
		f, err := readRankFile(filepath.Join(runDir, "ranks", "rank-"+strconv.Itoa(r)+".json"), r, rc)
		if err != nil {
			return err
		}
		files[r] = f
	}
	shape, err := shapes.Lookup(rc.Model)
	if err != nil {
		return err
	}
	r0 := files[0]
	prof, err := runProfile(rc.Hardware, r0.Env.GPU != "")
	if err != nil {
		return err
	}
	res.Env.Hardware, res.Env.GPU, res.Env.Driver, res.Env.CUDA, res.Env.CUBLAS = prof.Name, r0.Env.GPU, r0.Env.Driver, r0.Env.CUDA, r0.Env.CUBLAS
	res.Env.BLAS, res.Env.BLASThreads = r0.Env.BLAS, r0.Env.BLASThreads
	peak, err := prof.Peak(rc.MixedPrecision) // bf16 GEMMs run at the bf16 peak
	if err != nil {
		return err
	}
	res.Extra = map[string]any{"precision": precisionOf(rc.MixedPrecision)}
	if r0.Gathers != "" {
		// Which all-gather path ran: it explains a step time (zero-copy moves
		// no byte), and tells a transport comparison what it compared.
		res.Extra["gathers"] = r0.Gathers
	}
	if r0.KernelLaunchesPerStep > 0 {
		// Rank 0's kernel launches per measured step (the cuda device): whether
		// the step is launch-bound, and what fusing ops saves.
		res.Extra["kernel_launches_per_step"] = r0.KernelLaunchesPerStep
	}
	// Rank 0's losses (every rank computes the same global loss); a step lasts as
	// long as its slowest rank.
	res.Steps = make([]results.Step, rc.Steps)
	res.Env.NCCL = r0.NCCL
	for i := range res.Steps {
		loss := r0.Losses[i]
		st := results.Step{Step: i + 1, Loss: &loss, StepTimeS: r0.StepTimesS[i], Tokens: rc.TokensPerStep()}
		if i < len(steps) && steps[i].Tokens > 0 {
			st.Tokens = steps[i].Tokens
		}
		for _, f := range files[1:] {
			st.StepTimeS = max(st.StepTimeS, f.StepTimesS[i])
		}
		res.Steps[i] = st
	}
	var peakAlloc, peakRSS, peakReserved, peakDevice int64
	comm := &results.CommBytes{}
	for _, f := range files {
		res.MeasuredWallS = max(res.MeasuredWallS, f.MeasuredWallS)
		if f.PeakMemAllocatedBytes > peakAlloc {
			peakAlloc = f.PeakMemAllocatedBytes
			res.MemBreakdownBytes = f.PeakBytes
		}
		peakRSS = max(peakRSS, f.PeakRSSBytes)
		peakReserved = max(peakReserved, f.PeakMemReservedBytes)
		peakDevice = max(peakDevice, f.PeakDeviceMemBytes)
		comm.AllGather = max(comm.AllGather, f.CommBytesPerStep.AllGather)
		comm.ReduceScatter = max(comm.ReduceScatter, f.CommBytesPerStep.ReduceScatter)
		comm.AllReduce = max(comm.AllReduce, f.CommBytesPerStep.AllReduce)
		if v := f.CommBytesPerStep.InterNode; v != nil && (comm.InterNode == nil || *v > *comm.InterNode) {
			comm.InterNode = results.I64(*v)
		}
		loss := f.Losses[len(f.Losses)-1]
		// A rank file counts the global batch's tokens; results sums RankResult.Tokens
		// over ranks, so each rank reports its own share (global_batch divides evenly).
		res.PerRank = append(res.PerRank, results.RankResult{Rank: f.Rank, Host: f.Host,
			MeasuredWallS: f.MeasuredWallS, Tokens: f.Tokens / int64(rc.WorldSize),
			PeakMemAllocatedBytes: results.I64(f.PeakMemAllocatedBytes),
			PeakRSSBytes:          results.I64(f.PeakRSSBytes), LossLast: &loss,
			PeakMemReservedBytes: nonZero(f.PeakMemReservedBytes), PeakDeviceMemBytes: nonZero(f.PeakDeviceMemBytes),
			StepBreakdown: f.StepBreakdown})
	}
	if err := collectTimeline(res, runDir, rc.WorldSize); err != nil {
		return err
	}
	res.Status = results.StatusOK
	res.ModelFlopsPerToken = shape.FlopsPerToken(rc.SeqLen)
	res.PeakFlopsPerS = peak
	res.PeakMemAllocatedBytes = results.I64(peakAlloc)
	res.PeakRSSBytes = results.I64(peakRSS)
	if peakReserved > 0 {
		res.PeakMemReservedBytes = results.I64(peakReserved)
	}
	if peakDevice > 0 {
		res.PeakDeviceMemBytes = results.I64(peakDevice)
	}
	if prof.MemBytes > 0 {
		res.DeviceMemBytes = results.I64(prof.MemBytes)
	}
	res.CommBytesPerStep = comm
	res.Env.ModelParams = shape.Params()
	collectCheckpoint(res, rc, files)
	return nil
}

// precisionOf says what a run's mixed_precision trained with, as metrics.json's
// extra.precision: the dtype of each kind of memory and of the reductions.
func precisionOf(mp string) map[string]string {
	if mp == sweeps.BF16 {
		return map[string]string{
			"policy":       "FSDP2 MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)",
			"master":       "float32 (sharded parameters, gradient shards, AdamW state)",
			"gathered":     "bfloat16 (all-gather in bfloat16)",
			"activations":  "bfloat16; rstd, attention lse and per-token losses float32",
			"unit_grads":   "bfloat16, accumulated and reduced in float32",
			"gemm":         "bfloat16 inputs, float32 accumulation",
			"reduce_dtype": "float32",
		}
	}
	return map[string]string{"policy": "float32 throughout", "reduce_dtype": "float32"}
}

// freePort asks the kernel for a free TCP port on loopback. Another process may take
// it before rank 0 listens; rank 0 then fails with an error that says so.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
