// cpu_runtime.h: what a kernel's .cu source needs to compile with g++ and run on
// the CPU runner (runner.cc): each CUDA thread is a fiber, a block runs on one OS
// thread, barriers are checked. Included by ../../common.cuh when __CUDACC__ is not
// defined; never part of the product.
//
// Not modelled: lock-step warps, the memory model, partial shuffle masks (aborts),
// tensor cores / cp.async / inline PTX (kernels keep those behind __CUDA_ARCH__),
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
