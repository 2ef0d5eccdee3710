// SwiGLU (Shazeer 2020): out = silu(gate)·up, silu(g) = g·σ(g). Outputs may alias
// inputs (no __restrict__): each element is read, then written, by one thread.
#include "common.cuh"

template <typename T>
__device__ __forceinline__ void swiglu_fwd(T* out, const T* gate, const T* up, long long n) {
  GRID_STRIDE(i, n) {
    float g = ld(gate + i);
    st(out + i, g / (1.0f + expf(-g)) * ld(up + i));
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_fwd(float* out, const float* gate, const float* up, long long n) {
  swiglu_fwd(out, gate, up, n);
}
FSDP_REGISTER(fsdp_swiglu_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_fwd_bf16(bf16* out, const bf16* gate, const bf16* up, long long n) {
  swiglu_fwd(out, gate, up, n);
}
FSDP_REGISTER(fsdp_swiglu_fwd_bf16, ELEM_BLOCK)

// ∂/∂up = silu(g), ∂/∂g = up·σ(g)·(1 + g·(1 − σ(g))); both added.
template <typename T>
__device__ __forceinline__ void swiglu_bwd(T* dgate, T* dup, const T* dout, const T* gate, const T* up,
                                           long long n) {
  GRID_STRIDE(i, n) {
    float g = ld(gate + i), u = ld(up + i), dy = ld(dout + i), sg = 1.0f / (1.0f + expf(-g));
    float dg = ld(dgate + i) + dy * u * (sg * (1.0f + g * (1.0f - sg)));
    float du = ld(dup + i) + dy * (g * sg);
    st(dgate + i, dg);
    st(dup + i, du);
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up, long long n) {
  swiglu_bwd(dgate, dup, dout, gate, up, n);
}
FSDP_REGISTER(fsdp_swiglu_bwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_bwd_bf16(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate, const bf16* up, long long n) {
  swiglu_bwd(dgate, dup, dout, gate, up, n);
}
FSDP_REGISTER(fsdp_swiglu_bwd_bf16, ELEM_BLOCK)

// SwiGLU over the fused gate|up projection's output gu ([rows, 2·inter]: a row's
// gate then its up), so one GEMM makes both and no split copies them apart: out
// [rows, inter] = silu(gate)·up, the same arithmetic as swiglu_fwd per element.
template <typename T>
__device__ __forceinline__ void swiglu_packed_fwd(T* __restrict__ out, const T* __restrict__ gu, int rows, int inter) {
  long long n = (long long)rows * inter;
  GRID_STRIDE(i, n) {
    long long r = i / inter, j = i - r * inter;
    const T* row = gu + r * 2 * inter;
    float g = ld(row + j);
    st(out + i, g / (1.0f + expf(-g)) * ld(row + inter + j));
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_packed_fwd(float* __restrict__ out, const float* __restrict__ gu, int rows, int inter) {
  swiglu_packed_fwd(out, gu, rows, inter);
}
FSDP_REGISTER(fsdp_swiglu_packed_fwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_packed_fwd_bf16(bf16* __restrict__ out, const bf16* __restrict__ gu, int rows, int inter) {
  swiglu_packed_fwd(out, gu, rows, inter);
}
FSDP_REGISTER(fsdp_swiglu_packed_fwd_bf16, ELEM_BLOCK)

// Its backward adds into dgu ([rows, 2·inter], dgate then dup per row), so the
// gate|up weight gradient and the input gradient are one GEMM each.
template <typename T>
__device__ __forceinline__ void swiglu_packed_bwd(T* __restrict__ dgu, const T* __restrict__ dout,
                                                  const T* __restrict__ gu, int rows, int inter) {
  long long n = (long long)rows * inter;
  GRID_STRIDE(i, n) {
    long long r = i / inter, j = i - r * inter;
    long long gi = r * 2 * inter + j, ui = gi + inter;
    float g = ld(gu + gi), u = ld(gu + ui), dy = ld(dout + i), sg = 1.0f / (1.0f + expf(-g));
    float dg = ld(dgu + gi) + dy * u * (sg * (1.0f + g * (1.0f - sg)));
    float du = ld(dgu + ui) + dy * (g * sg);
    st(dgu + gi, dg);
    st(dgu + ui, du);
  }
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_packed_bwd(float* __restrict__ dgu, const float* __restrict__ dout, const float* __restrict__ gu,
                           int rows, int inter) {
  swiglu_packed_bwd(dgu, dout, gu, rows, inter);
}
FSDP_REGISTER(fsdp_swiglu_packed_bwd, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_packed_bwd_bf16(bf16* __restrict__ dgu, const bf16* __restrict__ dout, const bf16* __restrict__ gu,
                                int rows, int inter) {
  swiglu_packed_bwd(dgu, dout, gu, rows, inter);
}
FSDP_REGISTER(fsdp_swiglu_packed_bwd_bf16, ELEM_BLOCK)
