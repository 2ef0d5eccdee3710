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

// ---- warp-level tensor-core primitives (sm_80+) ----
// Under nvcc these are the PTX instructions; under g++ (the CPU runner) they are
// cpu_runtime.h's emulations, which gather the 32 lanes' registers at a warp barrier
// and apply the PTX ISA's per-lane fragment layouts, so a kernel that hands a
// fragment register to the wrong place computes the wrong thing on the CPU as it
// would on the GPU. All of them must be called by every lane of the warp.
//
// mma_bf16_16816: d += a·b for a 16×16 bf16 A (row; a[4] = a0..a7 two per register,
// lower index in the lower half), a 16×8 bf16 B (col; b[2]) and 16×8 f32 D (d[4]):
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32.
// ldmatrix_x{1,2,4}[_trans]: ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16;
// lane 8j+r gives the address of row r of matrix j (16 bytes, 16-byte aligned).
// cp_async16: cp.async.cg.shared.global of 16 bytes, of which the first srcBytes
// are read and the rest zero-filled (srcBytes 0: a zero row past the sequence);
// cp_async_commit / cp_async_wait<N>: commit_group / wait_group N.
// pack_bf16x2: two floats rounded to nearest even into one register (lo first).
#ifdef __CUDACC__
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x1(unsigned& r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x1_trans(unsigned& r, const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, int srcBytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem), "r"(srcBytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// FSDP_PLANT_SWAP(x, y): nothing on the GPU; on the CPU runner, with
// FAKECUDA_PLANT=fragment-swap, swaps two fragment registers, the layout bug the
// emulation tests require to be caught.
#define FSDP_PLANT_SWAP(x, y)
// FSDP_PLANTED(what): false on the GPU; on the CPU runner, whether FAKECUDA_PLANT
// names what (a test-only switch for bugs the emulation tests must catch).
#define FSDP_PLANTED(what) false
#else
inline void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2],
                           const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  fsdp_cpu::mma_m16n8k16_bf16(d, a, b, file, line);
}
inline void ldmatrix_x4(unsigned (&r)[4], const void* p, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(r, 4, false, p, file, line);
}
inline void ldmatrix_x4_trans(unsigned (&r)[4], const void* p, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(r, 4, true, p, file, line);
}
inline void ldmatrix_x2(unsigned (&r)[2], const void* p, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(r, 2, false, p, file, line);
}
inline void ldmatrix_x2_trans(unsigned (&r)[2], const void* p, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(r, 2, true, p, file, line);
}
inline void ldmatrix_x1(unsigned& r, const void* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(&r, 1, false, p, file, line);
}
inline void ldmatrix_x1_trans(unsigned& r, const void* p, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  fsdp_cpu::ldmatrix(&r, 1, true, p, file, line);
}
inline void cp_async16(void* smem, const void* gmem, int srcBytes) { fsdp_cpu::cp_async(smem, gmem, 16, srcBytes); }
inline void cp_async_commit() { fsdp_cpu::cp_async_commit(); }
template <int N>
inline void cp_async_wait() {
  fsdp_cpu::cp_async_wait(N);
}
inline unsigned pack_bf16x2(float lo, float hi) { return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16); }
#define FSDP_PLANTED(what) fsdp_cpu::planted(what)
#define FSDP_PLANT_SWAP(x, y)                        \
  do {                                               \
    if (fsdp_cpu::planted("fragment-swap")) {        \
      auto fsdp_tmp_ = (x);                          \
      (x) = (y);                                     \
      (y) = fsdp_tmp_;                               \
    }                                                \
  } while (0)
#endif
