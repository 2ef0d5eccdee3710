// Element-wise kernels: zero, copy, add, scale and the bf16 casts (grid-stride).
#include "common.cuh"

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_zero(float* __restrict__ x, long long n) {
  GRID_STRIDE(i, n) x[i] = 0.0f;
}
FSDP_REGISTER(fsdp_zero, ELEM_BLOCK)

// fsdp_zero_bf16 zeroes bf16 views, whose bounds need not be 4-byte aligned
// (cuMemsetD32 cannot).
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_zero_bf16(bf16* __restrict__ x, long long n) {
  GRID_STRIDE(i, n) x[i] = 0;
}
FSDP_REGISTER(fsdp_zero_bf16, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_copy(float* __restrict__ dst, const float* __restrict__ src, long long n) {
  GRID_STRIDE(i, n) dst[i] = src[i];
}
FSDP_REGISTER(fsdp_copy, ELEM_BLOCK)

// add rounds the product and the sum apart, as the cpu device's dst += alpha·x.
// dst may be src (no __restrict__): each element is read and written by one thread.
template <typename D, typename S>
__device__ __forceinline__ void add(D* dst, const S* src, float alpha, long long n) {
  GRID_STRIDE(i, n) st(dst + i, __fadd_rn(ld(dst + i), __fmul_rn(alpha, ld(src + i))));
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_add(float* dst, const float* src, float alpha, long long n) {
  add(dst, src, alpha, n);
}
FSDP_REGISTER(fsdp_add, ELEM_BLOCK)

// fsdp_add_f32_bf16 adds a bf16 source into an fp32 destination: gradient
// accumulation in fp32 of the bf16 unit gradients.
extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_add_f32_bf16(float* __restrict__ dst, const bf16* __restrict__ src, float alpha, long long n) {
  add(dst, src, alpha, n);
}
FSDP_REGISTER(fsdp_add_f32_bf16, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK)
    fsdp_add_bf16(bf16* dst, const bf16* src, float alpha, long long n) {
  add(dst, src, alpha, n);
}
FSDP_REGISTER(fsdp_add_bf16, ELEM_BLOCK)

template <typename T>
__device__ __forceinline__ void scale(T* __restrict__ x, float alpha, long long n) {
  GRID_STRIDE(i, n) st(x + i, __fmul_rn(ld(x + i), alpha));
}

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_scale(float* __restrict__ x, float alpha, long long n) {
  scale(x, alpha, n);
}
FSDP_REGISTER(fsdp_scale, ELEM_BLOCK)

extern "C" __global__ void __launch_bounds__(ELEM_BLOCK) fsdp_scale_bf16(bf16* __restrict__ x, float alpha, long long n) {
  scale(x, alpha, n);
}
FSDP_REGISTER(fsdp_scale_bf16, ELEM_BLOCK)

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
