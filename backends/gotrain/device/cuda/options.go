// Package cuda is the Device on an NVIDIA GPU: the CUDA driver API and cuBLAS,
// bound at run time through dynload (libcuda.so.1; libcublas.so.13/.12/.11; the
// FSDPBENCH_LIBCUDA / FSDPBENCH_LIBCUBLAS overrides; the Python environment's
// site-packages/nvidia/*/lib), so building needs no CUDA header and the program
// runs on machines without CUDA, where New fails with "no CUDA device: …".
//
// Every op mirrors the cpu reference device name for name: element-wise ops,
// reductions, norms, attention and the optimizer run the kernels of the kernels
// subpackage (one embedded fatbin), matrix products run cuBLAS. Ops are issued
// asynchronously on the device's compute stream in call order; a failing driver
// call is sticky (later ops are skipped) and reported by Sync. Memory comes from
// one caching arena (arena.go); the tracker is charged exactly what the cpu
// device charges, 4 bytes per fp32 element and 2 per bf16 element per category,
// and what the arena, cuBLAS and the context hold beyond that is reported apart
// (Extras). bf16 buffers (device.MixedPrecision) are stored as bf16; their ops
// run the kernels' _bf16 twins (bf16 load and store, fp32 math) and their
// GEMMs cublasGemmEx with bf16 A, B and C and fp32 compute (bf16.go).
//
// A build without cgo (CGO_ENABLED=0) cannot load the CUDA libraries: there
// Probe and New fail with ErrNoDevice saying so (nocgo.go).
package cuda

// DefaultWorkspaceBytes is the cuBLAS workspace the device gives each handle:
// NVIDIA recommends 32 MiB on Hopper (4 MiB is enough before it).
const DefaultWorkspaceBytes = 32 << 20

// GEMMMode says how MatMul multiplies.
type GEMMMode int

const (
	// GEMMFP32 is cublasSgemm: fp32 inputs, products and accumulation, the mode
	// that matches the cpu reference to fp32 rounding.
	GEMMFP32 GEMMMode = iota
	// GEMMBF16 is cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF: inputs rounded
	// to bf16 on the tensor cores, fp32 accumulation and output, the GEMM of a bf16
	// mixed-precision policy.
	GEMMBF16
)

// Options configure a cuda device; the zero value is GPU 0, fp32, no limit.
type Options struct {
	// Ordinal is the GPU (LOCAL_RANK under torchrun).
	Ordinal int
	// LimitBytes makes Alloc fail with device.ErrOutOfMemory once the tracked
	// bytes would exceed it (0: none), as on cpu.
	LimitBytes int64
	// GEMM picks MatMul's arithmetic.
	GEMM GEMMMode
	// WorkspaceBytes is the cuBLAS workspace (0: DefaultWorkspaceBytes).
	WorkspaceBytes int64
	// Profile times every op with a pair of CUDA events on the compute stream
	// (OpTimes reads them, WriteRoofline prints them against the roofline). The
	// events cost a little per op, so it is off for the measured runs.
	Profile bool
}

// Info describes the GPU and the libraries behind a device.
type Info struct {
	// GPU is the device's name ("NVIDIA H100 80GB HBM3").
	GPU string `json:"gpu"`
	// ComputeCapability is "9.0" for Hopper.
	ComputeCapability string `json:"compute_capability"`
	// MemoryBytes is the device's total memory.
	MemoryBytes int64 `json:"memory_bytes"`
	// Driver is the NVIDIA kernel module's version ("535.104.05") from
	// /proc/driver/nvidia/version; empty where that file is missing (a fake driver).
	Driver string `json:"driver,omitempty"`
	// CUDA is the CUDA version the driver implements ("12.2"), from cuDriverGetVersion.
	CUDA string `json:"cuda"`
	// CUBLAS is cuBLAS's version ("11.11.3").
	CUBLAS string `json:"cublas"`
	// LibCUDA and LibCUBLAS are the libraries loaded (a soname or a path).
	LibCUDA   string `json:"libcuda"`
	LibCUBLAS string `json:"libcublas"`
}
