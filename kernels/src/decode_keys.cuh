// The key side of the quantized decode (decode_kernel.cuh): key codes → MMA A fragments through
// the centroid-pair LUT, the scores S^T = C · Q'^T of a sub-tile, and the norm-correction sums. What
// depends on the key codec (how its bytes become fragments, the LUT's pair codes, the norm sums,
// turbo4-qjl's sign term) is in its KeyCodec (decode_key_codecs.cuh).
//
// Per warp and 32-token sub-tile (two 16-token halves, interleaved so their MMA
// chains overlap), G = query heads per kv head:
//   keys   : lane (r, p) feeds tokens r, r+8; per pair of k-steps it loads the
//            index bytes of dims 32ps + 8p … +7 (Keys::words: slots are only 2-byte
//            aligned; neighbouring lanes read neighbouring words, conflict free — with
//            4 heads per CTA only if MMA rows 0–7 are the even tokens: kEvenOddRows)
//            and maps each pair code through the LUT of half2(α·c[lo], α·c[hi])
//            straight into the MMA operand register, one conflict-free 4-byte load
//            from the lane's own copy. d ≤ 128: one 16-warp CTA per SM shares a LUT of
//            256-byte rows at shared address 64K, so the entry address is a single
//            PRMT of the code byte with 64K | 4·lane (Keys::wide_addrs); d = 256:
//            128-byte rows, PRMT + LEA (Keys::narrow_frag). α (KernelFormat::lut_scale)
//            makes α·c nearly exact in fp16 (7.4e-5). The query fragments use the
//            same dim order (built once).
//   nc norm: Σ(α·c)² of each token (Keys::norm_sums: the wide LUT's squares, or the
//            Gram at d = 256).
//   scores : S^T = C · Q'^T, Q' = FWHT(q)/√d split into fp16 hi + lo (fp16 q' alone
//            simulates to 1.5e-3 relative output error). G ≤ 4 (KernelTraits::kPacked): hi in
//            MMA columns 0–3, lo in columns 4–7 of one MMA (G ≤ 8 runs hi and lo as
//            two MMAs). Packed: lanes p < 2 then finish half 0, lanes p ≥ 2 half 1
//            (one shuffle exchanges the partial scores), so the per-token work —
//            norm, 1/‖c‖, exp2, scale, zero — runs once per token.
#pragma once

#include <cstdint>

#include "decode_cfg.cuh"
#include "decode_ring.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// The FWHT of each of TB blocks of 128 elements (element j of block b: lane j % 32,
// register 4b + j / 32); TB = 1: the whole array (d ≤ 128, any transform size).
template <int TB, int E>
__device__ __forceinline__ void block_fwht(float (&y)[E], int lane) {
  if constexpr (TB == 1) {
    dev::warp_fwht(y, lane);
  } else {
    static_assert(E == 4 * TB, "turbo blocks of 128 elements: 4 registers each");
#pragma unroll
    for (int b = 0; b < TB; ++b) {
      float z[4] = {y[4 * b], y[4 * b + 1], y[4 * b + 2], y[4 * b + 3]};
      dev::warp_fwht(z, lane);
#pragma unroll
      for (int k = 0; k < 4; ++k) y[4 * b + k] = z[k];
    }
  }
}

// 3-bit mse keys at d = 128 in the vLLM layout (kKeyRun in decode_body): lane p owns dims
// 32p … 32p + 31 of a token, its 12 key bytes read once per sub-tile as the aligned words x[0 … 3]
// around them; the run starts at bit O of x (O = 0 or 16: where it starts 2 bytes into its first
// word; x[3] is read only then). run_lut_addrs gives the wide LUT's entry addresses of pairs
// 4kp … 4kp + 3 (pair-step kp; rows keyed by a byte's low 6 bits): pair 4kp is byte 3kp + O/8 of x
// (one PRMT); pairs 4kp + t (t = 1 … 3) are byte 0 (kp even) or 3 (kp odd) of the window
// wnd[t − 1] = x >> (O + 24kp + 6t), made at even kp — one funnel shift serves pairs 4kp + t and
// 4kp + 4 + t, 24 bits apart. Per run of 16 pairs: 6 shifts and 16 PRMT, against 32 for joining a
// pair-step's 3 bytes first (one PRMT, three shifts, four address PRMT). O is a
// compile-time constant in the full-tile bodies (decode_kernel's key_off: the run's offset is the
// warp's, fixed by its head); where it is not (the masked body), the caller shifts the run to bit 0
// first (three funnel shifts) and passes O = 0.
template <int O>
__device__ __forceinline__ void run_lut_addrs(const uint32_t (&x)[4], uint32_t (&wnd)[3], int kp, uint32_t lut_lane,
                                              uint32_t (&a)[4]) {
  static_assert(O == 0 || O == 16, "the run starts at byte 0 or 2 of its first word");
  const int d = 3 * kp + O / 8;
  a[0] = wide_lut_addr(x[d >> 2], d & 3, lut_lane);
  if ((kp & 1) == 0) {
#pragma unroll
    for (int t = 1; t < 4; ++t) {
      const int bit = O + 24 * kp + 6 * t, w = bit >> 5, sh = bit & 31;
      wnd[t - 1] = w + 1 < (O ? 4 : 3) ? __funnelshift_r(x[w], x[w + 1], sh) : x[w] >> sh;
    }
  }
#pragma unroll
  for (int t = 1; t < 4; ++t) a[t] = wide_lut_addr(wnd[t - 1], (kp & 1) ? 3 : 0, lut_lane);
}

// The A fragment halves of k-step 2ps + h2 for one token from its key words w (Keys::words): lo =
// slots 2p, 2p+1, hi = slots 2p+8, 2p+9 (dims 32ps + 8p + 4h2 + {0,1} and + {2,3}). LUT keys: one
// 4-byte LUT load per pair code (the lane's own copy: conflict-free) straight into the MMA operand,
// at the entry addresses of Keys::wide_addrs (wide LUT: lut_lane = the LUT's 64 KB-aligned base |
// 4·lane) or as Keys::narrow_frag reads them (128-byte rows); else the key bytes converted (fp8).
template <class Q, bool P>
__device__ __forceinline__ void key_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                         uint32_t& hi) {
  using Keys = typename Q::Keys;
  if constexpr (!Keys::kLut) {
    Keys::frag(w, h2, lo, hi);
  } else if constexpr (Q::kWide) {
    uint32_t a_lo, a_hi;
    Keys::template wide_addrs<P>(w, h2, lut_lane, a_lo, a_hi);
    lo = dev::lds_u32(a_lo);
    hi = dev::lds_u32(a_hi);
  } else {
    Keys::template narrow_frag<P>(w, h2, lut_lane, lo, hi);
  }
}
// QCfg::kSqLut (mse keys, wide LUT): key_frag and the pairs' squares (lut_frag_sq)
template <class Q, bool P>
__device__ __forceinline__ void key_frag_sq(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                            uint32_t& hi, uint32_t& sq_lo, uint32_t& sq_hi) {
  static_assert(Q::kSqLut, "mse keys, wide LUT");
  uint32_t a_lo, a_hi;
  Q::Keys::template wide_addrs<P>(w, h2, lut_lane, a_lo, a_hi);
  lut_frag_sq(a_lo, a_hi, lo, hi, sq_lo, sq_hi);
}


// The key LUT: row e holds 32 lane copies of half2(α·c[lo], α·c[hi]) for pair code e (wide mse
// LUT: the second half of each row the pair's squares, see QCfg::kSqLut). Written by warps 1 …
// while warp 0 issues the first stages.
template <class C>
__device__ __forceinline__ void build_key_lut(uint32_t* lut, const float* s_cen, int tid, int nthreads, int nwarps) {
  using Q = QCfg<C>;
  if constexpr (Q::kLut) {
    static_assert(Q::kLutCopies == 32, "LUT rows: 32 lane copies, written 4 at a time");
    // row i / kChunks, lane copies 4·(chunk % 8) … +3 (kSqLut: chunks 8… are the row's
    // second half, the squares), written by warps 1… (warp 0 issues the first stages meanwhile)
    constexpr int kChunks = Q::kSqLut ? 16 : 8;
    const int first = nwarps > 1 ? 32 : 0;
    for (int i = tid - first; i >= 0 && i < Q::kLutEntries * kChunks; i += nthreads - first) {
      const int row = i / kChunks, chunk = i % kChunks;
      int lo, hi;  // pair code → its two dims' centroids
      Q::Keys::lut_pair(row, lo, hi);
      uint32_t v = dev::pack_half2(s_cen[lo], s_cen[hi]);
      if (Q::kSqLut && chunk >= 8) {  // the entry's squares: x_a² + x_b² exact in fp32, as fp16 hi + lo
        const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&v));
        const float sq = fmaf(x.x, x.x, x.y * x.y);
        const float sq_hi = __half2float(__float2half_rn(sq));
        v = dev::pack_half2(sq_hi, sq - sq_hi);
      }
      *reinterpret_cast<uint4*>(lut + row * (Q::kLutRow / 4) + 4 * chunk) = make_uint4(v, v, v, v);
    }
  }
}
// turbo4-qjl's sign LUT (QCfg::kSignLut)
template <class C>
__device__ __forceinline__ void build_sign_lut(uint2* slut, int tid, int nthreads) {
  using Q = QCfg<C>;
  if constexpr (Q::kSignLut) {  // row n: 32 lane copies of {±1 of bits 0, 1; ±1 of bits 2, 3} (half 0x3C00 = +1)
    for (int i = tid; i < Q::kSignLutEntries; i += nthreads) {
      const uint32_t n = uint32_t(i) >> 5;
      auto pm = [&](int bit) { return (n >> bit) & 1u ? 0x3c00u : 0xbc00u; };
      slut[i] = make_uint2(pm(0) | pm(1) << 16, pm(2) | pm(3) << 16);
    }
  }
}

// The scores of both 16-token halves of a sub-tile (hb: the halves' bases) for this lane's rows:
// sa (per N-tile of query columns; turbo4-qjl's sign term sq) per turbo block, half and hi/lo set, and the mse keys' Σ x²
// per token (qa; d = 256: the Gram's two diagonals qa, qb). KO ≥ 0: the warp's key slots start KO
// bytes into a word (KernelTraits::kKeyOffBodies), ro the run offset otherwise.
template <class K, int KO>
__device__ __forceinline__ void key_scores(const uint8_t* const (&hb)[2], const RowMap& rm, int tr, int p, uint32_t ro,
                                           uint32_t lut_lane, uint32_t slut_lane, const typename K::QFrags (&qf)[K::kNTiles],
                                           const typename K::QjlFrags& q2f, typename K::Scores (&sa)[K::kNTiles],
                                           typename K::QjlScores& sq, float (&qa)[2][4], float (&qb)[2][4]) {
  using Q = typename K::Q;
  using Keys = typename Q::Keys;
  constexpr int KS = Q::kKSteps, kQSets = K::kQSets, d8 = K::kRow8Delta;
  constexpr bool kPlanes = K::kPlanes, kPacked = K::kPacked, kKeyRuns = K::kKeyRuns;
  const uint8_t* krow[2][2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    krow[h][0] = hb[h] + rm.key + tr * rm.kst;
    krow[h][1] = krow[h][0] + d8 * rm.kst;
  }
  // kKeyRuns: each row's run as 3 words and its windows (run_lut_addrs; wnd: made at even kp, used at odd),
  // and (per kp) its pairs' LUT addresses
  [[maybe_unused]] uint32_t kx[kKeyRuns ? 2 : 1][2][4], wnd[kKeyRuns ? 2 : 1][2][3], ka[kKeyRuns ? 2 : 1][2][4];
  [[maybe_unused]] constexpr int kRunBit = KO < 0 ? 0 : 8 * KO;  // the runs' first bit in kx (run_lut_addrs' O)
  if constexpr (kKeyRuns) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint8_t* b = krow[h][j] + 12 * p - ro;
        uint32_t x[4];
#pragma unroll
        for (int i = 0; i < 3; ++i) x[i] = ld_u32(b + 4 * i);
        x[3] = ro ? ld_u32(b + 12) : 0u;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          kx[h][j][i] = KO >= 0 ? x[i] : i < 3 ? __funnelshift_r(x[i], x[i + 1], 8 * ro) : 0u;
      }
  }
#pragma unroll
  for (int kp = 0; kp < Q::kPairSteps; ++kp) {
    [[maybe_unused]] uint32_t kw[2][2][2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (kKeyRuns) {
        run_lut_addrs<kRunBit>(kx[h][0], wnd[h][0], kp, lut_lane, ka[h][0]);
        run_lut_addrs<kRunBit>(kx[h][1], wnd[h][1], kp, lut_lane, ka[h][1]);
      } else {
        Keys::template words<kPlanes, Q::kWide>(krow[h][0], kp, p, kw[h][0]);
        Keys::template words<kPlanes, Q::kWide>(krow[h][1], kp, p, kw[h][1]);
      }
    }
#pragma unroll
    for (int h2 = 0; h2 < 2; ++h2) {
      const int ks = 2 * kp + h2, tb = ks / (KS / Q::kTB);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t af[4];
        [[maybe_unused]] uint32_t sqf[4];
        if constexpr (kKeyRuns) {
          lut_frag_sq(ka[h][0][2 * h2], ka[h][0][2 * h2 + 1], af[0], af[2], sqf[0], sqf[2]);
          lut_frag_sq(ka[h][1][2 * h2], ka[h][1][2 * h2 + 1], af[1], af[3], sqf[1], sqf[3]);
        } else if constexpr (Q::kSqLut) {
          key_frag_sq<Q, kPlanes>(kw[h][0], h2, lut_lane, af[0], af[2], sqf[0], sqf[2]);
          key_frag_sq<Q, kPlanes>(kw[h][1], h2, lut_lane, af[1], af[3], sqf[1], sqf[3]);
        } else {
          key_frag<Q, kPlanes>(kw[h][0], h2, lut_lane, af[0], af[2]);
          key_frag<Q, kPlanes>(kw[h][1], h2, lut_lane, af[1], af[3]);
        }
#pragma unroll
        for (int n = 0; n < K::kNTiles; ++n) {  // every N-tile from the same A fragment
          dev::mma_16816(sa[n][tb][h][0], af, qf[n][0][ks][0], qf[n][0][ks][1]);
          if constexpr (!kPacked)
            dev::mma_16816(sa[n][tb][h][K::kScoreSets - 1], af, qf[n][kQSets - 1][ks][0], qf[n][kQSets - 1][ks][1]);
        }
        if constexpr (Keys::kSignTerm) {  // the sign nibble of k-step h2 (w[1]: the 8 dims' sign byte)
          uint32_t zf[4];
          sign_frag<Q::kSignLut>(kw[h][0][1], 4 * h2, slut_lane, zf[0], zf[2]);
          sign_frag<Q::kSignLut>(kw[h][1][1], 4 * h2, slut_lane, zf[1], zf[3]);
          dev::mma_16816(sq[tb][h][0], zf, q2f[0][ks][0], q2f[0][ks][1]);
          if constexpr (!kPacked) dev::mma_16816(sq[tb][h][kQSets - 1], zf, q2f[kQSets - 1][ks][0], q2f[kQSets - 1][ks][1]);
        }
        if constexpr (Keys::kNormSums) Keys::template norm_sums<Q::kSqLut, kPacked>(af, sqf, qa[h], qb[h]);
      }
    }
  }
}

}  // namespace

}  // namespace tq::cuda
