// SwiGLU (Shazeer 2020): out = silu(gate)·up, silu(g) = g·σ(g). Outputs may alias
// inputs (no __restrict__): each element is read, then written, by one thread.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_fwd(float* out, const float* gate, const float* up,
                    long long n) {
  GRID_STRIDE(i, n) {
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}
FSDP_REGISTER(fsdp_swiglu_fwd, ELEM_BLOCK)

// ∂/∂up = silu(g), ∂/∂g = up·σ(g)·(1 + g·(1 − σ(g))); both added.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_swiglu_bwd(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                    long long n) {
  GRID_STRIDE(i, n) {
    float g = gate[i], u = up[i], dy = dout[i], sg = 1.0f / (1.0f + expf(-g));
    float dg = dgate[i] + dy * u * (sg * (1.0f + g * (1.0f - sg)));
    float du = dup[i] + dy * (g * sg);
    dgate[i] = dg;
    dup[i] = du;
  }
}
FSDP_REGISTER(fsdp_swiglu_bwd, ELEM_BLOCK)
