// Kernels that check the CPU runner itself (compiled into the test build of the
// fake only, and by nvcc into a test fatbin): barrier checks, the reverse
// schedule, shuffle semantics.
#include "common.cuh"

// A thread returns before a barrier the others wait at: the runner must abort.
extern "C" __global__ void __launch_bounds__(64) check_early_return(float* x) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  x[threadIdx.x] = 1.0f;
}
FSDP_REGISTER(check_early_return, 64)

// Two halves of the block meet at different barriers: the runner must abort.
extern "C" __global__ void __launch_bounds__(64) check_divergent_barrier(float* x) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1.0f;
}
FSDP_REGISTER(check_divergent_barrier, 64)

// Thread i reads what thread i−1 wrote, with the barrier missing: right in the
// forward order by luck, wrong (NaN from the poisoned shared memory) in reverse.
extern "C" __global__ void __launch_bounds__(64) check_missing_barrier(float* out) {
  FSDP_DYNAMIC_SHARED(float, s);
  int i = threadIdx.x;
  s[i] = (float)(i + 1);
  out[i] = i > 0 ? s[i - 1] : 0.0f;
}
FSDP_REGISTER(check_missing_barrier, 64)

// out[4·i + 0..3] = warp sum, shfl_down by 1, shfl_up by 3, lane 7's value, for
// input x[i] = i (two warps).
extern "C" __global__ void __launch_bounds__(64) check_shuffles(float* out) {
  float v = (float)threadIdx.x;
  int i = threadIdx.x;
  out[4 * i + 0] = warp_sum(v);
  out[4 * i + 1] = __shfl_down_sync(0xffffffffu, v, 1);
  out[4 * i + 2] = __shfl_up_sync(0xffffffffu, v, 3);
  out[4 * i + 3] = __shfl_sync(0xffffffffu, v, 7);
}
FSDP_REGISTER(check_shuffles, 64)

// A shuffle with a partial mask: not modelled, the runner must abort.
extern "C" __global__ void __launch_bounds__(64) check_partial_mask(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, (float)threadIdx.x, 1);
}
FSDP_REGISTER(check_partial_mask, 64)

// Reads one float past the dynamic shared memory: AddressSanitizer must report it.
extern "C" __global__ void __launch_bounds__(64) check_shared_overrun(float* out) {
  FSDP_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x + 1];
}
FSDP_REGISTER(check_shared_overrun, 64)
