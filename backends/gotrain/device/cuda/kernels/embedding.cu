// Token embedding: a gather forward, a deterministic scatter-add backward.
#include "common.cuh"

// One block per token: out[i,:] = table[tokens[i],:].
template <typename T>
__device__ __forceinline__ void embedding_fwd(T* __restrict__ out, const T* __restrict__ table,
                                              const int* __restrict__ tokens, int ntok, int dim) {
  int i = blockIdx.x;
  if (i >= ntok) return;
  const T* src = table + (long long)tokens[i] * dim;
  T* dst = out + (long long)i * dim;
  for (int j = threadIdx.x; j < dim; j += blockDim.x) dst[j] = src[j];
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_fwd(float* __restrict__ out, const float* __restrict__ table, const int* __restrict__ tokens,
                       int ntok, int dim) {
  embedding_fwd(out, table, tokens, ntok, dim);
}
FSDP_REGISTER(fsdp_embedding_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_fwd_bf16(bf16* __restrict__ out, const bf16* __restrict__ table, const int* __restrict__ tokens,
                            int ntok, int dim) {
  embedding_fwd(out, table, tokens, ntok, dim);
}
FSDP_REGISTER(fsdp_embedding_fwd_bf16, ELEM_BLOCK)

// One thread per column walking the tokens in order: repeated tokens add in token
// order with no atomics, bit for bit the cpu device's serial loop. The reads of a
// token's row are coalesced across the block's columns. A bf16 table is read,
// added to and stored (rounded) per token, as the cpu device's bf16 loop.
template <typename T>
__device__ __forceinline__ void embedding_bwd(T* __restrict__ dtable, const T* __restrict__ dout,
                                              const int* __restrict__ tokens, int ntok, int dim) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= dim) return;
  for (int i = 0; i < ntok; i++) {
    T* d = dtable + (long long)tokens[i] * dim + j;
    st(d, __fadd_rn(ld(d), ld(dout + (long long)i * dim + j)));
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_bwd(float* __restrict__ dtable, const float* __restrict__ dout, const int* __restrict__ tokens,
                       int ntok, int dim) {
  embedding_bwd(dtable, dout, tokens, ntok, dim);
}
FSDP_REGISTER(fsdp_embedding_bwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_embedding_bwd_bf16(bf16* __restrict__ dtable, const bf16* __restrict__ dout, const int* __restrict__ tokens,
                            int ntok, int dim) {
  embedding_bwd(dtable, dout, tokens, ntok, dim);
}
FSDP_REGISTER(fsdp_embedding_bwd_bf16, ELEM_BLOCK)
