// The softmax stage of a sub-tile (decode_kernel.cuh): the scores become log2-domain logits (key
// norms, the norm correction 1/‖c‖, turbo4-qjl's sign term), the online softmax takes them
// (decode_softmax.cuh), and the weights p become Σ p·zero and the P' = p·scale fragments of the
// value MMAs. Packed kernels (G ≤ 4) split the per-token work between the lane pairs p, p ^ 2;
// the others (G > 4) take hi and lo column sets.
#pragma once

#include <cmath>
#include <cstdint>

#include "decode_cfg.cuh"
#include "decode_keys.cuh"
#include "decode_ring.cuh"
#include "decode_softmax.cuh"
#include "decode_value_codecs.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// Per-warp constants of the softmax stage.
struct LogitConsts {
  float raw_scale;  // score → log2-domain logit: · norm16 · (nc ? 1/sqrt(Σ(αc)²) : 1/α) · attn_scale · log2 e
  float nc_eps;     // added to Σ(αc)² before the reciprocal square root
  float qjl_k;      // turbo4-qjl: the sign term's score → logit: · norm · rnorm · κ · attn_scale · log2 e
  int diag_src;     // lane holding the Σc² diagonal entries of tokens r, r+8 (the Gram, d = 256)
};

// The P' fragments beyond pb[0] from the sub-tile's p (xs: tokens r, r, r+8, r+8; f0: token r's
// value block): turbo block 1 (d = 256) into pb[1] with that block's value norm, and turbo4-qjl's
// sign term P″ = p · norm · κ · rnorm into pq[tb]; frags: the path's fragment builder.
template <class K, class T, class Frags>
__device__ __forceinline__ void turbo_p_frags(const T& t, const RowMap& rm, const float (&xs)[4], const uint8_t* f0,
                                              bool v0, bool v1, Frags&& frags, typename K::PFrags& pb,
                                              typename K::QjlPFrags& pq) {
  using C = typename K::C;
  using Q = typename K::Q;
  constexpr int d8 = K::kRow8Delta;
  if constexpr (Q::kTB > 1) {
    const float sb0 = v0 ? Q::Values::block_norm(f0 + C::kTurboBlockBytes) : 0.f;
    const float sb1 = v1 ? Q::Values::block_norm(f0 + d8 * rm.mst + C::kTurboBlockBytes) : 0.f;
    const float pw[4] = {xs[0] * sb0, xs[1] * sb0, xs[2] * sb1, xs[3] * sb1};
    frags(pb[1], pw);
  }
  if constexpr (Q::Values::kSignTerm) {
#pragma unroll
    for (int tb = 0; tb < Q::kTB; ++tb) {
      const uint8_t* fb = f0 + tb * C::kTurboBlockBytes;
      // (written out here: as a ValueCodec member, ptxas scheduled turbo4-qjl's d = 256 kernels differently)
      const float k0 = v0 ? t.qjl_scale * ld_f16(fb) * ld_f16(fb + 2) : 0.f;
      const float k8 = v1 ? t.qjl_scale * ld_f16(fb + d8 * rm.mst) * ld_f16(fb + d8 * rm.mst + 2) : 0.f;
      const float pw[4] = {xs[0] * k0, xs[1] * k0, xs[2] * k8, xs[3] * k8};
      frags(pq[tb], pw);
    }
  }
}

// A score of one half (row/column i): the hi and lo sets' sum, or the one set both accumulate into
// (KernelTraits::kOneScoreAcc).
template <class K>
__device__ __forceinline__ float score_sum(const float (&s)[K::kScoreSets][4], int i) {
  if constexpr (K::kScoreSets == 1)
    return s[0][i];
  else
    return s[0][i] + s[1][i];
}

// Σ p·zero by α after a full softmax update (per lane, its two columns)
__device__ __forceinline__ void rescale_zero_sums(float (&zs)[2], const float (&alpha)[2]) {
#pragma unroll
  for (int c = 0; c < 2; ++c) zs[c] *= alpha[c];
}

// What packed_weights and column_weights share, made at the top of each: the logit constants and the
// helpers over Σ p·zero and the P' fragments. (Each keeps its own lambda for the valid rows: as a
// member of this struct it moved ptxas's schedules.)
template <class K, class T>
struct WeightsStage {
  float raw_scale, nc_eps, qjl_k;  // LogitConsts
  int diag_src;
  const T& t;
  const RowMap& rm;
  float (&zs)[2];
  float (&alpha)[2];
  typename K::PFrags& pb;
  typename K::QjlPFrags& pq;

  __device__ __forceinline__ WeightsStage(const T& t_, const LogitConsts& lc, const RowMap& rm_,
                                          float (&zs_)[2], float (&alpha_)[2], typename K::PFrags& pb_,
                                          typename K::QjlPFrags& pq_)
      : raw_scale(lc.raw_scale), nc_eps(lc.nc_eps), qjl_k(lc.qjl_k), diag_src(lc.diag_src), t(t_), rm(rm_),
        zs(zs_), alpha(alpha_), pb(pb_), pq(pq_) {}
  // after a full softmax update: Σ p·zero by α
  __device__ __forceinline__ void rescale_sums() const { rescale_zero_sums(zs, alpha); }
  // the P' fragments beyond pb[0] (turbo_p_frags)
  template <class Frags>
  __device__ __forceinline__ void turbo_frags(const float (&xs)[4], const uint8_t* f0, bool v0, bool v1,
                                              Frags&& frags) const {
    turbo_p_frags<K>(t, rm, xs, f0, v0, v1, frags, pb, pq);
  }
};

// The logit factors of tokens r (fr) and r + 8 (fr8) of half h of a sub-tile, single-block keys
// (QCfg::kTB = 1): raw_scale · the key norm (LUT keys) · the nc norm correction 1/‖c‖ (Σc² from qa, or,
// without the Σc² LUT, from the lane holding the diagonal entries: qb's for token r + 8).
// (raw_scale, nc_eps, diag_src: LogitConsts'; n0: token r's key record head, half + rm.norm + tr · rm.mst)
template <class K, class T>
__device__ __forceinline__ void token_logit_factors(const T& t, float raw_scale, float nc_eps, int diag_src,
                                                    const uint8_t* n0, const RowMap& rm, int r,
                                                    const float (&qa_h)[4], const float (&qb_h)[4], float& fr,
                                                    float& fr8) {
  using Q = typename K::Q;
  fr = raw_scale, fr8 = raw_scale;
  if constexpr (Q::Keys::kLut) {
    using Keys = typename Q::Keys;
    fr = Keys::norm_scale(n0, fr);
    fr8 = Keys::norm_scale(n0 + K::kRow8Delta * rm.mst, fr8);
    if constexpr (Keys::kNormSums) {
      if (Q::kSqLut && t.nc) {  // tokens r, r + 8: this lane's own sums
        fr *= Keys::norm_correction(qa_h[0], nc_eps);
        fr8 *= Keys::norm_correction(qa_h[2], nc_eps);
      } else if (t.nc) {  // token r: qa[r&1] of lane (r, r/2); token r+8: qb[2 + (r&1)] there
        const float sq0 = __shfl_sync(dev::kFull, (r & 1) ? qa_h[1] : qa_h[0], diag_src);
        const float sq1 = __shfl_sync(dev::kFull, (r & 1) ? qb_h[3] : qb_h[2], diag_src);
        fr *= Keys::norm_correction(sq0, nc_eps);
        fr8 *= Keys::norm_correction(sq1, nc_eps);
      }
    }
  }
}

// column_weights' logit factors for both halves, computed once per sub-tile where several N-tiles
// share it (KernelTraits::kNTiles > 1; computed inside each column_weights call, ptxas kept one copy
// per N-tile: 16 MUFU.RSQ in the two-tile causal kernel's loop for 8 tokens' norm corrections).
struct LogitFactors {
  float fr[2], fr8[2];  // half h: tokens r, r + 8
};
template <class K, class T>
__device__ __forceinline__ LogitFactors logit_factors(const T& t, const LogitConsts& lc, const uint8_t* const (&hb)[2],
                                                      const RowMap& rm, int tr, int r, const float (&qa)[2][4],
                                                      const float (&qb)[2][4]) {
  static_assert(K::Q::kTB == 1, "two-block (d = 256 turbo) keys fold the factors into the scores");
  LogitFactors f;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    token_logit_factors<K>(t, lc.raw_scale, lc.nc_eps, lc.diag_src, hb[h] + rm.norm + tr * rm.mst, rm, r, qa[h], qb[h],
                           f.fr[h], f.fr8[h]);
  return f;
}

// Both halves' value scales and zeros, and (KernelTraits::kHiOnlyP) 1/scale, once per sub-tile where several
// N-tiles share them (KernelTraits::kNTiles > 1; computed inside each column_weights call, ptxas kept one copy
// per N-tile: 8 MUFU.RCP in a sub-tile body of the two-tile kernels where 4 do). column_weights' one-tile path
// loads the same values itself.
struct ValueFactors {
  float sc[2][2], z[2][2], isc[2][2];  // [half][token r, r + 8]
};
template <class K, bool kFullTile>
__device__ __forceinline__ ValueFactors value_factors(const uint8_t* const (&hb)[2], const RowMap& rm, int tr,
                                                      int nvalid) {
  constexpr int d8 = K::kRow8Delta;
  ValueFactors f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint8_t* f0 = hb[h] + rm.scz + tr * rm.mst;  // token r's; 0 for rows past nvalid
    const bool v0 = kFullTile || 16 * h + tr < nvalid, v1 = kFullTile || 16 * h + tr + d8 < nvalid;
    f.sc[h][0] = v0 ? ld_f16(f0) : 0.f, f.z[h][0] = v0 ? ld_f16(f0 + 2) : 0.f;
    f.sc[h][1] = v1 ? ld_f16(f0 + d8 * rm.mst) : 0.f, f.z[h][1] = v1 ? ld_f16(f0 + d8 * rm.mst + 2) : 0.f;
    if constexpr (K::kHiOnlyP) f.isc[h][0] = dev::rcp_fast(f.sc[h][0]), f.isc[h][1] = dev::rcp_fast(f.sc[h][1]);
  }
  return f;
}

// Packed kernels (G ≤ 4). Returns whether the running maxima stayed (α = 1).
template <class K, bool kFullTile, class T>
__device__ __forceinline__ bool packed_weights(const T& t, const LogitConsts& lc, const uint8_t* const (&hb)[2], const RowMap& rm,
    int tr, int r, int p, int nvalid, const int (&ccut)[2], const int (&p_src)[2], uint32_t p_sel, const typename K::Scores& sa,
    const typename K::QjlScores& sq, const float (&qa)[2][4], const float (&qb)[2][4], Softmax32& sm, float (&zs)[2],
    float (&alpha)[2], typename K::PFrags& pb, typename K::QjlPFrags& pq, typename K::PairPFrags& pbv) {
  using C = typename K::C;
  using Q = typename K::Q;
  constexpr int kQSets = K::kQSets, d8 = K::kRow8Delta;
  constexpr bool kValuePairs = K::kValuePairs;
  const WeightsStage<K, T> st(t, lc, rm, zs, alpha, pb, pq);
  // token row (0 … 31 of the sub-tile) in range; always in a full sub-tile
  auto valid = [&](int row) { return kFullTile || row < nvalid; };
  const bool hi_lane = p < 2;  // this lane's columns are the hi parts
  bool fast;  // no logit above the running maxima: α = 1, no rescale
  // Lanes p < 2 finish half 0, lanes p ≥ 2 half 1 (same query heads 2(p&1), 2(p&1)+1):
  // each sends the partner the partial scores of the partner's half (hi + lo columns)
  // and the per-token softmax / scale work is done once per token, not twice.
  const int mh = hi_lane ? 0 : 1;
  float x4[4];
  const uint8_t* mb = hi_lane ? hb[0] : hb[1];
  float fr = st.raw_scale, fr8 = st.raw_scale;
  [[maybe_unused]] float frb = st.raw_scale, frb8 = st.raw_scale;  // turbo block 1's key norms (d = 256)
  if constexpr (Q::Keys::kLut) {
    using Keys = typename Q::Keys;
    const uint8_t* n0 = mb + rm.norm + tr * rm.mst;
    fr = Keys::norm_scale(n0, fr);
    fr8 = Keys::norm_scale(n0 + d8 * rm.mst, fr8);
    if constexpr (Q::kTB > 1) {
      frb = Keys::norm_scale(n0 + C::kTurboBlockBytes, frb);
      frb8 = Keys::norm_scale(n0 + d8 * rm.mst + C::kTurboBlockBytes, frb8);
    }
    if constexpr (Keys::kNormSums) {
      if (Q::kSqLut && t.nc) {  // tokens r, r + 8 of this lane's half: its own sums
        fr *= Keys::norm_correction(hi_lane ? qa[0][0] : qa[1][0], st.nc_eps);
        fr8 *= Keys::norm_correction(hi_lane ? qa[0][2] : qa[1][2], st.nc_eps);
      } else if (t.nc) {  // token r: qa[r&1] of lane (r, r/2); token r+8: qb[2 + (r&1)] there (both halves)
        const float q0 = __shfl_sync(dev::kFull, (r & 1) ? qa[0][1] : qa[0][0], st.diag_src);
        const float q1 = __shfl_sync(dev::kFull, (r & 1) ? qa[1][1] : qa[1][0], st.diag_src);
        const float q8 = __shfl_sync(dev::kFull, (r & 1) ? qb[0][3] : qb[0][2], st.diag_src);
        const float q9 = __shfl_sync(dev::kFull, (r & 1) ? qb[1][3] : qb[1][2], st.diag_src);
        fr *= Keys::norm_correction(hi_lane ? q0 : q1, st.nc_eps);
        fr8 *= Keys::norm_correction(hi_lane ? q8 : q9, st.nc_eps);
      }
    }
  }
  const bool v0 = valid(16 * mh + tr), v1 = valid(16 * mh + tr + d8);
  // this lane's half of a [half][set][4] score array: its own partial sums plus the partner's
  auto mine_half = [&](const float (&sc)[2][K::kScoreSets][4], float (&out)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float other = __shfl_xor_sync(dev::kFull, hi_lane ? sc[1][0][i] : sc[0][0][i], 2);
      out[i] = (hi_lane ? sc[0][0][i] : sc[1][0][i]) + other;
    }
  };
  mine_half(sa[0], x4);
  if constexpr (Q::kTB > 1) {  // score = norm0 · block 0's + norm1 · block 1's
    float y4[4];
    mine_half(sa[1], y4);
    x4[0] = v0 ? fmaf(y4[0], frb, x4[0] * fr) : -INFINITY;
    x4[1] = v0 ? fmaf(y4[1], frb, x4[1] * fr) : -INFINITY;
    x4[2] = v1 ? fmaf(y4[2], frb8, x4[2] * fr8) : -INFINITY;
    x4[3] = v1 ? fmaf(y4[3], frb8, x4[3] * fr8) : -INFINITY;
  } else {
    x4[0] = v0 ? x4[0] * fr : -INFINITY;
    x4[1] = v0 ? x4[1] * fr : -INFINITY;
    x4[2] = v1 ? x4[2] * fr8 : -INFINITY;
    x4[3] = v1 ? x4[3] * fr8 : -INFINITY;
  }
  if constexpr (Q::Keys::kSignTerm) {  // + Σ_b norm_b · κ · rnorm_b · (q″ · ±1)_b (norm, rnorm: bytes 0, 2 of block b)
    const uint8_t* n0 = mb + rm.norm + tr * rm.mst;
#pragma unroll
    for (int tb = 0; tb < Q::kTB; ++tb) {
      const uint8_t* nb = n0 + tb * C::kTurboBlockBytes;
      const float k0 = Q::Keys::sign_scale(nb, st.qjl_k);
      const float k8 = Q::Keys::sign_scale(nb + d8 * rm.mst, st.qjl_k);
      float e4[4];
      mine_half(sq[tb], e4);
#pragma unroll
      for (int i = 0; i < 4; ++i) x4[i] = (i < 2 ? v0 : v1) ? fmaf(e4[i], i < 2 ? k0 : k8, x4[i]) : -INFINITY;
    }
  }
  if constexpr (K::kCausal && !kFullTile) {  // rows at or past the column's causal limit
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (16 * mh + tr + (i < 2 ? 0 : d8) >= ccut[i & 1]) x4[i] = -INFINITY;
  }
  fast = sm.template try_keep_half<!kValuePairs, K::kCausal>(x4);
  if (!fast) {
    sm.template update_half<!kValuePairs, K::kCausal>(x4, alpha);
    st.rescale_sums();
  }
  const uint8_t* f0 = mb + rm.scz + tr * rm.mst;
  const float sc0 = v0 ? ld_f16(f0) : 0.f, z0 = v0 ? ld_f16(f0 + 2) : 0.f;
  const float sc1 = v1 ? ld_f16(f0 + d8 * rm.mst) : 0.f, z1 = v1 ? ld_f16(f0 + d8 * rm.mst + 2) : 0.f;
  const float pv[4] = {x4[0] * sc0, x4[1] * sc0, x4[2] * sc1, x4[3] * sc1};
  if constexpr (kValuePairs) {
    // P' = fp16(p·scale) of rows r (pk[0]) and r + 8 (pk[1]), heads 2(p & 1), +1; the weights it
    // carries, p̃ = fp16(P') / scale (a zero scale: p), into Σp and Σp·zero (as kHiOnlyP)
    const __half2 h01 = __floats2half2_rn(pv[0], pv[1]), h23 = __floats2half2_rn(pv[2], pv[3]);
    const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
    const uint32_t pk[2] = {*reinterpret_cast<const uint32_t*>(&h01),
                            *reinterpret_cast<const uint32_t*>(&h23)};
    const float i0 = dev::rcp_fast(sc0), i1 = dev::rcp_fast(sc1);
    const float wt[4] = {sc0 != 0.f ? f01.x * i0 : x4[0], sc0 != 0.f ? f01.y * i0 : x4[1],
                         sc1 != 0.f ? f23.x * i1 : x4[2], sc1 != 0.f ? f23.y * i1 : x4[3]};
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      zs[c] = fmaf(wt[c], z0, fmaf(wt[c + 2], z1, zs[c]));
      sm.l[c] += wt[c] + wt[c + 2];
    }
    // B of k-step j (half j >> 1, row set j & 1), k slots p (b0) and p + 4 (b1): head r & 3's P'
    // of their rows, from the lane of half j >> 1 holding that row and head pair
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u)
        pbv[j][u] = __byte_perm(__shfl_sync(dev::kFull, pk[j & 1], p_src[u] + 2 * (j >> 1)), 0u, p_sel);
  } else {
#pragma unroll
    for (int c = 0; c < 2; ++c) zs[c] = fmaf(x4[c], z0, fmaf(x4[c + 2], z1, zs[c]));
  }
  // P' matrix of half h: columns 0–3 fp16(P') (lanes p < 2), 4–7 P' − fp16(P') (lanes p ≥ 2).
  // Each lane splits its own P' into hi and lo, keeps the part its columns
  // hold and sends the other to lane p ^ 2 (whose columns hold that part of
  // this lane's half). own: this lane's half, oth: the partner's.
  // Turbo block tb > 0 (d = 256): P' = p · that block's value norm (into pb[tb]); turbo4-qjl's
  // sign term: P″ = p · norm · κ · rnorm (into pq[tb]).
  auto p_frags = [&](uint32_t (&dst)[2][kQSets][2], const float (&pw)[4]) {
    uint32_t own[2], oth[2];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const __half2 hh = __floats2half2_rn(pw[2 * j], pw[2 * j + 1]);
      const float2 f = __half22float2(hh);
      const uint32_t hi = *reinterpret_cast<const uint32_t*>(&hh);
      const uint32_t lo = dev::pack_half2(pw[2 * j] - f.x, pw[2 * j + 1] - f.y);
      own[j] = hi_lane ? hi : lo;
      oth[j] = __shfl_xor_sync(dev::kFull, hi_lane ? lo : hi, 2);
    }
    dst[0][0][0] = dev::movmatrix_trans(hi_lane ? own[0] : oth[0]);
    dst[0][0][1] = dev::movmatrix_trans(hi_lane ? own[1] : oth[1]);
    dst[1][0][0] = dev::movmatrix_trans(hi_lane ? oth[0] : own[0]);
    dst[1][0][1] = dev::movmatrix_trans(hi_lane ? oth[1] : own[1]);
  };
  if constexpr (!kValuePairs) {
    p_frags(pb[0], pv);
    st.turbo_frags(x4, f0, v0, v1, p_frags);
  }
  return fast;
}

// G > 4: hi and lo column sets (kHiOnlyP: P' as fp16 hi alone), for every N-tile n of the warp (its
// scores sa[n], softmax state sm[n], Σ p·zero zs[n], α alpha[n], P' fragments pb[n]). The warp votes once
// for all N-tiles, so that their softmax work is one straight run the scheduler can interleave (a vote
// and branch per N-tile ran them one after the other); where a running maximum may have moved (the
// slow path), rescale(alpha) rescales the value accumulators there where kNTiles > 1, so no branch
// separates the P' fragments from the value work that follows (one-tile kernels: the caller rescales
// after it where this returns false; inside, 3bit_nc's G-8 one-tile decodes measured 0.9% slower).
// Returns whether the running maxima stayed (α = 1). kGivenFactors: the logit and value factors come from lf
// and vf (logit_factors, value_factors: once per sub-tile for all N-tiles), else they are computed here.
template <class K, bool kFullTile, bool kGivenFactors, class T, class Rescale>
__device__ __forceinline__ bool column_weights(const T& t, const LogitConsts& lc, const uint8_t* const (&hb)[2], const RowMap& rm,
    int tr, int r, int p, int nvalid, const int (&ccut)[K::kNTiles][2], const int (&p_src)[2], uint32_t p_sel,
    const typename K::Scores (&sa)[K::kNTiles], const typename K::QjlScores& sq, const float (&qa)[2][4],
    const float (&qb)[2][4], Softmax32 (&sm)[K::kNTiles], float (&zs)[K::kNTiles][2], float (&alpha)[K::kNTiles][2],
    typename K::PFrags (&pb)[K::kNTiles], typename K::QjlPFrags& pq, typename K::PairPFrags& pbv,
    const LogitFactors& lf, const ValueFactors& vf, const Rescale& rescale) {
  using C = typename K::C;
  using Q = typename K::Q;
  constexpr int kQSets = K::kQSets, d8 = K::kRow8Delta, kNT = K::kNTiles;
  constexpr bool kHiOnlyP = K::kHiOnlyP;
  // token row (0 … 31 of the sub-tile) in range; always in a full sub-tile
  auto valid = [&](int row) { return kFullTile || row < nvalid; };
  float x[kNT][2][4];
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sc4[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) sc4[i] = score_sum<K>(sa[n][0][h], i);
      float fr, fr8;
      [[maybe_unused]] const uint8_t* n0 = hb[h] + rm.norm + tr * rm.mst;
      if constexpr (kGivenFactors) {
        fr = lf.fr[h];
        fr8 = lf.fr8[h];
      } else if constexpr (Q::kTB > 1) {  // score = norm0 · block 0's + norm1 · block 1's (d = 256; no norm sums)
        using Keys = typename Q::Keys;
        static_assert(Keys::kLut && !Keys::kNormSums, "two-block keys: LUT keys without norm sums");
        fr = Keys::norm_scale(n0, lc.raw_scale);
        fr8 = Keys::norm_scale(n0 + d8 * rm.mst, lc.raw_scale);
        const float frb = Keys::norm_scale(n0 + C::kTurboBlockBytes, lc.raw_scale);
        const float frb8 = Keys::norm_scale(n0 + d8 * rm.mst + C::kTurboBlockBytes, lc.raw_scale);
#pragma unroll
        for (int i = 0; i < 4; ++i) sc4[i] = fmaf(score_sum<K>(sa[n][1][h], i), i < 2 ? frb : frb8, sc4[i] * (i < 2 ? fr : fr8));
        fr = fr8 = 1.f;
      } else {
        token_logit_factors<K>(t, lc.raw_scale, lc.nc_eps, lc.diag_src, n0, rm, r, qa[h], qb[h], fr, fr8);
      }
      const bool v0 = valid(16 * h + tr), v1 = valid(16 * h + tr + d8);
      x[n][h][0] = v0 ? sc4[0] * fr : -INFINITY;
      x[n][h][1] = v0 ? sc4[1] * fr : -INFINITY;
      x[n][h][2] = v1 ? sc4[2] * fr8 : -INFINITY;
      x[n][h][3] = v1 ? sc4[3] * fr8 : -INFINITY;
      if constexpr (Q::Keys::kSignTerm) {  // + Σ_b norm_b · κ · rnorm_b · (q″ · ±1)_b
#pragma unroll
        for (int tb = 0; tb < Q::kTB; ++tb) {
          const uint8_t* nb = n0 + tb * C::kTurboBlockBytes;
          const float k0 = Q::Keys::sign_scale(nb, lc.qjl_k);
          const float k8 = Q::Keys::sign_scale(nb + d8 * rm.mst, lc.qjl_k);
#pragma unroll
          for (int i = 0; i < 4; ++i)
            x[n][h][i] = (i < 2 ? v0 : v1) ? fmaf(sq[tb][h][0][i] + sq[tb][h][kQSets - 1][i], i < 2 ? k0 : k8, x[n][h][i])
                                        : -INFINITY;
        }
      }
    }
  }
  if constexpr (K::kCausal && !kFullTile) {  // rows at or past the column's causal limit
#pragma unroll
    for (int n = 0; n < kNT; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (16 * h + tr + (i < 2 ? 0 : d8) >= ccut[n][i & 1]) x[n][h][i] = -INFINITY;
  }
  bool fit = true;  // no logit above the running maxima: α = 1, no rescale
#pragma unroll
  for (int n = 0; n < kNT; ++n) fit = fit && sm[n].fits(x[n]);
  const bool fast = __all_sync(dev::kFull, fit);
  if (fast) {
#pragma unroll
    for (int n = 0; n < kNT; ++n) sm[n].template keep<!kHiOnlyP, K::kCausal>(x[n]);
  } else {
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
      sm[n].template update<!kHiOnlyP, K::kCausal>(x[n], alpha[n]);
      rescale_zero_sums(zs[n], alpha[n]);
    }
    if constexpr (kNT > 1) rescale(alpha);
  }
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
    const WeightsStage<K, T> st(t, lc, rm, zs[n], alpha[n], pb[n], pq);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint8_t* f0 = hb[h] + rm.scz + tr * rm.mst;
      const bool v0 = valid(16 * h + tr), v1 = valid(16 * h + tr + d8);
      // (value_factors' loads, kept inline for the one-tile kernels: through a shared helper, ptxas scheduled
      // turbo3's one-tile kernels differently, 33 of 51 changed, and its 128/8 decode measured 0.7% slower on one H100)
      const float sc0 = kGivenFactors ? vf.sc[h][0] : v0 ? ld_f16(f0) : 0.f;
      const float z0 = kGivenFactors ? vf.z[h][0] : v0 ? ld_f16(f0 + 2) : 0.f;
      const float sc1 = kGivenFactors ? vf.sc[h][1] : v1 ? ld_f16(f0 + d8 * rm.mst) : 0.f;
      const float z1 = kGivenFactors ? vf.z[h][1] : v1 ? ld_f16(f0 + d8 * rm.mst + 2) : 0.f;
      const float pv[4] = {x[n][h][0] * sc0, x[n][h][1] * sc0, x[n][h][2] * sc1, x[n][h][3] * sc1};
      // fp16(P') (ph: tokens r, r + 8's two columns) and those values as floats (pf)
      auto to_half = [](const float (&pw)[4], uint32_t (&ph)[2], float (&pf)[4]) {
        const __half2 ph01 = __floats2half2_rn(pw[0], pw[1]), ph23 = __floats2half2_rn(pw[2], pw[3]);
        const float2 pf01 = __half22float2(ph01), pf23 = __half22float2(ph23);
        ph[0] = *reinterpret_cast<const uint32_t*>(&ph01);
        ph[1] = *reinterpret_cast<const uint32_t*>(&ph23);
        pf[0] = pf01.x, pf[1] = pf01.y, pf[2] = pf23.x, pf[3] = pf23.y;
      };
      // wt: the weights summed into Σp·zero (and, kHiOnlyP, Σp); wp: fp16(P') as floats (kHiOnlyP)
      float wt[4];
      [[maybe_unused]] float wp[4];
      [[maybe_unused]] uint32_t wh[2];
      if constexpr (kHiOnlyP) {
        to_half(pv, wh, wp);
        // p̃ = fp16(P') / scale; a zero scale (a constant value vector) has P' = 0 whatever p is,
        // and that token keeps p (its value is its zero)
        const float i0 = kGivenFactors ? vf.isc[h][0] : dev::rcp_fast(sc0);
        const float i1 = kGivenFactors ? vf.isc[h][1] : dev::rcp_fast(sc1);
#pragma unroll
        for (int i = 0; i < 4; ++i) wt[i] = (i < 2 ? sc0 : sc1) != 0.f ? wp[i] * (i < 2 ? i0 : i1) : x[n][h][i];
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) wt[i] = x[n][h][i];
      }
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        zs[n][c] = fmaf(wt[c], z0, fmaf(wt[c + 2], z1, zs[n][c]));
        if constexpr (kHiOnlyP) sm[n].l[c] += wt[c] + wt[c + 2];
      }
      if constexpr (kHiOnlyP) {
        pb[n][0][h][0][0] = dev::movmatrix_trans(wh[0]);
        pb[n][0][h][0][1] = dev::movmatrix_trans(wh[1]);
      } else {
        // turbo block tb > 0 (d = 256): P' = p · that block's value norm (into pb[tb]); turbo4-qjl's
        // sign term: P″ = p · norm · κ · rnorm (into pq[tb]); hi and lo sets
        auto p_frags = [&](uint32_t (&dst)[2][kQSets][2], const float (&pw)[4]) {
          uint32_t ph[2];
          float pf[4];
          to_half(pw, ph, pf);
          dst[h][0][0] = dev::movmatrix_trans(ph[0]);
          dst[h][0][1] = dev::movmatrix_trans(ph[1]);
          dst[h][kQSets - 1][0] = dev::movmatrix_trans(dev::pack_half2(pw[0] - pf[0], pw[1] - pf[1]));
          dst[h][kQSets - 1][1] = dev::movmatrix_trans(dev::pack_half2(pw[2] - pf[2], pw[3] - pf[3]));
        };
        p_frags(pb[n][0], pv);
        st.turbo_frags(x[n][h], f0, v0, v1, p_frags);
      }
    }
  }
  return fast;
}

}  // namespace

}  // namespace tq::cuda
