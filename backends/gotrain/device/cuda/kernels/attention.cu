// Causal grouped-query attention, flash-style (Dao 2022): the forward keeps an
// online softmax over key tiles in shared memory and saves only the row
// log-sum-exp; the backward recomputes the probabilities tile by tile. Four threads
// share a query (or key) row: each holds headDim/4 accumulators in registers
// (columns c = q4 + 4m), and the row's reductions are shuffles among the four
// (xor 1, 2: lanes 4r..4r+3 of one warp). Tiles pad past seq with zeros and masks,
// so seq need not be a multiple of the tile. Query head h reads kv head
// h/(heads/kvHeads). q, out, dout, dq are [batch, seq, heads, headDim]; k, v, dk, dv
// [batch, seq, kvHeads, headDim]; lse [batch, heads, seq].
#include "common.cuh"

#define FWD_T 32    // kernels.AttnFwdTile
#define BWD_T 16    // kernels.AttnBwdTile
#define MAX_D 128   // kernels.MaxHeadDim
#define NACC (MAX_D / 4)

// load_tile copies rows [r0, r0 + T) of a strided [seq, d] head into dst [T][d+1],
// zeros past seq.
__device__ __forceinline__ void load_tile(float* dst, const float* src, long long stride, int r0, int seq, int d,
                                          int T) {
  int ld = d + 1;
  for (int e = threadIdx.x; e < T * d; e += blockDim.x) {
    int rr = e / d, c = e - rr * d, t = r0 + rr;
    dst[rr * ld + c] = t < seq ? src[(long long)t * stride + c] : 0.0f;
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

extern "C" __global__ void __launch_bounds__(4 * FWD_T)
    fsdp_attn_fwd(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ q,
                  const float* __restrict__ k, const float* __restrict__ v, int batch, int seq, int heads,
                  int kvHeads, int d, float scale) {
  const int T = FWD_T, ld = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;             // [T][ld]
  float* KVs = Qs + T * ld;   // [T][ld]: keys, then values
  float* P = KVs + T * ld;    // [T][T+1]
  int tid = threadIdx.x, r = tid >> 2, q4 = tid & 3;
  int i0 = blockIdx.x * T, h = blockIdx.y, b = blockIdx.z, g = h / (heads / kvHeads);
  if (b >= batch) return;  // uniform: the whole block leaves
  long long qs = (long long)heads * d, ks = (long long)kvHeads * d;
  const float* qh = q + ((long long)b * seq * heads + h) * d;
  const float* kh = k + ((long long)b * seq * kvHeads + g) * d;
  const float* vh = v + ((long long)b * seq * kvHeads + g) * d;
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
      float qv = Qs[r * ld + c];
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) s[mm] += qv * KVs[(q4 + 4 * mm) * ld + c];
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
        if (c < d) acc[m] += p * KVs[j * ld + c];
      }
    }
  }
  if (i < seq) {
    float* o = out + ((long long)(b * seq + i) * heads + h) * d;
    float inv = 1.0f / lrow;
#pragma unroll
    for (int m = 0; m < NACC; m++) {
      int c = q4 + 4 * m;
      if (c < d) o[c] = acc[m] * inv;
    }
    if (q4 == 0) lse[((long long)b * heads + h) * seq + i] = mrow + logf(lrow);
  }
}
FSDP_REGISTER(fsdp_attn_fwd, 4 * FWD_T)

// row_delta returns D = dout_t·out_t of query row t (0 past seq) to the four lanes
// of the row.
__device__ __forceinline__ float row_delta(const float* dout, const float* out, long long rowOff, bool valid, int q4,
                                           int d) {
  float s = 0.0f;
  if (valid)
    for (int c = q4; c < d; c += 4) s += dout[rowOff + c] * out[rowOff + c];
  return quad_sum(s);
}

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dq(float* __restrict__ dq, const float* __restrict__ dout, const float* __restrict__ q,
                     const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ out,
                     const float* __restrict__ lse, int batch, int seq, int heads, int kvHeads, int d, float scale) {
  const int T = BWD_T, ld = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;
  float* dOs = Qs + T * ld;
  float* Ks = dOs + T * ld;
  float* Vs = Ks + T * ld;
  float* dS = Vs + T * ld;  // [T][T+1]
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
      float qv = Qs[r * ld + c], dov = dOs[r * ld + c];
#pragma unroll
      for (int mm = 0; mm < T / 4; mm++) {
        s[mm] += qv * Ks[(q4 + 4 * mm) * ld + c];
        dp[mm] += dov * Vs[(q4 + 4 * mm) * ld + c];
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
        if (c < d) acc[m] += ds * Ks[j * ld + c];
      }
    }
  }
  if (rowValid) {
    float* o = dq + qOff + (long long)i * qs;
#pragma unroll
    for (int m = 0; m < NACC; m++) {
      int c = q4 + 4 * m;
      if (c < d) o[c] += acc[m];
    }
  }
}
FSDP_REGISTER(fsdp_attn_bwd_dq, 4 * BWD_T)

extern "C" __global__ void __launch_bounds__(4 * BWD_T)
    fsdp_attn_bwd_dkdv(float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ dout,
                       const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                       const float* __restrict__ out, const float* __restrict__ lse, int batch, int seq, int heads,
                       int kvHeads, int d, float scale) {
  const int T = BWD_T, ld = d + 1;
  FSDP_DYNAMIC_SHARED(float, sm);
  float* Qs = sm;
  float* dOs = Qs + T * ld;
  float* Ks = dOs + T * ld;
  float* Vs = Ks + T * ld;
  float* P = Vs + T * ld;      // [T][T+1], key-major
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
        float kv = Ks[jr * ld + c], vv = Vs[jr * ld + c];
#pragma unroll
        for (int mm = 0; mm < T / 4; mm++) {
          s[mm] += kv * Qs[(q4 + 4 * mm) * ld + c];
          dp[mm] += vv * dOs[(q4 + 4 * mm) * ld + c];
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
            accV[m] += p * dOs[ii * ld + c];
            accK[m] += ds * Qs[ii * ld + c];
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
        dk[o + c] += accK[m];
        dv[o + c] += accV[m];
      }
    }
  }
}
FSDP_REGISTER(fsdp_attn_bwd_dkdv, 4 * BWD_T)
