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
