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

// The tensor-core primitives (common.cuh), each on known data, so that a test can
// hold the runner's emulation against the PTX ISA's fragment layouts written out
// independently in Go (runner_test.go). Both warps of the block do the same.

// check_ldmatrix: shared memory holds four 8×8 b16 matrices, element (j, r, c) =
// 64j + 8r + c; lane l gives row l%8 of matrix l/8. Thread i writes x[14i + ...]:
// 0–3 x4, 4–7 x4.trans, 8–9 x2, 10–11 x2.trans, 12 x1, 13 x1.trans.
extern "C" __global__ void __launch_bounds__(64) check_ldmatrix(unsigned* x) {
  FSDP_DYNAMIC_SHARED(unsigned short, s);
  for (int e = threadIdx.x; e < 256; e += 64) s[e] = (unsigned short)e;
  __syncthreads();
  int lane = threadIdx.x & 31;
  const unsigned short* row = s + (lane / 8) * 64 + (lane % 8) * 8;
  unsigned* o = x + 14 * threadIdx.x;
  unsigned r4[4], t4[4], r2[2], t2[2], r1, t1;
  ldmatrix_x4(r4, row);
  ldmatrix_x4_trans(t4, row);
  ldmatrix_x2(r2, row);
  ldmatrix_x2_trans(t2, row);
  ldmatrix_x1(r1, row);
  ldmatrix_x1_trans(t1, row);
  for (int j = 0; j < 4; j++) {
    o[j] = r4[j];
    o[4 + j] = t4[j];
  }
  o[8] = r2[0];
  o[9] = r2[1];
  o[10] = t2[0];
  o[11] = t2[1];
  o[12] = r1;
  o[13] = t1;
}
FSDP_REGISTER(check_ldmatrix, 64)

// check_mma: thread i reads its A registers x[10i + 0..3], B registers 4..5 and C
// (float bits) 6..9, and writes D = A·B + C over C.
extern "C" __global__ void __launch_bounds__(64) check_mma(unsigned* x) {
  unsigned* o = x + 10 * threadIdx.x;
  const unsigned a[4] = {o[0], o[1], o[2], o[3]}, b[2] = {o[4], o[5]};
  float d[4];
  for (int i = 0; i < 4; i++) d[i] = __uint_as_float(o[6 + i]);
  mma_bf16_16816(d, a, b);
  for (int i = 0; i < 4; i++) o[6 + i] = __float_as_uint(d[i]);
}
FSDP_REGISTER(check_mma, 64)

// check_cp_async: thread i copies x[8i .. 8i+4) (16 bytes) to shared memory whole
// (group 0) and x[8i+4 .. 8i+8) with 4 source bytes, the rest zero-filled (group 1),
// waits for both, and writes the shared words back over x[8i .. 8i+8).
extern "C" __global__ void __launch_bounds__(64) check_cp_async(unsigned* x) {
  FSDP_DYNAMIC_SHARED(unsigned, s);
  unsigned* mine = s + 8 * threadIdx.x;
  cp_async16(mine, x + 8 * threadIdx.x, 16);
  cp_async_commit();
  cp_async16(mine + 4, x + 8 * threadIdx.x + 4, 4);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  for (int i = 0; i < 8; i++) x[8 * threadIdx.x + i] = mine[i];
}
FSDP_REGISTER(check_cp_async, 64)
