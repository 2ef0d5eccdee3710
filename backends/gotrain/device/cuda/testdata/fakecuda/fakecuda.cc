// fakecuda.cc: a libcuda for the cuda device's tests of memory, copies, streams
// and cuBLAS calls, built by the tests with g++ and never linked into the product.
// Device memory is host memory (malloc); a stream's work runs when it is issued,
// which is an order CUDA allows. It runs no kernel: the kernels' own fake (the
// kernels package) runs those. FSDPBENCH_FAKECUDA_MEM_BYTES sets the GPU's
// memory (default 1 GiB) so out-of-memory is reproducible, and every allocation
// still live is counted, so a test can see that Close freed everything.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

extern "C" {
#include "cudaapi.h"
}

namespace {

constexpr CUresult kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotInitialized = 3, kInvalidContext = 201,
                   kInvalidHandle = 400, kNotSupported = 801;

std::mutex mu;
bool initialized = false;
int retained = 0;
std::map<uintptr_t, size_t> live;  // allocations: address → bytes
size_t used = 0;
thread_local CUcontext current = nullptr;
char ctxToken;  // the primary context's handle is its address

size_t capacity() {
  const char *s = getenv("FSDPBENCH_FAKECUDA_MEM_BYTES");
  return s != nullptr && *s != 0 ? strtoull(s, nullptr, 10) : (size_t)1 << 30;
}

CUresult ready() {
  if (!initialized) return kNotInitialized;
  if (current == nullptr || retained == 0) return kInvalidContext;
  return kSuccess;
}

}  // namespace

extern "C" {

// fakecuda_live_bytes is the tests' view of the memory still allocated.
size_t fakecuda_live_bytes(void) {
  std::lock_guard<std::mutex> l(mu);
  return used;
}

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return kInvalidValue;
  initialized = true;
  return kSuccess;
}
CUresult cuDriverGetVersion(int *v) {
  *v = 99010;  // 99.1: no real driver has it
  return kSuccess;
}
CUresult cuGetErrorName(CUresult, const char **s) {
  *s = "FAKE";
  return kSuccess;
}
CUresult cuDeviceGetCount(int *n) {
  if (!initialized) return kNotInitialized;
  *n = 1;
  return kSuccess;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (!initialized) return kNotInitialized;
  if (ordinal != 0) return 101;  // CUDA_ERROR_INVALID_DEVICE
  *d = 0;
  return kSuccess;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice) {
  snprintf(name, len, "fakecuda host GPU");
  return kSuccess;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice) {
  *bytes = capacity();
  return kSuccess;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  *v = a == 75 ? 9 : 0;  // compute capability 9.0
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice) {
  std::lock_guard<std::mutex> l(mu);
  if (!initialized) return kNotInitialized;
  retained++;
  *ctx = reinterpret_cast<CUcontext>(&ctxToken);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  std::lock_guard<std::mutex> l(mu);
  if (retained == 0) return kInvalidContext;
  retained--;
  return kSuccess;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  if (ctx != nullptr && ctx != reinterpret_cast<CUcontext>(&ctxToken)) return kInvalidContext;
  current = ctx;
  return kSuccess;
}
CUresult cuCtxSynchronize(void) { return ready(); }
CUresult cuMemGetInfo_v2(size_t *freeB, size_t *total) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  *total = capacity();
  *freeB = *total - used;
  return kSuccess;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  if (bytes == 0) return kInvalidValue;
  if (used + bytes > capacity()) return kOutOfMemory;
  void *m = aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (m == nullptr) return kOutOfMemory;
  memset(m, 0xff, bytes);  // garbage, as cuMemAlloc gives: the device must zero what Alloc hands out
  live[(uintptr_t)m] = bytes;
  used += bytes;
  *p = (CUdeviceptr)(uintptr_t)m;
  return kSuccess;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  std::lock_guard<std::mutex> l(mu);
  if (CUresult r = ready()) return r;
  auto it = live.find((uintptr_t)p);
  if (it == live.end()) return kInvalidValue;
  used -= it->second;
  live.erase(it);
  free((void *)(uintptr_t)p);
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream) {
  if (CUresult r = ready()) return r;
  memcpy((void *)(uintptr_t)dst, src, n);
  return kSuccess;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream) {
  if (CUresult r = ready()) return r;
  memcpy(dst, (const void *)(uintptr_t)src, n);
  return kSuccess;
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream) {
  if (CUresult r = ready()) return r;
  uintptr_t d = dst, s = src;
  if (d < s + n && s < d + n && d != s) {
    fprintf(stderr, "fakecuda: cuMemcpyDtoDAsync of overlapping ranges (undefined in CUDA)\n");
    return kInvalidValue;
  }
  memcpy((void *)d, (const void *)s, n);
  return kSuccess;
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int v, size_t n, CUstream) {
  if (CUresult r = ready()) return r;
  uint32_t *p = (uint32_t *)(uintptr_t)dst;
  for (size_t i = 0; i < n; i++) p[i] = v;
  return kSuccess;
}
CUresult cuModuleLoadData(CUmodule *m, const void *) {
  if (CUresult r = ready()) return r;
  *m = reinterpret_cast<CUmodule>(new char);
  return kSuccess;
}
CUresult cuModuleUnload(CUmodule m) {
  delete reinterpret_cast<char *>(m);
  return kSuccess;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *) {
  if (m == nullptr) return kInvalidHandle;
  *f = reinterpret_cast<CUfunction>(m);  // any handle: this fake launches nothing
  return kSuccess;
}
// cuLaunchKernel runs nothing: it fails, or with FSDPBENCH_FAKECUDA_NOOP_LAUNCH=1
// succeeds without running the kernel, for tests of what the device launches.
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned, CUstream, void **params, void **extra) {
  const char *noop = getenv("FSDPBENCH_FAKECUDA_NOOP_LAUNCH");
  if (noop == nullptr || strcmp(noop, "1") != 0) return kNotSupported;
  if (CUresult r = ready()) return r;
  if (f == nullptr || gx == 0 || gy == 0 || gz == 0 || bx == 0 || by != 1 || bz != 1 || bx > 1024) return kInvalidValue;
  if (params == nullptr || extra != nullptr) return kInvalidValue;
  return kSuccess;
}
CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  if (CUresult r = ready()) return r;
  if (flags != 1) return kInvalidValue;  // the device's streams are CU_STREAM_NON_BLOCKING
  *s = reinterpret_cast<CUstream>(new char);
  return kSuccess;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  if (s == nullptr) return kInvalidHandle;
  delete reinterpret_cast<char *>(s);
  return kSuccess;
}
CUresult cuStreamSynchronize(CUstream) { return ready(); }
CUresult cuStreamQuery(CUstream s) { return s == nullptr ? kInvalidHandle : ready(); }  // work is done when issued
CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int) {
  if (s == nullptr || e == nullptr) return kInvalidHandle;
  return ready();
}
CUresult cuEventCreate(CUevent *e, unsigned int) {
  if (CUresult r = ready()) return r;
  *e = reinterpret_cast<CUevent>(new char);
  return kSuccess;
}
CUresult cuEventRecord(CUevent e, CUstream) { return e == nullptr ? kInvalidHandle : ready(); }
CUresult cuEventSynchronize(CUevent e) { return e == nullptr ? kInvalidHandle : ready(); }
CUresult cuEventDestroy_v2(CUevent e) {
  delete reinterpret_cast<char *>(e);
  return kSuccess;
}

}  // extern "C"
