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
