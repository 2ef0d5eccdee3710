// Causal grouped-query attention in bf16 on tensor cores, FlashAttention-2's
// algorithm (Dao 2023) for head dims 64 and 128: a block of 4 warps takes 64 query
// rows (16 a warp, its Q fragments held in registers for the whole kernel) and
// walks the key tiles up to the diagonal; K and V tiles are double-buffered in
// shared memory by cp.async (the next tile loads while this one computes); S = Q·Kᵀ
// and O += P·V run on mma.sync m16n8k16 (bf16 in, fp32 accumulators) with operands
// from ldmatrix (V through .trans); the online softmax runs in registers in the
// exp2 domain, P is rounded to bf16 as the second product's A operand straight from
// the first product's accumulators (the C and A fragment layouts line up, no
// shuffles); tiles past seq are zero-filled by cp.async and masked, key tiles above
// the diagonal are never loaded. Shared tiles store each 16-byte chunk c of row r
// at chunk c ^ (r % 8), so the 8 rows an ldmatrix reads hit 8 different bank groups.
// Shapes and layouts are attention.cu's (q, out [batch, seq, heads, headDim], k, v
// [batch, seq, kvHeads, headDim], lse float [batch, heads, seq]), all tensors bf16.
#include "common.cuh"

#define TC_BM 64       // query rows a block (kernels.AttnTCRows)
#define TC_THREADS 128  // 4 warps of 16 query rows

// TcTile: key rows a tile (64 for head dim 64, 32 for 128), so that two K and two V
// tiles (32 KiB) fit the 47 KiB of dynamic shared memory an sm_90 block gets without
// opt-in (48 KiB less the 1 KiB the system reserves) and the registers let two
// blocks share an SM.
template <int D>
struct TcTile {
  static constexpr int BN = D == 64 ? 64 : 32;
};

// tc_swz is the offset (in elements) of 16-byte chunk c of row r in a [rows][D]
// swizzled tile.
template <int D>
__device__ __forceinline__ int tc_swz(int r, int c) {
  return r * D + ((c ^ (r & 7)) << 3);
}

// tc_tile_async queues the copy of rows [r0, r0 + R) of a strided [seq, D] head into
// a swizzled tile, rows at or past seq zero-filled (their source clamped to row 0,
// read for no bytes).
template <int D, int R>
__device__ __forceinline__ void tc_tile_async(bf16* tile, const bf16* src, long long stride, int r0, int seq) {
  constexpr int CH = D / 8;
#pragma unroll
  for (int e = threadIdx.x; e < R * CH; e += TC_THREADS) {
    int r = e / CH, c = e % CH, t = r0 + r;
    bool ok = t < seq;
    cp_async16(tile + tc_swz<D>(r, c), src + (long long)(ok ? t : 0) * stride + c * 8, ok ? 16 : 0);
  }
}

// tc_u4 is 16 bytes loaded at once (LDG.128): 8 bf16.
struct alignas(16) tc_u4 {
  unsigned w[4];
};

__device__ __forceinline__ float tc_quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float tc_quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int D>
__device__ __forceinline__ void attn_fwd_tc(bf16* __restrict__ out, float* __restrict__ lse,
                                            const bf16* __restrict__ q, const bf16* __restrict__ k,
                                            const bf16* __restrict__ v, int batch, int seq, int heads, int kvHeads,
                                            float scale) {
  constexpr int BN = TcTile<D>::BN, KC = D / 16, NT = BN / 8, DT = D / 8;
  FSDP_DYNAMIC_SHARED(bf16, sm);
  // Two buffers of a K tile then a V tile ([BN][D] each); the query tile
  // ([TC_BM][D] ≤ [2][BN][D]) borrows buffer 1 until its fragments are in registers.
  bf16* Qs = sm + 2 * BN * D;
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  int i0 = blockIdx.x * TC_BM, h = blockIdx.y, b = blockIdx.z, kvh = h / (heads / kvHeads);
  if (b >= batch) return;  // uniform: the whole block leaves
  long long qs = (long long)heads * D, ks = (long long)kvHeads * D;
  const bf16* qh = q + ((long long)b * seq * heads + h) * D;
  const bf16* kh = k + ((long long)b * seq * kvHeads + kvh) * D;
  const bf16* vh = v + ((long long)b * seq * kvHeads + kvh) * D;
  // Causal: the block's last row is i0 + TC_BM − 1, so keys from there on are never
  // seen; the tiles above the diagonal are neither loaded nor computed.
  int kend = min(seq, i0 + TC_BM), ntiles = (kend + BN - 1) / BN;

  tc_tile_async<D, TC_BM>(Qs, qh, qs, i0, seq);
  tc_tile_async<D, BN>(sm, kh, ks, 0, seq);
  tc_tile_async<D, BN>(sm + BN * D, vh, ks, 0, seq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  // The warp's 16 query rows as A fragments: lanes 0–15 address rows 0–15 of the
  // chunk's left 8 columns, lanes 16–31 its right 8 (a0a1, a2a3, a4a5, a6a7).
  unsigned qf[KC][4];
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    ldmatrix_x4(qf[kc], Qs + tc_swz<D>(warp * 16 + (lane & 15), kc * 2 + (lane >> 4)));
    FSDP_PLANT_SWAP(qf[kc][1], qf[kc][2]);
  }
  __syncthreads();  // every warp holds its Q fragments: buffer 1 is free for tile 1

  float o[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  // Rows r0 (accumulator elements 0, 1) and r0 + 8 (2, 3) of this lane; the running
  // max m is in log2 units (scores × scale × log2 e), l is this lane's partial sum.
  const int r0 = i0 + warp * 16 + g;
  const float sl2 = scale * 1.4426950408889634f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int j = 0; j < ntiles; j++) {
    const int j0 = j * BN;
    if (j + 1 < ntiles) {  // prefetch the next tile into the other buffer
      bf16* nb = sm + ((j + 1) & 1) * 2 * BN * D;
      tc_tile_async<D, BN>(nb, kh, ks, j0 + BN, seq);
      tc_tile_async<D, BN>(nb + BN * D, vh, ks, j0 + BN, seq);
      cp_async_commit();
      // FAKECUDA_PLANT=cp-async-early reads tile j without waiting for it: the
      // runner performs a copy only at its wait, so the tile is stale (poison).
      if (!FSDP_PLANTED("cp-async-early")) cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile have landed
    const bf16* Kt = sm + (j & 1) * 2 * BN * D;
    const bf16* Vt = Kt + BN * D;

    // S = Q·Kᵀ: B (k = head dim, n = key) is K's rows as they are; matrices 0, 1 are
    // keys 0–7 of the pair at the chunk's left and right 8 columns (b0b1, b2b3 of
    // n-tile 2np), 2, 3 keys 8–15 (n-tile 2np + 1).
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
#pragma unroll
      for (int np = 0; np < NT / 2; np++) {
        unsigned kb[4];
        ldmatrix_x4(kb, Kt + tc_swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1)));
        const unsigned b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma_bf16_16816(s[2 * np], qf[kc], b0);
        mma_bf16_16816(s[2 * np + 1], qf[kc], b1);
      }
    }

    // Mask only the tiles that cross the warp's diagonal or the end of the sequence.
    const bool mask = j0 + BN - 1 > i0 + warp * 16 || j0 + BN > seq;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float x = s[nt][e] * sl2;
        if (mask) {
          int key = j0 + nt * 8 + 2 * t4 + (e & 1), row = r0 + 8 * (e >> 1);
          if (key > row || key >= seq) x = -INFINITY;
        }
        s[nt][e] = x;
        mx[e >> 1] = fmaxf(mx[e >> 1], x);
      }
    }
    // Key 0 is in tile 0 and visible to every row, so m is finite from tile 0 on.
    float alpha[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
      float mnew = fmaxf(m[e], tc_quad_max(mx[e]));
      alpha[e] = exp2f(m[e] - mnew);
      m[e] = mnew;
      l[e] *= alpha[e];
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        float p = exp2f(s[nt][e] - m[e >> 1]);
        s[nt][e] = p;
        l[e >> 1] += p;
      }
    }
#pragma unroll
    for (int dt = 0; dt < DT; dt++) {
      o[dt][0] *= alpha[0];
      o[dt][1] *= alpha[0];
      o[dt][2] *= alpha[1];
      o[dt][3] *= alpha[1];
    }

    // O += P·V: P's A fragment for keys 16kk.. is n-tiles 2kk (a0..a3) and 2kk+1
    // (a4..a7) of S as they are. B (k = key, n = head dim) is V transposed:
    // ldmatrix.trans of key rows 0–7 / 8–15 (b0b1 / b2b3) at chunks 2dp, 2dp + 1.
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const unsigned pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < DT / 2; dp++) {
        unsigned vb[4];
        ldmatrix_x4_trans(vb, Vt + tc_swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp * 2 + (lane >> 4)));
        const unsigned b0[2] = {vb[0], vb[1]}, b1[2] = {vb[2], vb[3]};
        mma_bf16_16816(o[2 * dp], pa, b0);
        mma_bf16_16816(o[2 * dp + 1], pa, b1);
      }
    }
    __syncthreads();  // this buffer is read before the next iteration refills it
  }

  // Each lane holds columns 8dt + 2t4, +1 of rows r0 and r0 + 8.
#pragma unroll
  for (int e = 0; e < 2; e++) {
    float lsum = tc_quad_sum(l[e]);
    int row = r0 + 8 * e;
    if (row < seq) {
      float inv = 1.0f / lsum;
      unsigned* orow = reinterpret_cast<unsigned*>(out + ((long long)(b * seq + row) * heads + h) * D);
#pragma unroll
      for (int dt = 0; dt < DT; dt++) orow[dt * 4 + t4] = pack_bf16x2(o[dt][2 * e] * inv, o[dt][2 * e + 1] * inv);
      if (t4 == 0) lse[((long long)b * heads + h) * seq + row] = m[e] * 0.6931471805599453f + logf(lsum);
    }
  }
}

extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    fsdp_attn_fwd_tc64_bf16(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                            const bf16* __restrict__ k, const bf16* __restrict__ v, int batch, int seq, int heads,
                            int kvHeads, int d, float scale) {
  (void)d;  // 64 by construction: the device picks this kernel for head dim 64
  attn_fwd_tc<64>(out, lse, q, k, v, batch, seq, heads, kvHeads, scale);
}
FSDP_REGISTER(fsdp_attn_fwd_tc64_bf16, TC_THREADS)

extern "C" __global__ void __launch_bounds__(TC_THREADS, 2)
    fsdp_attn_fwd_tc128_bf16(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                             const bf16* __restrict__ k, const bf16* __restrict__ v, int batch, int seq, int heads,
                             int kvHeads, int d, float scale) {
  (void)d;
  attn_fwd_tc<128>(out, lse, q, k, v, batch, seq, heads, kvHeads, scale);
}
FSDP_REGISTER(fsdp_attn_fwd_tc128_bf16, TC_THREADS)

// ---- backward (FlashAttention-2's, split in two kernels so that no gradient needs
// atomics: every element of dq, dk and dv has one writer, results are the same run
// to run). Both recompute P = exp(S·scale − lse) from the forward's lse and use
// D = rowsum(dO⊙O) per query row, computed where needed from dO and O (the op has
// no scratch buffer for a separate preprocess pass; it is one read of O a query
// tile). dS = P⊙(dP − D) and P enter the second products rounded to bf16, as in
// FlashAttention-2. Gradients are added into dq, dk, dv (read, add, store bf16).

// tc_row_delta returns D of query row t (0 past seq) to the 4 lanes of a quad:
// each sums a quarter of the row.
template <int D>
__device__ __forceinline__ float tc_row_delta(const bf16* dout, const bf16* out, long long off, bool valid, int t4) {
  float s = 0.0f;
  if (valid) {
#pragma unroll 4
    for (int c = t4 * (D / 4); c < (t4 + 1) * (D / 4); c++) s += ld(dout + off + c) * ld(out + off + c);
  }
  return tc_quad_sum(s);
}

// dq: a block of 4 warps takes 64 query rows (Q and dO fragments in registers),
// walks the key tiles up to the diagonal (K, V double-buffered as in the forward)
// and accumulates dQ = Σ dS·K in registers.
template <int D>
__device__ __forceinline__ void attn_bwd_dq_tc(bf16* __restrict__ dq, const bf16* __restrict__ dout,
                                               const bf16* __restrict__ q, const bf16* __restrict__ k,
                                               const bf16* __restrict__ v, const bf16* __restrict__ out,
                                               const float* __restrict__ lse, int batch, int seq, int heads,
                                               int kvHeads, float scale) {
  constexpr int BN = TcTile<D>::BN, KC = D / 16, NT = BN / 8, DT = D / 8;
  FSDP_DYNAMIC_SHARED(bf16, sm);
  bf16* stage = sm + 2 * BN * D;  // Q, then dO, borrow buffer 1 before the loop
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  int i0 = blockIdx.x * TC_BM, h = blockIdx.y, b = blockIdx.z, kvh = h / (heads / kvHeads);
  if (b >= batch) return;
  long long qs = (long long)heads * D, ks = (long long)kvHeads * D;
  long long qOff = ((long long)b * seq * heads + h) * D;
  const bf16* kh = k + ((long long)b * seq * kvHeads + kvh) * D;
  const bf16* vh = v + ((long long)b * seq * kvHeads + kvh) * D;
  int kend = min(seq, i0 + TC_BM), ntiles = (kend + BN - 1) / BN;
  const int r0 = i0 + warp * 16 + g;
  const float sl2 = scale * 1.4426950408889634f;

  // Row statistics of rows r0 and r0 + 8, in the exp2 domain.
  float L2[2], Dr[2];
#pragma unroll
  for (int e = 0; e < 2; e++) {
    int row = r0 + 8 * e;
    bool ok = row < seq;
    L2[e] = ok ? lse[((long long)b * heads + h) * seq + row] * 1.4426950408889634f : 0.0f;
    Dr[e] = tc_row_delta<D>(dout, out, qOff + (long long)row * qs, ok, t4);
  }

  unsigned qf[KC][4], df[KC][4];
  tc_tile_async<D, TC_BM>(stage, q + qOff, qs, i0, seq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int kc = 0; kc < KC; kc++) {
    ldmatrix_x4(qf[kc], stage + tc_swz<D>(warp * 16 + (lane & 15), kc * 2 + (lane >> 4)));
    FSDP_PLANT_SWAP(qf[kc][1], qf[kc][2]);
  }
  __syncthreads();
  tc_tile_async<D, TC_BM>(stage, dout + qOff, qs, i0, seq);
  tc_tile_async<D, BN>(sm, kh, ks, 0, seq);
  tc_tile_async<D, BN>(sm + BN * D, vh, ks, 0, seq);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int kc = 0; kc < KC; kc++)
    ldmatrix_x4(df[kc], stage + tc_swz<D>(warp * 16 + (lane & 15), kc * 2 + (lane >> 4)));
  __syncthreads();

  float acc[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; dt++) acc[dt][0] = acc[dt][1] = acc[dt][2] = acc[dt][3] = 0.0f;
  for (int j = 0; j < ntiles; j++) {
    const int j0 = j * BN;
    if (j + 1 < ntiles) {
      bf16* nb = sm + ((j + 1) & 1) * 2 * BN * D;
      tc_tile_async<D, BN>(nb, kh, ks, j0 + BN, seq);
      tc_tile_async<D, BN>(nb + BN * D, vh, ks, j0 + BN, seq);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* Kt = sm + (j & 1) * 2 * BN * D;
    const bf16* Vt = Kt + BN * D;
    // S = Q·Kᵀ and dP = dO·Vᵀ (K and V rows as B, as the forward's S).
    float s[NT][4], dp[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
#pragma unroll
      for (int np = 0; np < NT / 2; np++) {
        int off = tc_swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1));
        unsigned kb[4], vb[4];
        ldmatrix_x4(kb, Kt + off);
        ldmatrix_x4(vb, Vt + off);
        const unsigned k0[2] = {kb[0], kb[1]}, k1[2] = {kb[2], kb[3]}, v0[2] = {vb[0], vb[1]}, v1[2] = {vb[2], vb[3]};
        mma_bf16_16816(s[2 * np], qf[kc], k0);
        mma_bf16_16816(s[2 * np + 1], qf[kc], k1);
        mma_bf16_16816(dp[2 * np], df[kc], v0);
        mma_bf16_16816(dp[2 * np + 1], df[kc], v1);
      }
    }
    // dS = P⊙(dP − D), P = exp2(S·scale·log2 e − lse·log2 e), masked to 0.
    const bool mask = j0 + BN - 1 > i0 + warp * 16 || j0 + BN > seq;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int key = j0 + nt * 8 + 2 * t4 + (e & 1), row = r0 + 8 * (e >> 1);
        float p = exp2f(s[nt][e] * sl2 - L2[e >> 1]);
        if (mask && (key > row || key >= seq || row >= seq)) p = 0.0f;
        s[nt][e] = p * (dp[nt][e] - Dr[e >> 1]);
      }
    }
    // dQ += dS·K: dS as A straight from the accumulators, K transposed as B.
#pragma unroll
    for (int kk = 0; kk < BN / 16; kk++) {
      const unsigned da[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                              pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                              pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int dp2 = 0; dp2 < DT / 2; dp2++) {
        unsigned kb[4];
        ldmatrix_x4_trans(kb, Kt + tc_swz<D>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3), dp2 * 2 + (lane >> 4)));
        const unsigned b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
        mma_bf16_16816(acc[2 * dp2], da, b0);
        mma_bf16_16816(acc[2 * dp2 + 1], da, b1);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int e = 0; e < 2; e++) {
    int row = r0 + 8 * e;
    if (row < seq) {
      bf16* o = dq + qOff + (long long)row * qs;
#pragma unroll
      for (int dt = 0; dt < DT; dt++) {
        int c = dt * 8 + 2 * t4;
        st(o + c, ld(o + c) + acc[dt][2 * e] * scale);
        st(o + c + 1, ld(o + c + 1) + acc[dt][2 * e + 1] * scale);
      }
    }
  }
}

// TcBwdKV: the dk/dv kernel's key block (16 a warp): 64 keys for head dim 64, 48
// for 128, so K and V ([BK][D] each) and double-buffered 16-row Q and dO tiles fit
// without opt-in.
template <int D>
struct TcBwdKV {
  static constexpr int BK = D == 64 ? 64 : 48, WARPS = BK / 16, THREADS = WARPS * 32;
};
#define TC_BQ 16  // query rows a tile of the dk/dv kernel

// dk/dv: a block takes BK keys of one kv head (K and V in shared memory for the
// whole kernel) and walks the query heads of its group and their 16-row query
// tiles from the diagonal on (Q and dO double-buffered by cp.async), accumulating
// dV = Σ Pᵀ·dO and dK = Σ dSᵀ·Q in registers.
template <int D>
__device__ __forceinline__ void attn_bwd_dkdv_tc(bf16* __restrict__ dk, bf16* __restrict__ dv,
                                                 const bf16* __restrict__ dout, const bf16* __restrict__ q,
                                                 const bf16* __restrict__ k, const bf16* __restrict__ v,
                                                 const bf16* __restrict__ out, const float* __restrict__ lse,
                                                 int batch, int seq, int heads, int kvHeads, float scale) {
  constexpr int BK = TcBwdKV<D>::BK, THREADS = TcBwdKV<D>::THREADS, KC = D / 16, DT = D / 8;
  FSDP_DYNAMIC_SHARED(bf16, sm);
  bf16* Ks = sm;                     // [BK][D]
  bf16* Vs = Ks + BK * D;            // [BK][D]
  bf16* QD = Vs + BK * D;            // [2][Q, dO][TC_BQ][D]
  float* stats = reinterpret_cast<float*>(QD + 4 * TC_BQ * D);  // [TC_BQ]: lse·log2 e
  float* part = stats + TC_BQ;                                   // [TC_BQ][D/8]: D's partials
  int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t4 = lane & 3;
  int j0 = blockIdx.x * BK, kvh = blockIdx.y, b = blockIdx.z, rep = heads / kvHeads;
  if (b >= batch) return;
  long long qs = (long long)heads * D, ks = (long long)kvHeads * D;
  long long kOff = ((long long)b * seq * kvHeads + kvh) * D;
  const float sl2 = scale * 1.4426950408889634f;
  // Query tiles from the diagonal (j0 is a multiple of TC_BQ) to seq, per head.
  const int ntq = (seq - j0 + TC_BQ - 1) / TC_BQ, total = rep * ntq;

  // tile_async of flat tile it: Q and dO rows of head g·rep + it/ntq.
  auto issue = [&](int it, int buf) {
    int h = kvh * rep + it / ntq, i0 = j0 + (it % ntq) * TC_BQ;
    long long qOff = ((long long)b * seq * heads + h) * D;
    bf16* dst = QD + buf * 2 * TC_BQ * D;
    for (int e = threadIdx.x; e < TC_BQ * (D / 8); e += THREADS) {
      int r = e / (D / 8), c = e % (D / 8), t = i0 + r;
      bool ok = t < seq;
      long long src = qOff + (long long)(ok ? t : 0) * qs + c * 8;
      cp_async16(dst + tc_swz<D>(r, c), q + src, ok ? 16 : 0);
      cp_async16(dst + TC_BQ * D + tc_swz<D>(r, c), dout + src, ok ? 16 : 0);
    }
  };
  for (int e = threadIdx.x; e < BK * (D / 8); e += THREADS) {
    int r = e / (D / 8), c = e % (D / 8), t = j0 + r;
    bool ok = t < seq;
    long long src = kOff + (long long)(ok ? t : 0) * ks + c * 8;
    cp_async16(Ks + tc_swz<D>(r, c), k + src, ok ? 16 : 0);
    cp_async16(Vs + tc_swz<D>(r, c), v + src, ok ? 16 : 0);
  }
  issue(0, 0);
  cp_async_commit();

  float accK[DT][4], accV[DT][4];
#pragma unroll
  for (int dt = 0; dt < DT; dt++)
#pragma unroll
    for (int e = 0; e < 4; e++) accK[dt][e] = accV[dt][e] = 0.0f;
  const int kr0 = j0 + warp * 16 + g;  // this lane's key rows kr0, kr0 + 8
  for (int it = 0; it < total; it++) {
    const int h = kvh * rep + it / ntq, i0 = j0 + (it % ntq) * TC_BQ, buf = it & 1;
    if (it + 1 < total) {
      issue(it + 1, buf ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    // The tile's row statistics, by every thread from global memory (16-byte loads
    // of out and dout): lse in the exp2 domain, and D = rowsum(dO⊙O) as partial dot
    // products of 8-column chunks, summed in order by the lanes that need them.
    {
      long long qOff = ((long long)b * seq * heads + h) * D;
      for (int e = tid; e < TC_BQ * (D / 8); e += THREADS) {
        int r = e / (D / 8), c = e % (D / 8), t = i0 + r;
        float acc = 0.0f;
        if (t < seq) {
          long long off = qOff + (long long)t * qs + c * 8;
          tc_u4 ov = *reinterpret_cast<const tc_u4*>(out + off), dv = *reinterpret_cast<const tc_u4*>(dout + off);
#pragma unroll
          for (int w = 0; w < 4; w++) {
            acc += __uint_as_float(ov.w[w] << 16) * __uint_as_float(dv.w[w] << 16);
            acc += __uint_as_float(ov.w[w] & 0xffff0000u) * __uint_as_float(dv.w[w] & 0xffff0000u);
          }
        }
        part[e] = acc;
      }
      if (tid < TC_BQ) {
        int t = i0 + tid;
        stats[tid] = t < seq ? lse[((long long)b * heads + h) * seq + t] * 1.4426950408889634f : 0.0f;
      }
    }
    __syncthreads();
    const bf16* Qt = QD + buf * 2 * TC_BQ * D;
    const bf16* dOt = Qt + TC_BQ * D;

    // Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ: the warp's 16 keys as A, the 16 query rows as B.
    float s[2][4], dp[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < KC; kc++) {
      unsigned ka[4], va[4], qb[4], ob[4];
      int aoff = tc_swz<D>(warp * 16 + (lane & 15), kc * 2 + (lane >> 4));
      int boff = tc_swz<D>((lane & 7) + ((lane >> 4) << 3), kc * 2 + ((lane >> 3) & 1));
      ldmatrix_x4(ka, Ks + aoff);
      FSDP_PLANT_SWAP(ka[1], ka[2]);
      ldmatrix_x4(va, Vs + aoff);
      ldmatrix_x4(qb, Qt + boff);
      ldmatrix_x4(ob, dOt + boff);
      const unsigned q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]}, o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]};
      mma_bf16_16816(s[0], ka, q0);
      mma_bf16_16816(s[1], ka, q1);
      mma_bf16_16816(dp[0], va, o0);
      mma_bf16_16816(dp[1], va, o1);
    }
    // D of this lane's 4 query columns 8nt + 2t4 + c.
    float Dq[2][2];
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
      for (int c = 0; c < 2; c++) {
        const float* pp = part + (nt * 8 + 2 * t4 + c) * (D / 8);
        float sum = 0.0f;
#pragma unroll
        for (int k = 0; k < D / 8; k++) sum += pp[k];
        Dq[nt][c] = sum;
      }
    // Pᵀ and dSᵀ; element e of n-tile nt is key kr0 + 8(e>>1), query i0 + 8nt + 2t4 + (e&1).
    float ds[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; nt++) {
#pragma unroll
      for (int e = 0; e < 4; e++) {
        int qc = nt * 8 + 2 * t4 + (e & 1), qi = i0 + qc, key = kr0 + 8 * (e >> 1);
        float p = exp2f(s[nt][e] * sl2 - stats[qc]);
        if (qi < key || qi >= seq || key >= seq) p = 0.0f;
        s[nt][e] = p;
        ds[nt][e] = p * (dp[nt][e] - Dq[nt][e & 1]);
      }
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q: A from the accumulators (one k-step of 16
    // queries), dO and Q transposed as B.
    const unsigned pa[4] = {pack_bf16x2(s[0][0], s[0][1]), pack_bf16x2(s[0][2], s[0][3]),
                            pack_bf16x2(s[1][0], s[1][1]), pack_bf16x2(s[1][2], s[1][3])};
    const unsigned dsa[4] = {pack_bf16x2(ds[0][0], ds[0][1]), pack_bf16x2(ds[0][2], ds[0][3]),
                             pack_bf16x2(ds[1][0], ds[1][1]), pack_bf16x2(ds[1][2], ds[1][3])};
#pragma unroll
    for (int dp2 = 0; dp2 < DT / 2; dp2++) {
      int off = tc_swz<D>((lane & 7) + (((lane >> 3) & 1) << 3), dp2 * 2 + (lane >> 4));
      unsigned ob[4], qb[4];
      ldmatrix_x4_trans(ob, dOt + off);
      ldmatrix_x4_trans(qb, Qt + off);
      const unsigned o0[2] = {ob[0], ob[1]}, o1[2] = {ob[2], ob[3]}, q0[2] = {qb[0], qb[1]}, q1[2] = {qb[2], qb[3]};
      mma_bf16_16816(accV[2 * dp2], pa, o0);
      mma_bf16_16816(accV[2 * dp2 + 1], pa, o1);
      mma_bf16_16816(accK[2 * dp2], dsa, q0);
      mma_bf16_16816(accK[2 * dp2 + 1], dsa, q1);
    }
    __syncthreads();  // this buffer and the statistics are read before they are refilled
  }
#pragma unroll
  for (int e = 0; e < 2; e++) {
    int key = kr0 + 8 * e;
    if (key < seq) {
      long long o = kOff + (long long)key * ks;
#pragma unroll
      for (int dt = 0; dt < DT; dt++) {
        int c = dt * 8 + 2 * t4;
        st(dk + o + c, ld(dk + o + c) + accK[dt][2 * e] * scale);
        st(dk + o + c + 1, ld(dk + o + c + 1) + accK[dt][2 * e + 1] * scale);
        st(dv + o + c, ld(dv + o + c) + accV[dt][2 * e]);
        st(dv + o + c + 1, ld(dv + o + c + 1) + accV[dt][2 * e + 1]);
      }
    }
  }
}

#define TC_BWD_KERNELS(DIM)                                                                                         \
  extern "C" __global__ void __launch_bounds__(TC_THREADS, 2) fsdp_attn_bwd_dq_tc##DIM##_bf16(                     \
      bf16* __restrict__ dq, const bf16* __restrict__ dout, const bf16* __restrict__ q, const bf16* __restrict__ k, \
      const bf16* __restrict__ v, const bf16* __restrict__ out, const float* __restrict__ lse, int batch, int seq,  \
      int heads, int kvHeads, int d, float scale) {                                                                 \
    (void)d;                                                                                                        \
    attn_bwd_dq_tc<DIM>(dq, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, scale);                           \
  }                                                                                                                 \
  FSDP_REGISTER(fsdp_attn_bwd_dq_tc##DIM##_bf16, TC_THREADS)                                                       \
  extern "C" __global__ void __launch_bounds__(TcBwdKV<DIM>::THREADS, 2) fsdp_attn_bwd_dkdv_tc##DIM##_bf16(        \
      bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout, const bf16* __restrict__ q,     \
      const bf16* __restrict__ k, const bf16* __restrict__ v, const bf16* __restrict__ out,                         \
      const float* __restrict__ lse, int batch, int seq, int heads, int kvHeads, int d, float scale) {             \
    (void)d;                                                                                                        \
    attn_bwd_dkdv_tc<DIM>(dk, dv, dout, q, k, v, out, lse, batch, seq, heads, kvHeads, scale);                     \
  }                                                                                                                 \
  FSDP_REGISTER(fsdp_attn_bwd_dkdv_tc##DIM##_bf16, TcBwdKV<DIM>::THREADS)

TC_BWD_KERNELS(64)
TC_BWD_KERNELS(128)
