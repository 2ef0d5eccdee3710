// RMSNorm (Zhang & Sennrich 2019), as Hugging Face's LlamaRMSNorm: one block a row.
// out may be x and dx may be dout (no __restrict__ on them): a row is read whole by
// the reduction, whose barriers come before any write, and then each element is
// read and written by one thread.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_fwd(float* out, float* __restrict__ rstd, const float* x,
                     const float* __restrict__ w, int rows, int dim, float eps) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;  // uniform across the block: no barrier is skipped by part of it
  const float* xr = x + (long long)r * dim;
  float* yr = out + (long long)r * dim;
  float ss = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) ss += xr[j] * xr[j];
  ss = block_sum(ss, scratch);
  float rs = 1.0f / sqrtf(ss / (float)dim + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) yr[j] = w[j] * (xr[j] * rs);
}
FSDP_REGISTER(fsdp_rmsnorm_fwd, ELEM_BLOCK)

// dx += r·w⊙dy − (r³/dim)·x·Σ(w⊙dy⊙x), one block a row.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dx(float* dx, const float* dy, const float* __restrict__ x,
                        const float* __restrict__ w, const float* __restrict__ rstd, int rows, int dim) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  long long off = (long long)r * dim;
  float dot = 0.0f;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dot += w[j] * dy[off + j] * x[off + j];
  dot = block_sum(dot, scratch);
  float rs = rstd[r];
  float c = rs * rs * rs * dot / (float)dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dx[off + j] += rs * w[j] * dy[off + j] - c * x[off + j];
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dx, ELEM_BLOCK)

// dw[j] += Σ_rows dy·(x·rstd), one thread a column, rows in order (the cpu's order).
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rmsnorm_bwd_dw(float* __restrict__ dw, const float* __restrict__ dy, const float* __restrict__ x,
                        const float* __restrict__ rstd, int rows, int dim) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  float acc = dw[j];
  for (int r = 0; r < rows; r++) {
    long long o = (long long)r * dim + j;
    acc = __fadd_rn(acc, __fmul_rn(dy[o], __fmul_rn(x[o], rstd[r])));
  }
  dw[j] = acc;
}
FSDP_REGISTER(fsdp_rmsnorm_bwd_dw, ELEM_BLOCK)
