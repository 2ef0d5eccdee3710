#include "shim.h"

#include <stddef.h>

#define FSDP_DECL(name) static __typeof__(name) *p_##name;
FSDP_CUDA_SYMBOLS(FSDP_DECL)
FSDP_CUBLAS_SYMBOLS(FSDP_DECL)

#define FSDP_NAME(name) #name,
#define FSDP_SLOT(name) (void **)&p_##name,
static const char *cuda_names[] = {FSDP_CUDA_SYMBOLS(FSDP_NAME)};
static void **cuda_slots[] = {FSDP_CUDA_SYMBOLS(FSDP_SLOT)};
static const char *cublas_names[] = {FSDP_CUBLAS_SYMBOLS(FSDP_NAME)};
static void **cublas_slots[] = {FSDP_CUBLAS_SYMBOLS(FSDP_SLOT)};

int fsdp_nsyms(int lib) {
  return lib == FSDP_LIB_CUDA ? (int)(sizeof cuda_names / sizeof *cuda_names)
                              : (int)(sizeof cublas_names / sizeof *cublas_names);
}

const char *fsdp_sym_name(int lib, int i) { return lib == FSDP_LIB_CUDA ? cuda_names[i] : cublas_names[i]; }

void fsdp_sym_set(int lib, int i, void *p) {
  if (lib == FSDP_LIB_CUDA)
    *cuda_slots[i] = p;
  else
    *cublas_slots[i] = p;
}

// The context current on this OS thread, as far as the shim set it. A thread
// whose context some other code changed is corrected at the next device call only
// if it went through the shim; nothing else in the process uses CUDA contexts.
// generation counts device closes: a primary context released to nobody is
// destroyed, and one retained later may have the same handle, so a thread's cached
// binding is trusted only within one generation.
static __thread CUcontext current;
static __thread unsigned current_gen;
static unsigned generation;

static CUresult use(CUcontext ctx) {
  unsigned gen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
  if (current == ctx && current_gen == gen) return 0;
  CUresult r = p_cuCtxSetCurrent(ctx);
  if (r == 0) {
    current = ctx;
    current_gen = gen;
  }
  return r;
}

#define WITH(ctx, call)          \
  do {                           \
    CUresult r_ = use(ctx);      \
    if (r_ != 0) return r_;      \
    return call;                 \
  } while (0)

CUresult fsdp_cuInit(void) { return p_cuInit(0); }
CUresult fsdp_driver_version(int *v) { return p_cuDriverGetVersion(v); }

const char *fsdp_error_name(CUresult r) {
  const char *s = NULL;
  if (p_cuGetErrorName == NULL || p_cuGetErrorName(r, &s) != 0) return NULL;
  return s;
}

CUresult fsdp_device_count(int *n) { return p_cuDeviceGetCount(n); }

// CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR and _MINOR.
enum { ATTR_CC_MAJOR = 75, ATTR_CC_MINOR = 76 };

CUresult fsdp_device_open(int ordinal, CUdevice *dev, CUcontext *ctx, char *name, int nameLen, size_t *total,
                          int *ccMajor, int *ccMinor) {
  CUresult r = p_cuDeviceGet(dev, ordinal);
  if (r == 0) r = p_cuDeviceGetName(name, nameLen, *dev);
  if (r == 0) r = p_cuDeviceTotalMem_v2(total, *dev);
  if (r == 0) r = p_cuDeviceGetAttribute(ccMajor, ATTR_CC_MAJOR, *dev);
  if (r == 0) r = p_cuDeviceGetAttribute(ccMinor, ATTR_CC_MINOR, *dev);
  if (r != 0) return r;
  r = p_cuDevicePrimaryCtxRetain(ctx, *dev);
  if (r != 0) return r;
  r = use(*ctx);
  if (r != 0) p_cuDevicePrimaryCtxRelease_v2(*dev);
  return r;
}

CUresult fsdp_device_close(CUdevice dev, CUcontext ctx) {
  CUresult r = use(ctx);
  if (r == 0) r = p_cuCtxSynchronize();
  CUresult r2 = p_cuDevicePrimaryCtxRelease_v2(dev);
  // The primary context may now be gone; no thread may keep believing it current.
  __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
  current = NULL;
  return r != 0 ? r : r2;
}

CUresult fsdp_mem_info(CUcontext ctx, size_t *freeB, size_t *total) { WITH(ctx, p_cuMemGetInfo_v2(freeB, total)); }
CUresult fsdp_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t bytes) { WITH(ctx, p_cuMemAlloc_v2(p, bytes)); }
CUresult fsdp_mem_free(CUcontext ctx, CUdeviceptr p) { WITH(ctx, p_cuMemFree_v2(p)); }

CUresult fsdp_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t bytes, CUstream s) {
  WITH(ctx, p_cuMemcpyHtoDAsync_v2(dst, src, bytes, s));
}

// fsdp_dtoh waits for the copy: the destination is Go memory, which must hold the
// data when the cgo call returns.
CUresult fsdp_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t bytes, CUstream s) {
  CUresult r = use(ctx);
  if (r == 0) r = p_cuMemcpyDtoHAsync_v2(dst, src, bytes, s);
  if (r == 0) r = p_cuStreamSynchronize(s);
  return r;
}

CUresult fsdp_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  WITH(ctx, p_cuMemcpyDtoDAsync_v2(dst, src, bytes, s));
}

CUresult fsdp_memset32(CUcontext ctx, CUdeviceptr dst, unsigned int v, size_t n, CUstream s) {
  WITH(ctx, p_cuMemsetD32Async(dst, v, n, s));
}

// CU_STREAM_NON_BLOCKING: the device's streams do not synchronize with the legacy
// default stream, which nothing of ours uses.
CUresult fsdp_stream_create(CUcontext ctx, CUstream *s) { WITH(ctx, p_cuStreamCreate(s, 1)); }
CUresult fsdp_stream_destroy(CUcontext ctx, CUstream s) { WITH(ctx, p_cuStreamDestroy_v2(s)); }
CUresult fsdp_stream_sync(CUcontext ctx, CUstream s) { WITH(ctx, p_cuStreamSynchronize(s)); }
CUresult fsdp_stream_query(CUcontext ctx, CUstream s) { WITH(ctx, p_cuStreamQuery(s)); }
CUresult fsdp_make_current(CUcontext ctx) { return use(ctx); }
// CU_EVENT_DISABLE_TIMING: events only order streams, and untimed ones are cheaper.
CUresult fsdp_event_create(CUcontext ctx, CUevent *e) { WITH(ctx, p_cuEventCreate(e, 2)); }
// fsdp_event_create_timed is a default (timing) event: the op profiler's.
CUresult fsdp_event_create_timed(CUcontext ctx, CUevent *e) { WITH(ctx, p_cuEventCreate(e, 0)); }
CUresult fsdp_event_elapsed(CUcontext ctx, float *ms, CUevent a, CUevent b) { WITH(ctx, p_cuEventElapsedTime(ms, a, b)); }
CUresult fsdp_event_destroy(CUcontext ctx, CUevent e) { WITH(ctx, p_cuEventDestroy_v2(e)); }
CUresult fsdp_event_record(CUcontext ctx, CUevent e, CUstream s) { WITH(ctx, p_cuEventRecord(e, s)); }
CUresult fsdp_event_sync(CUcontext ctx, CUevent e) { WITH(ctx, p_cuEventSynchronize(e)); }
CUresult fsdp_event_query(CUcontext ctx, CUevent e) { WITH(ctx, p_cuEventQuery(e)); }
CUresult fsdp_stream_wait(CUcontext ctx, CUstream s, CUevent e) { WITH(ctx, p_cuStreamWaitEvent(s, e, 0)); }

CUresult fsdp_module_load(CUcontext ctx, CUmodule *m, const void *image) { WITH(ctx, p_cuModuleLoadData(m, image)); }
CUresult fsdp_module_unload(CUcontext ctx, CUmodule m) { WITH(ctx, p_cuModuleUnload(m)); }
CUresult fsdp_module_function(CUcontext ctx, CUmodule m, const char *name, CUfunction *f) {
  WITH(ctx, p_cuModuleGetFunction(f, m, name));
}

#define FSDP_MAX_ARGS 32

CUresult fsdp_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                     unsigned shmem, CUstream s, unsigned long long *args, int nargs) {
  void *params[FSDP_MAX_ARGS];
  if (nargs < 0 || nargs > FSDP_MAX_ARGS) return 1; // CUDA_ERROR_INVALID_VALUE
  for (int i = 0; i < nargs; i++) params[i] = &args[i];
  WITH(ctx, p_cuLaunchKernel(f, gx, gy, gz, bx, 1, 1, shmem, s, params, NULL));
}

// cuBLAS enums, from cublas_api.h and library_types.h.
enum {
  OP_N = 0, OP_T = 1, DEFAULT_MATH = 0, R_32F = 0, R_16BF = 14, COMPUTE_32F = 68, COMPUTE_32F_FAST_16BF = 75, GEMM_DEFAULT = -1,
};

cublasStatus_t fsdp_blas_create(CUcontext ctx, cublasHandle_t *h, CUstream s, CUdeviceptr ws, size_t wsBytes,
                                int *version) {
  CUresult cr = use(ctx);
  if (cr != 0) return 1000 + cr; // not a cuBLAS status: the Go side reports the driver error
  cublasStatus_t r = p_cublasCreate_v2(h);
  if (r != 0) return r;
  r = p_cublasGetVersion_v2(*h, version);
  if (r == 0) r = p_cublasSetStream_v2(*h, s);
  // A workspace of our own, from the arena: cuBLAS otherwise allocates one per
  // stream behind the allocator's back.
  if (r == 0 && wsBytes > 0) r = p_cublasSetWorkspace_v2(*h, (void *)(size_t)ws, wsBytes);
  // Default math: cublasSgemm keeps fp32 (TF32 would need CUBLAS_TF32_TENSOR_OP_MATH),
  // so fp32 GEMMs match the cpu reference to fp32 rounding; the bf16 mode asks for
  // tensor cores through GemmEx's compute type instead.
  if (r == 0) r = p_cublasSetMathMode(*h, DEFAULT_MATH);
  if (r != 0) {
    p_cublasDestroy_v2(*h);
    *h = NULL;
  }
  return r;
}

cublasStatus_t fsdp_blas_destroy(CUcontext ctx, cublasHandle_t h) {
  CUresult cr = use(ctx);
  if (cr != 0) return 1000 + cr;
  return p_cublasDestroy_v2(h);
}

cublasStatus_t fsdp_sgemm(CUcontext ctx, cublasHandle_t h, int mode, int ta, int tb, int m, int n, int k,
                          float alpha, CUdeviceptr A, int lda, CUdeviceptr B, int ldb, float beta,
                          CUdeviceptr C, int ldc) {
  CUresult cr = use(ctx);
  if (cr != 0) return 1000 + cr;
  cublasOperation_t opA = ta ? OP_T : OP_N, opB = tb ? OP_T : OP_N;
  if (mode == 0)
    return p_cublasSgemm_v2(h, opA, opB, m, n, k, &alpha, (const float *)(size_t)A, lda, (const float *)(size_t)B,
                            ldb, &beta, (float *)(size_t)C, ldc);
  if (mode == 2)  // bf16 buffers: bf16 A, B and C, fp32 accumulation and fp32 scalars
    return p_cublasGemmEx(h, opA, opB, m, n, k, &alpha, (const void *)(size_t)A, R_16BF, lda, (const void *)(size_t)B,
                          R_16BF, ldb, &beta, (void *)(size_t)C, R_16BF, ldc, COMPUTE_32F, GEMM_DEFAULT);
  return p_cublasGemmEx(h, opA, opB, m, n, k, &alpha, (const void *)(size_t)A, R_32F, lda, (const void *)(size_t)B,
                        R_32F, ldb, &beta, (void *)(size_t)C, R_32F, ldc, COMPUTE_32F_FAST_16BF, GEMM_DEFAULT);
}
