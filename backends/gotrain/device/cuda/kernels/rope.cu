// Rotary position embedding (Su et al. 2021), rotate_half pairing (i, i + half),
// with cos/sin tables made on the host in float64 as the cpu device does.
#include "common.cuh"

// One thread a pair: (x1, x2) -> (x1·c − x2·s, x2·c + x1·s) with s = sign·sin.
template <typename T>
__device__ __forceinline__ void rope(T* __restrict__ x, const float* __restrict__ cosT,
                                     const float* __restrict__ sinT, int rows, int seq, int heads, int headDim,
                                     float sign) {
  int half = headDim / 2;
  long long n = (long long)rows * heads * half;
  GRID_STRIDE(p, n) {
    int i = (int)(p % half);
    long long rh = p / half;  // row·heads + head
    int t = (int)((rh / heads) % seq);
    float c = cosT[(long long)t * half + i], s = __fmul_rn(sign, sinT[(long long)t * half + i]);
    T* v = x + rh * headDim;
    float x1 = ld(v + i), x2 = ld(v + i + half);
    st(v + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    st(v + i + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rope(float* __restrict__ x, const float* __restrict__ cosT, const float* __restrict__ sinT, int rows,
              int seq, int heads, int headDim, float sign) {
  rope(x, cosT, sinT, rows, seq, heads, headDim, sign);
}
FSDP_REGISTER(fsdp_rope, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rope_bf16(bf16* __restrict__ x, const float* __restrict__ cosT, const float* __restrict__ sinT, int rows,
                   int seq, int heads, int headDim, float sign) {
  rope(x, cosT, sinT, rows, seq, heads, headDim, sign);
}
FSDP_REGISTER(fsdp_rope_bf16, ELEM_BLOCK)

// q and k rotated in one launch (RoPEForward or RoPEBackward of both): q is [rows,
// qHeads, headDim], k [rows, kvHeads, headDim]; the pairs of a token row's q heads
// come first, then its k heads', so neighbouring threads read neighbouring cos/sin
// entries. The same arithmetic as rope, pair for pair.
template <typename T>
__device__ __forceinline__ void rope_qk(T* __restrict__ q, T* __restrict__ k, const float* __restrict__ cosT,
                                        const float* __restrict__ sinT, int rows, int seq, int qHeads, int kvHeads,
                                        int headDim, float sign) {
  int half = headDim / 2, heads = qHeads + kvHeads;
  long long n = (long long)rows * heads * half;
  GRID_STRIDE(p, n) {
    int i = (int)(p % half);
    long long rh = p / half;  // row·heads + head
    long long row = rh / heads;
    int h = (int)(rh % heads);
    int t = (int)(row % seq);
    float c = cosT[(long long)t * half + i], s = __fmul_rn(sign, sinT[(long long)t * half + i]);
    T* v = h < qHeads ? q + (row * qHeads + h) * headDim : k + (row * kvHeads + (h - qHeads)) * headDim;
    float x1 = ld(v + i), x2 = ld(v + i + half);
    st(v + i, __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
    st(v + i + half, __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rope_qk(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ cosT,
                 const float* __restrict__ sinT, int rows, int seq, int qHeads, int kvHeads, int headDim, float sign) {
  rope_qk(q, k, cosT, sinT, rows, seq, qHeads, kvHeads, headDim, sign);
}
FSDP_REGISTER(fsdp_rope_qk, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_rope_qk_bf16(bf16* __restrict__ q, bf16* __restrict__ k, const float* __restrict__ cosT,
                      const float* __restrict__ sinT, int rows, int seq, int qHeads, int kvHeads, int headDim,
                      float sign) {
  rope_qk(q, k, cosT, sinT, rows, seq, qHeads, kvHeads, headDim, sign);
}
FSDP_REGISTER(fsdp_rope_qk_bf16, ELEM_BLOCK)
