// Token embedding: a gather forward, a deterministic scatter-add backward.
#include "common.cuh"

// One block per token: out[i,:] = table[tokens[i],:].
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_fwd(float* __restrict__ out, const float* __restrict__ table, const int* __restrict__ tokens,
                       int ntok, int dim) {
  int i = blockIdx.x;
  if (i >= ntok) return;
  const float* src = table + (long long)tokens[i] * dim;
  float* dst = out + (long long)i * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dst[j] = src[j];
}
FSDP_REGISTER(fsdp_embedding_fwd, ELEM_BLOCK)

// One thread per column walking the tokens in order: repeated tokens add in token
// order with no atomics, bit for bit the cpu device's serial loop. The reads of a
// token's row are coalesced across the block's columns.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_bwd(float* __restrict__ dtable, const float* __restrict__ dout, const int* __restrict__ tokens,
                       int ntok, int dim) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  for (int i = 0; i < ntok; i++) {
    float* d = dtable + (long long)tokens[i] * dim + j;
    *d = __fadd_rn(*d, dout[(long long)i * dim + j]);
  }
}
FSDP_REGISTER(fsdp_embedding_bwd, ELEM_BLOCK)
