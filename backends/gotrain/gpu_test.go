//go:build cgo

package gotrain

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fsdpbench/fsdpbench/backends"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/comm/nccl/ncclfake"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda"
	"github.com/fsdpbench/fsdpbench/backends/gotrain/device/cuda/cudatest"
	"github.com/fsdpbench/fsdpbench/results"
	"github.com/fsdpbench/fsdpbench/sweeps"
)

// EnvRequireGPU makes the GPU tests fail instead of skip where no CUDA device is
// usable: .ci/gpu-check sets it on the GPU machine.
const EnvRequireGPU = "FSDPBENCH_REQUIRE_GPU"

// envQuick shortens TestCUDATracksCPU to two configurations of 3 steps.
const envQuick = "FSDPBENCH_CUDA_TRACK_QUICK"

// TestCUDAOverFakesTracksCPU runs TestCUDATracksCPU, shortened, in a process
// bound to the fake libcuda (which runs the kernels on the CPU, each stream on a
// thread of its own), the fake cuBLAS and the fake NCCL: the whole cuda code path
// of a training run, workers and all, on a machine without a GPU.
func TestCUDAOverFakesTracksCPU(t *testing.T) {
	dir := t.TempDir()
	f, err := cudatest.Build(dir)
	require.NoError(t, err)
	lib, err := ncclfake.Build(dir)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCUDATracksCPU$", "-test.v")
	cmd.Env = append(append(os.Environ(), f.Env()...), "FSDPBENCH_LIBNCCL="+lib, EnvRequireGPU+"=1", envQuick+"=1",
		EnvShareGPUs+"=1", "FAKECUDA_STREAMS=async")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "--- PASS: TestCUDATracksCPU")
	t.Logf("%s", out)
}

// requireGPU skips t without a usable cuda device, or fails it under EnvRequireGPU.
func requireGPU(t *testing.T) {
	t.Helper()
	if err := cuda.Probe(); err != nil {
		if os.Getenv(EnvRequireGPU) == "1" {
			t.Fatalf("%s=1 but %v", EnvRequireGPU, err)
		}
		t.Skipf("needs a GPU (.ci/gpu-check runs it on one): %v", err)
	}
}

// TestCUDATracksCPU trains the tiny model for 20 steps at world size 1 on the cpu
// device (TCP ring) and on the cuda device (NCCL), for each strategy with and
// without activation checkpointing, and requires the same losses: the cuda device
// in fp32 differs from the cpu device only by summation order, ≤ 1e-4 relative
// per step over 20 steps. Each strategy also trains in bf16 on both devices (the
// cpu device's bf16 is the reference: the same roundings at the same points), ≤
// bf16CUDATol relative per step, since a summation-order difference may flip a
// bf16 rounding, which the next steps carry; the memory per category is the same
// byte for byte in both precisions.
func TestCUDATracksCPU(t *testing.T) {
	requireGPU(t)
	type config struct {
		sharding string
		ckpt     bool
		ws       int
		mp       string
	}
	var configs []config
	for _, sharding := range []string{sweeps.FullShard, sweeps.ShardGradOp, sweeps.NoShard, sweeps.DDP} {
		configs = append(configs, config{sharding, false, 1, sweeps.FP32}, config{sharding, true, 1, sweeps.FP32},
			config{sharding, false, 1, sweeps.BF16})
	}
	steps := 20
	if os.Getenv(envQuick) == "1" { // over the fakes, where every kernel runs on the CPU
		// Two ranks share the fake's one GPU (EnvShareGPUs), as real NCCL allows only from 2.30.
		configs, steps = []config{{sweeps.FullShard, false, 1, sweeps.FP32}, {sweeps.DDP, true, 1, sweeps.FP32},
			{sweeps.FullShard, true, 2, sweeps.FP32}, {sweeps.FullShard, false, 2, sweeps.BF16}, {sweeps.DDP, true, 1, sweeps.BF16}}, 3
	}
	for _, cf := range configs {
		sharding, ckpt := cf.sharding, cf.ckpt
		tol := 1e-4
		if cf.mp == sweeps.BF16 {
			tol = bf16CUDATol
		}
		t.Run(fmt.Sprintf("%s,checkpointing=%v,world=%d,%s", sharding, ckpt, cf.ws, cf.mp), func(t *testing.T) {
			run := func(hw string, opts map[string]any) results.Result {
				rc := tinyRun(cf.ws, 1, sharding)
				rc.Steps, rc.Hardware, rc.ActivationCheckpointing, rc.BackendOptions = steps, hw, ckpt, opts
				rc.MixedPrecision = cf.mp
				rc.AssignID()
				res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
				require.NoError(t, err)
				require.Equal(t, results.StatusOK, res.Status, res.Error)
				return res
			}
			cpuRes := run("cpu", nil)
			gpuRes := run("auto", map[string]any{"comm": "nccl"})
			assert.NotEmpty(t, gpuRes.Env.GPU, "the run trained on the GPU")
			assert.NotEmpty(t, gpuRes.Env.CUBLAS)
			assert.NotNil(t, gpuRes.PeakMemReservedBytes, "the arena's reserved peak")
			assert.NotNil(t, gpuRes.PeakDeviceMemBytes, "the GPU's memory in use at its peak")
			assert.Positive(t, gpuRes.Extra["kernel_launches_per_step"], "metrics.json's extra.kernel_launches_per_step")
			assert.NotContains(t, cpuRes.Extra, "kernel_launches_per_step", "the cpu device launches nothing")
			require.Len(t, gpuRes.Steps, len(cpuRes.Steps))
			for i := range cpuRes.Steps {
				c, g := *cpuRes.Steps[i].Loss, *gpuRes.Steps[i].Loss
				assert.LessOrEqual(t, math.Abs(c-g), tol*math.Abs(c), "step %d: cpu %v, cuda %v", i+1, c, g)
			}
			assert.Equal(t, cpuRes.MemBreakdownBytes, gpuRes.MemBreakdownBytes, "the same bytes per category")
			t.Logf("%s: %v launches a step", sharding, gpuRes.Extra["kernel_launches_per_step"])
			t.Logf("%s: cpu %.3fs, cuda %.3fs measured; GPU %s, driver %s, CUDA %s, cuBLAS %s, NCCL %s, reserved %v",
				sharding, cpuRes.MeasuredWallS, gpuRes.MeasuredWallS, gpuRes.Env.GPU, gpuRes.Env.Driver,
				gpuRes.Env.CUDA, gpuRes.Env.CUBLAS, gpuRes.Env.NCCL, deref(gpuRes.PeakMemReservedBytes))
		})
	}
}

// bf16CUDATol bounds the relative difference per step between the cuda device's
// bf16 losses and the cpu device's bf16 losses over 20 steps of tiny: a flipped
// bf16 rounding is 2⁻⁸ of one value, and the loss averages thousands of them.
const bf16CUDATol = 2e-3

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// envFault names the fault TestCUDAFault expects the run to end with.
const envFault = "FSDPBENCH_CUDA_FAULT_CASE"

// TestCUDAFaultsOverFakes injects faults into the fake libcuda under a training run
// on the cuda device, each in a process of its own bound to the fakes: a kernel
// launch that fails (sticky, as a GPU's) fails the run naming the rank and the
// error; a GPU whose memory runs out mid-run ends it as oom.
func TestCUDAFaultsOverFakes(t *testing.T) {
	dir := t.TempDir()
	f, err := cudatest.Build(dir)
	require.NoError(t, err)
	lib, err := ncclfake.Build(dir)
	require.NoError(t, err)
	for _, tc := range []struct{ name, env string }{
		{"launch", "FAKECUDA_FAIL_LAUNCH=fsdp_attn_fwd:3"},
		{"oom", "FAKECUDA_MEM_LIMIT=" + fmt.Sprint(35<<20)}, // the run reserves 36 MiB, the cuBLAS workspace 32 of them
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestCUDAFault$", "-test.v")
			cmd.Env = append(append(os.Environ(), f.Env()...), "FSDPBENCH_LIBNCCL="+lib, envFault+"="+tc.name, tc.env)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- PASS: TestCUDAFault")
		})
	}
}

// TestCUDAFault is TestCUDAFaultsOverFakes's child.
func TestCUDAFault(t *testing.T) {
	which := os.Getenv(envFault)
	if which == "" {
		t.Skip("run by TestCUDAFaultsOverFakes in a process bound to the fakes")
	}
	rc := tinyRun(1, 1, sweeps.FullShard)
	rc.Hardware = "auto"
	rc.AssignID()
	res, err := New().Run(context.Background(), rc, backends.RunEnv{RunDir: t.TempDir()}, nil)
	require.NoError(t, err)
	switch which {
	case "launch":
		assert.Equal(t, results.StatusFailed, res.Status)
		assert.Contains(t, res.Error, "rank 0 exited")
		assert.Contains(t, res.Error, "CUDA_ERROR_LAUNCH_FAILED (719)")
	case "oom":
		assert.Equal(t, results.StatusOOM, res.Status, res.Error)
		assert.Contains(t, res.Error, "rank 0 ran out of device memory")
	}
}
