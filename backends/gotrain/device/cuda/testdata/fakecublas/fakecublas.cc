// fakecublas.cc: a libcublas for tests, built by the cuda package's tests with g++
// and never linked into the product. It implements the entry points the cuda
// device calls (cudaapi.h) on the host: device pointers are host pointers, as in
// the fake libcuda the tests pair it with, and each GEMM runs in the order of the
// handle's stream: enqueued through the fake libcuda's cuLaunchHostFunc when that
// library is loaded (its streams may run on threads of their own), else at once.
//
// Every GEMM is checked as cuBLAS would check it and more strictly: column-major
// leading dimensions (lda ≥ max(1, rows of A as stored), ...), the handle, the
// stream and the workspace set before the first GEMM, the data and compute types
// of cublasGemmEx. A call that breaks a rule returns CUBLAS_STATUS_INVALID_VALUE
// and prints why on stderr. Each call is appended to the file named by
// FSDPBENCH_FAKECUBLAS_LOG (one line, key=value), so the tests can check the
// row-major ↔ column-major mapping of every MatMul. FSDPBENCH_FAKECUBLAS_FAIL_AT=n
// makes the n-th GEMM (1-based) of each handle fail with CUBLAS_STATUS_EXECUTION_FAILED.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <mutex>
#include <vector>

extern "C" {
#include "cudaapi.h"
}

namespace {

constexpr int kSuccess = 0, kNotInitialized = 1, kInvalidValue = 7, kExecutionFailed = 13;
constexpr int kOpN = 0, kOpT = 1;
constexpr int kR32F = 0, kR16BF = 14, kCompute32F = 68, kCompute32FFast16BF = 75, kGemmDefault = -1;
constexpr uint32_t kMagic = 0xb1a5f00d;

struct Handle {
  uint32_t magic = kMagic;
  cudaStream_t stream = nullptr;
  bool streamSet = false;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  int mathMode = 0;
  long gemms = 0;  // GEMMs issued through this handle
};

std::mutex mu;

Handle *check(cublasHandle_t h) {
  auto *x = reinterpret_cast<Handle *>(h);
  if (x == nullptr || x->magic != kMagic) return nullptr;
  return x;
}

// onStream runs f in the order of stream s: through cuLaunchHostFunc of the
// libcuda loaded in this process (FSDPBENCH_LIBCUDA, else libcuda.so.1), or at
// once when there is none. It returns false when the driver refused.
bool onStream(cudaStream_t s, std::function<void()> f) {
  typedef CUresult (*launchFn)(CUstream, void (*)(void *), void *);
  const char *path = getenv("FSDPBENCH_LIBCUDA");
  void *lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  launchFn launch = lib ? reinterpret_cast<launchFn>(dlsym(lib, "cuLaunchHostFunc")) : nullptr;
  if (lib) dlclose(lib);  // drops the reference RTLD_NOLOAD took; the library stays loaded
  if (launch == nullptr || s == nullptr) {
    f();
    return true;
  }
  auto *job = new std::function<void()>(std::move(f));
  auto run = [](void *p) {
    auto *j = static_cast<std::function<void()> *>(p);
    (*j)();
    delete j;
  };
  if (launch(reinterpret_cast<CUstream>(s), run, job) != 0) {
    delete job;
    return false;
  }
  return true;
}

int reject(const char *call, const char *why) {
  fprintf(stderr, "fakecublas: %s: %s\n", call, why);
  return kInvalidValue;
}

// bf16 rounds x to bfloat16 (round to nearest even), as tensor cores read fp32
// inputs under CUBLAS_COMPUTE_32F_FAST_16BF.
float bf16(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

// The storage of a GEMM's matrices: fp32, or bf16 encodings (CUDA_R_16BF), which
// are widened exactly on load and rounded to nearest even on the store of C.
float load(const void *p, size_t i, bool bf) {
  if (!bf) return static_cast<const float *>(p)[i];
  uint32_t u = uint32_t(static_cast<const uint16_t *>(p)[i]) << 16;
  float x;
  memcpy(&x, &u, 4);
  return x;
}

void store(void *p, size_t i, float x, bool bf) {
  if (!bf) {
    static_cast<float *>(p)[i] = x;
    return;
  }
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    u = (u >> 16) | 0x40u;  // a NaN stays a quiet NaN
  } else {
    u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  }
  static_cast<uint16_t *>(p)[i] = uint16_t(u);
}

void logCall(const char *call, Handle *h, int ta, int tb, int m, int n, int k, float alpha, const void *A, int lda,
             const void *B, int ldb, float beta, const void *C, int ldc, int compute, int dtype) {
  const char *path = getenv("FSDPBENCH_FAKECUBLAS_LOG");
  if (path == nullptr || *path == 0) return;
  FILE *f = fopen(path, "a");
  if (f == nullptr) return;
  fprintf(f,
          "call=%s transa=%c transb=%c m=%d n=%d k=%d alpha=%.9g A=%p lda=%d B=%p ldb=%d beta=%.9g C=%p ldc=%d "
          "compute=%d dtype=%d stream=%p workspace=%zu\n",
          call, ta == kOpT ? 'T' : 'N', tb == kOpT ? 'T' : 'N', m, n, k, alpha, A, lda, B, ldb, beta, C, ldc,
          compute, dtype, (void *)h->stream, h->workspaceBytes);
  fclose(f);
}

int gemm(const char *call, cublasHandle_t handle, int ta, int tb, int m, int n, int k, float alpha, const void *A,
         int lda, const void *B, int ldb, float beta, void *C, int ldc, int compute, int dtype = kR32F) {
  std::lock_guard<std::mutex> lock(mu);
  Handle *h = check(handle);
  if (h == nullptr) return kNotInitialized;
  if (!h->streamSet) return reject(call, "no cublasSetStream before the first GEMM: it would run on the legacy default stream");
  if (h->workspace == nullptr || h->workspaceBytes == 0) return reject(call, "no cublasSetWorkspace: cuBLAS would allocate behind the allocator");
  if ((ta != kOpN && ta != kOpT) || (tb != kOpN && tb != kOpT)) return reject(call, "transa/transb not N or T");
  if (m < 0 || n < 0 || k < 0) return reject(call, "negative m, n or k");
  int rowsA = ta == kOpN ? m : k, rowsB = tb == kOpN ? k : n;
  if (lda < (rowsA > 1 ? rowsA : 1)) return reject(call, "lda < max(1, rows of A as stored)");
  if (ldb < (rowsB > 1 ? rowsB : 1)) return reject(call, "ldb < max(1, rows of B as stored)");
  if (ldc < (m > 1 ? m : 1)) return reject(call, "ldc < max(1, m)");
  if (m > 0 && n > 0 && (C == nullptr || (k > 0 && (A == nullptr || B == nullptr)))) return reject(call, "null matrix");
  logCall(call, h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc, compute, dtype);
  h->gemms++;
  const char *failAt = getenv("FSDPBENCH_FAKECUBLAS_FAIL_AT");
  if (failAt != nullptr && atol(failAt) == h->gemms) {
    fprintf(stderr, "fakecublas: %s: injected failure at GEMM %ld of its handle\n", call, h->gemms);
    return kExecutionFailed;
  }
  bool round = compute == kCompute32FFast16BF, bf = dtype == kR16BF;
  // alpha and beta are read now (host pointer mode), the matrices when the GEMM runs.
  auto run = [=]() {
    auto a = [&](int i, int l) {  // op(A)[i,l], column-major
      float x = load(A, ta == kOpN ? i + (size_t)l * lda : l + (size_t)i * lda, bf);
      return round ? bf16(x) : x;
    };
    auto b = [&](int l, int j) {  // op(B)[l,j]
      float x = load(B, tb == kOpN ? l + (size_t)j * ldb : j + (size_t)l * ldb, bf);
      return round ? bf16(x) : x;
    };
    for (int j = 0; j < n; j++) {
      for (int i = 0; i < m; i++) {
        double s = 0;
        for (int l = 0; l < k; l++) s += (double)a(i, l) * (double)b(l, j);
        size_t at = i + (size_t)j * ldc;
        // BLAS: beta = 0 ignores C (it may hold NaN).
        double c = beta == 0 ? 0.0 : (double)beta * (double)load(C, at, bf);
        store(C, at, (float)((double)alpha * s + c), bf);
      }
    }
  };
  if (!onStream(h->stream, run)) return reject(call, "cuLaunchHostFunc refused the handle's stream");
  return kSuccess;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  if (handle == nullptr) return kInvalidValue;
  *handle = reinterpret_cast<cublasHandle_t>(new Handle());
  return kSuccess;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  Handle *h = check(handle);
  if (h == nullptr) return kNotInitialized;
  h->magic = 0;
  delete h;
  return kSuccess;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
  if (check(handle) == nullptr) return kNotInitialized;
  *version = 990100;  // 99.1.0: no real cuBLAS has it, so a report shows the fake
  return kSuccess;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t s) {
  Handle *h = check(handle);
  if (h == nullptr) return kNotInitialized;
  h->stream = s;
  h->streamSet = true;
  return kSuccess;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *ws, size_t bytes) {
  Handle *h = check(handle);
  if (h == nullptr) return kNotInitialized;
  if (ws == nullptr && bytes > 0) return reject("cublasSetWorkspace_v2", "null workspace of non-zero size");
  if (((uintptr_t)ws) % 256 != 0) return reject("cublasSetWorkspace_v2", "workspace not 256-byte aligned");
  h->workspace = ws;
  h->workspaceBytes = bytes;
  return kSuccess;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  Handle *h = check(handle);
  if (h == nullptr) return kNotInitialized;
  if (mode != 0) return reject("cublasSetMathMode", "the device asks for CUBLAS_DEFAULT_MATH (fp32 parity) and nothing else");
  h->mathMode = mode;
  return kSuccess;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
  return gemm("cublasSgemm_v2", handle, transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc, kCompute32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  // The device's two kinds of buffers: fp32 (A, B and C CUDA_R_32F, compute 32F
  // or 32F_FAST_16BF) or bf16 (all three CUDA_R_16BF, compute 32F: fp32
  // accumulation). Mixed types are a device bug.
  bool f32 = Atype == kR32F && Btype == kR32F && Ctype == kR32F;
  bool b16 = Atype == kR16BF && Btype == kR16BF && Ctype == kR16BF;
  if (!f32 && !b16)
    return reject("cublasGemmEx", "A, B and C must all be CUDA_R_32F or all CUDA_R_16BF (one buffer dtype per MatMul)");
  if (f32 && computeType != kCompute32F && computeType != kCompute32FFast16BF)
    return reject("cublasGemmEx", "compute type must be CUBLAS_COMPUTE_32F or _32F_FAST_16BF with fp32 scalars");
  if (b16 && computeType != kCompute32F)
    return reject("cublasGemmEx", "bf16 matrices need CUBLAS_COMPUTE_32F (fp32 accumulation, fp32 scalars)");
  if (algo != kGemmDefault) return reject("cublasGemmEx", "algo must be CUBLAS_GEMM_DEFAULT");
  return gemm("cublasGemmEx", handle, transa, transb, m, n, k, *(const float *)alpha, A, lda, B, ldb,
              *(const float *)beta, C, ldc, computeType, Atype);
}

}  // extern "C"
