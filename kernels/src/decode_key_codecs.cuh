// The key codecs of the quantized decode (decode_keys.cuh): KeyCodec<Kind, Bits>, one explicit
// specialization per key kind and bits of the GPU codec table (TQ_GPU_CODECS in
// tq/cuda/kernel_format.h). A codec says how a key record's bytes become the MMA A fragments of the
// scores and which per-token terms the logits take; the stage code (key_scores, build_key_lut,
// decode_weights.cuh) calls its members. A new key codec: its specialization here, with
//   kLut        the keys go through the centroid-pair LUT (the query rotated by the FWHT); else frag()
//               converts the key bytes themselves (fp8)
//   kBlocks     turbo blocks of 128: a key norm per block, the query and the value sum rotated per
//               block with the sign tables s1, s2; kHeadBytes: a block's bytes before its index stream
//   kNormSums   the Σ(αc)² of each token for the norm correction (norm_sums; KernelFormat::
//               norm_correction)
//   kSignTerm   turbo4-qjl's QJL sign term (sign_frag: a second MMA chain over the sign bits)
//   kPairBits   bits of a LUT row's pair code (rows 0 … 2^kPairBits − 1)
//   norm_scale(head, raw)                  a LUT key's score → logit factor: raw · the fp16 norm at head
//   norm_correction(sum, eps)              (kNormSums) 1/sqrt(Σ(αc)² + eps), the nc norm correction
//   sign_scale(head, k)                    (kSignTerm) the sign term's factor: k · norm · residual norm
//   words<P, Wide>(row, ps, p, w)          the key words of pair-step ps for quad lane p
//   lut_pair(row, lo, hi)                  the centroid indices of LUT row `row`
//   wide_addrs<P>(w, h2, lut_lane, lo, hi) the wide LUT's entry addresses of k-step 2ps + h2's halves
//   narrow_frag<P>(w, h2, lut_lane, lo, hi) those halves from the LUT of 128-byte rows (d = 256)
// P: the plane layout (tq/cuda/paged.h); Wide: the wide LUT (QCfg::kWide).
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "common.cuh"
#include "decode_common.cuh"
#include "tq/cuda/kernel_format.h"

namespace tq::cuda {

namespace {

__device__ __forceinline__ uint32_t ld_u8(const uint8_t* p) { return *p; }
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// turbo3: the 2-bit codes of 8 dims (q, dim i at bits 2i) and their sign bits (s ≤ 255, dim i
// at bit i) → the 6-bit pair codes of dims 2k, 2k+1 in byte k: bits 0–3 q's nibble k,
// bits 4–5 s's bits 2k, 2k+1. Each product is two shifted copies of s whose bits do not overlap
// (s·0x10010 = s << 4 + s << 16, s·0x400400 = s << 10 + s << 22: no carries), so the masks take
// s's bit pairs unchanged (two LOP3 fewer per word than masking s first).
// turbo2 (no sign plane): s = 0, 4-bit pair codes.
__device__ __forceinline__ uint32_t turbo_pairs(uint32_t q, uint32_t s) {
  uint32_t x = __byte_perm(q, 0u, 0x4140);  // q's bytes → bytes 0 and 2
  x = (x | (x << 4)) & 0x0f0f0f0fu;          // nibbles → bytes 0–3
  return x | ((s * 0x10010u) & 0x00300030u) | ((s * 0x400400u) & 0x30003000u);
}

// The wide LUT's entry address of the pair code in byte `byte` of src (lut_lane = the LUT's 64 KB-aligned
// base | 4·lane): one PRMT puts that byte in byte 1, the 256-byte row.
__device__ __forceinline__ uint32_t wide_lut_addr(uint32_t src, int byte, uint32_t lut_lane) {
  return __byte_perm(src, lut_lane, 0x7604u | (uint32_t(byte) << 4));
}

// Pair codes in whole bytes of the key words (4-bit codes, turbo3/turbo2's pair codes): k-step h2's
// two at bytes 2h2, 2h2 + 1 of w[0] (kOneWord: one word holds both k-steps) or at bytes 0, 1 of
// w[h2]. Wide LUT: PRMT puts the byte in byte 1 of the entry address; 128-byte rows: the byte
// zero-extended (PRMT) and one LEA. One 4-byte LUT load per pair code (the lane's own copy:
// conflict-free) straight into the MMA operand.
template <bool kOneWord>
__device__ __forceinline__ void byte_pair_addrs(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& a_lo,
                                                uint32_t& a_hi) {
  const int byte = kOneWord ? 2 * h2 : 0;
  a_lo = wide_lut_addr(w[kOneWord ? 0 : h2], byte, lut_lane);
  a_hi = wide_lut_addr(w[kOneWord ? 0 : h2], byte + 1, lut_lane);
}
template <bool kOneWord>
__device__ __forceinline__ void byte_pair_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                               uint32_t& hi) {
  const uint32_t sel = kOneWord ? 0x4440u + 2u * uint32_t(h2) : 0x4440u;
  lo = dev::lds_u32(lut_lane + (__byte_perm(w[kOneWord ? 0 : h2], 0u, sel) << 7));
  hi = dev::lds_u32(lut_lane + (__byte_perm(w[kOneWord ? 0 : h2], 0u, sel + 1u) << 7));
}
// 6-bit pair codes packed in w[0] (pair j at bits 6j: 3-bit mse keys and turbo4-qjl at d = 256), from
// the LUT of 128-byte rows.
__device__ __forceinline__ void six_bit_pair_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                                  uint32_t& hi) {
  lo = dev::lds_u32(lut_lane + (((w[0] >> (12 * h2)) & 63u) << 7));
  hi = dev::lds_u32(lut_lane + (((w[0] >> (12 * h2 + 6)) & 63u) << 7));
}

// QCfg::kSqLut (mse keys, wide LUT): the two entries at a_lo, a_hi and, 128 bytes on in the same
// rows, the pairs' squares {hi, lo} (one LDS each, immediate offset).
__device__ __forceinline__ void lut_frag_sq(uint32_t a_lo, uint32_t a_hi, uint32_t& lo, uint32_t& hi, uint32_t& sq_lo,
                                            uint32_t& sq_hi) {
  lo = dev::lds_u32(a_lo);
  hi = dev::lds_u32(a_hi);
  sq_lo = dev::lds_u32(a_lo + 0x80u);
  sq_hi = dev::lds_u32(a_hi + 0x80u);
}

// turbo4-qjl: the ±1 halves of 4 dims from their sign bits s … s+3 of w (bit set = +1):
// lo = dims 0, 1, hi = dims 2, 3. LUT (QCfg::kSignLut): from the lane's copy of a 16-entry
// shared LUT (8-byte entries, 32 lane copies per 256-byte row: conflict-free), one LDS.64;
// else on the ALU: −1 (0xBC00) with its sign bit flipped by the dim's bit.
template <bool LUT>
__device__ __forceinline__ void sign_frag(uint32_t w, int s, uint32_t slut_lane, uint32_t& lo, uint32_t& hi) {
  if constexpr (LUT) {
    const uint2 v = dev::lds_u64(slut_lane + (((w >> s) & 15u) << 8));
    lo = v.x;
    hi = v.y;
  } else {
    const uint32_t x = w >> s;
    lo = 0xbc00bc00u ^ ((x << 15) & 0x8000u) ^ ((x << 30) & 0x80000000u);
    hi = 0xbc00bc00u ^ ((x << 13) & 0x8000u) ^ ((x << 28) & 0x80000000u);
  }
}

template <KeyKind Kind, int Bits>
struct KeyCodec;  // one specialization per key codec of TQ_GPU_CODECS

// What the key codecs have unless they say otherwise: LUT row `row` is the pair of codes lo (bits
// 0 … Bits − 1) and hi, no per-token terms beyond the key norm, no norm sums.
template <int Bits>
struct LutKeys {
  static constexpr bool kLut = true, kBlocks = false, kNormSums = false, kSignTerm = false;
  static constexpr int kPairBits = 2 * Bits;
  // the token's (turbo: its block's) score → log2-domain logit factor: raw · its fp16 key norm
  // (the record's or block's first two bytes, at head)
  static __device__ __forceinline__ float norm_scale(const uint8_t* head, float raw) { return raw * ld_f16(head); }
  static __device__ __forceinline__ void lut_pair(int row, int& lo, int& hi) {
    lo = row & ((1 << Bits) - 1);
    hi = row >> Bits;
  }
};

// mse keys (Hadamard + scalar codebook, b-bit LSB-first indices, fp16 norm). Norm sums: Σ(αc)² of
// each token, the same fp16 centroids the scores use. Wide LUT (QCfg::kSqLut): the second half of
// each LUT row holds the lane copies of its entry's x_a² + x_b² as fp16 hi + lo (exact to ~1e-6),
// read 128 bytes after the key entry (lut_frag_sq); one m16n8k16 with B = ones per k-step and half
// sums them, and every lane holds its own tokens' sums (cheaper than the Gram below, whose operand
// moves make ptxas spill at G > 4). d = 256: the Gram, per k-step four m16n8k8 MMAs whose B operand
// is the tile's own key registers (tokens 0–7 / 8–15 as columns), the diagonal being each token's
// sum of squares (G > 4: two m16n8k16, B = {a0, a2}, {a1, a3}). (Squaring the fp16 fragment instead
// is faster but off by up to 4.3e-4 per code.)
template <int Bits>
struct MseKeys : LutKeys<Bits> {
  static constexpr bool kNormSums = true;
  // the nc formats' norm correction 1/‖c‖ from the token's Σ(αc)² (norm_sums)
  static __device__ __forceinline__ float norm_correction(float sum, float eps) { return dev::rsqrt_fast(sum + eps); }
  // af: a k-step's A fragment of one half; sqf: its squares (SqLut); qa (d = 256: and qb, the Gram's
  // two diagonals) the half's sums
  template <bool SqLut, bool Packed>
  static __device__ __forceinline__ void norm_sums(const uint32_t (&af)[4], const uint32_t (&sqf)[4], float (&qa)[4],
                                                   float (&qb)[4]) {
    if constexpr (SqLut) {  // each row's Σ x² in every column: every lane holds its own tokens'
      dev::mma_16816(qa, sqf, 0x3c003c00u, 0x3c003c00u);
    } else if constexpr (Packed) {  // d = 256, m16n8k8: the operand pairs are consecutive registers
      dev::mma_1688(qa, af[0], af[1], af[0]);  // columns: tokens 0–7
      dev::mma_1688(qb, af[0], af[1], af[1]);  // columns: tokens 8–15
      dev::mma_1688(qa, af[2], af[3], af[2]);
      dev::mma_1688(qb, af[2], af[3], af[3]);
    } else {
      // G > 4: two m16n8k16 (B = {a0, a2}, {a1, a3}: register moves): fewer spills in these
      // register-bound kernels than four m16n8k8
      dev::mma_16816(qa, af, af[0], af[2]);
      dev::mma_16816(qb, af, af[1], af[3]);
    }
  }
};

// 4-bit mse keys: lane p reads the 8 codes of dims 32ps + 8p … +7 as two 16-bit words (w[0]: codes
// 0–3, w[1]: codes 4–7; the plane layout's 16-byte aligned rows: one 4-byte load, both k-steps in
// it). Neighbouring lanes read neighbouring words, so a warp's loads are bank-conflict free in the
// vLLM layout (token rows 8·slot bytes apart); a lane owning a contiguous D/4-dim run instead makes
// them 4-way conflicted.
template <>
struct KeyCodec<KeyKind::mse, 4> : MseKeys<4> {
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    if constexpr (P) {
      w[0] = w[1] = ld_u32(row + 16 * ps + 4 * p);
    } else {
      const uint8_t* q = row + 16 * ps + 4 * p;
      w[0] = ld_u16(q);
      w[1] = ld_u16(q + 2);
    }
  }
  template <bool P>
  static __device__ __forceinline__ void wide_addrs(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& a_lo,
                                                    uint32_t& a_hi) {
    byte_pair_addrs<P>(w, h2, lut_lane, a_lo, a_hi);
  }
  template <bool P>
  static __device__ __forceinline__ void narrow_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                                     uint32_t& hi) {
    byte_pair_frag<P>(w, h2, lut_lane, lo, hi);
  }
};

// 3-bit mse keys: the 24 code bits of dims 32ps + 8p … +7 in w[0] (pair k at bits 6k). Wide LUT: row
// e holds pair code e & 63 (a pair at bits 0–5 of a byte, the top two bits ignored), so each pair is
// one PRMT from the word shifted by 0, 6, 4 or 2 bits: words() reads the 24 bits shifted left by 8
// (w[0] = [0, b0, b1, b2], one PRMT) and w[1] = w[0] >> 4; pair j at bit 8 + 6j is the low 6 bits of
// byte 1 of w[0] (j = 0), of w[0] >> 6 (j = 1), byte 2 of w[1] (j = 2), byte 3 of w[0] >> 2 (j = 3).
// (At d = 128 in the vLLM layout the kernel reads whole runs instead: run_lut_addrs.)
template <>
struct KeyCodec<KeyKind::mse, 3> : MseKeys<3> {
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    const int odd = p & 1;
    const uint8_t* q = row + 12 * ps + 3 * p - odd;
    if constexpr (Wide) {  // the 24 bits shifted left by 8: [0, b0, b1, b2] (one PRMT)
      w[0] = __byte_perm(ld_u16(q), ld_u16(q + 2), odd ? 0x5412u : 0x4102u);
      w[1] = w[0] >> 4;  // pair 2 at bits 16–21 (wide_addrs)
    } else {
      w[0] = __byte_perm(ld_u16(q), ld_u16(q + 2), 0x5410) >> (8 * odd);
    }
  }
  static __device__ __forceinline__ void lut_pair(int row, int& lo, int& hi) {
    LutKeys<3>::lut_pair(row & 63, lo, hi);  // wide: the byte's low 6 bits
  }
  template <bool P>
  static __device__ __forceinline__ void wide_addrs(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& a_lo,
                                                    uint32_t& a_hi) {
    a_lo = wide_lut_addr(w[h2], h2 ? 2 : 1, lut_lane);
    a_hi = wide_lut_addr(w[0] >> (h2 ? 2 : 6), h2 ? 3 : 1, lut_lane);
  }
  template <bool P>
  static __device__ __forceinline__ void narrow_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                                     uint32_t& hi) {
    six_bit_pair_frag(w, h2, lut_lane, lo, hi);
  }
};

// FP8 E4M3 keys (no rotation, no scale, no norm): two 32-bit words of the 8 bytes of dims 32ps + 8p …
// +7, each k-step's word converted to the fp16 A halves.
template <>
struct KeyCodec<KeyKind::fp8, 8> {
  static constexpr bool kLut = false, kBlocks = false, kNormSums = false, kSignTerm = false;
  static constexpr int kPairBits = 0;
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    const uint8_t* q = row + 32 * ps + 8 * p;  // 4-byte aligned: fp8+u4 slots are 1.5·d + 4 bytes
    w[0] = ld_u32(q);
    w[1] = ld_u32(q + 4);
  }
  static __device__ __forceinline__ void frag(const uint32_t (&w)[2], int h2, uint32_t& lo, uint32_t& hi) {
    const uint32_t word = w[h2];
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word >> 16), __NV_E4M3);
    lo = uint32_t(a.x) | (uint32_t(a.y) << 16);
    hi = uint32_t(b.x) | (uint32_t(b.y) << 16);
  }
};

// turbo2/3/4 keys (turboquant_plus blocks of 128: {norm, qs[…], turbo3: signs}): block ps / 4 holds
// pair-step ps (row: block 0's qs; block b's kBlockBytes further on). The pair codes are bytes:
// turbo3/turbo2 one word of them (turbo_pairs of the 2-bit codes and turbo3's sign plane, 32 bytes
// after the codes), turbo4 two 16-bit words of nibbles, one per k-step.
template <int Bits>
struct TurboKeys : LutKeys<Bits> {
  static constexpr bool kBlocks = true;
  static constexpr int kHeadBytes = 2;  // the block's norm
  static constexpr int kBlockBytes = layout::turbo_block_bytes(Bits, false);
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    const uint8_t* q = row + (ps >> 2) * kBlockBytes;
    const int pl = ps & 3;
    w[0] = turbo_pairs(ld_u16(q + 8 * pl + 2 * p), Bits == 3 ? ld_u8(q + 32 + 4 * pl + p) : 0u);
  }
  template <bool P>
  static __device__ __forceinline__ void wide_addrs(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& a_lo,
                                                    uint32_t& a_hi) {
    byte_pair_addrs<Bits <= 3>(w, h2, lut_lane, a_lo, a_hi);
  }
  template <bool P>
  static __device__ __forceinline__ void narrow_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                                     uint32_t& hi) {
    byte_pair_frag<Bits <= 3>(w, h2, lut_lane, lo, hi);
  }
};
template <>
struct KeyCodec<KeyKind::turbo, 4> : TurboKeys<4> {
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    const uint8_t* q = row + (ps >> 2) * kBlockBytes + 16 * (ps & 3) + 4 * p;
    w[0] = ld_u16(q);
    w[1] = ld_u16(q + 2);
  }
};
// turbo3: LUT row e holds the 6-bit pair code of turbo_pairs (two 2-bit codes, two sign bits)
template <>
struct KeyCodec<KeyKind::turbo, 3> : TurboKeys<3> {
  static __device__ __forceinline__ void lut_pair(int row, int& lo, int& hi) {
    lo = (row & 3) | (row >> 2 & 4);
    hi = (row >> 2 & 3) | (row >> 3 & 4);
  }
};
template <>
struct KeyCodec<KeyKind::turbo, 2> : TurboKeys<2> {};

// turbo4-qjl keys ({raw norm, residual norm, 3-bit index stream, 1-bit QJL signs} per block of 128,
// 68 bytes): w[0] the 24 index bits of dims 32pl + 8p … +7 (pair k at bits 6k), w[1] their QJL sign
// byte. The score adds norm·κ·rnorm·(R q′)·(±1): a second MMA chain over the signs (sign_frag) with
// the query rotated once more.
template <>
struct KeyCodec<KeyKind::turbo_qjl, 3> : LutKeys<3> {
  static constexpr bool kBlocks = true, kSignTerm = true;
  static constexpr int kHeadBytes = 4;  // the block's norm and residual norm
  static constexpr int kBlockBytes = layout::turbo_block_bytes(3, true);
  // the sign term's score → logit factor of a block (head: its norm, then its residual norm)
  static __device__ __forceinline__ float sign_scale(const uint8_t* head, float k) {
    return k * ld_f16(head) * ld_f16(head + 2);
  }
  template <bool P, bool Wide>
  static __device__ __forceinline__ void words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
    const uint8_t* q = row + (ps >> 2) * kBlockBytes;
    const int pl = ps & 3, odd = p & 1;
    const uint8_t* qq = q + 12 * pl + 3 * p - odd;
    w[0] = __byte_perm(ld_u16(qq), ld_u16(qq + 2), 0x5410) >> (8 * odd);
    w[1] = ld_u8(q + 48 + 4 * pl + p);
  }
  template <bool P>
  static __device__ __forceinline__ void narrow_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                                     uint32_t& hi) {
    six_bit_pair_frag(w, h2, lut_lane, lo, hi);
  }
};

}  // namespace

}  // namespace tq::cuda
