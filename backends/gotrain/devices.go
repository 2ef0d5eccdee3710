package gotrain

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cpu/openblas"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda"
	"github.com/fsdpbench/fsdpbench/backends/hardware"
	"github.com/fsdpbench/fsdpbench/results"
)

// useCUDA says which device a run's hardware asks for: cpu → the cpu device; a GPU
// profile → the cuda device, and an error with the reason when this machine cannot
// run it; auto → the cuda device where there is one, else the cpu device.
func useCUDA(hw string) (bool, error) {
	switch hw {
	case "cpu":
		return false, nil
	case hardware.Auto:
		return cuda.Probe() == nil, nil
	}
	p, err := hardware.Lookup(hw)
	if err != nil {
		return false, err
	}
	if !p.IsGPU {
		return false, nil
	}
	if err := cuda.Probe(); err != nil {
		return false, fmt.Errorf("hardware %s needs gotrain's cuda device, and this machine has none: %s (set hardware: cpu to train on the cpu device)",
			hw, firstLine(err.Error()))
	}
	return true, nil
}

// cudaReason is why gotrain's cuda device cannot run here, "" when it can.
func cudaReason() string {
	if err := cuda.Probe(); err != nil {
		return "cuda device: " + firstLine(err.Error())
	}
	return ""
}

func firstLine(s string) string {
	first, rest, found := strings.Cut(s, "\n")
	if found && strings.TrimSpace(rest) != "" {
		return first + " …"
	}
	return first
}

// EnvShareGPUs, set to 1, lets the ranks of a node outnumber its GPUs: local rank r
// trains on GPU r mod count, for tests of several ranks on one GPU (the fakes, or
// real NCCL ≥ 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1). Unset, such a rank fails
// naming the GPU it asked for, as torchrun's would.
const EnvShareGPUs = "FSDPBENCH_CUDA_SHARE_GPUS"

// deviceEnv is what a rank reports about its device.
type deviceEnv struct {
	Device string `json:"device"`
	GPU    string `json:"gpu,omitempty"`
	Driver string `json:"driver,omitempty"`
	CUDA   string `json:"cuda,omitempty"`
	CUBLAS string `json:"cublas,omitempty"`
	// BLAS and BLASThreads say what the cpu device's GEMMs ran on (results.Env).
	BLAS        string `json:"blas,omitempty"`
	BLASThreads int    `json:"blas_threads,omitempty"`
}

// openDevice opens the device of a run for the rank with this local rank (its GPU
// ordinal), and returns how to close it. The cpu device's GEMMs run on the BLAS
// that blas names (Options.BLAS) with threads threads (rankThreads).
func openDevice(hw string, limit int64, localRank int, blas string, threads int) (device.Device, deviceEnv, func() error, error) {
	gpu, err := useCUDA(hw)
	if err != nil {
		return nil, deviceEnv{}, nil, err
	}
	if !gpu {
		d, err := openCPU(limit, blas, threads)
		if err != nil {
			return nil, deviceEnv{}, nil, err
		}
		info := d.(cpu.BLASReporter).BLAS()
		return d, deviceEnv{Device: d.Name(), BLAS: blasName(info), BLASThreads: info.Threads}, func() error { return nil }, nil
	}
	ord := localRank
	if n, err := cuda.DeviceCount(); err == nil && ord >= n && os.Getenv(EnvShareGPUs) == "1" {
		ord %= n
	}
	d, err := cuda.New(cuda.Options{Ordinal: ord, LimitBytes: limit})
	if err != nil {
		if errors.Is(err, cuda.ErrNoDevice) {
			return nil, deviceEnv{}, nil, fmt.Errorf("hardware %s: %w", hw, err)
		}
		return nil, deviceEnv{}, nil, err
	}
	info := d.Info()
	return d, deviceEnv{Device: d.Name(), GPU: info.GPU, Driver: info.Driver, CUDA: info.CUDA, CUBLAS: info.CUBLAS}, d.Close, nil
}

// runProfile is the hardware profile a run's MFU is computed against: the named
// profile, or for auto the detected GPU's when the run trained on cuda and the
// cpu profile otherwise.
func runProfile(hw string, onGPU bool) (hardware.Profile, error) {
	if hw != hardware.Auto {
		return hardware.Lookup(hw)
	}
	if onGPU {
		if p, _ := hardware.Detect(); p.IsGPU {
			return p, nil
		}
	}
	return hardware.Lookup("cpu")
}

// commFor is the communicator a run uses: the one backend_options.comm names, or
// when it is empty the device's own, the TCP ring on cpu and NCCL on cuda. The TCP
// ring works on host memory, so it refuses the cuda device.
func commFor(comm string, onGPU bool) (string, error) {
	switch {
	case comm == "" && onGPU:
		return CommNCCL, nil
	case comm == "":
		return CommTCP, nil
	case comm == CommTCP && onGPU:
		return "", fmt.Errorf("gotrain: backend_options.comm tcp runs collectives on host memory and the cuda device's buffers are on the GPU: set comm: nccl, or leave it unset")
	}
	return comm, nil
}

// nonZero is a figure only the cuda device measures: nil (unknown) when 0.
func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return results.I64(v)
}

// openCPU opens the cpu device on the BLAS blas names, with threads for its GEMMs
// and its ops' loops: OpenBLAS's thread count is set through
// openblas_set_num_threads, which wins over OPENBLAS_NUM_THREADS and
// OMP_NUM_THREADS, so a rank uses what it was given whatever its environment
// says; the loops through cpu.SetWorkers (GOMAXPROCS stays Go's default: with
// one processor, a collective's goroutines waited for a GEMM in C to give it
// back, and a 2-rank run on 2 cores took 1.3-1.6x as long).
func openCPU(limit int64, blas string, threads int) (device.Device, error) {
	o := cpu.Options{LimitBytes: limit}
	cpu.SetWorkers(threads)
	switch blas {
	case BLASGonum:
		o.BLAS = cpu.BLASGonum
	case BLASOpenBLAS, BLASAuto, "":
		if err := checkBLAS(blas); err != nil {
			return nil, err
		}
		lib, err := openblas.Load()
		if err == nil {
			if err := lib.SetThreads(min(threads, openblas.MaxThreads)); err != nil {
				return nil, err
			}
		}
	}
	return cpu.New(o), nil
}

// checkBLAS says why the cpu device cannot run on the BLAS blas asks for: OpenBLAS
// does not load and blas is openblas, or the user named a library in
// FSDPBENCH_LIBOPENBLAS that does not load (with blas: auto, falling back to gonum
// would measure another library than the one named, without a word). Both are
// spec errors: the environment, not the run, is at fault, and every run would
// fail alike.
func checkBLAS(blas string) error {
	if blas == BLASGonum {
		return nil
	}
	_, err := openblas.Load()
	if err == nil {
		return nil
	}
	if blas == BLASOpenBLAS {
		return backends.SpecErrorf("gotrain: backend_options.blas is openblas and it does not load: %w (install libopenblas0-pthread, or set blas: auto to fall back to gonum)", err)
	}
	if named := strings.TrimSpace(os.Getenv(openblas.EnvVar)); named != "" {
		return backends.SpecErrorf("gotrain: %s=%s names an OpenBLAS that does not load: %w (point it at libopenblas.so.0, or unset it to use the loader's libopenblas.so.0 or gonum; backend_options.blas: gonum ignores it)",
			openblas.EnvVar, named, err)
	}
	return nil
}

// blasName is what results.Env.BLAS says: OpenBLAS's own configuration line,
// which starts with its name and version, or gonum and its version.
func blasName(b cpu.BLASInfo) string {
	if b.Config != "" {
		return b.Config
	}
	return strings.TrimSpace(b.Name + " " + b.Version)
}

// EnvThreads is the variable that sets a rank's threads, as it does torch's.
const EnvThreads = "OMP_NUM_THREADS"

// maxThreads bounds OMP_NUM_THREADS: past any host this trainer runs on.
const maxThreads = 1024

// rankThreads is how many threads a rank computes with (OpenBLAS's, and the
// goroutines of the cpu device's loops): OMP_NUM_THREADS when it is set, as
// torch reads it; else cpus, the CPUs this process may run on (the worker passes
// Go's default GOMAXPROCS: the affinity mask and the cgroup's CPU limit),
// divided among the node's ranks, at least 1. torchrun sets OMP_NUM_THREADS=1
// for every rank when it starts more than one per node; dividing gives the same
// on this project's 2-core machines at 2 or more ranks, and does not leave the
// cores of a bigger host idle.
func rankThreads(getenv func(string) string, cpus, localWorldSize int) (int, error) {
	if v := strings.TrimSpace(getenv(EnvThreads)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxThreads {
			return 0, fmt.Errorf("%s=%q: give a whole number of threads from 1 to %d, or unset it to divide this host's %d CPUs among its %d ranks",
				EnvThreads, v, maxThreads, cpus, localWorldSize)
		}
		return n, nil
	}
	return max(1, cpus/max(localWorldSize, 1)), nil
}

// ptrOr is *p, or 0 when p is nil.
func ptrOr(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
