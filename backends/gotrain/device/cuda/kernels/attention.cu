// Causal grouped-query attention, flash-style (Dao 2022): the forward keeps an
// online softmax over key tiles in shared memory and saves only the row
// log-sum-exp; the backward recomputes the probabilities tile by tile. Four threads
// share a query (or key) row: each holds headDim/4 accumulators in registers
// (columns c = q4 + 4m), and the row's reductions are shuffles among the four
// (xor 1, 2: lanes 4r..4r+3 of one warp). Tiles pad past seq with zeros and masks,
// so seq need not be a multiple of the tile. Query head h reads kv head
// h/(heads/kvHeads). q, out, dout, dq are [batch, seq, heads, headDim]; k, v, dk, dv
// [batch, seq, kvHeads, headDim]; lse [batch, heads, seq]. Tensors are float or
// bf16 (T_, widened into the float tiles), lse float.
#include "common.cuh"

#define FWD_T 32    // kernels.AttnFwdTile
#define BWD_T 16    // kernels.AttnBwdTile
#define MAX_D 128   // kernels.MaxHeadDim
#define NACC (MAX_D / 4)

// load_tile copies rows [r0, r0 + T) of a strided [seq, d] head into dst [T][d+1],
// zeros past seq; a bf16 head widens to float in shared memory.
template <typename S>
__device__ __forceinline__ void load_tile(float* dst, const S* src, long long stride, int r0, int seq, int d,
                                          int T) {
  int lds = d + 1;
  for (int e = threadIdx.x; e < T * d; e += blockDim.x) {
    int rr = e / d, c = e - rr * d, t = r0 + rr;
    dst[rr * lds + c] = t < seq ? ld(src + (long long)t * stride + c) : 0.0f;
  }
}

// quad_sum sums v over the four lanes of a row (every lane of the warp calls it).
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

template <typename T_>
__device__ __forceinline__ void attn_fwd(T_* __restrict__ out, float* __restrict__ lse, const T_* __restrict__ q,
                                         const T_* __restrict__ k, const T_* __restrict__ v, int batch, int seq,
                                         int heads, int kvHeads, int d, float scale) {
  const int T = FWD_T, lds = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;             // [T][lds]
  float* KVs = Qs + T * lds;   // [T][lds]: keys, then values
  float* P = KVs + T * lds;    // [T][T+1]
  int tid = threadIdx.x, r = tid >> 2, q4 = tid & 3;
  int i0 = blockIdx.x * T, h = blockIdx.y, b = blockIdx.z, g = h / (heads / kvHeads);
  if (b >= batch) return;  // uniform: the whole block leaves
  long long qs = (long long)heads * d, ks = (long long)kvHeads * d;
  const T_* qh = q + ((long long)b * seq * heads + h) * d;
  const T_* kh = k + ((long long)b * seq * kvHeads + g) * d;
  const T_* vh = v + ((long long)b * seq * kvHeads + g) * d;
  load_tile(Qs, qh, qs, i0, seq, d, T);

  float acc[NACC];
#pragma unroll
  for (int m = 0; m < NACC; m++) acc[m] = 0.0f;
  float mrow = -INFINITY, lrow = 0.0f;
  int i = i0 + r, kend = min(seq, i0 + T);
  for (int j0 = 0; j0 < kend; j0 += T) {
    __syncthreads();  // the previous tile's values are read
    load_tile(KVs, kh, ks, j0, seq, d, T);
    __syncthreads();
    float s[T / 4];
#pragma unroll
    for (int mm = 0; mm < T / 4; mm++) s[mm] = 0.0f;
#pragma unroll 2
    for (int c = 0; c < d; c++) {
      float qv = Qs[r * lds + c];
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) s[mm] += qv * KVs[(q4 + 4 * mm) * lds + c];
    }
    float tmax = -INFINITY;
#pragma unroll
    for (int mm = 0; mm < T / 4; mm++) {
      int jg = j0 + q4 + 4 * mm;
      s[mm] = jg <= i && jg < seq ? s[mm] * scale : -INFINITY;
      tmax = fmaxf(tmax, s[mm]);
    }
    // Key 0 is in the first tile and visible to every row, so mnew is finite.
    float mnew = fmaxf(mrow, quad_max(tmax));
    float alpha = expf(mrow - mnew), psum = 0.0f;
#pragma unroll
    for (int mm = 0; mm < T / 4; mm++) {
      float p = expf(s[mm] - mnew);
      P[r * (T + 1) + q4 + 4 * mm] = p;
      psum += p;
    }
    lrow = lrow * alpha + quad_sum(psum);
    mrow = mnew;
    __syncthreads();  // the keys are read
    load_tile(KVs, vh, ks, j0, seq, d, T);
    __syncthreads();
#pragma unroll
    for (int m = 0; m < NACC; m++) acc[m] *= alpha;
#pragma unroll 1
    for (int j = 0; j < T; j++) {
      float p = P[r * (T + 1) + j];
#pragma unroll
      for (int m = 0; m < NACC; m++) {
        int c = q4 + 4 * m;
        if (c < d) acc[m] += p * KVs[j * lds + c];
      }
    }
  }
  if (i < seq) {
    T_* o = out + ((long long)(b * seq + i) * heads + h) * d;
    float inv = 1.0f / lrow;
#pragma unroll
    for (int m = 0; m < NACC; m++) {
      int c = q4 + 4 * m;
      if (c < d) st(o + c, acc[m] * inv);
    }
    if (q4 == 0) lse[((long long)b * heads + h) * seq + i] = mrow + logf(lrow);
  }
}

extern "C" __global__ void __launch_bounds__(4 * FWD_T)
    fsdp_attn_fwd(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ q,
                  const float* __restrict__ k, const float* __restrict__ v, int batch, int seq, int heads,
                  int kvHeads, int d, float scale) {
  attn_fwd(out, lse, q, k, v, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_fwd, 4 * FWD_T)

extern "C" __global__ void __launch_bounds__(4 * FWD_T)
    fsdp_attn_fwd_bf16(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                       const bf16* __restrict__ k, const bf16* __restrict__ v, int batch, int seq, int heads,
                       int kvHeads, int d, float scale) {
  attn_fwd(out, lse, q, k, v, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_fwd_bf16, 4 * FWD_T)

// row_delta returns D = dout_t·out_t of query row t (0 past seq) to the four lanes
// of the row.
template <typename T_>
__device__ __forceinline__ float row_delta(const T_* dout, const T_* out, long long rowOff, bool valid, int q4,
                                           int d) {
  float s = 0.0f;
  if (valid)
    for (int c = q4; c < d; c += 4) s += ld(dout + rowOff + c) * ld(out + rowOff + c);
  return quad_sum(s);
}

template <typename T_>
__device__ __forceinline__ void attn_bwd_dq(T_* __restrict__ dq, const T_* __restrict__ dout,
                                            const T_* __restrict__ q, const T_* __restrict__ k,
                                            const T_* __restrict__ v, const T_* __restrict__ out,
                                            const float* __restrict__ lse, int batch, int seq, int heads,
                                            int kvHeads, int d, float scale) {
  const int T = BWD_T, lds = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;
  float* dOs = Qs + T * lds;
  float* Ks = dOs + T * lds;
  float* Vs = Ks + T * lds;
  float* dS = Vs + T * lds;  // [T][T+1]
  int tid = threadIdx.x, r = tid >> 2, q4 = tid & 3;
  int i0 = blockIdx.x * T, h = blockIdx.y, b = blockIdx.z, g = h / (heads / kvHeads);
  if (b >= batch) return;
  long long qs = (long long)heads * d, ks = (long long)kvHeads * d;
  long long qOff = ((long long)b * seq * heads + h) * d, kOff = ((long long)b * seq * kvHeads + g) * d;
  load_tile(Qs, q + qOff, qs, i0, seq, d, T);
  load_tile(dOs, dout + qOff, qs, i0, seq, d, T);
  int i = i0 + r;
  bool rowValid = i < seq;
  float D = row_delta(dout, out, qOff + (long long)i * qs, rowValid, q4, d);
  float L = rowValid ? lse[((long long)b * heads + h) * seq + i] : 0.0f;

  float acc[NACC];
#pragma unroll
  for (int m = 0; m < NACC; m++) acc[m] = 0.0f;
  int kend = min(seq, i0 + T);
  for (int j0 = 0; j0 < kend; j0 += T) {
    __syncthreads();  // the previous keys and dS are read
    load_tile(Ks, k + kOff, ks, j0, seq, d, T);
    load_tile(Vs, v + kOff, ks, j0, seq, d, T);
    __syncthreads();
    float s[T / 4], dp[T / 4];
#pragma unroll
    for (int mm = 0; mm < T / 4; mm++) s[mm] = dp[mm] = 0.0f;
#pragma unroll 2
    for (int c = 0; c < d; c++) {
      float qv = Qs[r * lds + c], dov = dOs[r * lds + c];
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) {
        s[mm] += qv * Ks[(q4 + 4 * mm) * lds + c];
        dp[mm] += dov * Vs[(q4 + 4 * mm) * lds + c];
      }
    }
#pragma unroll
    for (int mm = 0; mm < T / 4; mm++) {
      int jg = j0 + q4 + 4 * mm;
      float p = rowValid && jg <= i && jg < seq ? expf(s[mm] * scale - L) : 0.0f;
      dS[r * (T + 1) + q4 + 4 * mm] = p * (dp[mm] - D) * scale;
    }
    __syncthreads();
#pragma unroll 1
    for (int j = 0; j < T; j++) {
      float ds = dS[r * (T + 1) + j];
#pragma unroll
      for (int m = 0; m < NACC; m++) {
        int c = q4 + 4 * m;
        if (c < d) acc[m] += ds * Ks[j * lds + c];
      }
    }
  }
  if (rowValid) {
    T_* o = dq + qOff + (long long)i * qs;
#pragma unroll
    for (int m = 0; m < NACC; m++) {
      int c = q4 + 4 * m;
      if (c < d) st(o + c, ld(o + c) + acc[m]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dq(float* __restrict__ dq, const float* __restrict__ dout, const float* __restrict__ q,
                     const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ out,
                     const float* __restrict__ lse, int batch, int seq, int heads, int kvHeads, int d, float scale) {
  attn_bwd_dq(dq, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_bwd_dq, 4 * BWD_T)

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dq_bf16(bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q,
                          const bf16* __restrict__ k, const bf16* __restrict__ v, const bf16* __restrict__ out,
                          const float* __restrict__ lse, int batch, int seq, int heads, int kvHeads, int d,
                          float scale) {
  attn_bwd_dq(dq, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_bwd_dq_bf16, 4 * BWD_T)

template <typename T_>
__device__ __forceinline__ void attn_bwd_dkdv(T_* __restrict__ dk, T_* __restrict__ dv, const T_* __restrict__ dout,
                                              const T_* __restrict__ q, const T_* __restrict__ k,
                                              const T_* __restrict__ v, const T_* __restrict__ out,
                                              const float* __restrict__ lse, int batch, int seq, int heads,
                                              int kvHeads, int d, float scale) {
  const int T = BWD_T, lds = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;
  float* dOs = Qs + T * lds;
  float* Ks = dOs + T * lds;
  float* Vs = Ks + T * lds;
  float* P = Vs + T * lds;      // [T][T+1], key-major
  float* dS = P + T * (T + 1);  // [T][T+1], key-major
  float* Dr = dS + T * (T + 1);  // [T]
  float* Lr = Dr + T;           // [T]
  int tid = threadIdx.x, jr = tid >> 2, q4 = tid & 3;
  int j0 = blockIdx.x * T, g = blockIdx.y, b = blockIdx.z, rep = heads / kvHeads;
  if (b >= batch) return;
  long long qs = (long long)heads * d, ks = (long long)kvHeads * d;
  long long kOff = ((long long)b * seq * kvHeads + g) * d;
  load_tile(Ks, k + kOff, ks, j0, seq, d, T);
  load_tile(Vs, v + kOff, ks, j0, seq, d, T);
  int j = j0 + jr;

  float accK[NACC], accV[NACC];
#pragma unroll
  for (int m = 0; m < NACC; m++) accK[m] = accV[m] = 0.0f;
  for (int h = g * rep; h < (g + 1) * rep; h++) {
    long long qOff = ((long long)b * seq * heads + h) * d;
    // Query rows before the key tile see none of its keys: start at the diagonal.
    for (int i0 = j0; i0 < seq; i0 += T) {
      __syncthreads();  // the previous tile's q, dout, P and dS are read
      load_tile(Qs, q + qOff, qs, i0, seq, d, T);
      load_tile(dOs, dout + qOff, qs, i0, seq, d, T);
      {
        int ir = tid >> 2, ig = i0 + ir;  // here the four lanes of a row share query row ir
        float D = row_delta(dout, out, qOff + (long long)ig * qs, ig < seq, q4, d);
        if (q4 == 0) {
          Dr[ir] = D;
          Lr[ir] = ig < seq ? lse[((long long)b * heads + h) * seq + ig] : 0.0f;
        }
      }
      __syncthreads();
      float s[T / 4], dp[T / 4];
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) s[mm] = dp[mm] = 0.0f;
  #pragma unroll 2
    for (int c = 0; c < d; c++) {
        float kv = Ks[jr * lds + c], vv = Vs[jr * lds + c];
#pragma unroll
        for (int mm = 0; mm < T / 4; mm++) {
          s[mm] += kv * Qs[(q4 + 4 * mm) * lds + c];
          dp[mm] += vv * dOs[(q4 + 4 * mm) * lds + c];
        }
      }
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) {
        int ii = q4 + 4 * mm, ig = i0 + ii;
        float p = j < seq && j <= ig && ig < seq ? expf(s[mm] * scale - Lr[ii]) : 0.0f;
        P[jr * (T + 1) + ii] = p;
        dS[jr * (T + 1) + ii] = p * (dp[mm] - Dr[ii]) * scale;
      }
      __syncthreads();
#pragma unroll 1
      for (int ii = 0; ii < T; ii++) {
        float p = P[jr * (T + 1) + ii], ds = dS[jr * (T + 1) + ii];
#pragma unroll
        for (int m = 0; m < NACC; m++) {
          int c = q4 + 4 * m;
          if (c < d) {
            accV[m] += p * dOs[ii * lds + c];
            accK[m] += ds * Qs[ii * lds + c];
          }
        }
      }
    }
  }
  if (j < seq) {
    long long o = kOff + (long long)j * ks;
#pragma unroll
    for (int m = 0; m < NACC; m++) {
      int c = q4 + 4 * m;
      if (c < d) {
        st(dk + o + c, ld(dk + o + c) + accK[m]);
        st(dv + o + c, ld(dv + o + c) + accV[m]);
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dkdv(float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ dout,
                       const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       const float* __restrict__ out, const float* __restrict__ lse, int batch, int seq, int heads,
                       int kvHeads, int d, float scale) {
  attn_bwd_dkdv(dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_bwd_dkdv, 4 * BWD_T)

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dkdv_bf16(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                            const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                            const bf16* __restrict__ out, const float* __restrict__ lse, int batch, int seq,
                            int heads, int kvHeads, int d, float scale) {
  attn_bwd_dkdv(dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, d, scale);
}
FSDP_REGISTER(fsdp_attn_bwd_dkdv_bf16, 4 * BWD_T)
