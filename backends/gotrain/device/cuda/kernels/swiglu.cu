// SwiGLU (Shazeer 2020): out = silu(gate)·up, silu(g) = g·σ(g).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_fwd(float* __restrict__ out, const float* __restrict__ gate, const float* __restrict__ up,
                    long long n) {
  GRID_STRIDE(i, n) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
FSDP_REGISTER(fsdp_swiglu_fwd, ELEM_BLOCK)

// ∂/∂up = silu(g), ∂/∂g = up·σ(g)·(1 + g·(1 − σ(g))); both added.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_bwd(float* __restrict__ dgate, float* __restrict__ dup, const float* __restrict__ dout,
                    const float* __restrict__ gate, const float* __restrict__ up, long long n) {
  GRID_STRIDE(i, n) {
    float g = gate[i], sg = 1.0f / (1.0f + expf(-g));
    dgate[i] += dout[i] * up[i] * (sg * (1.0f + g * (1.0f - sg)));
    dup[i] += dout[i] * (g * sg);
  }
}
FSDP_REGISTER(fsdp_swiglu_bwd, ELEM_BLOCK)
