// The value codecs of the quantized decode (decode_values.cuh): ValueCodec<Kind, Bits>, one
// specialization per value kind and bits of the GPU codec table (TQ_GPU_CODECS in
// tq/cuda/kernel_format.h). accumulate(tile) turns a sub-tile's value codes into the MMA A
// fragments of O^T += V^T · P'^T (ValueTile: the lane's code rows, P' fragments and accumulators);
// code_scale (uniform codes) undoes the fragments' scaling at the write-out (decode_epilogue.cuh);
// block_norm (turbo, d = 256) is the P' factor of a token's second block (decode_weights.cuh).
//
// Uniform 4-bit codes: A is the code nibble masked in place, the fp16 subnormal c·2^-24 (row r) or
// c·2^-20 (row r+8): exact, no bias, so the tensor cores accumulate straight into acc. Lane row r
// reads the u16 words at bytes 2r + 16w of each token's codes (bank-conflict free, QCfg::
// kVRowBytes), or aligned words (KernelTraits::kValueWords), or one word per token and k-slot pair
// (KernelTraits::kValuePairs). Uniform 3-bit codes (lane row r: its chunk of 3·d/64 bytes): the code
// masked in place in a two-byte window of the chunk, c·2^(k−24) with k its bit in the window's first
// byte (value_code_bit). Turbo values go through the key LUT as pairs of centroids (pairs()).
// B = P' = p·scale: packed (G ≤ 4) hi in columns 0–3, lo in 4–7; G > 4 fp16(P') alone where
// KernelTraits::kHiOnlyP. Σ p·zero runs on the CUDA cores (decode_weights.cuh).
#pragma once

#include <cstdint>

#include "decode_cfg.cuh"
#include "decode_keys.cuh"
#include "decode_ring.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

// 3-bit value codes (mse formats): the bit at which code j of a lane's NB-byte chunk sits in
// the A register (the fp16 subnormal c·2^(k − 24)): its bit offset in byte 3j / 8 for even
// chunks (masked in place), 0 for d = 64's 3-byte chunks (shifted down).
template <int NB>
__host__ __device__ constexpr int value_code_bit(int j) {
  return NB % 2 == 0 ? (3 * j) & 7 : 0;
}

// One sub-tile's value stage for this lane: hb, the halves' bases; vp, the value codes of the tokens
// of k-slots 2p, 2p + 1, 2p + 8, 2p + 9 at lane row r (per half); vw: the warp's codes start 2 bytes
// into a word and lane row 7 then wraps (kValueWords, kValuePairs); v_off: kValuePairs' word offsets;
// pb, pq, pbv: the P' fragments (per N-tile; turbo4-qjl's sign term: pq; kValuePairs: pbv); acc (per
// N-tile; turbo4-qjl: acc2) the sums they go into.
template <class K>
struct ValueTile;

// ac += the A fragments of both halves (a0, a1) times the P' fragments pf of the m-tile's dims
template <class K>
__device__ __forceinline__ void fold_halves(const uint32_t (&pf)[2][K::kQSets][2], float (&ac)[4],
                                            const uint32_t (&a0)[4], const uint32_t (&a1)[4]) {
#pragma unroll
  for (int n = 0; n < K::kPSets; ++n) {
    dev::mma_16816(ac, a0, pf[0][n][0], pf[0][n][1]);
    dev::mma_16816(ac, a1, pf[1][n][0], pf[1][n][1]);
  }
}

template <class K>
struct ValueTile {
  const uint8_t* const (&hb)[2];
  const RowMap& rm;
  const uint8_t* const (&vp)[2][4];
  int r;
  bool vw;
  const int (&v_off)[2];
  uint32_t lut_lane, slut_lane;
  const typename K::PFrags (&pb)[K::kNTiles];
  const typename K::QjlPFrags& pq;
  const typename K::PairPFrags& pbv;
  typename K::Acc (&acc)[K::kNTiles];
  typename K::QjlAcc& acc2;
  // value m-tile i of every N-tile += both halves' A fragments (a0, a1) × that tile's P' of turbo block tb
  __device__ __forceinline__ void fold(int tb, int i, const uint32_t (&a0)[4], const uint32_t (&a1)[4]) const {
#pragma unroll
    for (int n = 0; n < K::kNTiles; ++n) fold_halves<K>(pb[n][tb], acc[n][i], a0, a1);
  }
};

template <ValueKind Kind, int Bits>
struct ValueCodec;  // one specialization per value codec of TQ_GPU_CODECS

// What the uniform value codecs share: one record per token (codes, fp16 scale and zero), no sign term.
struct UniformValues {
  static constexpr bool kBlocks = false, kSignTerm = false;
};

// Uniform 4-bit codes (per-vector min/max, fp16 scale then zero).
template <>
struct ValueCodec<ValueKind::uniform, 4> : UniformValues {
  // the A fragment's scaling of row r (row8: r + 8) of m-tile i, undone at the write-out
  template <int NB>
  static __device__ __forceinline__ float code_scale(int, bool row8) {
    return row8 ? 1048576.f : 16777216.f;
  }
  template <class K>
  static __device__ __forceinline__ void accumulate(const ValueTile<K>& v) {
    if constexpr (K::kValuePairs)
      accumulate_pairs(v);
    else
      accumulate_slots(v);
  }
  // KernelTraits::kValuePairs: k-step j takes the words of k slots p, p + 4 (rows of row set j & 1 in
  // half j >> 1); m-tile i takes word i >> 1, nibbles 2(i & 1) (row r: c·2^-24) and 2(i & 1) + 1
  // (row r + 8: c·2^-20), each with nibble + 4 beside it (e = 1) — masked in place, exact
  template <class K>
  static __device__ __forceinline__ void accumulate_pairs(const ValueTile<K>& v) {
    uint32_t x[4][2][2];  // [k-step][slot u][word]
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint8_t* vb = v.hb[j >> 1] + v.v_off[u] + 8 * (j & 1) * v.rm.cst;
        x[j][u][0] = ld_u32(vb);
        x[j][u][1] = ld_u32(vb + 32);
      }
    // the warp's codes 2 bytes into a word: row 7's second words take codes 0, 1 from the word before
    // the codes (predicated: a warp-uniform branch around it made the body 17 instructions longer)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int u = 0; u < 2; ++u)
        if (v.vw) {
          const uint8_t* vb = v.hb[j >> 1] + v.v_off[u] + 8 * (j & 1) * v.rm.cst;
          x[j][u][1] = __byte_perm(x[j][u][1], ld_u32(vb - 32), 0x7610u);  // codes 62, 63 | 0, 1
        }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int i = 0; i < K::kAccTiles; ++i) {
        auto nib = [&](uint32_t w, int row8) {
          return ((i & 1) ? w >> 8 : w) & (row8 ? 0x00f000f0u : 0x000f000fu);
        };
        const uint32_t af[4] = {nib(x[j][0][i >> 1], 0), nib(x[j][0][i >> 1], 1), nib(x[j][1][i >> 1], 0),
                                nib(x[j][1][i >> 1], 1)};
        dev::mma_16816(v.acc[0][i], af, v.pbv[j][0], v.pbv[j][1]);  // (packed: one N-tile)
      }
  }
  // Unit slot w: 4 dims of each token → m-tiles 2w, 2w+1. wab / wcd: the slot's 16 bits of the
  // tokens of k-slots 2p, 2p+1 / 2p+8, 2p+9 (low / high half), one PRMT each. u16 words: lane row
  // r reads byte 2r + 16w of each token's codes (WS = 16 bytes between a row's words; rows
  // QCfg::kVRowBytes = 2 apart). Aligned words (kValueWords): lane row r reads words r + 8k + v_s
  // (k < NV2), slot w is half w & 1 of word w >> 1; where v_s = 1 (codes 2 bytes past a word)
  // the last slot of row 7 is unit 0, the high half of the word 32 bytes back, read by that row
  // alone.
  template <class K>
  static __device__ __forceinline__ void accumulate_slots(const ValueTile<K>& v) {
    constexpr bool kValueWords = K::kValueWords;
    constexpr int NV2 = kValueWords ? K::Q::kVChunk / 4 : 1;
    [[maybe_unused]] constexpr int WS = 16;
    const uint8_t* const(&vp)[2][4] = v.vp;
    [[maybe_unused]] uint32_t xw[2][4][NV2];
    if constexpr (kValueWords) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int k = 0; k < NV2; ++k) xw[h][u][k] = ld_u32(vp[h][u] + 32 * k);
    }
#pragma unroll
    for (int w = 0; w < K::Q::kVChunk / 2; ++w) {
      uint32_t wab[2], wcd[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if constexpr (kValueWords) {
          const uint32_t sel = w & 1 ? 0x7632u : 0x5410u;
          wab[h] = __byte_perm(xw[h][0][w >> 1], xw[h][1][w >> 1], sel);
          wcd[h] = __byte_perm(xw[h][2][w >> 1], xw[h][3][w >> 1], sel);
          if (w == 2 * NV2 - 1 && v.vw) {
            wab[h] = __byte_perm(ld_u32(vp[h][0] - 32), ld_u32(vp[h][1] - 32), sel);
            wcd[h] = __byte_perm(ld_u32(vp[h][2] - 32), ld_u32(vp[h][3] - 32), sel);
          }
        } else {
          wab[h] = __byte_perm(ld_u16(vp[h][0] + WS * w), ld_u16(vp[h][1] + WS * w), 0x5410);
          wcd[h] = __byte_perm(ld_u16(vp[h][2] + WS * w), ld_u16(vp[h][3] + WS * w), 0x5410);
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
        // nibble 2m (row r) and 2m+1 (row r+8) of both tokens, masked in place:
        // fp16 subnormals c·2^-24 (row r) and c·2^-20 (row r+8), exact.
        uint32_t af[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint32_t xab = m ? wab[h] >> 8 : wab[h], xcd = m ? wcd[h] >> 8 : wcd[h];
          af[h][0] = xab & 0x000f000fu;
          af[h][1] = xab & 0x00f000f0u;
          af[h][2] = xcd & 0x000f000fu;
          af[h][3] = xcd & 0x00f000f0u;
        }
        v.fold(0, 2 * w + m, af[0], af[1]);
      }
    }
  }
};

// Uniform 3-bit codes: lane row r's chunk of NB = 3·d/64 bytes (code j of the chunk at bit 3j),
// A = the code masked in place, the fp16 subnormal c·2^(k − 24), k = value_code_bit(j)
// (exact; undone at the write-out). m-tile i: row r code 2i, row r + 8 code 2i + 1.
template <>
struct ValueCodec<ValueKind::uniform, 3> : UniformValues {
  template <int NB>
  static __device__ __forceinline__ float code_scale(int i, bool row8) {
    return float(1 << (24 - value_code_bit<NB>(2 * i + row8)));
  }
  template <class K>
  static __device__ __forceinline__ void accumulate(const ValueTile<K>& v) {
    constexpr int NB = K::Q::kVChunk;
    const uint8_t* const(&vp)[2][4] = v.vp;
    // code(h, t, j): the A register of code j for half h's token pair t (tokens 2p, 2p+1 or
    // 2p+8, 2p+9 in its low / high half)
    auto fold_codes = [&](auto&& code) {
#pragma unroll
      for (int i = 0; i < K::D / 16; ++i) {
        const uint32_t a0[4] = {code(0, 0, 2 * i), code(0, 0, 2 * i + 1), code(0, 1, 2 * i), code(0, 1, 2 * i + 1)};
        const uint32_t a1[4] = {code(1, 0, 2 * i), code(1, 0, 2 * i + 1), code(1, 1, 2 * i), code(1, 1, 2 * i + 1)};
        v.fold(0, i, a0, a1);
      }
    };
    if constexpr (NB % 2 == 0) {
      // d ≥ 128 (even chunks at even offsets): e[h][t][m] = bytes 2m, 2m+1 of token pair t's
      // two tokens (low half: tokens 2p / 2p+8, high half: 2p+1 / 2p+9). Code j lies in the
      // byte window b = 3j / 8 (bytes b, b+1) at bit k = 3j % 8 ≤ 7 of each half: window 2m is
      // e[m], window 2m+1 one PRMT of e[m] and e[m+1], the last (codes in byte NB − 1 alone)
      // e[m] >> 8. Per token pair 16 LOP3 and ≤ 6 PRMT/SHF for 32 codes, from NB/2 u16 loads
      // per token.
      static_assert(K::kSlot % 2 == 0 && K::C::kKeyBytes % 2 == 0, "u16 loads of the value chunks");
      uint32_t e[2][2][NB / 2];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int t = 0; t < 2; ++t)
#pragma unroll
          for (int m = 0; m < NB / 2; ++m)
            e[h][t][m] = __byte_perm(ld_u16(vp[h][2 * t] + 2 * m), ld_u16(vp[h][2 * t + 1] + 2 * m), 0x5410);
      fold_codes([&](int h, int t, int j) {
        const int b = (3 * j) >> 3, m = b >> 1;
        const uint32_t w = !(b & 1) ? e[h][t][m] : b + 1 == NB ? e[h][t][m] >> 8 : __byte_perm(e[h][t][m], e[h][t][m + 1], 0x6341);
        return w & (0x00070007u << value_code_bit<NB>(j));
      });
    } else {
      // d = 64: 3-byte chunks at any byte offset; each code shifted down to bit 0 (k = 0)
      constexpr int NH = NB / 2 + 2;  // u16 words covering NB bytes from the even base
      unsigned __int128 xs[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int odd = int(reinterpret_cast<uintptr_t>(vp[h][u]) & 1);
          const uint8_t* q = vp[h][u] - odd;
          unsigned __int128 x = 0;
#pragma unroll
          for (int i = 0; i < NH; ++i) x |= (unsigned __int128)ld_u16(q + 2 * i) << (16 * i);
          xs[h][u] = x >> (8 * odd);
        }
      fold_codes([&](int h, int t, int j) {
        const uint32_t lo = uint32_t(xs[h][2 * t] >> (3 * j)) & 7u, hi = uint32_t(xs[h][2 * t + 1] >> (3 * j)) & 7u;
        return lo | (hi << 16);
      });
    }
  }
};

// Turbo value blocks (Codec: the turbo kind's ValueCodec): row r takes dims 4r + 32w … +3 (out_dim)
// as two pair codes, pair e = dims 2j, 2j+1 (j = 2r + 16w + e) → half2(α·c, α·c′) from the key LUT
// (Codec::pairs; turbo4-qjl: and their ±1, z); m-tile 2w + e takes dim 2j as row r and dim 2j+1 as
// row r + 8, so two PRMTs turn the pairs of tokens (2p, 2p+1) into the A registers (two tokens of one
// dim each).
template <class K, class Codec>
__device__ __forceinline__ void accumulate_turbo_blocks(const ValueTile<K>& v) {
#pragma unroll
  for (int w = 0; w < K::D / 32; ++w) {
    uint32_t x[2][4][2];  // [half][token 2p, 2p+1, 2p+8, 2p+9][byte e]
    [[maybe_unused]] uint32_t z[2][4][2];  // turbo4-qjl: the ±1 of the same dims
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        Codec::template pairs<K>(v.vp[h][u], w, v.r, v.lut_lane, v.slut_lane, x[h][u], z[h][u]);
      }
    // pair e of the four tokens' halves p[h][u][e] → the A registers of m-tile 2w + e
    auto pair_a = [&](const uint32_t (&p)[2][4][2], int e, uint32_t (&af)[2][4]) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        af[h][0] = __byte_perm(p[h][0][e], p[h][1][e], 0x5410);
        af[h][1] = __byte_perm(p[h][0][e], p[h][1][e], 0x7632);
        af[h][2] = __byte_perm(p[h][2][e], p[h][3][e], 0x5410);
        af[h][3] = __byte_perm(p[h][2][e], p[h][3][e], 0x7632);
      }
    };
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      uint32_t af[2][4];
      pair_a(x, e, af);
      v.fold(w / 4, 2 * w + e, af[0], af[1]);
      if constexpr (Codec::kSignTerm) {
        pair_a(z, e, af);
        fold_halves<K>(v.pq[w / 4], v.acc2[2 * w + e], af[0], af[1]);
      }
    }
  }
}

// What the turbo value codecs share: blocks of 128 dims, each led by its fp16 norm.
struct TurboValues {
  static constexpr bool kBlocks = true;
  // the P' factor of a block beyond the first (d = 256): its norm (head: the block's first byte)
  static __device__ __forceinline__ float block_norm(const uint8_t* head) { return ld_f16(head); }
};

// turbo3/turbo2 values: one qs byte (the 2-bit codes of 4 dims) and their sign bits (s ≤ 15) → the pair codes
// of dims 0, 1 and 2, 3 in bytes 0 and 1, as turbo_pairs' first two bytes, in 4 operations instead of 8 (no
// PRMT; s·0x410 = s << 4 + s << 10 places both sign pairs without overlaps).
__device__ __forceinline__ uint32_t turbo_value_pairs(uint32_t q, uint32_t s) {
  return ((q | (q << 4)) & 0x0f0fu) | ((s * 0x410u) & 0x3030u);
}

// turbo2/3/4 values: the same block codec as the keys (turbo4: the u16 at byte 2r + 16w of qs;
// turbo3/turbo2: built by turbo_value_pairs), through the key LUT.
template <int Bits>
struct ValueCodec<ValueKind::turbo, Bits> : TurboValues {
  static constexpr bool kSignTerm = false;
  // the pair entries of dims 4r + 32w … +3 (codes: the token's value block 0 + row r's offset)
  template <class K>
  static __device__ __forceinline__ void pairs(const uint8_t* codes, int w, int r, uint32_t lut_lane, uint32_t,
                                               uint32_t (&x)[2], uint32_t (&)[2]) {
    const uint8_t* vb = codes + (w >> 2) * K::C::kTurboBlockBytes;  // block w / 4's qs (+ row)
    const int wl = w & 3;
    uint32_t word;
    if constexpr (Bits == 4) {
      word = ld_u16(vb + 16 * wl);
    } else {  // qs byte r + 8w; turbo3: sign nibble (r & 1) of byte r/2 + 4w (vb: + r), turbo2: none
      const uint8_t* sg = vb - r + 32 + (r >> 1) + 4 * wl;
      word = turbo_value_pairs(ld_u8(vb + 8 * wl), Bits == 3 ? ld_u8(sg) >> (4 * (r & 1)) & 15u : 0u);
    }
    key_frag<typename K::Q, false>({word, word}, 0, lut_lane, x[0], x[1]);
  }
  template <class K>
  static __device__ __forceinline__ void accumulate(const ValueTile<K>& v) {
    accumulate_turbo_blocks<K, ValueCodec>(v);
  }
};

// turbo4-qjl values: the key's block codec; a second accumulator over the QJL signs (z), rotated
// back by R⁻¹ at the write-out.
template <>
struct ValueCodec<ValueKind::turbo_qjl, 3> : TurboValues {
  static constexpr bool kSignTerm = true;
  // the 12 index bits of dims 4r + 32wl … +3 (wl = w & 3) start at bit 12r + 96wl of block w / 4's
  // index stream (codes: no row offset), their sign bits are nibble r & 1 of byte r/2 + 4wl of the
  // sign plane 48 bytes on
  template <class K>
  static __device__ __forceinline__ void pairs(const uint8_t* codes, int w, int r, uint32_t lut_lane,
                                               uint32_t slut_lane, uint32_t (&x)[2], uint32_t (&z)[2]) {
    const uint8_t* vb = codes + (w >> 2) * K::C::kTurboBlockBytes;
    const int wl = w & 3;
    const uint8_t* cb = vb + ((3 * r) >> 1) + 12 * wl;
    const uint32_t bits = (ld_u8(cb) | ld_u8(cb + 1) << 8) >> (4 * (r & 1));
    x[0] = dev::lds_u32(lut_lane + ((bits & 63u) << 7));
    x[1] = dev::lds_u32(lut_lane + (((bits >> 6) & 63u) << 7));
    sign_frag<K::Q::kSignLut>(ld_u8(vb + 48 + (r >> 1) + 4 * wl), 4 * (r & 1), slut_lane, z[0], z[1]);
  }
  template <class K>
  static __device__ __forceinline__ void accumulate(const ValueTile<K>& v) {
    accumulate_turbo_blocks<K, ValueCodec>(v);
  }
};

}  // namespace

}  // namespace tq::cuda
