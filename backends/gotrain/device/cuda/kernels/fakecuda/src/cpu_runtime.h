// cpu_runtime.h: what a kernel's .cu source needs to compile with g++ and run on
// the CPU runner (runner.cc): each CUDA thread is a fiber, a block runs on one OS
// thread, barriers are checked. Included by ../../common.cuh when __CUDACC__ is not
// defined; never part of the product.
//
// Not modelled: lock-step warps, the memory model, partial shuffle masks (aborts),
// inline PTX other than the tensor-core primitives common.cuh wraps (mma.sync,
// ldmatrix, cp.async: emulated below, lane by lane),
// GPU fast-math and FMA contraction (tests compare with tolerances; kernels that
// must match bit for bit use __fmul_rn / __fadd_rn, which both sides honour).
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
// Shared memory: one copy per OS thread, and a block's threads all run on the one
// OS thread that runs the block.
#define __shared__ static thread_local

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
struct uint3 {
  unsigned x, y, z;
};

// Set by the runner: threadIdx before every switch into a fiber, the rest per block.
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local dim3 blockDim;
extern thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace fsdp_cpu {

// block_barrier blocks the calling fiber until every thread of its block arrived
// at the same file:line (the same number of times); else it aborts naming the
// kernel, block and threads.
void block_barrier(const char* file, int line);
// warp_barrier is block_barrier for the 32 threads (lanes) of the caller's warp.
void warp_barrier(unsigned mask, const char* file, int line);
// shfl_slot is the caller's exchange slot for shuffles (one per thread).
uint64_t* shfl_slot(int tid);
// dynamic_shared is the block's dynamic shared memory (sharedMemBytes of the launch).
void* dynamic_shared();
// check_mask aborts unless mask names every lane of the caller's warp.
void check_mask(unsigned mask, const char* what, const char* file, int line);

inline int flat_tid() { return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)); }

// shfl exchanges v across the warp: every lane stores, the warp meets, each reads
// lane src's value, the warp meets again so no slot is overwritten before it is read.
template <class T>
T shfl(unsigned mask, T v, int srcLane, const char* file, int line) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
  check_mask(mask, "shuffle", file, line);
  int tid = flat_tid();
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  *shfl_slot(tid) = bits;
  warp_barrier(mask, file, line);
  int base = tid & ~31;
  std::memcpy(&v, shfl_slot(base + srcLane), sizeof(T));
  warp_barrier(mask, file, line);
  return v;
}

// ---- warp-level tensor-core primitives (common.cuh's host side) ----
// The PTX ISA's fragment layouts, lane by lane: every lane stores its registers in
// its exchange area, the warp meets, each lane computes its own outputs from the
// other lanes' registers, the warp meets again before the areas are reused. So the
// data moves between lanes exactly as the instruction moves it on a GPU.

// xchg is the exchange area (16 words) of thread tid of the caller's block.
uint32_t* xchg(int tid);
// check_shared aborts unless [p, p+n) lies in the block's dynamic shared memory
// and p is a multiple of n (the 16-byte rows and copies of ldmatrix and cp.async).
void check_shared(const void* p, size_t n, const char* what, const char* file, int line);
// cp_async queues a copy of bytes from src to dst (shared), of which only the first
// srcBytes are read and the rest zero-filled. Queued copies happen at the
// cp_async_wait that covers their group, not before: a kernel reading a tile before
// waiting for it reads what was there (poison), as a GPU may.
void cp_async(void* dst, const void* src, int bytes, int srcBytes);
// cp_async_commit closes the caller's current group of copies.
void cp_async_commit();
// cp_async_wait performs the caller's copies of every committed group but the n
// most recent.
void cp_async_wait(int n);
// planted reports whether FAKECUDA_PLANT names what: a test-only switch that
// plants a bug into a kernel (FSDP_PLANT_SWAP), for tests that must catch it.
bool planted(const char* what);

inline float bf16_bits_to_float(uint32_t h) {
  uint32_t u = (h & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// mma_m16n8k16_bf16 is mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 with
// D = C = d. With g = lane>>2 and t = lane%4: A element (r, k) is a_i of lane
// 4(r%8) + (k%8)/2 with i = (k&1) | (r≥8)<<1 | (k≥8)<<2; B element (k, n) is b_i of
// lane 4n + (k%8)/2 with i = (k&1) | (k≥8)<<1; D element (r, n) is d_i of lane
// 4(r%8) + n/2 with i = (n&1) | (r≥8)<<1. Register j holds elements 2j (low half)
// and 2j+1 (high half). Products of bf16 are exact in float; the sum runs over k in
// order.
inline void mma_m16n8k16_bf16(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2], const char* file,
                              int line) {
  check_mask(0xffffffffu, "mma.sync", file, line);
  int tid = flat_tid(), base = tid & ~31, lane = tid & 31;
  uint32_t* x = xchg(tid);
  for (int i = 0; i < 4; i++) x[i] = a[i];
  x[4] = b[0];
  x[5] = b[1];
  warp_barrier(0xffffffffu, file, line);
  auto A = [&](int r, int k) {
    int i = (k & 1) | ((r >> 3) << 1) | ((k >> 3) << 2);
    return bf16_bits_to_float(xchg(base + (r & 7) * 4 + ((k & 7) >> 1))[i >> 1] >> (16 * (i & 1)));
  };
  auto B = [&](int k, int n) {
    int i = (k & 1) | ((k >> 3) << 1);
    return bf16_bits_to_float(xchg(base + n * 4 + ((k & 7) >> 1))[4 + (i >> 1)] >> (16 * (i & 1)));
  };
  int g = lane >> 2, t = lane & 3;
  float out[4];
  for (int i = 0; i < 4; i++) {
    int r = g + 8 * (i >> 1), n = 2 * t + (i & 1);
    float s = d[i];
    for (int k = 0; k < 16; k++) s += A(r, k) * B(k, n);
    out[i] = s;
  }
  warp_barrier(0xffffffffu, file, line);
  for (int i = 0; i < 4; i++) d[i] = out[i];
}

// ldmatrix is ldmatrix.sync.aligned.m8n8.x{num}[.trans].shared.b16 into r[0..num):
// lane 8j+i gives the address of row i of matrix j; register j of lane (g, t)
// receives row g, columns 2t and 2t+1 of matrix j, or with trans column g, rows
// 2t and 2t+1 (the transposed matrix's row g).
inline void ldmatrix(unsigned* r, int num, bool trans, const void* p, const char* file, int line) {
  check_mask(0xffffffffu, "ldmatrix", file, line);
  int tid = flat_tid(), base = tid & ~31, lane = tid & 31;
  if (lane < 8 * num) check_shared(p, 16, "ldmatrix row", file, line);
  uint32_t* x = xchg(tid);
  uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  std::memcpy(x, &addr, sizeof addr);
  warp_barrier(0xffffffffu, file, line);
  auto row = [&](int l) {
    uintptr_t v;
    std::memcpy(&v, xchg(base + l), sizeof v);
    return reinterpret_cast<const uint16_t*>(v);
  };
  int g = lane >> 2, t = lane & 3;
  unsigned out[4];
  for (int j = 0; j < num; j++) {
    uint16_t lo, hi;
    if (!trans) {
      lo = row(8 * j + g)[2 * t];
      hi = row(8 * j + g)[2 * t + 1];
    } else {
      lo = row(8 * j + 2 * t)[g];
      hi = row(8 * j + 2 * t + 1)[g];
    }
    out[j] = unsigned(lo) | (unsigned(hi) << 16);
  }
  warp_barrier(0xffffffffu, file, line);
  for (int j = 0; j < num; j++) r[j] = out[j];
}

}  // namespace fsdp_cpu

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  fsdp_cpu::block_barrier(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  fsdp_cpu::warp_barrier(mask, file, line);
}

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  int lane = fsdp_cpu::flat_tid() & 31;
  return fsdp_cpu::shfl(mask, v, (lane / width) * width + (src % width), file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
  int lane = fsdp_cpu::flat_tid() & 31;
  int src = lane ^ laneMask;
  if (src / width != lane / width) src = lane;  // outside the lane's segment: its own value
  return fsdp_cpu::shfl(mask, v, src, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   int line = __builtin_LINE()) {
  int lane = fsdp_cpu::flat_tid() & 31;
  int src = (lane % width) + int(delta) < width ? lane + int(delta) : lane;
  return fsdp_cpu::shfl(mask, v, src, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
  int lane = fsdp_cpu::flat_tid() & 31;
  int src = (lane % width) >= int(delta) ? lane - int(delta) : lane;
  return fsdp_cpu::shfl(mask, v, src, file, line);
}

// min and max of CUDA's math library (int and float overloads).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// Atomics: real atomics, since blocks run on several OS threads at once.
inline float atomicAdd(float* p, float v) {
  unsigned* u = reinterpret_cast<unsigned*>(p);
  unsigned old = __atomic_load_n(u, __ATOMIC_RELAXED), upd;
  do {
    float f;
    std::memcpy(&f, &old, 4);
    f += v;
    std::memcpy(&upd, &f, 4);
  } while (!__atomic_compare_exchange_n(u, &old, upd, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  float r;
  std::memcpy(&r, &old, 4);
  return r;
}
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline int atomicMax(int* p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// Math intrinsics: the IEEE versions (x86-64 without -mfma never contracts, so the
// _rn forms are the plain operators).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fdividef(float a, float b) { return a / b; }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline unsigned __float_as_uint(float f) {
  unsigned i;
  std::memcpy(&i, &f, 4);
  return i;
}
inline float __uint_as_float(unsigned i) {
  float f;
  std::memcpy(&f, &i, 4);
  return f;
}
// expf, logf, sqrtf, fmaxf, fminf: the C library's (<math.h> through <cmath>).

// ---- the kernel registry: what cuModuleGetFunction finds and cuLaunchKernel calls ----
namespace fsdp_cpu {

// Invoke calls a kernel with its arguments unpacked from cuLaunchKernel's
// kernelParams (params[i] points at argument i).
using Invoke = void (*)(void* fn, void** params);

// register_kernel records a kernel under its name with its signature (one letter a
// parameter: p pointer, i int32, l int64, f float32) and the block it is compiled for.
void register_kernel(const char* name, const char* sig, int block, void* fn, Invoke invoke);

template <class T>
constexpr char kind_of() {
  static_assert(std::is_pointer<T>::value || std::is_same<T, int>::value || std::is_same<T, long long>::value ||
                    std::is_same<T, float>::value,
                "kernel parameters are pointers, int, long long or float only");
  return std::is_pointer<T>::value ? 'p' : std::is_same<T, int>::value ? 'i' : std::is_same<T, long long>::value ? 'l' : 'f';
}

template <class... A, size_t... I>
void invoke_impl(void* fn, void** params, std::index_sequence<I...>) {
  reinterpret_cast<void (*)(A...)>(fn)(*static_cast<A*>(params[I])...);
}

template <class... A>
struct Registrar {
  Registrar(const char* name, int block, void (*fn)(A...)) {
    static const char sig[] = {kind_of<A>()..., 0};
    register_kernel(name, sig, block, reinterpret_cast<void*>(fn),
                    [](void* f, void** params) { invoke_impl<A...>(f, params, std::index_sequence_for<A...>{}); });
  }
};

}  // namespace fsdp_cpu

#define FSDP_REGISTER(name, block) static fsdp_cpu::Registrar fsdp_registrar_##name(#name, block, name);
#define FSDP_DYNAMIC_SHARED(type, var) type* var = static_cast<type*>(fsdp_cpu::dynamic_shared())
