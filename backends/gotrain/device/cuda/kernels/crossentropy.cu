// Cross-entropy over the vocabulary fused with its softmax: one block a row.
#include "common.cuh"

// row_lse returns logsumexp of z[0:vocab] to every thread (max subtracted first).
__device__ __forceinline__ float row_lse(const float* z, int vocab, float* scratch) {
  float m = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, z[j]);
  m = block_max(m, scratch);
  float s = 0.0f;
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) s += expf(z[j] - m);
  s = block_sum(s, scratch);
  return m + logf(s);
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_fwd(float* __restrict__ losses, const float* __restrict__ logits, const int* __restrict__ targets,
                  int rows, int vocab) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const float* z = logits + (long long)r * vocab;
  float l = row_lse(z, vocab, scratch);
  if (threadIdx.x == 0) losses[r] = l - z[targets[r]];
}
FSDP_REGISTER(fsdp_xent_fwd, ELEM_BLOCK)

// dlogits may alias logits (no __restrict__): the whole row is read by the two
// reductions, which end in barriers, before any element is written, and each
// element is then read and written by the same thread.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_bwd(float* dlogits, const float* logits, const int* __restrict__ targets, int rows, int vocab,
                  float scale) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const float* z = logits + (long long)r * vocab;
  float* dz = dlogits + (long long)r * vocab;
  float l = row_lse(z, vocab, scratch);
  __syncthreads();  // every read of the row done before the first write (aliasing)
  int t = targets[r];
  for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
    float d = scale * expf(z[j] - l);
    dz[j] = j == t ? d - scale : d;
  }
}
FSDP_REGISTER(fsdp_xent_bwd, ELEM_BLOCK)
