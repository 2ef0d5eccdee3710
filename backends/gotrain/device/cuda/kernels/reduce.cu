// Reductions: Σx and Σx² per block into partials (float, a fixed tree, so the
// result depends only on the grid), and one block that sums the partials.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void sum_partials(float* __restrict__ partials, const T* __restrict__ x, long long n,
                                             int squares) {
  __shared__ float scratch[32];
  float s = 0.0f;
  if (squares) {
    GRID_STRIDE(i, n) {
      float v = ld(x + i);
      s += v * v;
    }
  } else {
    GRID_STRIDE(i, n) s += ld(x + i);
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_sum_partials(float* __restrict__ partials, const float* __restrict__ x, long long n, int squares) {
  sum_partials(partials, x, n, squares);
}
FSDP_REGISTER(fsdp_sum_partials, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_sum_partials_bf16(float* __restrict__ partials, const bf16* __restrict__ x, long long n, int squares) {
  sum_partials(partials, x, n, squares);
}
FSDP_REGISTER(fsdp_sum_partials_bf16, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_sum_finish(float* __restrict__ out, const float* __restrict__ partials, int count) {
  __shared__ float scratch[32];
  float s = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[0] = s;
}
FSDP_REGISTER(fsdp_sum_finish, ELEM_BLOCK)
