// shim.h: the C side of the cuda device. Function pointers of the exact types
// declared in cudaapi.h, filled from dlsym by the Go loader, and thin wrappers that
// make the device's context current on the calling OS thread before each driver
// call (goroutines move between threads; a context is per thread).
#ifndef FSDP_SHIM_H
#define FSDP_SHIM_H

#include "cudaapi.h"

enum { FSDP_LIB_CUDA = 0, FSDP_LIB_CUBLAS = 1 };

int fsdp_nsyms(int lib);
const char *fsdp_sym_name(int lib, int i);
void fsdp_sym_set(int lib, int i, void *p);

CUresult fsdp_cuInit(void);
CUresult fsdp_driver_version(int *v);
const char *fsdp_error_name(CUresult r);
CUresult fsdp_device_count(int *n);
CUresult fsdp_device_open(int ordinal, CUdevice *dev, CUcontext *ctx, char *name, int nameLen,
                          size_t *total, int *ccMajor, int *ccMinor);
CUresult fsdp_device_close(CUdevice dev, CUcontext ctx);
CUresult fsdp_mem_info(CUcontext ctx, size_t *freeB, size_t *total);
CUresult fsdp_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t bytes);
CUresult fsdp_mem_free(CUcontext ctx, CUdeviceptr p);
CUresult fsdp_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t bytes, CUstream s);
CUresult fsdp_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t bytes, CUstream s);
CUresult fsdp_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s);
CUresult fsdp_memset32(CUcontext ctx, CUdeviceptr dst, unsigned int v, size_t n, CUstream s);
CUresult fsdp_stream_create(CUcontext ctx, CUstream *s);
CUresult fsdp_stream_destroy(CUcontext ctx, CUstream s);
CUresult fsdp_stream_sync(CUcontext ctx, CUstream s);
CUresult fsdp_stream_query(CUcontext ctx, CUstream s);
// fsdp_make_current makes ctx current on the calling thread.
CUresult fsdp_make_current(CUcontext ctx);
CUresult fsdp_event_create(CUcontext ctx, CUevent *e);
CUresult fsdp_event_create_timed(CUcontext ctx, CUevent *e);
CUresult fsdp_event_elapsed(CUcontext ctx, float *ms, CUevent a, CUevent b);
CUresult fsdp_event_destroy(CUcontext ctx, CUevent e);
CUresult fsdp_event_record(CUcontext ctx, CUevent e, CUstream s);
CUresult fsdp_event_sync(CUcontext ctx, CUevent e);
// fsdp_event_query is cuEventQuery: 0 done, CUDA_ERROR_NOT_READY (600) pending.
CUresult fsdp_event_query(CUcontext ctx, CUevent e);
CUresult fsdp_stream_wait(CUcontext ctx, CUstream s, CUevent e);
CUresult fsdp_module_load(CUcontext ctx, CUmodule *m, const void *image);
CUresult fsdp_module_unload(CUcontext ctx, CUmodule m);
CUresult fsdp_module_function(CUcontext ctx, CUmodule m, const char *name, CUfunction *f);
// fsdp_launch launches f with nargs parameters, each in its own 8-byte slot of
// args (the kernel reads as many bytes of a slot as its parameter has).
CUresult fsdp_launch(CUcontext ctx, CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                     unsigned shmem, CUstream s, unsigned long long *args, int nargs);

cublasStatus_t fsdp_blas_create(CUcontext ctx, cublasHandle_t *h, CUstream s, CUdeviceptr ws, size_t wsBytes,
                                int *version);
cublasStatus_t fsdp_blas_destroy(CUcontext ctx, cublasHandle_t h);
// fsdp_sgemm is column-major cuBLAS; mode 0 runs cublasSgemm (fp32 parity), mode 1
// cublasGemmEx with fp32 operands and CUBLAS_COMPUTE_32F_FAST_16BF (inputs rounded
// to bf16 on the tensor cores, fp32 accumulation), mode 2 cublasGemmEx on bf16
// buffers: CUDA_R_16BF A, B and C with CUBLAS_COMPUTE_32F (fp32 accumulation, C
// rounded to bf16 once).
cublasStatus_t fsdp_sgemm(CUcontext ctx, cublasHandle_t h, int mode, int ta, int tb, int m, int n, int k,
                          float alpha, CUdeviceptr A, int lda, CUdeviceptr B, int ldb, float beta,
                          CUdeviceptr C, int ldc);

#endif
