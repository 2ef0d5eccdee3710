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

// ---- fused: forward loss and backward dlogits in one launch ----
//
// The separate kernels read a row five times (forward: max, then Σexp; backward:
// max, Σexp, then the write pass). The fused kernel reads it twice and writes it
// once: pass 1 keeps a running (max, Σexp) per thread, rescaling the sum when the
// max grows (the online logsumexp of Milakov & Gimelshein 2018), merged across
// the block; pass 2 writes dlogits from the final lse. Logits stay in their
// storage type (bf16 under the bf16 policy): no fp32 copy of a 128k-wide row is
// made anywhere, and the loss is the row statistic (fp32).

// xent_online adds x to the running (m, s): s = Σ exp(x_i − m).
__device__ __forceinline__ void xent_online(float x, float& m, float& s) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;  // m = −inf at first: 0·0 + 1
    m = x;
  } else if (x != -INFINITY) {
    s += expf(x - m);
  }
}

// xent_pairs says whether a row is read as bf16 pairs (4-byte loads): bf16 rows
// of even length (every row then starts 4-byte aligned in an arena block).
template <typename T>
__device__ __forceinline__ bool xent_pairs(int vocab) {
  return sizeof(T) == 2 && (vocab & 1) == 0;
}

template <typename T>
__device__ __forceinline__ void xent_fused(float* __restrict__ losses, T* dlogits, const T* logits,
                                           const int* __restrict__ targets, int rows, int vocab, float scale) {
  __shared__ float scratch[32];
  int r = blockIdx.x;
  if (r >= rows) return;
  const T* z = logits + (long long)r * vocab;
  T* dz = dlogits + (long long)r * vocab;
  int t = targets[r];
  float zt = ld(z + t);  // read before any thread writes the row (aliasing)
  float m = -INFINITY, s = 0.0f;
  bool pairs = xent_pairs<T>(vocab);
  if (pairs) {
    // Each thread reads and later writes the same pairs, so aliasing stays safe.
    const unsigned* z2 = reinterpret_cast<const unsigned*>(z);
    for (int j = threadIdx.x; j < vocab / 2; j += blockDim.x) {
      unsigned u = z2[j];
      xent_online(__uint_as_float(u << 16), m, s);
      xent_online(__uint_as_float(u & 0xffff0000u), m, s);
    }
  } else {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) xent_online(ld(z + j), m, s);
  }
  float mx = block_max(m, scratch);
  float part = m == -INFINITY ? 0.0f : s * expf(m - mx);
  float lse = mx + logf(block_sum(part, scratch));
  __syncthreads();  // every read of the row done before the first write (aliasing)
  if (threadIdx.x == 0) losses[r] = lse - zt;
  if (pairs) {
    const unsigned* z2 = reinterpret_cast<const unsigned*>(z);
    unsigned* dz2 = reinterpret_cast<unsigned*>(dz);
    for (int j = threadIdx.x; j < vocab / 2; j += blockDim.x) {
      unsigned u = z2[j];
      float d0 = scale * expf(__uint_as_float(u << 16) - lse);
      float d1 = scale * expf(__uint_as_float(u & 0xffff0000u) - lse);
      if (2 * j == t) d0 -= scale;
      if (2 * j + 1 == t) d1 -= scale;
      dz2[j] = (unsigned)f32_to_bf16(d0) | ((unsigned)f32_to_bf16(d1) << 16);
    }
  } else {
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
      float d = scale * expf(ld(z + j) - lse);
      st(dz + j, j == t ? d - scale : d);
    }
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_fused(float* __restrict__ losses, float* dlogits, const float* logits, const int* __restrict__ targets,
                    int rows, int vocab, float scale) {
  xent_fused(losses, dlogits, logits, targets, rows, vocab, scale);
}
FSDP_REGISTER(fsdp_xent_fused, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_xent_fused_bf16(float* __restrict__ losses, bf16* dlogits, const bf16* logits,
                         const int* __restrict__ targets, int rows, int vocab, float scale) {
  xent_fused(losses, dlogits, logits, targets, rows, vocab, scale);
}
FSDP_REGISTER(fsdp_xent_fused_bf16, ELEM_BLOCK)
