// common.cuh: included first by every kernel source. Under nvcc it is CUDA as is;
// under g++ (the CPU runner of the tests) it pulls in fakecuda/src/cpu_runtime.h,
// which maps the CUDA built-ins onto fibers. Kernels keep anything the runner cannot
// model (tensor cores, cp.async, inline PTX) behind __CUDA_ARCH__ with a portable
// fallback.
#pragma once

#ifdef __CUDACC__
#define FSDP_REGISTER(name, block)
#define FSDP_DYNAMIC_SHARED(type, var) \
  extern __shared__ float fsdp_dynamic_smem[]; \
  type* var = reinterpret_cast<type*>(fsdp_dynamic_smem)
#else
#include "cpu_runtime.h"
#endif

// The block of element-wise, row and reduction kernels (kernels.ElemBlock).
#define ELEM_BLOCK 256
// The grid-stride loop over [0, n) in 64-bit indices.
#define GRID_STRIDE(i, n)                                                                   \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n);            \
       i += (long long)gridDim.x * blockDim.x)

// warp_sum returns the sum of v over the caller's warp, to every lane (a butterfly:
// every lane adds the same values in the same order, so all lanes agree).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// warp_max returns the maximum of v over the caller's warp, to every lane.
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// block_sum returns the sum of v over the block (blockDim.x a multiple of 32, at
// most 1024) to every thread; scratch holds 32 floats of shared memory. It begins
// with a barrier, so scratch may be reused by consecutive calls.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// block_max is block_sum with max (−inf for an empty block).
__device__ __forceinline__ float block_max(float v, float* scratch) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

// ---- storage types ----
// Buffers hold float or bf16 (bfloat16 as its 16 bits: the runner has no
// cuda_bf16.h, and the bits are all a kernel needs). A kernel templated over the
// storage type T loads through ld (bf16 widens exactly), computes in float, and
// stores through st (bf16 rounds to nearest even): the bf16 policy's "bf16 in
// memory, fp32 math". Row statistics (rstd, lse, losses) are float in both.
typedef unsigned short bf16;

// f32_to_bf16 rounds to nearest even; a NaN keeps its sign and becomes quiet.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

__device__ __forceinline__ float ld(const float* p) { return *p; }
__device__ __forceinline__ float ld(const bf16* p) { return __uint_as_float((unsigned)*p << 16); }
__device__ __forceinline__ void st(float* p, float v) { *p = v; }
__device__ __forceinline__ void st(bf16* p, float v) { *p = f32_to_bf16(v); }
