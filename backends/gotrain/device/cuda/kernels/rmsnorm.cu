// RMSNorm (Zhang & Sennrich 2019), as Hugging Face's LlamaRMSNorm: one block a row.
// out may be x and dx may be dout (no __restrict__ on them): a row is read whole by
// the reduction, whose barriers come before any write, and then each element is
// read and written by one thread. Tensors are float or bf16 (T), rstd float.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void rmsnorm_fwd(T* out, float* __restrict__ rstd, const T* x, const T* __restrict__ w,
                                            int rows, int dim, float eps) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;  // uniform across the block: no barrier is skipped by part of it
  const T* xr = x + (long long)r * dim;
  T* yr = out + (long long)r * dim;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    float v = ld(xr + j);
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) st(yr + j, ld(w + j) * (ld(xr + j) * rs));
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_fwd(float* out, float* __restrict__ rstd, const float* x,
                     const float* __restrict__ w, int rows, int dim, float eps) {
  rmsnorm_fwd(out, rstd, x, w, rows, dim, eps);
}
FSDP_REGISTER(fsdp_rmsnorm_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_fwd_bf16(bf16* out, float* __restrict__ rstd, const bf16* x,
                          const bf16* __restrict__ w, int rows, int dim, float eps) {
  rmsnorm_fwd(out, rstd, x, w, rows, dim, eps);
}
FSDP_REGISTER(fsdp_rmsnorm_fwd_bf16, ELEM_BLOCK)

// The residual connection and the next RMSNorm in one pass (a block a row): x +=
// resid, rounded as it is stored (the cpu device's Add with alpha 1, then its
// RMSNormForward), and out = RMSNorm(x) from the stored values. The model writes
// the attention output projection into x (beta 0) and adds the residual stream
// here, instead of copying the stream into x first (one launch and one pass over
// a row less). Each thread reads back only the elements it stored itself.
template <typename T>
__device__ __forceinline__ void residual_rmsnorm_fwd(T* __restrict__ out, float* __restrict__ rstd, T* __restrict__ x,
                                                     const T* __restrict__ resid, const T* __restrict__ w, int rows,
                                                     int dim, float eps) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;  // uniform across the block
  long long off = (long long)r * dim;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) {
    st(x + off + j, __fadd_rn(ld(x + off + j), ld(resid + off + j)));
    float v = ld(x + off + j);  // the stored (for bf16: rounded) sum, as RMSNormForward reads it
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) st(out + off + j, ld(w + j) * (ld(x + off + j) * rs));
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_residual_rmsnorm_fwd(float* __restrict__ out, float* __restrict__ rstd, float* __restrict__ x,
                              const float* __restrict__ resid, const float* __restrict__ w, int rows, int dim,
                              float eps) {
  residual_rmsnorm_fwd(out, rstd, x, resid, w, rows, dim, eps);
}
FSDP_REGISTER(fsdp_residual_rmsnorm_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_residual_rmsnorm_fwd_bf16(bf16* __restrict__ out, float* __restrict__ rstd, bf16* __restrict__ x,
                                   const bf16* __restrict__ resid, const bf16* __restrict__ w, int rows, int dim,
                                   float eps) {
  residual_rmsnorm_fwd(out, rstd, x, resid, w, rows, dim, eps);
}
FSDP_REGISTER(fsdp_residual_rmsnorm_fwd_bf16, ELEM_BLOCK)

// dx += r·w⊙dy − (r³/dim)·x·Σ(w⊙dy⊙x), one block a row.
template <typename T>
__device__ __forceinline__ void rmsnorm_bwd_dx(T* dx, const T* dy, const T* __restrict__ x, const T* __restrict__ w,
                                               const float* __restrict__ rstd, int rows, int dim) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  long long off = (long long)r * dim;
  float dot = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dot += ld(w + j) * ld(dy + off + j) * ld(x + off + j);
  dot = block_sum(dot, scratch);
  float rs = rstd[r];
  float c = rs * rs * rs * dot / (float)dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x)
    st(dx + off + j, ld(dx + off + j) + (rs * ld(w + j) * ld(dy + off + j) - c * ld(x + off + j)));
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dx(float* dx, const float* dy, const float* __restrict__ x,
                        const float* __restrict__ w, const float* __restrict__ rstd, int rows, int dim) {
  rmsnorm_bwd_dx(dx, dy, x, w, rstd, rows, dim);
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dx, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dx_bf16(bf16* dx, const bf16* dy, const bf16* __restrict__ x,
                             const bf16* __restrict__ w, const float* __restrict__ rstd, int rows, int dim) {
  rmsnorm_bwd_dx(dx, dy, x, w, rstd, rows, dim);
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dx_bf16, ELEM_BLOCK)

// dw[j] += Σ_rows dy·(x·rstd), one thread a column, rows in order (the cpu's
// order), accumulated in a float register and stored once.
template <typename T>
__device__ __forceinline__ void rmsnorm_bwd_dw(T* __restrict__ dw, const T* __restrict__ dy,
                                               const T* __restrict__ x, const float* __restrict__ rstd, int rows,
                                               int dim) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float acc = ld(dw + j);
  for (int r = 0; r < rows; r++) {
    long long o = (long long)r * dim + j;
    acc = __fadd_rn(acc, __fmul_rn(ld(dy + o), __fmul_rn(ld(x + o), rstd[r])));
  }
  st(dw + j, acc);
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dw(float* __restrict__ dw, const float* __restrict__ dy, const float* __restrict__ x,
                        const float* __restrict__ rstd, int rows, int dim) {
  rmsnorm_bwd_dw(dw, dy, x, rstd, rows, dim);
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dw, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dw_bf16(bf16* __restrict__ dw, const bf16* __restrict__ dy, const bf16* __restrict__ x,
                             const float* __restrict__ rstd, int rows, int dim) {
  rmsnorm_bwd_dw(dw, dy, x, rstd, rows, dim);
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dw_bf16, ELEM_BLOCK)
