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
