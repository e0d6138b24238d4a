// The key side of the quantized decode (decode_kernel.cuh): key codes → MMA A fragments through
// the centroid-pair LUT, the scores S^T = C · Q'^T of a sub-tile, and the norm-correction sums.
//
// Per warp and 32-token sub-tile (two 16-token halves, interleaved so their MMA
// chains overlap), G = query heads per kv head:
//   keys   : lane (r, p) feeds tokens r, r+8; per pair of k-steps it loads the 4
//            index bytes of dims 32ps + 8p … +7 (two 2-byte loads: slots are only
//            2-byte aligned; neighbouring lanes read neighbouring words, conflict
//            free — with 4 heads per CTA only if MMA rows 0–7 are the even tokens:
//            kEvenOddRows) and maps each byte — two 4-bit indices — through a 256-entry LUT
//            of half2(α·c[lo], α·c[hi]) straight into the MMA operand register, one
//            conflict-free 4-byte load from the lane's own copy. d ≤ 128: one 16-warp
//            CTA per SM shares a LUT of 256-byte rows at shared address 64K, so the
//            entry address is a single PRMT of the code byte with 64K | 4·lane (3-bit
//            keys: from the word shifted by 0, 6, 4 or 2 bits, rows keyed by a byte's
//            low 6 bits); d = 256: 128-byte rows, PRMT + LEA. α
//            (KernelFormat::lut_scale) makes α·c nearly exact in fp16 (7.4e-5).
//            The query fragments use the same dim order (built once).
//   nc norm: Σ(α·c)² of each token, the same fp16 centroids the scores use. d ≤ 128 (wide
//            LUT, QCfg::kSqLut): the second half of each LUT row holds the lane copies of
//            its entry's x_a² + x_b² as fp16 hi + lo (exact to ~1e-6), read 128 bytes after
//            the key entry (an LDS with an immediate offset); one m16n8k16 with B = ones per
//            k-step and half sums them, and every lane holds its own tokens' sums (cheaper
//            than the Gram below, whose operand moves make ptxas spill at G > 4). d = 256: the
//            Gram, per k-step four m16n8k8 MMAs whose B operand is the tile's own key registers
//            (tokens 0–7 / 8–15 as columns), the diagonal being each token's sum of squares
//            (G > 4: two m16n8k16, B = {a0, a2}, {a1, a3}). (Squaring the fp16 fragment
//            instead is faster but off by up to 4.3e-4 per code.)
//   scores : S^T = C · Q'^T, Q' = FWHT(q)/√d split into fp16 hi + lo (fp16 q' alone
//            simulates to 1.5e-3 relative output error). G ≤ 4 (KernelTraits::kPacked): hi in
//            MMA columns 0–3, lo in columns 4–7 of one MMA (G ≤ 8 runs hi and lo as
//            two MMAs). Packed: lanes p < 2 then finish half 0, lanes p ≥ 2 half 1
//            (one shuffle exchanges the partial scores), so the per-token work —
//            norm, 1/‖c‖, exp2, scale, zero — runs once per token.
#pragma once

#include <cstdint>

#include <cuda_fp8.h>

#include "decode_cfg.cuh"
#include "decode_ring.cuh"
#include "tq/cuda/device.h"

namespace tq::cuda {

namespace {

__device__ __forceinline__ uint32_t ld_u8(const uint8_t* p) { return *p; }
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// turbo3: the 2-bit codes of 8 dims (q, dim i at bits 2i) and their sign bits (s, dim i
// at bit i) → the 6-bit pair codes of dims 2k, 2k+1 in byte k: bits 0–3 q's nibble k,
// bits 4–5 s's bits 2k, 2k+1 (the products place each sign pair without overlaps).
// turbo2 (no sign plane): s = 0, 4-bit pair codes.
__device__ __forceinline__ uint32_t turbo_pairs(uint32_t q, uint32_t s) {
  uint32_t x = __byte_perm(q, 0u, 0x4140);  // q's bytes → bytes 0 and 2
  x = (x | (x << 4)) & 0x0f0f0f0fu;          // nibbles → bytes 0–3
  return x | (((s & 0x33u) * 0x10010u) & 0x00300030u) | (((s & 0xccu) * 0x400400u) & 0x30003000u);
}

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

// The 8 key codes of pair-step ps (two k-steps, 32 head dims) for quad lane p
// (dims 32ps + 8p … +7) of one token row: 4-bit: two 16-bit words (w[0]: codes 0–3,
// w[1]: codes 4–7; the plane layout's 16-byte aligned rows: one 4-byte load);
// 3-bit: 24 bits in w[0]; fp8: two 32-bit words. Neighbouring lanes read
// neighbouring words, so a warp's loads are bank-conflict free in the vLLM layout
// (token rows 8·slot bytes apart); a lane owning a contiguous D/4-dim run instead
// makes them 4-way conflicted.
template <class C, bool P>
__device__ __forceinline__ void key_words(const uint8_t* row, int ps, int p, uint32_t (&w)[2]) {
  if constexpr (P && C::kKeyBits == 4) {
    w[0] = w[1] = ld_u32(row + 16 * ps + 4 * p);
  } else if constexpr (C::kKey == KeyKind::fp8) {
    const uint8_t* q = row + 32 * ps + 8 * p;  // 4-byte aligned: fp8+u4 slots are 1.5·d + 4 bytes
    w[0] = ld_u32(q);
    w[1] = ld_u32(q + 4);
  } else if constexpr (QCfg<C>::kQjl) {
    // turbo4-qjl block ps / 4 (row: its index stream, 68 bytes per block): w[0] the 24 index
    // bits of dims 32pl + 8p … +7 (pair k at bits 6k), w[1] their QJL sign byte
    const uint8_t* q = row + (ps >> 2) * C::kTurboBlockBytes;
    const int pl = ps & 3, odd = p & 1;
    const uint8_t* qq = q + 12 * pl + 3 * p - odd;
    w[0] = __byte_perm(ld_u16(qq), ld_u16(qq + 2), 0x5410) >> (8 * odd);
    w[1] = ld_u8(q + 48 + 4 * pl + p);
  } else if constexpr (QCfg<C>::kTurbo) {
    // block ps / 4 (row: its qs; block b's qs kTurboBlockBytes further on). turbo4: two
    // 16-bit words of nibbles; turbo3: qs, the sign plane 32 bytes on; turbo2: qs only
    const uint8_t* q = row + (ps >> 2) * C::kTurboBlockBytes;
    const int pl = ps & 3;
    if constexpr (C::kKeyBits == 4) {
      w[0] = ld_u16(q + 16 * pl + 4 * p);
      w[1] = ld_u16(q + 16 * pl + 4 * p + 2);
    } else {
      w[0] = turbo_pairs(ld_u16(q + 8 * pl + 2 * p), C::kKeyBits == 3 ? ld_u8(q + 32 + 4 * pl + p) : 0u);
    }
  } else if constexpr (C::kKeyBits == 4) {
    const uint8_t* q = row + 16 * ps + 4 * p;
    w[0] = ld_u16(q);
    w[1] = ld_u16(q + 2);
  } else {
    const int odd = p & 1;
    const uint8_t* q = row + 12 * ps + 3 * p - odd;
    if constexpr (QCfg<C>::kWide) {  // the 24 bits shifted left by 8: [0, b0, b1, b2] (one PRMT)
      w[0] = __byte_perm(ld_u16(q), ld_u16(q + 2), odd ? 0x5412u : 0x4102u);
      w[1] = w[0] >> 4;  // pair 2 at bits 16–21 (wide_lut_addrs)
    } else {
      w[0] = __byte_perm(ld_u16(q), ld_u16(q + 2), 0x5410) >> (8 * odd);
    }
  }
}

// The wide LUT's entry address of the pair code in byte `byte` of src (lut_lane = the LUT's 64 KB-aligned
// base | 4·lane): one PRMT puts that byte in byte 1, the 256-byte row. wide_lut_addrs and run_lut_addrs.
__device__ __forceinline__ uint32_t wide_lut_addr(uint32_t src, int byte, uint32_t lut_lane) {
  return __byte_perm(src, lut_lane, 0x7604u | (uint32_t(byte) << 4));
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

// A fragment halves of k-step 2ps + h2 for one token: lo = slots 2p, 2p+1, hi =
// slots 2p+8, 2p+9 (dims 32ps + 8p + 4h2 + {0,1} and + {2,3}). mse: one 4-byte
// LUT load per pair code (the lane's own copy: conflict-free) straight into the
// MMA operand; 4-bit: the entry address is one PRMT (byte → zero-extended) and one LEA.
// The wide LUT's entry addresses of those two halves (lut_lane = the LUT's 64 KB-aligned base |
// 4·lane): PRMT puts a code byte in byte 1. 4-bit codes, planes and turbo3/turbo2 (pair codes in
// bytes; both k-steps in one word of planes and turbo): the byte itself. 3-bit mse codes (w[0]: the
// 24 code bits at bits 8–31, w[1] = w[0] >> 4; rows keyed by a byte's low 6 bits): pair j at bit
// 8 + 6j is the low 6 bits of byte 1 of w[0] (j = 0), of w[0] >> 6 (j = 1), byte 2 of w[1] (j = 2),
// byte 3 of w[0] >> 2 (j = 3).
template <class C, bool P>
__device__ __forceinline__ void wide_lut_addrs(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& a_lo,
                                               uint32_t& a_hi) {
  static_assert(QCfg<C>::kWide, "the wide LUT");
  if constexpr (QCfg<C>::kMse && C::kKeyBits == 3) {
    a_lo = wide_lut_addr(w[h2], h2 ? 2 : 1, lut_lane);
    a_hi = wide_lut_addr(w[0] >> (h2 ? 2 : 6), h2 ? 3 : 1, lut_lane);
  } else {
    constexpr bool kOneWord = P || C::kKeyBits <= 3;
    const int byte = kOneWord ? 2 * h2 : 0;
    a_lo = wide_lut_addr(w[kOneWord ? 0 : h2], byte, lut_lane);
    a_hi = wide_lut_addr(w[kOneWord ? 0 : h2], byte + 1, lut_lane);
  }
}

template <class C, bool P>
__device__ __forceinline__ void key_frag(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                         uint32_t& hi) {
  if constexpr (C::kKey == KeyKind::fp8) {
    const uint32_t word = w[h2];
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word & 0xffffu), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(word >> 16), __NV_E4M3);
    lo = uint32_t(a.x) | (uint32_t(a.y) << 16);
    hi = uint32_t(b.x) | (uint32_t(b.y) << 16);
  } else if constexpr (QCfg<C>::kWide) {
    uint32_t a_lo, a_hi;
    wide_lut_addrs<C, P>(w, h2, lut_lane, a_lo, a_hi);
    lo = dev::lds_u32(a_lo);
    hi = dev::lds_u32(a_hi);
  } else if constexpr (C::kKeyBits == 4 || (QCfg<C>::kTurbo && !QCfg<C>::kQjl)) {
    // planes and turbo3/turbo2 (d = 256): both k-steps in one word
    constexpr bool kOneWord = P || C::kKeyBits <= 3;
    const uint32_t sel = kOneWord ? 0x4440u + 2u * uint32_t(h2) : 0x4440u;
    lo = dev::lds_u32(lut_lane + (__byte_perm(w[kOneWord ? 0 : h2], 0u, sel) << 7));
    hi = dev::lds_u32(lut_lane + (__byte_perm(w[kOneWord ? 0 : h2], 0u, sel + 1u) << 7));
  } else {  // 3-bit mse keys at d = 256
    lo = dev::lds_u32(lut_lane + (((w[0] >> (12 * h2)) & 63u) << 7));
    hi = dev::lds_u32(lut_lane + (((w[0] >> (12 * h2 + 6)) & 63u) << 7));
  }
}

// QCfg::kSqLut (mse keys, wide LUT): the two entries at a_lo, a_hi and, 128 bytes on in the same
// rows, the pairs' squares {hi, lo} (one LDS each, immediate offset); key_frag_sq: from the key words.
__device__ __forceinline__ void lut_frag_sq(uint32_t a_lo, uint32_t a_hi, uint32_t& lo, uint32_t& hi, uint32_t& sq_lo,
                                            uint32_t& sq_hi) {
  lo = dev::lds_u32(a_lo);
  hi = dev::lds_u32(a_hi);
  sq_lo = dev::lds_u32(a_lo + 0x80u);
  sq_hi = dev::lds_u32(a_hi + 0x80u);
}
template <class C, bool P>
__device__ __forceinline__ void key_frag_sq(const uint32_t (&w)[2], int h2, uint32_t lut_lane, uint32_t& lo,
                                            uint32_t& hi, uint32_t& sq_lo, uint32_t& sq_hi) {
  static_assert(QCfg<C>::kSqLut, "mse keys, wide LUT");
  uint32_t a_lo, a_hi;
  wide_lut_addrs<C, P>(w, h2, lut_lane, a_lo, a_hi);
  lut_frag_sq(a_lo, a_hi, lo, hi, sq_lo, sq_hi);
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


// The key LUT: row e holds 32 lane copies of half2(α·c[lo], α·c[hi]) for pair code e (wide mse
// LUT: the second half of each row the pair's squares, see QCfg::kSqLut). Written by warps 1 …
// while warp 0 issues the first stages.
template <class C>
__device__ __forceinline__ void build_key_lut(uint32_t* lut, const float* s_cen, int tid, int nthreads, int nwarps) {
  using Q = QCfg<C>;
  if constexpr (Q::kLut) {
    constexpr int KB = C::kKeyBits;
    static_assert(Q::kLutCopies == 32, "LUT rows: 32 lane copies, written 4 at a time");
    // row i / kChunks, lane copies 4·(chunk % 8) … +3 (kSqLut: chunks 8… are the row's
    // second half, the squares), written by warps 1… (warp 0 issues the first stages meanwhile)
    constexpr int kChunks = Q::kSqLut ? 16 : 8;
    const int first = nwarps > 1 ? 32 : 0;
    for (int i = tid - first; i >= 0 && i < Q::kLutEntries * kChunks; i += nthreads - first) {
      const int row = i / kChunks, chunk = i % kChunks;
      const int e = Q::kMse && KB == 3 ? row & 63 : row;  // wide 3-bit: the byte's low 6 bits
      // pair code → its two dims' centroids (turbo3: see turbo_pairs)
      constexpr bool kT3 = Q::kTurbo && !Q::kQjl && KB == 3;
      const int lo = kT3 ? (e & 3) | (e >> 2 & 4) : e & ((1 << KB) - 1);
      const int hi = kT3 ? (e >> 2 & 3) | (e >> 3 & 4) : e >> KB;
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
// sa (and turbo4-qjl's sign term sq) per turbo block, half and hi/lo set, and the mse keys' Σ x²
// per token (qa; d = 256: the Gram's two diagonals qa, qb). KO ≥ 0: the warp's key slots start KO
// bytes into a word (KernelTraits::kKeyOffBodies), ro the run offset otherwise.
template <class K, int KO>
__device__ __forceinline__ void key_scores(const uint8_t* const (&hb)[2], const RowMap& rm, int tr, int p, uint32_t ro,
                                           uint32_t lut_lane, uint32_t slut_lane, const typename K::QFrags& qf,
                                           const typename K::QjlFrags& q2f, typename K::Scores& sa,
                                           typename K::QjlScores& sq, float (&qa)[2][4], float (&qb)[2][4]) {
  using C = typename K::C;
  using Q = typename K::Q;
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
        key_words<C, kPlanes>(krow[h][0], kp, p, kw[h][0]);
        key_words<C, kPlanes>(krow[h][1], kp, p, kw[h][1]);
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
          key_frag_sq<C, kPlanes>(kw[h][0], h2, lut_lane, af[0], af[2], sqf[0], sqf[2]);
          key_frag_sq<C, kPlanes>(kw[h][1], h2, lut_lane, af[1], af[3], sqf[1], sqf[3]);
        } else {
          key_frag<C, kPlanes>(kw[h][0], h2, lut_lane, af[0], af[2]);
          key_frag<C, kPlanes>(kw[h][1], h2, lut_lane, af[1], af[3]);
        }
        dev::mma_16816(sa[tb][h][0], af, qf[0][ks][0], qf[0][ks][1]);
        if constexpr (!kPacked) dev::mma_16816(sa[tb][h][kQSets - 1], af, qf[kQSets - 1][ks][0], qf[kQSets - 1][ks][1]);
        if constexpr (Q::kQjl) {  // the sign nibble of k-step h2 (w[1]: the 8 dims' sign byte)
          uint32_t zf[4];
          sign_frag<Q::kSignLut>(kw[h][0][1], 4 * h2, slut_lane, zf[0], zf[2]);
          sign_frag<Q::kSignLut>(kw[h][1][1], 4 * h2, slut_lane, zf[1], zf[3]);
          dev::mma_16816(sq[tb][h][0], zf, q2f[0][ks][0], q2f[0][ks][1]);
          if constexpr (!kPacked) dev::mma_16816(sq[tb][h][kQSets - 1], zf, q2f[kQSets - 1][ks][0], q2f[kQSets - 1][ks][1]);
        }
        if constexpr (Q::kSqLut) {  // each row's Σ x² in every column: every lane holds its own tokens'
          dev::mma_16816(qa[h], sqf, 0x3c003c00u, 0x3c003c00u);
        } else if constexpr (Q::kMse && kPacked) {  // d = 256, m16n8k8: the operand pairs are consecutive registers
          dev::mma_1688(qa[h], af[0], af[1], af[0]);  // columns: tokens 0–7
          dev::mma_1688(qb[h], af[0], af[1], af[1]);  // columns: tokens 8–15
          dev::mma_1688(qa[h], af[2], af[3], af[2]);
          dev::mma_1688(qb[h], af[2], af[3], af[3]);
        } else if constexpr (Q::kMse) {
          // G > 4: two m16n8k16 (B = {a0, a2}, {a1, a3}: register moves): fewer spills in these
          // register-bound kernels than four m16n8k8
          dev::mma_16816(qa[h], af, af[0], af[2]);
          dev::mma_16816(qb[h], af, af[1], af[3]);
        }
      }
    }
  }
}

}  // namespace

}  // namespace tq::cuda
