// Element-wise kernels: zero, copy, add, scale and the bf16 casts (grid-stride).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_zero(float* __restrict__ x, long long n) {
  GRID_STRIDE(i, n) x[i] = 0.0f;
}
FSDP_REGISTER(fsdp_zero, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_copy(float* __restrict__ dst, const float* __restrict__ src, long long n) {
  GRID_STRIDE(i, n) dst[i] = src[i];
}
FSDP_REGISTER(fsdp_copy, ELEM_BLOCK)

// fsdp_add rounds the product and the sum apart, as the cpu device's dst += alpha·x.
// dst may be src (no __restrict__): each element is read and written by one thread.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_add(float* dst, const float* src, float alpha, long long n) {
  GRID_STRIDE(i, n) dst[i] = __fadd_rn(dst[i], __fmul_rn(alpha, src[i]));
}
FSDP_REGISTER(fsdp_add, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_scale(float* __restrict__ x, float alpha, long long n) {
  GRID_STRIDE(i, n) x[i] = __fmul_rn(x[i], alpha);
}
FSDP_REGISTER(fsdp_scale, ELEM_BLOCK)

// f32_to_bf16 rounds to nearest even; a NaN keeps its sign and becomes quiet.
__device__ __forceinline__ unsigned short f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (unsigned short)(u >> 16);
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_cast_f32_bf16(unsigned short* __restrict__ dst, const float* __restrict__ src, long long n) {
  GRID_STRIDE(i, n) dst[i] = f32_to_bf16(src[i]);
}
FSDP_REGISTER(fsdp_cast_f32_bf16, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_cast_bf16_f32(float* __restrict__ dst, const unsigned short* __restrict__ src, long long n) {
  GRID_STRIDE(i, n) dst[i] = __uint_as_float((unsigned)src[i] << 16);
}
FSDP_REGISTER(fsdp_cast_bf16_f32, ELEM_BLOCK)
