package gotrain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/fsdpbench/fsdpbench/backends/contract"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/fsdp"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/rendezvous"
	"github.com/fsdpbench/fsdpbench/backends/shapes"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
	"github.com/fsdpbench/fsdpbench/sweeps/input"
)

// EnvRunConfig names the environment variable that holds the path of the run's
// RunConfig (JSON) for a worker.
const EnvRunConfig = "FSDPBENCH_RUN_CONFIG"

// EnvCollectiveTimeout names the variable by which Run gives its workers the
// collective timeout it chose (a Go duration); without it a worker uses
// backend_options.collective_timeout, or comm's default.
const EnvCollectiveTimeout = "FSDPBENCH_COLLECTIVE_TIMEOUT"

// EventPrefix starts every line of a worker's stdout that the backend parses; the
// rest of the line is one JSON workerEvent.
const EventPrefix = "FSDPBENCH "

// ExitOOM is a worker's exit code when its device ran out of memory, so the backend
// can report the run as oom rather than failed.
const ExitOOM = 3

// ExitDiverged is a worker's exit code when the loss became NaN or infinite: the
// run is diverged (a result), and its last stderr line says where.
const ExitDiverged = 5

// errDiverged is the worker's error for a loss that is not finite.
var errDiverged = errors.New("diverged")

// WorkerEnv is what a worker process reads and writes: its environment (os.Getenv
// in the real command) and its output streams.
type WorkerEnv struct {
	Getenv func(string) string
	Stdout io.Writer
	Stderr io.Writer
}

// ExitCode is the process exit code for Worker's error: 0, ExitOOM for
// device.ErrOutOfMemory, ExitDiverged for a loss that is not finite, 1 otherwise.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, device.ErrOutOfMemory):
		return ExitOOM
	case errors.Is(err, errDiverged):
		return ExitDiverged
	default:
		return 1
	}
}

// workerEvent is one FSDPBENCH line.
type workerEvent struct {
	Event     string  `json:"event"`
	Rank      int     `json:"rank"`
	Step      int     `json:"step,omitempty"`
	Warmup    bool    `json:"warmup,omitempty"`
	Loss      float64 `json:"loss,omitempty"`
	StepTimeS float64 `json:"step_time_s,omitempty"`
	Tokens    int64   `json:"tokens,omitempty"`
	// Peer and Reason come with event "peer_failed": this rank stopped because the
	// peer of that world rank died or hung, as Reason (comm's error) says.
	Peer   *int   `json:"peer,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// RankFile is what a worker writes to ranks/rank-<r>.json in the run directory at
// the end of a successful run; the backend builds the Result from these files.
type RankFile struct {
	Rank int    `json:"rank"`
	Host string `json:"host,omitempty"`
	// Tokens is the global tokens of the measured steps.
	Tokens        int64     `json:"tokens"`
	MeasuredWallS float64   `json:"measured_wall_s"`
	StepTimesS    []float64 `json:"step_times_s"`
	Losses        []float64 `json:"losses"`
	// PeakMemAllocatedBytes is the device's peak total; PeakBytes its peak per
	// category (params, grads, optimizer, activations, comm, other).
	PeakMemAllocatedBytes int64            `json:"peak_mem_allocated_bytes"`
	PeakBytes             map[string]int64 `json:"peak_bytes"`
	PeakRSSBytes          int64            `json:"peak_rss_bytes"`
	// Env is the device this rank trained on (GPU name, driver, CUDA, cuBLAS).
	Env deviceEnv `json:"env"`
	// PeakMemReservedBytes is the cuda device's arena at its peak (0 on cpu);
	// ExtraBytes what the device held beyond the tracked buffers (device.ExtraMemory).
	PeakMemReservedBytes int64 `json:"peak_mem_reserved_bytes,omitempty"`
	// PeakDeviceMemBytes is the GPU's memory in use (cuMemGetInfo) at its largest
	// at a step's end, everything on the GPU included (0 on cpu).
	PeakDeviceMemBytes int64            `json:"peak_device_mem_bytes,omitempty"`
	ExtraBytes         map[string]int64 `json:"extra_bytes,omitempty"`
	// CommBytesPerStep is the payload this rank sent per measured step, per collective.
	CommBytesPerStep results.CommBytes `json:"comm_bytes_per_step"`
	// NCCL is the version of the libnccl the run used, with its path
	// ("2.27.3 (/path/libnccl.so.2)"); empty on the TCP ring.
	NCCL string `json:"nccl,omitempty"`
	// Gathers is how the unit all-gathers moved the parameters
	// (fsdp.RankReport.Gathers: none, zero-copy, shared, copy).
	Gathers string `json:"gathers,omitempty"`
	// SpecEnv is the spec's variables (env:) as this rank's process saw them.
	SpecEnv map[string]string `json:"spec_env,omitempty"`
	// KernelLaunchesPerStep is the kernel launches (cuBLAS calls, memsets and
	// device copies included: cuda.Device.Launches) of a measured step, averaged
	// over them; 0 on devices that launch nothing (cpu). A step whose launches
	// times a few microseconds approach its time is launch-bound.
	KernelLaunchesPerStep int64 `json:"kernel_launches_per_step,omitempty"`
	// Checkpoint is the checkpoint phase, when the run checkpoints.
	Checkpoint *CheckpointReport `json:"checkpoint,omitempty"`
	// StepBreakdown is where this rank's median measured step went
	// (results.MedianBreakdown over the steps' fsdp.StepReport.Breakdown).
	StepBreakdown *results.StepBreakdown `json:"step_breakdown,omitempty"`
}

// Worker runs one rank of a gotrain run: it reads the RunConfig named by
// FSDPBENCH_RUN_CONFIG and its place from torchrun's (or Slurm's) variables, trains
// warmup_steps + steps steps, prints rank 0's steps as FSDPBENCH lines and writes
// ranks/rank-<r>.json next to the config file. `fsdpbench worker` calls it.
//
// SIGTERM, SIGINT and SIGHUP stop it cleanly (its collectives abort and tell the
// peers); when a collective fails because of a peer, it prints a "peer_failed"
// line naming that peer, so the backend can blame the right rank.
func Worker(ctx context.Context, env WorkerEnv) error {
	ctx, stop := stopOnSignals(ctx)
	defer stop()
	err := work(ctx, env)
	if err != nil && ctx.Err() != nil {
		if cause := context.Cause(ctx); cause != ctx.Err() {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
	}
	return err
}

// stopOnSignals cancels ctx, with the signal as the cause, on SIGTERM, SIGINT or
// SIGHUP (a closed terminal or session): a worker stops as it would for a
// cancelled run, instead of dying where it stands.
func stopOnSignals(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(fmt.Errorf("stopped by signal %v", s))
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(nil)
	}
}

func work(ctx context.Context, env WorkerEnv) error {
	path := env.Getenv(EnvRunConfig)
	if path == "" {
		return fmt.Errorf("gotrain worker: %s is not set; the worker is started by the gotrain backend, not by hand", EnvRunConfig)
	}
	data, err := input.ReadJSON(path, input.RunFile)
	if err != nil {
		return fmt.Errorf("gotrain worker: read the run config: %w", err)
	}
	var rc sweeps.RunConfig
	if err := json.Unmarshal(data, &rc); err != nil {
		return fmt.Errorf("gotrain worker: run config %s: %w", path, err)
	}
	opts, err := ParseOptions(rc.BackendOptions)
	if err != nil {
		return err
	}
	shape, err := shapes.Lookup(rc.Model)
	if err != nil {
		return fmt.Errorf("gotrain worker: %w", err)
	}
	info, err := rendezvous.FromEnv(env.Getenv)
	if err != nil {
		return fmt.Errorf("gotrain worker: %w", err)
	}
	copts := comm.Options{OpTimeout: opts.CollectiveTimeout, TimeoutName: collectiveTimeoutOption, Transport: opts.Transport}
	if v := env.Getenv(EnvCollectiveTimeout); v != "" {
		if copts.OpTimeout, err = time.ParseDuration(v); err != nil {
			return fmt.Errorf("gotrain worker: %s: %w", EnvCollectiveTimeout, err)
		}
	}
	// GOMAXPROCS: the CPUs Go found this process may use (its affinity mask and,
	// since Go 1.25, its cgroup's CPU limit).
	threads, err := rankThreads(env.Getenv, runtime.GOMAXPROCS(0), info.LocalWorldSize)
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: %w", info.Rank, err)
	}
	dev, denv, closeDev, err := openDevice(rc.Hardware, opts.MemLimitBytes, info.LocalRank, opts.BLAS, threads)
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: %w", info.Rank, err)
	}
	defer closeDev()
	world, ncclVersion, err := dialWorld(ctx, info, opts, copts, dev)
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: %w", info.Rank, err)
	}
	defer world.Close()
	newTrainer := func() (*fsdp.Trainer, error) {
		return fsdp.New(ctx, dev, world, fsdp.Config{
			Shape: shape, Sharding: rc.Sharding, GPUsPerNode: rc.GPUsPerNode,
			BackwardPrefetch: rc.BackwardPrefetch, ForwardPrefetch: rc.ForwardPrefetch,
			ActivationCheckpointing: rc.ActivationCheckpointing, GradAccum: rc.GradAccum,
			BatchPerDevice: rc.BatchPerDevice, SeqLen: rc.SeqLen, Seed: uint64(rc.Seed), Data: opts.Data,
			LR: opts.LR, WeightDecay: opts.WeightDecay, GradClip: opts.GradClip, MixedPrecision: rc.MixedPrecision,
		})
	}
	tr, err := newTrainer()
	if err != nil {
		return fmt.Errorf("gotrain worker: rank %d: %w", info.Rank, err)
	}
	defer tr.Close()

	out := RankFile{Rank: info.Rank, Env: denv, NCCL: ncclVersion, SpecEnv: contract.Received(rc.Env, env.Getenv)}
	ckpt := newCheckpointer(rc, filepath.Dir(path), info.Rank)
	out.Host, _ = os.Hostname()
	enc := json.NewEncoder(env.Stdout)
	var before comm.Stats
	// launches counts the device's kernel launches (the cuda device's); the
	// measured steps' are reported per step.
	launches, counts := dev.(interface{ Launches() int64 })
	var launchesBefore int64
	breakdowns := make([]results.StepBreakdown, 0, rc.Steps)
	for i := 1; i <= rc.WarmupSteps+rc.Steps; i++ {
		// A step runs no collective at world size 1, and the cpu device's ops do
		// not watch ctx: without this check a stopped worker trained on until
		// SIGKILL (killGrace later), and a Ctrl-C took that long to take effect.
		if err := ctx.Err(); err != nil {
			return err
		}
		warmup := i <= rc.WarmupSteps
		if i == rc.WarmupSteps+1 {
			before = tr.Report().Comm
			if counts {
				launchesBefore = launches.Launches()
			}
			tr.KeepTimeline(timelineEventsPerRank(rc.WorldSize))
		}
		if opts.StepDelay > 0 {
			// A test knob: it makes a run last, outside the measured step.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(opts.StepDelay):
			}
		}
		rep, err := tr.Step(ctx)
		if err != nil {
			var pe *comm.PeerError
			if errors.As(err, &pe) && ctx.Err() == nil {
				_, _ = io.WriteString(env.Stdout, EventPrefix)
				_ = enc.Encode(workerEvent{Event: "peer_failed", Rank: info.Rank, Peer: &pe.Rank, Reason: pe.Error()})
			}
			return fmt.Errorf("gotrain worker: %w", err)
		}
		if math.IsNaN(rep.Loss) || math.IsInf(rep.Loss, 0) {
			// Every rank computes the same global loss, so all stop here together;
			// JSON could not carry the value anyway.
			where := fmt.Sprintf("measured step %d of %d", i-rc.WarmupSteps, rc.Steps)
			if warmup {
				where = fmt.Sprintf("warm-up step %d of %d", i, rc.WarmupSteps)
			}
			return fmt.Errorf("gotrain worker: rank %d: %w: the loss is %v at %s (lr %g; lower backend_options.lr or set grad_clip)",
				info.Rank, errDiverged, rep.Loss, where, opts.LR)
		}
		if info.Rank == 0 {
			if _, err := io.WriteString(env.Stdout, EventPrefix); err != nil {
				return err
			}
			if err := enc.Encode(workerEvent{Event: "step", Rank: 0, Step: rep.Step, Warmup: warmup,
				Loss: rep.Loss, StepTimeS: rep.Time.Seconds(), Tokens: int64(rep.Tokens)}); err != nil {
				return err
			}
		}
		if warmup {
			continue
		}
		breakdowns = append(breakdowns, rep.Breakdown)
		out.StepTimesS = append(out.StepTimesS, rep.Time.Seconds())
		out.Losses = append(out.Losses, rep.Loss)
		out.MeasuredWallS += rep.Time.Seconds()
		out.Tokens += int64(rep.Tokens)
		if m := i - rc.WarmupSteps; ckpt.due(m) {
			// Outside the measured step: the save is a phase of its own.
			if err := ckpt.save(ctx, tr, m); err != nil {
				return err
			}
		}
	}
	rr := tr.Report()
	out.StepBreakdown = results.MedianBreakdown(breakdowns)
	tlSteps, tlEvents, tlDropped := tr.Timeline()
	source := ""
	if out.StepBreakdown != nil {
		source = out.StepBreakdown.Source
	}
	timeline := newRankTimeline(info.Rank, out.Host, source, tlSteps, tlEvents, tlDropped)
	out.PeakMemAllocatedBytes = rr.Memory.PeakTotal
	out.Gathers = rr.Gathers
	out.PeakBytes = map[string]int64{}
	for c := device.Category(0); c < device.NumCategories; c++ {
		if v := rr.Memory.Peak[c]; v != 0 || c != device.Other {
			out.PeakBytes[c.String()] = v
		}
	}
	out.PeakRSSBytes = peakRSS()
	if x, ok := dev.(device.ExtraMemory); ok {
		out.ExtraBytes = x.ExtraMemory()
		out.PeakMemReservedBytes = out.ExtraBytes["arena_peak_reserved"]
		out.PeakDeviceMemBytes = out.ExtraBytes["peak_device_used"]
	}
	if n := int64(rc.Steps); n > 0 && counts {
		out.KernelLaunchesPerStep = (launches.Launches() - launchesBefore) / n
	}
	if n := int64(rc.Steps); n > 0 {
		d := rr.Comm
		out.CommBytesPerStep = results.CommBytes{
			AllGather:     (d.AllGather.BytesSent - before.AllGather.BytesSent) / n,
			ReduceScatter: (d.ReduceScatter.BytesSent - before.ReduceScatter.BytesSent) / n,
			AllReduce:     (d.AllReduce.BytesSent - before.AllReduce.BytesSent) / n,
		}
		inter := (d.AllGather.BytesSentInterNode + d.ReduceScatter.BytesSentInterNode + d.AllReduce.BytesSentInterNode -
			before.AllGather.BytesSentInterNode - before.ReduceScatter.BytesSentInterNode - before.AllReduce.BytesSentInterNode) / n
		out.CommBytesPerStep.InterNode = &inter
	}
	if ckpt != nil {
		// The resume check trains a fresh trainer: free the first one's memory.
		tr.Close()
		if err := ckpt.resume(ctx, newTrainer, out.Losses[rc.CheckpointEvery:]); err != nil {
			return err
		}
		out.Checkpoint = &ckpt.report
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Join(filepath.Dir(path), "ranks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("gotrain worker: %w", err)
	}
	// The timeline first: the backend reads it once the report is there.
	if err := writeRankTimeline(filepath.Dir(path), timeline); err != nil {
		return fmt.Errorf("gotrain worker: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rank-"+strconv.Itoa(info.Rank)+".json"), b, 0o644); err != nil {
		return fmt.Errorf("gotrain worker: %w", err)
	}
	return nil
}

// dialWorld opens the world communicator that backend_options.comm names; for
// NCCL it also returns the library's version and path.
func dialWorld(ctx context.Context, info rendezvous.Info, opts Options, copts comm.Options, dev device.Device) (comm.Communicator, string, error) {
	_, onGPU := dev.(*cuda.Device)
	which, err := commFor(opts.Comm, onGPU)
	if err != nil {
		return nil, "", err
	}
	if which != CommNCCL {
		c, err := comm.Dial(ctx, info, copts)
		return c, "", err
	}
	lib, err := nccl.Load()
	if err != nil {
		return nil, "", err
	}
	no := nccl.Options{Timeout: copts.OpTimeout}
	if cd, ok := dev.(*cuda.Device); ok { // collectives on the cuda device's comm stream
		no.Stream, no.Staging = cd.CollectiveStream(), cd
	}
	c, err := nccl.Dial(ctx, info, lib, no)
	if err != nil {
		return nil, "", err
	}
	return c, fmt.Sprintf("%s (%s)", lib.VersionString(), lib.Path), nil
}

// peakRSS is this process's peak resident set; Linux reports ru_maxrss in KiB.
func peakRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}
