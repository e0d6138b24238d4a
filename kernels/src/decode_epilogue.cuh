// The quantized decode's write-out (decode_kernel.cuh): each warp's part O = (Σ c·P' (scaled
// back) + Σ p·zero) / Σ p, to the output row (parts == 1) or to the workspace with its
// log-sum-exp for the merge kernel (decode.cu) — or, where the CTA merges its warps' parts first
// (DecodeArgs::merge), to a staging area in shared memory, which merge_warp_parts then reduces to
// one part per work item. Turbo formats rotate back here: the value sum is linear in the codes, so
// the inverse rotation runs once per part, not per token.
#pragma once

#include <cmath>
#include <cstdint>

#include "decode_cfg.cuh"
#include "decode_keys.cuh"
#include "decode_softmax.cuh"
#include "decode_values.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// acc, acc2: the warp's value sums; sm, zs: its softmax state and Σ p·zero partials; qbuf: its
// staging row; s_row: the CTA's item row (shared); ws: the warp's sub-tile; kvh, g0: its kv head
// and first query column; group(): its columns; v_s: kValueWords/kValuePairs code offset; stage (K::kCtaMerge):
// this warp's staging area (merge_stage_floats<C>; column g's output at g · C::kD, its lse at 8 · C::kD + g), else
// unused: the part goes to the workspace or the output row.
template <class K, class T, class Group>
__device__ __forceinline__ void write_parts(const DecodeArgs& a, const T& t, typename K::Acc& acc,
                                            typename K::QjlAcc& acc2, const Softmax32& sm, const float (&zs)[2],
                                            float* qbuf, const int& s_row, const Group& group, int lane, int r, int p,
                                            int v_s, int warps_per_head, int ws, int kvh, int g0, float* stage) {
  using C = typename K::C;
  using Q = typename K::Q;
  using Values = typename Q::Values;
  constexpr int D = K::D, kAccTiles = K::kAccTiles;
  constexpr bool kPacked = K::kPacked, kValuePairs = K::kValuePairs, kValueWords = K::kValueWords;
  const bool hi_lane = p < 2;  // packed: this lane's columns are the hi parts
  if constexpr (kPacked && !kValuePairs) {  // add the lo columns (lanes p + 2) to the hi columns
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] += __shfl_xor_sync(dev::kFull, acc[i][j], 2);
    if constexpr (Values::kSignTerm) {
#pragma unroll
      for (int i = 0; i < D / 16; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc2[i][j] += __shfl_xor_sync(dev::kFull, acc2[i][j], 2);
    }
  }
  // Workspace row of query head qh_idx; parts == 1: the out row of sequence b = item (the
  // plan has one item per sequence then). From s_row and blockIdx.x (S2R) rather than from
  // values kept in registers through the main loop.
  const int row_item = s_row;
  auto part_row = [&](int qh_idx) { return (int64_t(qh_idx) * a.items + row_item) * warps_per_head + ws; };
  auto out_row = [&](int qh_idx) { return a.out + int64_t(blockIdx.x) * a.o_sb + int64_t(qh_idx) * a.o_sh; };
  // per-lane partials over the lane's tokens (packed: one half; lane p ^ 2 holds the other)
  auto total = [&](float v) {
    if constexpr (kPacked) v += __shfl_xor_sync(dev::kFull, v, 2);
    return dev::sum_over_token_lanes(v);
  };
  if constexpr (Values::kBlocks) {
    // (no value zero: the Σ p·zero terms, read from the value qs, are dead here)
    // acc: Σ p·norm·α·c in the rotated domain (row dims: out_dim). One query head at a
    // time through this warp's q buffer: x̂ = s1 · H(s2 · acc) · rot_scale / (α · Σp) per
    // block of 128, the first C::kD values (TurboCodec::decode, linear, so once per part).
    float inv[2], lse[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l = total(sm.l[c]);
      inv[c] = Softmax32::inv_sum(l);
      lse[c] = sm.lse(c, l);
    }
    const float osc = t.rot_scale / t.lut_scale;
    for (int g = 0; g < group(); ++g) {
      const int c = g & 1;
      // head g's column of ac / Σp → y (element lane + 32k), through qbuf, signs sg applied
      auto gather = [&](const float (&ac)[D / 16][4], const uint32_t (&sg)[4], float (&y)[D / 32]) {
        if (p == g >> 1) {  // packed: g < 4, the hi lanes (which now hold hi + lo)
#pragma unroll
          for (int i = 0; i < D / 16; ++i) {
            qbuf[Q::out_dim(r, i)] = (c ? ac[i][1] : ac[i][0]) * inv[c];
            qbuf[Q::out_dim(r, i) + 1] = (c ? ac[i][3] : ac[i][2]) * inv[c];
          }
        }
        __syncwarp();
#pragma unroll
        for (int k = 0; k < D / 32; ++k) y[k] = (sg[k & 3] >> lane) & 1u ? -qbuf[lane + 32 * k] : qbuf[lane + 32 * k];
        __syncwarp();
      };
      float y[D / 32];
      gather(acc, t.s2, y);
      if constexpr (Values::kSignTerm) {  // + α · R⁻¹(acc2 / Σp), R⁻¹ = qs1 · H(qs2 ·) / √128 per block (s2: as y)
        float y2[D / 32];
        gather(acc2, t.qs2, y2);
        block_fwht<Q::kTB>(y2, lane);
        const float ka = t.lut_scale * t.rot_scale;
#pragma unroll
        for (int k = 0; k < D / 32; ++k) y[k] = fmaf(((t.s2[k & 3] ^ t.qs1[k & 3]) >> lane) & 1u ? -ka : ka, y2[k], y[k]);
      }
      block_fwht<Q::kTB>(y, lane);
      const float lse_g = __shfl_sync(dev::kFull, c ? lse[1] : lse[0], g >> 1);
      const int qh_idx = dev::query_head<K::kSliced>(a, kvh, g0 + g);
      const int64_t row = part_row(qh_idx);
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const int j = lane + 32 * k;
        if (j >= C::kD) continue;
        const float v = y[k] * ((t.s1[k & 3] >> lane) & 1u ? -osc : osc);
        if constexpr (K::kCtaMerge)
          stage[g * C::kD + j] = v;
        else if (a.parts == 1)
          out_row(qh_idx)[j] = __ushort_as_half(dev::act_from_float(v, a.bf16 != 0));
        else
          a.o_part[row * C::kD + j] = v;
      }
      if (lane == 0) {
        if constexpr (K::kCtaMerge)
          stage[8 * C::kD + g] = lse_g;
        else if (a.parts > 1)
          a.lse_part[row] = lse_g;
      }
    }
  } else {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l = total(sm.l[c]);
      const float z = total(zs[c]);
      // kValuePairs: every lane, head 2(p & 1) + c, columns e = p >> 1
      const int g = kValuePairs ? 2 * (p & 1) + c : 2 * p + c;
      if (g >= group() || (kPacked && !kValuePairs && !hi_lane)) continue;
      const int qh_idx = dev::query_head<K::kSliced>(a, kvh, g0 + g);
      const float inv = Softmax32::inv_sum(l);
      // m-tile i: 4-bit values, acc rows r hold Σ c·P'·2^-24, rows r+8 Σ c·P'·2^-20; 3-bit values,
      // rows r / r+8 Σ c·P'·2^(k − 24) for codes 2i / 2i+1 (value_code_bit): exact scalings
      // (Values::code_scale).
      auto val = [&](float v, int i, bool row8) {
        return (v * Values::template code_scale<Q::kVChunk>(i, row8) + z) * inv;
      };
      // output dim of acc row r of m-tile i (row r + 8: the next): kValueWords, 4 · the unit of slot w = i >> 1
      // (2r + v_s + 16·(w >> 1) + (w & 1), mod D/4) + 2·(i & 1); else QCfg::out_dim
      // kValuePairs: word i >> 1's nibble 2(i & 1) + 4e (e = p >> 1) of this lane's words, (64(i >> 1) + 8r + 4v_s
      // + 2(i & 1) + 4e) mod 128
      auto vdim = [&](int i) {
        if constexpr (kValuePairs) return (64 * (i >> 1) + 8 * r + 4 * v_s + 2 * (i & 1) + 4 * (p >> 1)) & (D - 1);
        if constexpr (kValueWords) return 4 * ((2 * r + v_s + 16 * (i >> 2) + ((i >> 1) & 1)) & (D / 4 - 1)) + 2 * (i & 1);
        return Q::out_dim(r, i);
      };
      if constexpr (K::kCtaMerge) {
        float* o = stage + g * D;
#pragma unroll
        for (int i = 0; i < kAccTiles; ++i)
          *reinterpret_cast<float2*>(o + vdim(i)) = make_float2(val(acc[i][c], i, false), val(acc[i][c + 2], i, true));
        if (r == 0 && (!kValuePairs || p < 2)) stage[8 * D + g] = sm.lse(c, l);
      } else if (a.parts == 1) {
        __half* o = out_row(qh_idx);
#pragma unroll
        for (int i = 0; i < kAccTiles; ++i)
          *reinterpret_cast<uint32_t*>(o + vdim(i)) =
              dev::act_pack2(val(acc[i][c], i, false), val(acc[i][c + 2], i, true), a.bf16 != 0);
      } else {
        const int64_t row = part_row(qh_idx);
        float* o = a.o_part + row * D;
#pragma unroll
        for (int i = 0; i < kAccTiles; ++i)
          *reinterpret_cast<float2*>(o + vdim(i)) =
              make_float2(val(acc[i][c], i, false), val(acc[i][c + 2], i, true));
        if (r == 0 && (!kValuePairs || p < 2)) a.lse_part[row] = sm.lse(c, l);
      }
    }
  }
}

// The CTA's merge of its warps' parts (K::kCtaMerge), after every warp's write_parts into its staging
// area (base: warp 0's; warp hl + heads · (ws + warps_per_head · slice) holds kv head hl's sub-tile ws of
// column slice `slice`): per (kv head, query column, dim), the log-sum-exp weighted sum of the warps' parts,
// written as the item's one part (DecodePlan::part_warps 1) or, parts == 1, to the output row. (The merging
// kernels have one slice; dropping the slice terms changes their SASS, which was A/B'd and tested as it is.)
template <class K>
__device__ __forceinline__ void merge_warp_parts(const DecodeArgs& a, const float* base, int s_row, int heads,
                                                 int warps_per_head, int hg) {
  constexpr int OD = K::C::kD, kStage = merge_stage_floats<typename K::C>(), kSlices = K::kSlices;
  // a thread merges 4 consecutive dims (one 16-byte load per warp part, the weights computed once for the 4:
  // 16/2 is one pass of its 512 threads)
  constexpr int kQuads = OD / 4;
  const int n = heads * kSlices * 8 * kQuads, step = heads * kStage;  // step: warp ws → ws + 1
  for (int i = int(threadIdx.x); i < n; i += int(blockDim.x)) {
    const int j = 4 * (i % kQuads), g = i / kQuads % 8, hs = i / (kQuads * 8), hl = hs % heads, slice = hs / heads,
              g0 = 8 * slice;
    if (g >= (kSlices == 1 ? a.group : min(8, a.group - g0))) continue;
    const float* w0 = base + (hl + heads * warps_per_head * slice) * kStage;
    float m = -INFINITY;
    for (int ws = 0; ws < warps_per_head; ++ws) m = fmaxf(m, w0[ws * step + 8 * OD + g]);
    float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
    float den = 0.f;
    if (m != -INFINITY) {
      for (int ws = 0; ws < warps_per_head; ++ws) {
        const float w = exp2f(w0[ws * step + 8 * OD + g] - m);
        den += w;
        const float4 x = *reinterpret_cast<const float4*>(w0 + ws * step + g * OD + j);
        // (an empty part, weight 0, adds nothing, whatever its staging area holds)
        num.x += w > 0.f ? w * x.x : 0.f, num.y += w > 0.f ? w * x.y : 0.f;
        num.z += w > 0.f ? w * x.z : 0.f, num.w += w > 0.f ? w * x.w : 0.f;
      }
    }
    const float4 v = den > 0.f ? make_float4(num.x / den, num.y / den, num.z / den, num.w / den)
                               : make_float4(0.f, 0.f, 0.f, 0.f);
    const int qh_idx = dev::query_head<K::kSliced>(a, hg * heads + hl, g0 + g);
    if (a.parts == 1) {
      __half* o = a.out + int64_t(blockIdx.x) * a.o_sb + int64_t(qh_idx) * a.o_sh + j;
      const bool bf = a.bf16 != 0;
      o[0] = __ushort_as_half(dev::act_from_float(v.x, bf)), o[1] = __ushort_as_half(dev::act_from_float(v.y, bf));
      o[2] = __ushort_as_half(dev::act_from_float(v.z, bf)), o[3] = __ushort_as_half(dev::act_from_float(v.w, bf));
    } else {
      const int64_t row = int64_t(qh_idx) * a.items + s_row;
      *reinterpret_cast<float4*>(a.o_part + row * OD + j) = v;
      if (j == 0) a.lse_part[row] = den > 0.f ? m + __log2f(den) : -INFINITY;
    }
  }
}

}  // namespace

}  // namespace tq::cuda
