// The value side of the quantized decode (decode_kernel.cuh): O^T += V^T · P'^T per sub-tile, the
// value codes turned into MMA A fragments in place by the format's ValueCodec
// (decode_value_codecs.cuh).
#pragma once

#include <cstdint>

#include "decode_cfg.cuh"
#include "decode_ring.cuh"
#include "decode_value_codecs.cuh"

namespace tq::cuda {

namespace {

// acc (and turbo4-qjl's acc2) += the sub-tile's values times its P' fragments (pb, pq; kValuePairs:
// pbv; pb and acc: one per N-tile), through the format's ValueCodec. hb: the halves' bases; tv: the token of k-slot 2p; vs, vw: the
// warp's codes start 2 bytes into a word, and lane row 7 then wraps (kValueWords, kValuePairs); v_off:
// kValuePairs' word offsets.
template <class K>
__device__ __forceinline__ void accumulate_values(const uint8_t* const (&hb)[2], const RowMap& rm, int tv, int r, int vs,
                                                  bool vw, const int (&v_off)[2], uint32_t lut_lane, uint32_t slut_lane,
                                                  const typename K::PFrags (&pb)[K::kNTiles],
                                                  const typename K::QjlPFrags& pq, const typename K::PairPFrags& pbv,
                                                  typename K::Acc (&acc)[K::kNTiles], typename K::QjlAcc& acc2) {
  using Q = typename K::Q;
  using Values = typename Q::Values;
  static_assert(!Values::kBlocks || (Q::Keys::kBlocks && Values::kSignTerm == Q::Keys::kSignTerm),
                "turbo values go through the key LUT of the same block codec");
  constexpr int d8 = K::kRow8Delta, dv1 = K::kSlot1Delta;
  // value codes of tokens 2p, 2p+1 (k-slots 2p..) and 2p+8, 2p+9 (k-slots 2p+8..), lane row r
  const uint8_t* vp[2][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    vp[h][0] = hb[h] + rm.code + tv * rm.cst + (K::kValueWords ? 4 * r + 2 * vs : r * Q::kVRowBytes);
    vp[h][1] = vp[h][0] + dv1 * rm.cst;
    vp[h][2] = vp[h][0] + d8 * rm.cst;
    vp[h][3] = vp[h][2] + dv1 * rm.cst;
  }
  Values::accumulate(ValueTile<K>{hb, rm, vp, r, vw, v_off, lut_lane, slut_lane, pb, pq, pbv, acc, acc2});
}

}  // namespace

}  // namespace tq::cuda
