// The query side of the quantized decode's prologue (decode_kernel.cuh): the query heads loaded,
// rotated (FWHT; turbo: the sign tables) and split into fp16 hi + lo MMA B fragments, once per CTA
// and warp before the main loop.
#pragma once

#include <cstdint>

#include "bitexact.cuh"
#include "decode_cfg.cuh"
#include "decode_keys.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// The FWHT of each of TB blocks of 128 elements is block_fwht (decode_keys.cuh).

// Packed kernels (G ≤ 4) and KernelTraits::kRawRows (≤ 8 columns per N-tile): the query heads' elements
// lane + 32k, fp16 as loaded, two heads per register, all heads' loads issued at kernel entry with
// the producer's block-table loads: one global round trip before the prologue instead of one per
// head. Other G > 4 kernels: the prologue loads the heads one ahead (query_frags); their lines are
// prefetched here instead (no registers).
// q_row(g): head g's row; group(): the warp's query columns.
template <class K, class QRow, class Group>
__device__ __forceinline__ void query_prefetch(const DecodeArgs& a, const QRow& q_row, const Group& group, int lane,
                                               int ws, typename K::QRaw& qraw) {
  using C = typename K::C;
  constexpr int D = K::D;
  constexpr bool kPacked = K::kPacked;
  if constexpr (kPacked || K::kRawRows) {
    constexpr int kPairs = kPacked ? 2 : 4 * K::kNTiles;
#pragma unroll
    for (int i = 0; i < kPairs; ++i) {
      const __half* qrow = q_row(2 * i);
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const int j = lane + 32 * k;
        const bool in = j < C::kD;
        qraw[i][k].x = 2 * i < group() && in ? qrow[j] : __ushort_as_half(0);
        qraw[i][k].y = 2 * i + 1 < group() && in ? qrow[j + a.q_sh] : __ushort_as_half(0);
      }
    }
  } else if (ws == 0) {
    // G > 4: the prologue loads the heads one ahead, each waiting for the previous; their
    // lines prefetched here, at kernel entry (no registers), turn those HBM round trips into
    // cache hits
    constexpr int kLines = (2 * C::kD + 127) / 128;  // 128-byte lines of a query row
    if (lane < group() * kLines) dev::prefetch_l1(q_row(lane / kLines) + 64 * (lane % kLines));
  }
}

// The warp's query fragments qf (turbo4-qjl: and q2f, of q″ = R q′): query head g (turbo: s1 · q,
// zero-padded to the block) in registers, element lane + 32k: the FWHT across the warp
// (shuffles); then every lane splits its own elements (scaled) into fp16 hi + lo and stages them
// in qbuf as two half rows, from which the lanes holding head g's fragments take theirs with
// 8-byte loads. qf[0]: hi (packed: hi in columns 0–3, lo in 4–7); qf[1]: lo (G > 4). Key runs
// (KernelTraits::kKeyRuns): lane p's fragments follow its own run of 32 dims.
template <class K, class T, class QRow, class Group>
__device__ __forceinline__ void query_frags(const T& t, const QRow& q_row, const Group& group,
                                            const typename K::QRaw& qraw, int n, int lane, int r, int p, float* qbuf,
                                            typename K::QFrags& qf, typename K::QjlFrags& q2f) {
  using C = typename K::C;
  using Q = typename K::Q;
  using Keys = typename Q::Keys;
  constexpr int D = K::D, KS = Q::kKSteps, kQSets = K::kQSets;
  constexpr bool kPacked = K::kPacked, kKeyRuns = K::kKeyRuns;
  auto q_head = [&](int g, float (&y)[D / 32]) {
    __half* const hrow = reinterpret_cast<__half*>(qbuf);  // hi: halves [0, D), lo: [D, 2D)
    const bool mine = kPacked ? (r & 3) == g : r == g;
    auto frags = [&](uint32_t (&f)[kQSets][KS][2], const float (&v)[D / 32]) {  // v → f (this lane's head)
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const __half h = __float2half_rn(v[k]);
        hrow[lane + 32 * k] = h;
        hrow[D + lane + 32 * k] = __float2half_rn(v[k] - __half2float(h));
      }
      __syncwarp();
      if (mine) {
        const bool lo_col = kPacked && r >= 4;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          // dims base … +3: b0 = +0, +1; b1 = +2, +3 (kKeyRuns: lane p's own run of 32 dims)
          const int base = kKeyRuns ? 32 * p + 8 * (ks >> 1) + 4 * (ks & 1) : 32 * (ks >> 1) + 8 * p + 4 * (ks & 1);
          if constexpr (kPacked) {
            const uint2 w = *reinterpret_cast<const uint2*>(hrow + (lo_col ? D : 0) + base);
            f[0][ks][0] = w.x;
            f[0][ks][1] = w.y;
          } else {
            const uint2 h = *reinterpret_cast<const uint2*>(hrow + base);
            const uint2 l = *reinterpret_cast<const uint2*>(hrow + D + base);
            f[0][ks][0] = h.x;
            f[0][ks][1] = h.y;
            f[kQSets - 1][ks][0] = l.x;
            f[kQSets - 1][ks][1] = l.y;
          }
        }
      }
      __syncwarp();
    };
    float sc = 1.f;
    if constexpr (Keys::kLut) {
      block_fwht<Q::kTB>(y, lane);
      sc = t.rot_scale;
    }
    float v[D / 32];
#pragma unroll
    for (int k = 0; k < D / 32; ++k) v[k] = (Keys::kBlocks && (t.s2[k & 3] >> lane) & 1u ? -y[k] : y[k]) * sc;
    frags(qf, v);
    if constexpr (Keys::kSignTerm) {  // q″ = qs2 · H(qs1 · q′) / √128 per block (q′ = s2 · y · sc)
      float y2[D / 32];
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const bool neg = ((t.s2[k & 3] ^ t.qs1[k & 3]) >> lane) & 1u;  // q′'s s2 sign and qs1
        y2[k] = neg ? -y[k] : y[k];
      }
      block_fwht<Q::kTB>(y2, lane);
      const float sc2 = sc * t.rot_scale;
#pragma unroll
      for (int k = 0; k < D / 32; ++k) v[k] = ((t.qs2[k & 3] >> lane) & 1u ? -y2[k] : y2[k]) * sc2;
      frags(q2f, v);
    }
  };
  auto s1_sign = [&](int k, float v) { return Keys::kBlocks && (t.s1[k & 3] >> lane) & 1u ? -v : v; };
  if constexpr (kPacked) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      if (g >= group()) break;
      float y[D / 32];
#pragma unroll
      for (int k = 0; k < D / 32; ++k) y[k] = s1_sign(k, __half2float(g & 1 ? qraw[g / 2][k].y : qraw[g / 2][k].x));
      q_head(g, y);
    }
  } else if constexpr (K::kRawRows) {
    // head g: half g & 1 of pair g / 2, picked with byte permutes (indexing qraw by g, or selects
    // that nvcc folds into that, would put the array in local memory)
    auto bits = [&](int i, int k) { return *reinterpret_cast<const uint32_t*>(&qraw[4 * n + i][k]); };  // N-tile n's pairs
    auto raw_head = [&](int g) {
      const uint32_t pair = g & 2 ? 0x7654u : 0x3210u;                        // pair 1 of 0–1, 3 of 2–3
      const uint32_t b0 = 4u * uint32_t(g >> 2) + 2u * uint32_t(g & 1), half = b0 | (b0 + 1u) << 4;  // → bits 0–15
      float y[D / 32];
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const uint32_t h = __byte_perm(__byte_perm(bits(0, k), bits(1, k), pair), __byte_perm(bits(2, k), bits(3, k), pair), half);
        y[k] = s1_sign(k, __half2float(__ushort_as_half(uint16_t(h))));
      }
      q_head(g, y);
    };
    if constexpr (kKeyRuns) {  // unrolled: each pair's registers free once its two heads are done (fewer spills)
#pragma unroll
      for (int g = 0; g < 8; ++g) {
        if (g >= group()) break;
        raw_head(g);
      }
    } else {  // rolled (unrolled measured 0.4% slower for 4bit_nc at 32/4)
#pragma unroll 1
      for (int g = 0; g < group(); ++g) raw_head(g);
    }
  } else {  // the next head's loads are issued before this head's work
    auto load_q = [&](int g, float (&y)[D / 32]) {
      const __half* qrow = q_row(g);
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const int j = lane + 32 * k;
        y[k] = s1_sign(k, j < C::kD ? __half2float(qrow[j]) : 0.f);
      }
    };
    float y_next[D / 32];
    load_q(0, y_next);
    for (int g = 0; g < group(); ++g) {
      float y[D / 32];
#pragma unroll
      for (int k = 0; k < D / 32; ++k) y[k] = y_next[k];
      if (g + 1 < group()) load_q(g + 1, y_next);
      q_head(g, y);
    }
  }
}

}  // namespace

}  // namespace tq::cuda
