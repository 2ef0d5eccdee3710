// Cross-entropy over the vocabulary fused with its softmax: one block a row.
// Logits are float or bf16 (T); losses are float.
#include "common.cuh"

// row_lse returns logsumexp of z[0:vocab] to every thread (max subtracted first).
template <typename T>
__device__ __forceinline__ float row_lse(const T* z, int vocab, float* scratch) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, ld(z + j));
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(ld(z + j) - m);
  s = block_sum(s, scratch);
  return m + logf(s);
}

template <typename T>
__device__ __forceinline__ void xent_fwd(float* __restrict__ losses, const T* __restrict__ logits,
                                         const int* __restrict__ targets, int rows, int vocab) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const T* z = logits + (long long)r * vocab;
  float l = row_lse(z, vocab, scratch);
  if (threadIdx.x == 0) losses[r] = l - ld(z + targets[r]);
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_fwd(float* __restrict__ losses, const float* __restrict__ logits, const int* __restrict__ targets,
                  int rows, int vocab) {
  xent_fwd(losses, logits, targets, rows, vocab);
}
FSDP_REGISTER(fsdp_xent_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_fwd_bf16(float* __restrict__ losses, const bf16* __restrict__ logits, const int* __restrict__ targets,
                       int rows, int vocab) {
  xent_fwd(losses, logits, targets, rows, vocab);
}
FSDP_REGISTER(fsdp_xent_fwd_bf16, ELEM_BLOCK)

// dlogits may alias logits (no __restrict__): the whole row is read by the two
// reductions, which end in barriers, before any element is written, and each
// element is then read and written by the same thread.
template <typename T>
__device__ __forceinline__ void xent_bwd(T* dlogits, const T* logits, const int* __restrict__ targets, int rows,
                                         int vocab, float scale) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const T* z = logits + (long long)r * vocab;
  T* dz = dlogits + (long long)r * vocab;
  float l = row_lse(z, vocab, scratch);
  __syncthreads();  // every read of the row done before the first write (aliasing)
  int t = targets[r];
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float d = scale * expf(ld(z + j) - l);
    st(dz + j, j == t ? d - scale : d);
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_bwd(float* dlogits, const float* logits, const int* __restrict__ targets, int rows, int vocab,
                  float scale) {
  xent_bwd(dlogits, logits, targets, rows, vocab, scale);
}
FSDP_REGISTER(fsdp_xent_bwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_bwd_bf16(bf16* dlogits, const bf16* logits, const int* __restrict__ targets, int rows, int vocab,
                       float scale) {
  xent_bwd(dlogits, logits, targets, rows, vocab, scale);
}
FSDP_REGISTER(fsdp_xent_bwd_bf16, ELEM_BLOCK)
