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
