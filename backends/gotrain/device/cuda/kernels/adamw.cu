// AdamW (Loshchilov & Hutter 2019) on a shard, operation for operation as
// torch.optim.AdamW and the cpu device; products and sums rounded apart (no FMA
// contraction) so both agree bit for bit.
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_adamw(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
               long long n, float decay, float omb1, float beta2, float omb2, float stepSize, float bc2Sqrt,
               float eps) {
  GRID_STRIDE(i, n) {
    float gi = g[i], pi = __fmul_rn(p[i], decay), mi = m[i];
    mi = __fadd_rn(mi, __fmul_rn(omb1, __fsub_rn(gi, mi)));
    float vi = __fadd_rn(__fmul_rn(v[i], beta2), __fmul_rn(omb2, __fmul_rn(gi, gi)));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2Sqrt), eps);
    p[i] = __fsub_rn(pi, __fdiv_rn(__fmul_rn(stepSize, mi), denom));
    m[i] = mi;
    v[i] = vi;
  }
}
FSDP_REGISTER(fsdp_adamw, ELEM_BLOCK)
