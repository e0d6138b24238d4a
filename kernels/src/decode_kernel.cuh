// Paged decode over TurboQuant caches (mse keys + u values; fp8 keys + u values;
// turbo2/3/4 blocks for keys and values — one block of 128 per head at d ≤ 128, two at
// d = 256: scores and the value sum in each block's rotated domain, keys and values through
// the pair LUT, the inverse rotation once per part at the write-out).
//
// Per CTA (work item: a chunk of one sequence's tokens, dev::work_item; group of hpc kv
// heads): hpc × wph warps; warp (h, w)
// owns head h of 32-token sub-tile w of every pipeline stage and keeps its own
// softmax state (one "part" of the log-sum-exp merge). (8 < G ≤ 16 query heads per kv
// head: a second hpc × wph warps may compute columns 8 … G − 1 from the same stages.)
//
// Loads: a ring of `stages` stages, each wph sub-tiles × 32 tokens × hpc heads,
// filled by the TMA engine (cp.async.bulk, one instruction per contiguous run:
// a 16-token page slice of all hpc heads in the vLLM layout, 16 per-token runs
// when hpc < n_kv_heads or the rows are padded (ring_row_bytes: turbo slots at 16
// heads), three plane runs in the plane layout; CTAs of 8 of the kv heads with unpadded rows
// take a half as one box of a tensor map instead, cp.async.bulk.tensor: TM) completing on a
// "full" mbarrier per stage; every warp releases a stage on its "empty"
// mbarrier and the refills take turns among the first warps (warp (it − 1) % n_prod in
// iteration it), each with block-table entries it loaded at its turn before (a table lookup
// inside the refill put an L2 round trip on the refilling warp's path, and the ring moves at
// that warp's pace; one warp doing every refill on top of its own sub-tile sets every CTA's
// pace — four warps taking turns: k3v4_nc −2.4% at 32/8, 32K). Every slot is read from HBM once per query
// group. 16-token halves past the range end are not copied (their page may not
// exist); rows past it inside a copied half are read but masked (selects, not
// products: never-written slots may hold NaN).
// (Bulk copies rather than per-thread cp.async chunks, which took ~50 SASS instructions per
// warp-tile and a __syncthreads per stage.)
//
// Per warp and 32-token sub-tile (two 16-token halves, interleaved so their MMA
// chains overlap), G = query heads per kv head:
//   keys   : lane (r, p) feeds tokens r, r+8; per pair of k-steps it loads the 4
//            index bytes of dims 32ps + 8p … +7 (two 2-byte loads: slots are only
//            2-byte aligned; neighbouring lanes read neighbouring words, conflict
//            free — with 4 heads per CTA only if MMA rows 0–7 are the even tokens:
//            kEvenOdd) and maps each byte — two 4-bit indices — through a 256-entry LUT
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
//            k-step and half sums them, and every lane holds its own tokens' sums (against the
//            Gram: 4-bit keys −3.3% at 32/8, 32K; 3-bit keys −1.1% there and −5.3 … −7.1% at
//            G > 4, where the Gram's operand moves made ptxas spill). d = 256: the Gram, per
//            k-step four m16n8k8 MMAs whose B operand is the tile's own key registers
//            (tokens 0–7 / 8–15 as columns), the diagonal being each token's sum of squares
//            (G > 4: two m16n8k16, B = {a0, a2}, {a1, a3}). Not kept: integer sums of squares
//            from 8-byte LUT entries (12–17% slower, spills); the fragment squared in fp16
//            (HMUL2) times a B of ones, 7–9% faster but off by up to 4.3e-4 per code, the
//            large-logits case at 1.24e-3; with the residuals x·x − fp16(x²) added back,
//            exact and 13–18% slower.
//   scores : S^T = C · Q'^T, Q' = FWHT(q)/√d split into fp16 hi + lo (fp16 q' alone
//            simulates to 1.5e-3 relative output error). G ≤ 4 ("packed", PK): hi in
//            MMA columns 0–3, lo in columns 4–7 of one MMA (G ≤ 8 runs hi and lo as
//            two MMAs). Packed: lanes p < 2 then finish half 0, lanes p ≥ 2 half 1
//            (one shuffle exchanges the partial scores), so the per-token work —
//            norm, 1/‖c‖, exp2, scale, zero — runs once per token.
//   values : O^T += V^T · P'^T. 8-head packed kernels at d = 128, 4-bit codes (kVPar; k3v4_nc
//            −4.3% at 32/8, 32K): the k slots are 8 tokens × e ∈ {0, 1}, P' column h (e = 0) and
//            4 + h (e = 1) for head h, so
//            an A register is one token's nibbles i, i + 4 masked in place in one aligned word (no
//            joining PRMT, half the loads, 16 accumulator registers). Other 4-bit codes (lane row r:
//            the u16 words at bytes 2r + 16w,
//            bank-conflict free, QCfg::kVRowBytes): A is the code nibble masked in place,
//            the fp16 subnormal c·2^-24 (row r) or c·2^-20 (row r+8): exact; the
//            scalings are undone at the write-out. 3-bit codes (lane row r: its chunk of
//            3·d/64 bytes): the code masked in place in a two-byte window of the chunk,
//            c·2^(k−24) with k its bit in the window's first byte (value_code_bit;
//            25% fewer SASS instructions in 3bit_nc's loop than 1 + c/16 from per-code shifts).
//            B = P' = p·scale: packed (G ≤ 4) hi in columns 0–3, lo in 4–7; G > 4 fp16(P')
//            alone (one MMA per m-tile and half instead of two; not turbo4-qjl, nor turbo
//            at d = 256), with Σp and Σ p·zero taken over the weights that fp16(P') carries,
//            fp16(P')/scale, so the output stays a weighted mean of the values (64/8, 32K:
//            −6% against hi + lo).
//            Σ p·zero on CUDA cores.
//   softmax: online over the 32 tokens, exp2 domain (ex2.approx.ftz). While no logit
//            of a sub-tile exceeds its column's running maximum (all but a few sub-tiles
//            once the maxima settle), m stays and the cross-lane max, α and the rescales
//            are skipped (Softmax32::try_keep*). The values (exact subnormals, no
//            bias) accumulate in the MMA itself; acc is rescaled only when a running max
//            moved (warp vote). (A biased 1 + c/16 would need each 32-token product folded
//            in with a round-to-nearest FFMA, the MMA's truncating fp32 accumulation being
//            amplified by the bias cancellation; unbiased codes need no fold: 4.3e-4 at 32K
//            either way.)
// A sub-tile with all 32 tokens valid runs a copy of the body without masks.
// Launch bounds: 16 warps × 128 registers (wide LUT), else 8 warps, 2 CTAs per SM
// (d = 256: 1).
//
// This header holds the kernel and the choice of its instantiation (pick_kernel); it is
// included only by the per-format translation units decode_<format>.cu, each of which
// instantiates decode_kernel_occupancy / decode_kernel_launch for its format
// (TQ_DECODE_INSTANTIATE). The planner, the launchers and the merge are in decode.cu.
#pragma once

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <cuda_fp8.h>

#include "bitexact.cuh"
#include "decode_cfg.cuh"
#include "tq/cuda/decode.h"
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

// 3-bit value codes (mse formats): the bit at which code j of a lane's NB-byte chunk sits in
// the A register (the fp16 subnormal c·2^(k − 24)): its bit offset in byte 3j / 8 for even
// chunks (masked in place), 0 for d = 64's 3-byte chunks (shifted down).
template <int NB>
__host__ __device__ constexpr int value_code_bit(int j) {
  return NB % 2 == 0 ? (3 * j) & 7 : 0;
}

// Where this warp's rows live in a 16-token half (byte offsets from the half's
// base): key indices, value codes, norm and value scale/zero of token u are at
// base + u · stride.
struct RowMap {
  int key, code, norm, scz, kst, cst, mst;
};
template <class C, bool P>
__device__ __forceinline__ RowMap row_map(int hl, int hpc) {
  constexpr int SLOT = QCfg<C>::kSlot, IB = C::kIdxBytes, VB = C::kValueCodeBytes;
  RowMap m;
  if constexpr (P) {  // [keys: hpc][16][IB] | [codes: hpc][16][VB] | [meta: hpc][16][6] (tq/cuda/paged.h)
    m.key = hl * 16 * IB;
    m.code = hpc * 16 * IB + hl * 16 * VB;
    m.norm = hpc * 16 * (IB + VB) + hl * 16 * 6;
    m.scz = m.norm + 2;
    m.kst = IB;
    m.cst = VB;
    m.mst = 6;
  } else if constexpr (QCfg<C>::kTurbo) {  // slot: key block {norm, qs[64]}, value block {norm, qs[64]}
    // (turbo4-qjl: {norm, rnorm, qs[48], signs[16]}, the codes 4 bytes on)
    constexpr int kHead = QCfg<C>::kQjl ? 4 : 2;
    m.norm = hl * SLOT;
    m.key = m.norm + kHead;
    m.scz = m.norm + C::kKeyBytes;  // the value block's norm (no zero)
    m.code = m.scz + kHead;
    m.kst = m.cst = m.mst = ring_row_bytes<C, P>(hpc);
  } else {  // [16 tokens][hpc heads][slot]
    m.key = hl * SLOT;
    m.code = m.key + C::kKeyBytes;
    m.norm = m.key + (QCfg<C>::kMse ? IB : 0);
    m.scz = m.key + C::kKeyBytes + VB;
    m.kst = m.cst = m.mst = ring_row_bytes<C, P>(hpc);
  }
  return m;
}

// The online softmax over 32 tokens (two 16-token halves) for the lane's two
// query columns: x[h][0..1] token r, x[h][2..3] token r+8 of half h (log2-domain
// logits, −inf = masked). Returns α per column; x becomes p.
struct Softmax32 {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.f, 0.f};  // per-lane partial sums (reduced over the 8 token lanes at the end)
  // kSum = false: l is only rescaled; the caller adds the weights it actually uses (hi-only P')
  template <bool kSum = true>
  __device__ __forceinline__ void update(float (&x)[2][4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(fmaxf(x[0][c], x[0][c + 2]), fmaxf(x[1][c], x[1][c + 2]));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 16));
      const float mn = fmaxf(m[c], mx);  // finite: the sub-tile has ≥ 1 valid token
      alpha[c] = dev::ex2_fast(m[c] - mn);  // m = −inf → 0
      m[c] = mn;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        x[h][c] = dev::ex2_fast(x[h][c] - mn);
        x[h][c + 2] = dev::ex2_fast(x[h][c + 2] - mn);
      }
      l[c] = kSum ? l[c] * alpha[c] + ((x[0][c] + x[0][c + 2]) + (x[1][c] + x[1][c + 2])) : l[c] * alpha[c];
    }
  }
  // The common case once the maxima have settled: no logit of the sub-tile
  // exceeds its column's running maximum anywhere in the warp. Then m stays, α = 1
  // and x becomes p without the cross-lane max (returns false, x untouched,
  // otherwise: the first sub-tile, a new maximum, or a NaN).
  template <bool kSum = true>
  __device__ __forceinline__ bool try_keep(float (&x)[2][4]) {
    bool keep = true;
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int i = 0; i < 4; ++i) keep = keep && x[h][i] <= m[i & 1];
    if (!__all_sync(dev::kFull, keep)) return false;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        x[h][c] = dev::ex2_fast(x[h][c] - m[c]);
        x[h][c + 2] = dev::ex2_fast(x[h][c + 2] - m[c]);
      }
      if constexpr (kSum) l[c] += (x[0][c] + x[0][c + 2]) + (x[1][c] + x[1][c + 2]);
    }
    return true;
  }
  template <bool kSum = true>
  __device__ __forceinline__ bool try_keep_half(float (&x)[4]) {
    const bool keep = x[0] <= m[0] && x[2] <= m[0] && x[1] <= m[1] && x[3] <= m[1];
    if (!__all_sync(dev::kFull, keep)) return false;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      x[c] = dev::ex2_fast(x[c] - m[c]);
      x[c + 2] = dev::ex2_fast(x[c + 2] - m[c]);
      if constexpr (kSum) l[c] += x[c] + x[c + 2];
    }
    return true;
  }
  // Packed kernels: the lane holds one half (tokens r, r+8); lane p ^ 2 the other.
  template <bool kSum = true>
  __device__ __forceinline__ void update_half(float (&x)[4], float (&alpha)[2]) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      float mx = fmaxf(x[c], x[c + 2]);
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 2));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(dev::kFull, mx, 16));
      const float mn = fmaxf(m[c], mx);
      alpha[c] = dev::ex2_fast(m[c] - mn);
      m[c] = mn;
      x[c] = dev::ex2_fast(x[c] - mn);
      x[c + 2] = dev::ex2_fast(x[c + 2] - mn);
      l[c] = kSum ? l[c] * alpha[c] + (x[c] + x[c + 2]) : l[c] * alpha[c];
    }
  }
};

// PK (packed, G ≤ 4): MMA columns 0–3 = query heads 0–3 in fp16 hi, 4–7 = their lo parts.
// H: heads per CTA known at compile time (8, 4, 16, 2: every row stride and ring offset is
// an immediate), or 0: a.hpc; H < 0 (kSliced: a.hpc, kSliced8: 8): the launch is one slice of ≤ 8
// query columns of G > 8 (dev::query_head<true>); kDual / kDual8 (dual_slices): both slices of
// 8 < G ≤ 16 in one launch (where the planner takes it: dual_slices_fit), the CTA's warps
// twice hpc · wph (slice 1: columns 8 … G − 1, g0), so the ring's bytes are read once for all G
// columns. TM (H = 8; tm_copies): the CTA holds some of
// the kv heads and takes each 16-token half as one box of the tensor map in t (DecodeTablesTm)
// instead of 16 per-token copies. The body of decode_kernel and decode_kernel_tm (TM), inlined
// into each.
template <class C, bool P, bool PK, int H, bool TM, class T>
__device__ __forceinline__ void decode_body(const DecodeArgs& a, const T& t, const uint8_t* __restrict__ cache) {
  static_assert(!TM || (H == 8 && !P && tm_rows<C>(H)), "TM: 8-head kernels whose rows tm_rows accepts");
  using Q = QCfg<C>;
  static_assert(!P || (Q::kMse && C::kValueBits == 4 && Q::kSlot == C::kIdxBytes + C::kValueCodeBytes + 6),
                "plane layout: mse keys, 4-bit values, no pad byte");
  constexpr int D = Q::D, SLOT = Q::kSlot, KS = Q::kKSteps;
  constexpr int NQ = PK ? 1 : 2;  // query fragment sets (hi+lo packed, or hi and lo)
  // G > 4 (not packed), one value block (all but turbo at d = 256), no QJL term: P' = fp16(p·scale)
  // alone (no lo set: half the value MMAs), and the weights summed into Σp, Σp·zero (and Σ P') are
  // the ones that P' carries, p̃ = fp16(p·scale) / scale, so the output stays a weighted mean of the
  // values, each weight off by at most half an fp16 ulp of p·scale (2^-11 relative where p·scale is
  // a normal fp16), instead of a numerator off by that much against an exact Σp.
  constexpr bool kHiP = !PK && !Q::kQjl && Q::kTB == 1;
  constexpr int NV = kHiP ? 1 : NQ;  // P' fragment sets the value MMAs use
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ __align__(16) uint32_t lut_static[Q::kLut && !Q::kWide ? Q::kLutEntries * Q::kLutCopies : 2];
  // wide: the LUT sits 64 KB below ring_hi (at kLutAddr, or kLutAddr2 when the ring needs the room: RingLayout)
  uint32_t* lut = Q::kWide ? reinterpret_cast<uint32_t*>(smem + (a.ring_hi - kLutBytesWide - dev::smem_u32(smem))) : lut_static;
  __shared__ __align__(8) uint2 slut[Q::kSignLutEntries];  // sign nibble → ±1 halves (sign_frag)
  __shared__ __align__(8) uint64_t bars[2 * kMaxStages];  // full[s], empty[s]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nthreads = blockDim.x, nwarps = nthreads >> 5;
  constexpr int kH = compile_heads(H);  // heads per CTA at compile time (0: a.hpc)
  constexpr int NS = dual_slices(H) ? 2 : 1;  // query slices per CTA (2: warp slice·hpc·wph + … computes columns 8·slice …)
  const int hpc = kH > 0 ? kH : a.hpc, wph = kH > 0 ? Q::kCtaWarps / (NS * kH) : a.wph;
  const int hl = warp % hpc, ws = NS == 1 ? warp / hpc : warp / hpc % wph;
  const int g0 = NS == 1 ? 0 : 8 * (warp / (hpc * wph));  // the warp's first query column
  // the warp's columns (read from the parameters at each use where NS = 1, as before: a copy kept in a
  // register moved ptxas's schedules)
  auto group = [&] { return NS == 1 ? a.group : min(8, a.group - g0); };
  const int item = blockIdx.x, hg = blockIdx.y;
  const int tile = kSub * wph;
  // every warp: the same
  const dev::WorkItem wi = t.balance > 0 ? dev::work_item_balanced(a.seq_lens, a.batch, a.items, tile, item, t.balance)
                                         : dev::work_item(a.seq_lens, a.batch, a.items, tile, item);
  if (wi.b < 0) return;  // an unused item (the lengths fit in fewer)
  const int b = wi.b;
  __shared__ int s_row;  // the parts' item row (wi.row), read back at the write-out
  if (tid == 0) s_row = wi.row;
  const dev::Range rg = wi.r;
  const int kvh = hg * hpc + hl;
  const int r = lane >> 2, p = lane & 3;
  const int S = a.stages;

  const uint32_t dyn_base = dev::smem_u32(smem);
  // a ring piece: 16 token rows of hpc slots + row_pad bytes (ring_row_bytes: a pad where the
  // stride would put the key loads on few banks); copy_bytes of them come from the cache
  const int row_pad = ring_row_bytes<C, P>(hpc) - hpc * SLOT;
  const int half_bytes = 16 * hpc * SLOT + 16 * row_pad, copy_bytes = 16 * hpc * SLOT;
  // shared address of ring piece k = 2·(s·wph + w) + h (stage s, sub-tile w, half h)
  auto piece = [&](int k) -> uint32_t {
    return k < a.ring_split ? dyn_base + uint32_t(k * half_bytes) : a.ring_hi + uint32_t((k - a.ring_split) * half_bytes);
  };
  const uint32_t qaddr = a.qbuf_addr ? a.qbuf_addr : dyn_base + uint32_t(S * a.stage_bytes);
  float* qbuf = reinterpret_cast<float*>(smem + (qaddr - dyn_base)) + warp * D;
  const uint32_t full0 = dev::smem_u32(bars), empty0 = full0 + 8u * kMaxStages;
  if constexpr (Q::kWide) {  // the layout the host planned must hold for this base
    uint32_t dyn_size;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_size));
    if (dyn_base < kBaseMin || dyn_base > kBaseMax || qaddr + uint32_t(nwarps * D * 4) > dyn_base + dyn_size) __trap();
  }

  // ---- producer (the refilling warp): the copies of stage `s` for CTA tile j ----
  const bool contig = hpc == a.n_kv_heads && row_pad == 0;  // the half is one copy (issue: one lane per half)
  constexpr int kPlaneRuns = 3;
  const int runs = P ? kPlaneRuns : contig || TM ? 1 : 16;  // copies per 16-token half
  if constexpr (TM) {  // the boxes' shared destinations: 128-byte aligned (halves are 128 · slot bytes)
    if ((dyn_base | a.ring_hi) & 127u) __trap();
  }
  const int64_t row_bytes = int64_t(a.n_kv_heads) * SLOT;
  const int32_t* btab = a.table + int64_t(b) * a.table_stride;
  const int bs_mask = a.block_size - 1;
  // Block-table entries one turn ahead: lane x < 2·wph of a refilling warp holds the page of half x
  // of the next tile it will issue, loaded while its current refill goes out, so the refill never
  // stalls on a global load (an L2 round trip per stage made warp 0 the slowest warp, and the
  // ring moves at its pace). The first fill_tiles tiles' entries are loaded at once (lane x:
  // tile x / 2·wph), before the barriers are set up: one round trip at the start instead of one
  // per stage ahead of warp 0's prologue; the refilling warps 1 … n_prod − 1 load them too and
  // take their first turn's pages from them (or, where that turn's tile lies past them — 2·wph ≥ 8 —
  // load its pages just before the LUT barrier).
  const int hw = 2 * wph, fill_tiles = 32 / hw;
  auto load_pages = [&](int j, int lanes) -> int {  // lane x < lanes: half x % 2·wph of tile j + x / 2·wph
    const int jj = j + lane / hw, tj = rg.begin + jj * tile + 16 * (lane % hw);
    return lane < lanes && jj < rg.tiles && tj < rg.end ? btab[tj >> a.log2_block_size] : 0;
  };
  // The refills rotate over the warps 0 … n_prod − 1 (one per scheduler): warp (it − 1) % n_prod refills in
  // iteration it, so no one warp carries every refill on top of its own sub-tiles.
  const int n_prod = nwarps >= 4 ? 4 : 1;
  const int fill_pages = warp < n_prod ? load_pages(0, fill_tiles * hw) : 0;  // tiles 0 … fill_tiles − 1
  int next_pages = 0;
  // Packed kernels (G ≤ 4): the query heads' elements lane + 32k, fp16 as loaded, two
  // heads per register, all G heads' loads issued here with the producer's block-table
  // loads: one global round trip before the prologue below instead of one per head
  // (~1 µs each: q comes from HBM). (G > 4: the loads go one head ahead in the prologue;
  // 8 heads' registers made the register allocation of those kernels spill more.)
  auto q_row = [&](int g) { return a.q + int64_t(b) * a.q_sb + int64_t(dev::query_head<(H < 0)>(a, kvh, g0 + g)) * a.q_sh; };  // head g
  __half2 qraw[PK ? 2 : 1][D / 32];
  if constexpr (PK) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
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
  // the cache row of token tj of a page (rb: the row stride)
  auto half_src = [&](int64_t page, int tj, int64_t rb) { return cache + ((page << a.log2_block_size) + (tj & bs_mask)) * rb; };
  // pages: lane src0 + x holds the page of half x of tile j
  auto issue = [&](int j, int s, int pages, int src0) {
    const int t_first = rg.begin + j * tile;
    const int halves = min(2 * wph, (rg.end - t_first + 15) >> 4);  // halves with ≥ 1 token in range
    const uint32_t bar = full0 + 8u * uint32_t(s);
    if (lane == 0) dev::mbar_arrive_expect_tx(bar, uint32_t(halves * copy_bytes));
    const uint64_t pol = dev::l2_evict_first();  // the cache is read once per decode (made per refill: one
                                                 // instruction, no register pair held through the main loop)
    __syncwarp();
    if (!TM && !P && contig) {  // one copy per half: lane x copies half x (rows of all the kv heads: kH of them)
      const int64_t page = __shfl_sync(dev::kFull, pages, (src0 + lane) & 31);
      if (lane < halves) {
        const uint8_t* g = half_src(page, t_first + 16 * lane, kH > 0 ? int64_t(kH) * SLOT : row_bytes);
        dev::bulk_copy_g2s(piece(2 * s * wph + lane), g, uint32_t(copy_bytes), bar, pol);
      }
      return;
    }
    for (int c0 = 0; c0 < halves * runs; c0 += 32) {
      const int c = c0 + lane;
      const int hx = min(c / runs, halves - 1), k = c - hx * runs;  // half (sub-tile hx/2, half hx%2), run k
      const int64_t page = __shfl_sync(dev::kFull, pages, src0 + hx);
      if (c >= halves * runs) continue;
      const int tj = t_first + 16 * hx;
      const uint8_t* g = half_src(page, tj, row_bytes);
      const uint32_t dst = piece(2 * s * wph + hx);
      if constexpr (TM) {  // box (this CTA's heads' bytes / 8, the half's 16 token rows)
        dev::tensor_copy_g2s_2d(dst, &t.map, hg * (H * SLOT / 8), int(page << a.log2_block_size) + (tj & bs_mask), bar, pol);
      } else if constexpr (P) {  // plane runs of heads h0 … h0+hpc−1 (k: indices, codes, meta)
        constexpr int IB = C::kIdxBytes, VB = C::kValueCodeBytes;
        const int h0 = hg * hpc, nkv = a.n_kv_heads;
        const int goff = k == 0 ? h0 * 16 * IB : k == 1 ? 16 * nkv * IB + h0 * 16 * VB : 16 * nkv * (IB + VB) + h0 * 96;
        const int soff = k == 0 ? 0 : k == 1 ? hpc * 16 * IB : hpc * 16 * (IB + VB);
        const int len = k == 0 ? hpc * 16 * IB : k == 1 ? hpc * 16 * VB : hpc * 96;
        dev::bulk_copy_g2s(dst + soff, g + goff, uint32_t(len), bar, pol);
      } else {  // token k's run of this CTA's hpc heads (to a padded row, or hpc < n_kv_heads)
        dev::bulk_copy_g2s(dst + k * (hpc * SLOT + row_pad), g + k * row_bytes + hg * hpc * SLOT, uint32_t(hpc * SLOT), bar, pol);
      }
    }
  };

  // Centroids → shared (indexing the parameter array at run time would copy it to the
  // local-memory stack), set up with the barriers, before warp 0 waits for its pages.
  __shared__ float s_cen[16];
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      dev::mbar_init(full0 + 8u * s, 1);
      dev::mbar_init(empty0 + 8u * s, nthreads);  // every lane arrives (below)
    }
    dev::mbar_fence_init();
    if constexpr (Q::kLut) {
#pragma unroll
      for (int i = 0; i < 16; ++i) s_cen[i] = t.lut_scale * t.centroids[i];
    }
  }
  __syncthreads();
  if (warp == 0) {
    for (int j = 0; j < S && j < rg.tiles; ++j)
      issue(j, j, j < fill_tiles ? fill_pages : load_pages(j, hw), j < fill_tiles ? j * hw : 0);
  }

  // ---- prologue: LUT and the rotated query fragments (overlaps the first loads) ----
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
  if constexpr (Q::kSignLut) {  // row n: 32 lane copies of {±1 of bits 0, 1; ±1 of bits 2, 3} (half 0x3C00 = +1)
    for (int i = tid; i < Q::kSignLutEntries; i += nthreads) {
      const uint32_t n = uint32_t(i) >> 5;
      auto pm = [&](int bit) { return (n >> bit) & 1u ? 0x3c00u : 0xbc00u; };
      slut[i] = make_uint2(pm(0) | pm(1) << 16, pm(2) | pm(3) << 16);
    }
  }
  // qf[0]: hi (PK: hi in columns 0–3, lo in 4–7); qf[1]: lo (G > 4)
  uint32_t qf[NQ][KS][2];
#pragma unroll
  for (int n = 0; n < NQ; ++n)
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) qf[n][ks][0] = qf[n][ks][1] = 0u;
  // turbo4-qjl: the fragments of q″ = R q′ (the QJL rotation of the rotated query), as qf
  [[maybe_unused]] uint32_t q2f[Q::kQjl ? NQ : 1][Q::kQjl ? KS : 1][2] = {};
  // query head g (turbo: s1 · q, zero-padded to the block) in registers, element
  // lane + 32k: the FWHT across the warp (shuffles); then every lane splits its own
  // elements (scaled) into fp16 hi + lo and stages them in qbuf as two half rows, from which
  // the lanes holding head g's fragments take theirs with 8-byte loads. (The lanes of head g
  // alone converting their 32 elements from a float row, while the rest of the warp waited,
  // was ~200 dependent instructions per head.)
  // 3-bit mse keys (k3v4_nc, 3bit_nc), d = 128, vLLM layout: each lane reads its own 12-byte run of a
  // key and takes its pairs' LUT addresses with run_lut_addrs (k3v4_nc −2.8% at
  // 32/8, 3bit_nc −3.9%; see experiments/results/kernels.md, Decisions)
  constexpr bool kKeyRun = Q::kSqLut && C::kKeyBits == 3 && D == 128 && !P;
  auto q_head = [&](int g, float (&y)[D / 32]) {
    __half* const hrow = reinterpret_cast<__half*>(qbuf);  // hi: halves [0, D), lo: [D, 2D)
    const bool mine = PK ? (r & 3) == g : r == g;
    auto frags = [&](uint32_t (&f)[NQ][KS][2], const float (&v)[D / 32]) {  // v → f (this lane's head)
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const __half h = __float2half_rn(v[k]);
        hrow[lane + 32 * k] = h;
        hrow[D + lane + 32 * k] = __float2half_rn(v[k] - __half2float(h));
      }
      __syncwarp();
      if (mine) {
        const bool lo_col = PK && r >= 4;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
          // dims base … +3: b0 = +0, +1; b1 = +2, +3 (kKeyRun: lane p's own run of 32 dims)
          const int base = kKeyRun ? 32 * p + 8 * (ks >> 1) + 4 * (ks & 1) : 32 * (ks >> 1) + 8 * p + 4 * (ks & 1);
          if constexpr (PK) {
            const uint2 w = *reinterpret_cast<const uint2*>(hrow + (lo_col ? D : 0) + base);
            f[0][ks][0] = w.x;
            f[0][ks][1] = w.y;
          } else {
            const uint2 h = *reinterpret_cast<const uint2*>(hrow + base);
            const uint2 l = *reinterpret_cast<const uint2*>(hrow + D + base);
            f[0][ks][0] = h.x;
            f[0][ks][1] = h.y;
            f[NQ - 1][ks][0] = l.x;
            f[NQ - 1][ks][1] = l.y;
          }
        }
      }
      __syncwarp();
    };
    float sc = 1.f;
    if constexpr (Q::kLut) {
      block_fwht<Q::kTB>(y, lane);
      sc = t.rot_scale;
    }
    float v[D / 32];
#pragma unroll
    for (int k = 0; k < D / 32; ++k) v[k] = (Q::kTurbo && (t.s2[k & 3] >> lane) & 1u ? -y[k] : y[k]) * sc;
    frags(qf, v);
    if constexpr (Q::kQjl) {  // q″ = qs2 · H(qs1 · q′) / √128 per block (q′ = s2 · y · sc)
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
  auto s1_sign = [&](int k, float v) { return Q::kTurbo && (t.s1[k & 3] >> lane) & 1u ? -v : v; };
  if constexpr (PK) {
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      if (g >= group()) break;
      float y[D / 32];
#pragma unroll
      for (int k = 0; k < D / 32; ++k) y[k] = s1_sign(k, __half2float(g & 1 ? qraw[g / 2][k].y : qraw[g / 2][k].x));
      q_head(g, y);
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
  // score → log2-domain logit: · norm16 · (nc ? 1/sqrt(Σ(αc)²) : 1/α) · attn_scale · log2 e
  const float raw_scale = Q::kLut && !t.nc ? a.scale_log2 / t.lut_scale : a.scale_log2;
  const float nc_eps = 1e-16f * t.lut_scale * t.lut_scale;
  // wide: the LUT's 64 KB-aligned address | 4·lane (the PRMT/LOP3 operand giving the entry address); else the
  // lane's copy
  const uint32_t lut_lane = (Q::kWide ? a.ring_hi - kLutBytesWide : dev::smem_u32(lut)) + 4u * uint32_t(lane);
  // turbo4-qjl: score of the sign term → log2-domain logit: · norm · rnorm · κ · attn_scale · log2 e
  [[maybe_unused]] float qjl_k = 0.f;
  if constexpr (Q::kQjl) qjl_k = a.scale_log2 * t.qjl_scale;
  [[maybe_unused]] const uint32_t slut_lane = dev::smem_u32(slut) + 8u * uint32_t(lane);
  const int diag_src = 4 * r + (r >> 1);  // lane holding the Σc² diagonal entries of tokens r, r+8
  const bool hi_lane = p < 2;             // PK: this lane's columns are the hi parts
  const RowMap rm = row_map<C, P>(hl, hpc);
  // Tokens of the MMA rows (any order of a half's 16 tokens works, the values' k-slots following
  // the score rows). A token's slot row is kst = hpc·SLOT bytes after the previous one (+ 16 where
  // ring_row_bytes pads it: rows ≡ 0 mod 64 bytes, where neither order below applies). Keys:
  // lane (r, p) reads rows r and r + 8 at 4p … (4 consecutive words per row over the p lanes);
  // with kst/4 ≡ 4·odd mod 32 words (8 heads of 134- or 118-byte slots) rows 0–7 fall in 8
  // distinct 4-bank groups; with kst/4 ≡ 2 mod 4 (4 heads) rows r and r + 5 share banks, and
  // even tokens (2r) do not: there row r is token 2r and row r + 8 token 2r + 1 (kEvenOdd;
  // value k-slots 2p, 2p+1, 2p+8, 2p+9 are then tokens 4p, 4p+2, 4p+1, 4p+3). Values: lanes
  // (·, p) read k-slot 2p's token at 2r (4 words per token); with kst/4 ≡ 8 mod 16 words (16
  // heads of 134- or 118-byte slots, 8 of turbo2/3/4's 68–132) tokens 2p = 0, 2, 4, 6 fall on two
  // bank groups, tokens 0–3 on four: there row r is token r/2 + 4·(r & 1) (kSpread; k-slots
  // 2p, 2p+1 are tokens p, p + 4), the keys' rows r and r + 4 sharing banks as before.
  constexpr bool kEvenOdd = !P && kH > 0 && (kH * SLOT) % 16 == 8;
  // (not for 3-bit mse keys: k3v4_nc at 64/16 ran 3% slower with it)
  constexpr bool kSpread = !P && kH > 0 && (kH * SLOT) % 64 == 32 && !(Q::kMse && C::kKeyBits == 3);
  // token of row r + 8 / of k-slot 2p+1, minus that of row r / of k-slot 2p
  constexpr int d8 = kEvenOdd ? 1 : 8, dv1 = kEvenOdd ? 2 : kSpread ? 4 : 1;
  // token of row r / of k-slot 2p
  const int tr = kEvenOdd ? 2 * r : kSpread ? (r >> 1) + 4 * (r & 1) : r, tv = kEvenOdd ? 4 * p : kSpread ? p : 2 * p;
  // kKeyRun: the byte offset (0 or 2) of this lane's key runs in their first aligned word — the same
  // in every piece (16-row pieces of even rows, 128-byte aligned) and in rows r and r + d8 (d8 · kst ≡ 0 mod 4)
  [[maybe_unused]] const uint32_t run_off = uint32_t(rm.key + tr * rm.kst + 12 * p) & 2u;
  // 4-bit values, vLLM layout, 8 or 16 heads per CTA, G ≤ 4, d = 128, one value block (kVPar): the k slots of
  // each value MMA are (token, e) pairs and the m-tile covers 32 dims, e = 0 in P' columns 0–3 (query
  // heads 0–3) and e = 1 in columns 4–7, P' = fp16(p·scale) alone (as kHiP: the weights P' carries are
  // summed into Σp, Σp·zero). Both halves of an A register are then one token's codes, masked in place
  // from one aligned 4-byte word (nibbles i and i + 4: e = 0 and 1) — no joining PRMT of two tokens' u16
  // loads — and acc is 16 registers instead of 32. Lane (r, p) reads the words r and r + 8 of the value
  // codes (dims 8r … 8r + 7 and 64 + 8r …; where v_s, 2 bytes on: dims 8r + 4 …, and row 7's second word
  // then joins the word before the codes, which holds dims 0–3) of the tokens of k slots p and p + 4:
  // the score rows σp, σp + 1 (σ = kVRowStep = 2) or p, p + 4 (σ = 1) of row set j & 1 of half j >> 1 in
  // k-step j, σ the step that puts the four slot lanes' words on disjoint 8-bank groups (row stride ·
  // σ ≡ ±8 words mod 32; 0: there is none, the u16 path).
  constexpr int kVStrideW = (ring_row_bytes<C, P>(kH > 0 ? kH : 1) / 4) % 32;
  constexpr int kVRowStep = kVStrideW % 16 == 8 ? 1 : kVStrideW % 8 == 4 ? 2 : 0;
  constexpr bool kVPar = C::kValueBits == 4 && !Q::kTurbo && !Q::kQjl && Q::kTB == 1 && !P && !TM && PK &&
                         (kH == 8 || kH == 16) && D == 128 && !kEvenOdd && !kSpread &&
                         ring_row_bytes<C, P>(kH > 0 ? kH : 1) % 4 == 0 && kVRowStep > 0;
  // 4-bit values, vLLM layout, 16 heads per CTA, G ≤ 4, d = 128, where kVPar does not apply (kSpread:
  // 4bit_nc): each lane row reads its codes as aligned 4-byte words instead of u16 (half the
  // shared-memory wavefronts where a warp's codes are word aligned, 3/4 where they are not). Kept where it measured faster (32/16 and
  // 64/16 −1.6 … −2.4% at 32K); at 8 heads it was within ±1% at G 4 and 3–5% slower at 64/8 and 28/4
  // (G > 4, where ptxas spilled more). v_s: this warp's codes start 2 bytes past a word (rows and
  // pieces are 4-byte aligned here); v_wrap: lane row 7 then reads unit 0 as its last (write-out: vdim).
  constexpr bool kVWords = C::kValueBits == 4 && !Q::kTurbo && !P && PK && kH == 16 && D == 128 && !kVPar;
  static_assert(!kVWords || ring_row_bytes<C, P>(kH) % 4 == 0, "v_s is the same in every token row");
  [[maybe_unused]] const int v_s = kVWords || kVPar ? (rm.code >> 1) & 1 : 0;
  [[maybe_unused]] const bool v_wrap = v_s && r == 7;
  // kKeyOff: where token rows and pieces are 4-byte aligned, a warp's key slots start rm.key & 3 (0 or 2:
  // slots are even) bytes into a word in every row, so run_off and v_s follow from that offset, the same
  // for the whole warp; the full sub-tiles then run a body compiled for it (run_off, v_s and v_wrap
  // constants: no run-alignment shifts, no predicated loads for the other offset's case: k3v4_nc's
  // full-tile body 605 → 568 / 576 SASS instructions). Kept where it measured faster (3-bit
  // keys, 8 heads per CTA, G ≤ 4: k3v4_nc −1.2%, 3bit_nc −2.0% at 32/8, 32K); at 16 heads,
  // at G 8 and for kVPar alone (4bit_nc) it was 0.5–3.5% slower.
  constexpr bool kKeyOff = kKeyRun && PK && kH == 8 && ring_row_bytes<C, P>(kH) % 4 == 0;
  [[maybe_unused]] const int key_mod = rm.key & 3;
  // kVPar: this lane's value word offsets (slots p, p + 4) in a half's row set 0, the P' sources (the
  // lanes holding those rows' p of query heads 2(r/2 & 1), +1 in half 0) and the PRMT that puts head
  // r & 3's P' in half r >> 2 of the B register (the other half 0)
  [[maybe_unused]] int v_off[2] = {0, 0}, p_src[2] = {0, 0};
  [[maybe_unused]] uint32_t p_sel = 0u;
  if constexpr (kVPar) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int row = kVRowStep == 2 ? 2 * p + u : p + 4 * u;
      v_off[u] = rm.code + 2 * v_s + 4 * r + row * rm.cst;
      p_src[u] = 4 * row + ((r >> 1) & 1);
    }
    p_sel = r < 4 ? (r & 1 ? 0x4432u : 0x4410u) : (r & 1 ? 0x3244u : 0x1044u);
  }
  if (warp < n_prod) {  // the pages of this warp's first refill (iteration warp + 1: tile warp + S)
    const int j = warp + S;
    next_pages = j < fill_tiles ? __shfl_sync(dev::kFull, fill_pages, (j * hw + lane) & 31) : load_pages(j, hw);
  }
  __syncthreads();  // LUT complete

  // ---- main loop ----
  constexpr int NACC = kVPar ? D / 32 : D / 16;  // value m-tiles (kVPar: 32 dims each)
  float acc[NACC][4];
#pragma unroll
  for (int i = 0; i < NACC; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  [[maybe_unused]] float acc2[Q::kQjl ? D / 16 : 1][4] = {};  // turbo4-qjl: Σ P″ · (±1), rotated by R⁻¹ at the end
  Softmax32 sm;
  float zs[2] = {0.f, 0.f};  // Σ p·zero (per-lane partials)
  int s = 0, sp = S - 1;            // stage of this iteration, of the previous one
  uint32_t ph = 0u, php = 1u;        // their use parities
  for (int it = 0; it < rg.tiles; ++it) {
    if (it >= 1 && warp == ((it - 1) & (n_prod - 1)) && it - 1 + S < rg.tiles) {  // refill the stage read in iteration it − 1
      const int pages = next_pages;
      // (tiles < fill_tiles are in fill_pages already; taking them from there with a
      // shuffle instead of this reload made the producer path longer: 32K k3v4_nc +2.6%)
      next_pages = load_pages(it + n_prod - 1 + S, hw);
      dev::mbar_wait(empty0 + 8u * sp, php);
      issue(it - 1 + S, sp, pages, 0);
    }
    dev::mbar_wait(full0 + 8u * s, ph);
    const int t0 = rg.begin + it * tile + kSub * ws;
    const int nvalid = min(rg.end - t0, kSub);
    // the sub-tile's work; kFullTile: all 32 tokens valid (every sub-tile but a range's
    // last), so no masks (instantiated twice, selected per sub-tile, warp-uniform)
    auto tile_body = [&](auto full_tile, auto key_off) {
      constexpr bool kFullTile = decltype(full_tile)::value;
      // KO ≥ 0: this body is for warps whose key slots start at KO (mod 4) bytes into a word (kKeyOff)
      constexpr int KO = decltype(key_off)::value;
      [[maybe_unused]] const uint32_t ro = KO < 0 ? run_off : uint32_t(KO);
      [[maybe_unused]] const int vs = KO < 0 || !(kVWords || kVPar) ? v_s : ((KO + C::kKeyBytes) >> 1) & 1;  // rm.code >> 1 & 1
      [[maybe_unused]] const bool vw = KO < 0 ? v_wrap : vs && r == 7;
      const uint8_t* hb[2] = {smem + (piece(2 * (s * wph + ws)) - dyn_base),
                              smem + (piece(2 * (s * wph + ws) + 1) - dyn_base)};  // the two halves

      // ---- scores of both halves ----
      float sa[Q::kTB][2][NQ][4] = {};  // [turbo block][half][hi/lo set]
      [[maybe_unused]] float sq[Q::kQjl ? Q::kTB : 1][2][NQ][4] = {};  // turbo4-qjl: q″ · (±1)
      [[maybe_unused]] float qa[2][4] = {}, qb[2][4] = {};  // Σc² (mse keys)
      const uint8_t* krow[2][2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        krow[h][0] = hb[h] + rm.key + tr * rm.kst;
        krow[h][1] = krow[h][0] + d8 * rm.kst;
      }
      // kKeyRun: each row's run as 3 words and its windows (run_lut_addrs; wnd: made at even kp, used at odd),
      // and (per kp) its pairs' LUT addresses
      [[maybe_unused]] uint32_t kx[kKeyRun ? 2 : 1][2][4], wnd[kKeyRun ? 2 : 1][2][3], ka[kKeyRun ? 2 : 1][2][4];
      [[maybe_unused]] constexpr int kRunBit = KO < 0 ? 0 : 8 * KO;  // the runs' first bit in kx (run_lut_addrs' O)
      if constexpr (kKeyRun) {
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
          if constexpr (kKeyRun) {
            run_lut_addrs<kRunBit>(kx[h][0], wnd[h][0], kp, lut_lane, ka[h][0]);
            run_lut_addrs<kRunBit>(kx[h][1], wnd[h][1], kp, lut_lane, ka[h][1]);
          } else {
            key_words<C, P>(krow[h][0], kp, p, kw[h][0]);
            key_words<C, P>(krow[h][1], kp, p, kw[h][1]);
          }
        }
#pragma unroll
        for (int h2 = 0; h2 < 2; ++h2) {
          const int ks = 2 * kp + h2, tb = ks / (KS / Q::kTB);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            uint32_t af[4];
            [[maybe_unused]] uint32_t sqf[4];
            if constexpr (kKeyRun) {
              lut_frag_sq(ka[h][0][2 * h2], ka[h][0][2 * h2 + 1], af[0], af[2], sqf[0], sqf[2]);
              lut_frag_sq(ka[h][1][2 * h2], ka[h][1][2 * h2 + 1], af[1], af[3], sqf[1], sqf[3]);
            } else if constexpr (Q::kSqLut) {
              key_frag_sq<C, P>(kw[h][0], h2, lut_lane, af[0], af[2], sqf[0], sqf[2]);
              key_frag_sq<C, P>(kw[h][1], h2, lut_lane, af[1], af[3], sqf[1], sqf[3]);
            } else {
              key_frag<C, P>(kw[h][0], h2, lut_lane, af[0], af[2]);
              key_frag<C, P>(kw[h][1], h2, lut_lane, af[1], af[3]);
            }
            dev::mma_16816(sa[tb][h][0], af, qf[0][ks][0], qf[0][ks][1]);
            if constexpr (!PK) dev::mma_16816(sa[tb][h][NQ - 1], af, qf[NQ - 1][ks][0], qf[NQ - 1][ks][1]);
            if constexpr (Q::kQjl) {  // the sign nibble of k-step h2 (w[1]: the 8 dims' sign byte)
              uint32_t zf[4];
              sign_frag<Q::kSignLut>(kw[h][0][1], 4 * h2, slut_lane, zf[0], zf[2]);
              sign_frag<Q::kSignLut>(kw[h][1][1], 4 * h2, slut_lane, zf[1], zf[3]);
              dev::mma_16816(sq[tb][h][0], zf, q2f[0][ks][0], q2f[0][ks][1]);
              if constexpr (!PK) dev::mma_16816(sq[tb][h][NQ - 1], zf, q2f[NQ - 1][ks][0], q2f[NQ - 1][ks][1]);
            }
            if constexpr (Q::kSqLut) {  // each row's Σ x² in every column: every lane holds its own tokens'
              dev::mma_16816(qa[h], sqf, 0x3c003c00u, 0x3c003c00u);
            } else if constexpr (Q::kMse && PK) {  // d = 256, m16n8k8: the operand pairs are consecutive registers
              dev::mma_1688(qa[h], af[0], af[1], af[0]);  // columns: tokens 0–7
              dev::mma_1688(qb[h], af[0], af[1], af[1]);  // columns: tokens 8–15
              dev::mma_1688(qa[h], af[2], af[3], af[2]);
              dev::mma_1688(qb[h], af[2], af[3], af[3]);
            } else if constexpr (Q::kMse) {
              // G > 4: two m16n8k16 (B = {a0, a2}, {a1, a3}: register moves), fewer spills in these
              // register-bound kernels, ~1% faster at GQA 8 (at G ≤ 4 within ±1%)
              dev::mma_16816(qa[h], af, af[0], af[2]);
              dev::mma_16816(qb[h], af, af[1], af[3]);
            }
          }
        }
      }
      [[maybe_unused]] uint32_t pb[Q::kTB][2][NQ][2];  // P' fragments [turbo block][half][hi/lo set][b0/b1]
      [[maybe_unused]] uint32_t pbv[kVPar ? 4 : 1][2];  // kVPar: the B of k-step j
      [[maybe_unused]] uint32_t pq[Q::kQjl ? Q::kTB : 1][2][NQ][2];  // turbo4-qjl: P″ fragments
      float alpha[2] = {1.f, 1.f};
      bool fast;  // no logit above the running maxima: α = 1, no rescale
      auto rescale_sums = [&] {  // after a full softmax update: Σ p·zero by α
#pragma unroll
        for (int c = 0; c < 2; ++c) zs[c] *= alpha[c];
      };
      // token row (0 … 31 of the sub-tile) in range; always in a full sub-tile
      auto valid = [&](int row) { return kFullTile || row < nvalid; };
      // The P' fragments beyond pb[0] from the sub-tile's p (xs: tokens r, r, r+8, r+8; f0: token
      // r's value block): turbo block 1 (d = 256) into pb[1] with that block's value norm, and
      // turbo4-qjl's sign term P″ = p · norm · κ · rnorm into pq[tb]; frags: the path's builder.
      [[maybe_unused]] auto turbo_frags = [&](const float (&xs)[4], const uint8_t* f0, bool v0, bool v1, auto&& frags) {
        if constexpr (Q::kTB > 1) {
          const float sb0 = v0 ? ld_f16(f0 + C::kTurboBlockBytes) : 0.f;
          const float sb1 = v1 ? ld_f16(f0 + d8 * rm.mst + C::kTurboBlockBytes) : 0.f;
          const float pw[4] = {xs[0] * sb0, xs[1] * sb0, xs[2] * sb1, xs[3] * sb1};
          frags(pb[1], pw);
        }
        if constexpr (Q::kQjl) {
#pragma unroll
          for (int tb = 0; tb < Q::kTB; ++tb) {
            const uint8_t* fb = f0 + tb * C::kTurboBlockBytes;
            const float k0 = v0 ? t.qjl_scale * ld_f16(fb) * ld_f16(fb + 2) : 0.f;
            const float k8 = v1 ? t.qjl_scale * ld_f16(fb + d8 * rm.mst) * ld_f16(fb + d8 * rm.mst + 2) : 0.f;
            const float pw[4] = {xs[0] * k0, xs[1] * k0, xs[2] * k8, xs[3] * k8};
            frags(pq[tb], pw);
          }
        }
      };
      if constexpr (PK) {
        // Lanes p < 2 finish half 0, lanes p ≥ 2 half 1 (same query heads 2(p&1), 2(p&1)+1):
        // each sends the partner the partial scores of the partner's half (hi + lo columns)
        // and the per-token softmax / scale work is done once per token, not twice.
        const int mh = hi_lane ? 0 : 1;
        float x4[4];
        const uint8_t* mb = hi_lane ? hb[0] : hb[1];
        float fr = raw_scale, fr8 = raw_scale;
        [[maybe_unused]] float frb = raw_scale, frb8 = raw_scale;  // turbo block 1's key norms (d = 256)
        if constexpr (Q::kLut) {
          const uint8_t* n0 = mb + rm.norm + tr * rm.mst;
          fr *= ld_f16(n0);
          fr8 *= ld_f16(n0 + d8 * rm.mst);
          if constexpr (Q::kTB > 1) {
            frb *= ld_f16(n0 + C::kTurboBlockBytes);
            frb8 *= ld_f16(n0 + d8 * rm.mst + C::kTurboBlockBytes);
          }
          if (Q::kSqLut && t.nc) {  // tokens r, r + 8 of this lane's half: its own sums
            fr *= dev::rsqrt_fast((hi_lane ? qa[0][0] : qa[1][0]) + nc_eps);
            fr8 *= dev::rsqrt_fast((hi_lane ? qa[0][2] : qa[1][2]) + nc_eps);
          } else if (Q::kMse && t.nc) {  // token r: qa[r&1] of lane (r, r/2); token r+8: qb[2 + (r&1)] there (both halves)
            const float q0 = __shfl_sync(dev::kFull, (r & 1) ? qa[0][1] : qa[0][0], diag_src);
            const float q1 = __shfl_sync(dev::kFull, (r & 1) ? qa[1][1] : qa[1][0], diag_src);
            const float q8 = __shfl_sync(dev::kFull, (r & 1) ? qb[0][3] : qb[0][2], diag_src);
            const float q9 = __shfl_sync(dev::kFull, (r & 1) ? qb[1][3] : qb[1][2], diag_src);
            fr *= dev::rsqrt_fast((hi_lane ? q0 : q1) + nc_eps);
            fr8 *= dev::rsqrt_fast((hi_lane ? q8 : q9) + nc_eps);
          }
        }
        const bool v0 = valid(16 * mh + tr), v1 = valid(16 * mh + tr + d8);
        // this lane's half of a [half][set][4] score array: its own partial sums plus the partner's
        auto mine_half = [&](const float (&sc)[2][NQ][4], float (&out)[4]) {
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
        if constexpr (Q::kQjl) {  // + Σ_b norm_b · κ · rnorm_b · (q″ · ±1)_b (norm, rnorm: bytes 0, 2 of block b)
          const uint8_t* n0 = mb + rm.norm + tr * rm.mst;
#pragma unroll
          for (int tb = 0; tb < Q::kTB; ++tb) {
            const uint8_t* nb = n0 + tb * C::kTurboBlockBytes;
            const float k0 = qjl_k * ld_f16(nb) * ld_f16(nb + 2);
            const float k8 = qjl_k * ld_f16(nb + d8 * rm.mst) * ld_f16(nb + d8 * rm.mst + 2);
            float e4[4];
            mine_half(sq[tb], e4);
#pragma unroll
            for (int i = 0; i < 4; ++i) x4[i] = (i < 2 ? v0 : v1) ? fmaf(e4[i], i < 2 ? k0 : k8, x4[i]) : -INFINITY;
          }
        }
        fast = sm.template try_keep_half<!kVPar>(x4);
        if (!fast) {
          sm.template update_half<!kVPar>(x4, alpha);
          rescale_sums();
        }
        const uint8_t* f0 = mb + rm.scz + tr * rm.mst;
        const float sc0 = v0 ? ld_f16(f0) : 0.f, z0 = v0 ? ld_f16(f0 + 2) : 0.f;
        const float sc1 = v1 ? ld_f16(f0 + d8 * rm.mst) : 0.f, z1 = v1 ? ld_f16(f0 + d8 * rm.mst + 2) : 0.f;
        const float pv[4] = {x4[0] * sc0, x4[1] * sc0, x4[2] * sc1, x4[3] * sc1};
        if constexpr (kVPar) {
          // P' = fp16(p·scale) of rows r (pk[0]) and r + 8 (pk[1]), heads 2(p & 1), +1; the weights it
          // carries, p̃ = fp16(P') / scale (a zero scale: p), into Σp and Σp·zero (as kHiP)
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
        auto p_frags = [&](uint32_t (&dst)[2][NQ][2], const float (&pw)[4]) {
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
        if constexpr (!kVPar) {
          p_frags(pb[0], pv);
          turbo_frags(x4, f0, v0, v1, p_frags);
        }
      } else {
        float x[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float sc4[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) sc4[i] = sa[0][h][0][i] + sa[0][h][NQ - 1][i];
          float fr = raw_scale, fr8 = raw_scale;
          [[maybe_unused]] const uint8_t* n0 = hb[h] + rm.norm + tr * rm.mst;
          if constexpr (Q::kLut) {
            fr *= ld_f16(n0);
            fr8 *= ld_f16(n0 + d8 * rm.mst);
            if constexpr (Q::kTB > 1) {  // score = norm0 · block 0's + norm1 · block 1's (d = 256)
              const float frb = raw_scale * ld_f16(n0 + C::kTurboBlockBytes);
              const float frb8 = raw_scale * ld_f16(n0 + d8 * rm.mst + C::kTurboBlockBytes);
#pragma unroll
              for (int i = 0; i < 4; ++i) sc4[i] = fmaf(sa[1][h][0][i] + sa[1][h][NQ - 1][i], i < 2 ? frb : frb8, sc4[i] * (i < 2 ? fr : fr8));
              fr = fr8 = 1.f;
            }
            if (Q::kSqLut && t.nc) {  // tokens r, r + 8: this lane's own sums
              fr *= dev::rsqrt_fast(qa[h][0] + nc_eps);
              fr8 *= dev::rsqrt_fast(qa[h][2] + nc_eps);
            } else if (Q::kMse && t.nc) {  // token r: qa[r&1] of lane (r, r/2); token r+8: qb[2 + (r&1)] there
              const float sq0 = __shfl_sync(dev::kFull, (r & 1) ? qa[h][1] : qa[h][0], diag_src);
              const float sq1 = __shfl_sync(dev::kFull, (r & 1) ? qb[h][3] : qb[h][2], diag_src);
              fr *= dev::rsqrt_fast(sq0 + nc_eps);
              fr8 *= dev::rsqrt_fast(sq1 + nc_eps);
            }
          }
          const bool v0 = valid(16 * h + tr), v1 = valid(16 * h + tr + d8);
          x[h][0] = v0 ? sc4[0] * fr : -INFINITY;
          x[h][1] = v0 ? sc4[1] * fr : -INFINITY;
          x[h][2] = v1 ? sc4[2] * fr8 : -INFINITY;
          x[h][3] = v1 ? sc4[3] * fr8 : -INFINITY;
          if constexpr (Q::kQjl) {  // + Σ_b norm_b · κ · rnorm_b · (q″ · ±1)_b
#pragma unroll
            for (int tb = 0; tb < Q::kTB; ++tb) {
              const uint8_t* nb = n0 + tb * C::kTurboBlockBytes;
              const float k0 = qjl_k * ld_f16(nb) * ld_f16(nb + 2);
              const float k8 = qjl_k * ld_f16(nb + d8 * rm.mst) * ld_f16(nb + d8 * rm.mst + 2);
#pragma unroll
              for (int i = 0; i < 4; ++i)
                x[h][i] = (i < 2 ? v0 : v1) ? fmaf(sq[tb][h][0][i] + sq[tb][h][NQ - 1][i], i < 2 ? k0 : k8, x[h][i])
                                            : -INFINITY;
            }
          }
        }
        fast = sm.template try_keep<!kHiP>(x);
        if (!fast) {
          sm.template update<!kHiP>(x, alpha);
          rescale_sums();
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint8_t* f0 = hb[h] + rm.scz + tr * rm.mst;
          const bool v0 = valid(16 * h + tr), v1 = valid(16 * h + tr + d8);
          const float sc0 = v0 ? ld_f16(f0) : 0.f, z0 = v0 ? ld_f16(f0 + 2) : 0.f;
          const float sc1 = v1 ? ld_f16(f0 + d8 * rm.mst) : 0.f, z1 = v1 ? ld_f16(f0 + d8 * rm.mst + 2) : 0.f;
          const float pv[4] = {x[h][0] * sc0, x[h][1] * sc0, x[h][2] * sc1, x[h][3] * sc1};
          // fp16(P') (ph: tokens r, r + 8's two columns) and those values as floats (pf)
          auto to_half = [](const float (&pw)[4], uint32_t (&ph)[2], float (&pf)[4]) {
            const __half2 ph01 = __floats2half2_rn(pw[0], pw[1]), ph23 = __floats2half2_rn(pw[2], pw[3]);
            const float2 pf01 = __half22float2(ph01), pf23 = __half22float2(ph23);
            ph[0] = *reinterpret_cast<const uint32_t*>(&ph01);
            ph[1] = *reinterpret_cast<const uint32_t*>(&ph23);
            pf[0] = pf01.x, pf[1] = pf01.y, pf[2] = pf23.x, pf[3] = pf23.y;
          };
          // wt: the weights summed into Σp·zero (and, kHiP, Σp); wp: fp16(P') as floats (kHiP)
          float wt[4];
          [[maybe_unused]] float wp[4];
          [[maybe_unused]] uint32_t wh[2];
          if constexpr (kHiP) {
            to_half(pv, wh, wp);
            // p̃ = fp16(P') / scale; a zero scale (a constant value vector) has P' = 0 whatever p is,
            // and that token keeps p (its value is its zero)
            const float i0 = dev::rcp_fast(sc0), i1 = dev::rcp_fast(sc1);
#pragma unroll
            for (int i = 0; i < 4; ++i) wt[i] = (i < 2 ? sc0 : sc1) != 0.f ? wp[i] * (i < 2 ? i0 : i1) : x[h][i];
          } else {
#pragma unroll
            for (int i = 0; i < 4; ++i) wt[i] = x[h][i];
          }
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            zs[c] = fmaf(wt[c], z0, fmaf(wt[c + 2], z1, zs[c]));
            if constexpr (kHiP) sm.l[c] += wt[c] + wt[c + 2];
          }
          if constexpr (kHiP) {
            pb[0][h][0][0] = dev::movmatrix_trans(wh[0]);
            pb[0][h][0][1] = dev::movmatrix_trans(wh[1]);
          } else {
            // turbo block tb > 0 (d = 256): P' = p · that block's value norm (into pb[tb]); turbo4-qjl's
            // sign term: P″ = p · norm · κ · rnorm (into pq[tb]); hi and lo sets
            auto p_frags = [&](uint32_t (&dst)[2][NQ][2], const float (&pw)[4]) {
              uint32_t ph[2];
              float pf[4];
              to_half(pw, ph, pf);
              dst[h][0][0] = dev::movmatrix_trans(ph[0]);
              dst[h][0][1] = dev::movmatrix_trans(ph[1]);
              dst[h][NQ - 1][0] = dev::movmatrix_trans(dev::pack_half2(pw[0] - pf[0], pw[1] - pf[1]));
              dst[h][NQ - 1][1] = dev::movmatrix_trans(dev::pack_half2(pw[2] - pf[2], pw[3] - pf[3]));
            };
            p_frags(pb[0], pv);
            turbo_frags(x[h], f0, v0, v1, p_frags);
          }
        }
      }
      // ---- values: acc = acc·α + Σ_halves A·P' ----
      // The value codes are exact fp16 subnormals (no bias), so the tensor cores accumulate
      // straight into acc and the rescale runs only when a running max moved (α ≠ 1
      // somewhere in the warp: rare after the first tiles).
      if (!fast && __any_sync(dev::kFull, alpha[0] != 1.f || alpha[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < NACC; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[i][j] *= alpha[j & 1];
        if constexpr (Q::kQjl) {
#pragma unroll
          for (int i = 0; i < D / 16; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc2[i][j] *= alpha[j & 1];
        }
      }
      // pf: the P' fragments for the m-tile's dims (pb[turbo block]; turbo4-qjl's sign term: pq[…])
      auto fold = [&](const uint32_t (&pf)[2][NQ][2], float (&ac)[4], const uint32_t (&a0)[4], const uint32_t (&a1)[4]) {
#pragma unroll
        for (int n = 0; n < NV; ++n) {
          dev::mma_16816(ac, a0, pf[0][n][0], pf[0][n][1]);
          dev::mma_16816(ac, a1, pf[1][n][0], pf[1][n][1]);
        }
      };
      // value codes of tokens 2p, 2p+1 (k-slots 2p..) and 2p+8, 2p+9 (k-slots 2p+8..), lane row r
      const uint8_t* vp[2][4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        vp[h][0] = hb[h] + rm.code + tv * rm.cst + (kVWords ? 4 * r + 2 * vs : r * Q::kVRowBytes);
        vp[h][1] = vp[h][0] + dv1 * rm.cst;
        vp[h][2] = vp[h][0] + d8 * rm.cst;
        vp[h][3] = vp[h][2] + dv1 * rm.cst;
      }
      if constexpr (Q::kTurbo) {
        // turbo value blocks: row r takes dims 4r + 32w … +3 (out_dim) as two pair codes
        // (turbo4: the u16 at byte 2r + 16w of qs; turbo3/turbo2: built by turbo_pairs), pair
        // e = dims 2j, 2j+1 (j = 2r + 16w + e) → half2(α·c, α·c′) from the key LUT; m-tile
        // 2w + e takes dim 2j as row r and dim 2j+1 as row r + 8, so two PRMTs turn the
        // pairs of tokens (2p, 2p+1) into the A registers (two tokens of one dim each).
#pragma unroll
        for (int w = 0; w < D / 32; ++w) {
          uint32_t x[2][4][2];  // [half][token 2p, 2p+1, 2p+8, 2p+9][byte e]
          [[maybe_unused]] uint32_t z[Q::kQjl ? 2 : 1][4][2];  // turbo4-qjl: the ±1 of the same dims
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              const uint8_t* vb = vp[h][u] + (w >> 2) * C::kTurboBlockBytes;  // block w / 4's qs (+ row)
              const int wl = w & 3;
              if constexpr (Q::kQjl) {
                // the 12 index bits of dims 4r + 32wl … +3 start at bit 12r + 96wl of the block's index
                // stream (vb: no row offset), their sign bits are nibble r & 1 of byte r/2 + 4wl of the
                // sign plane 48 bytes on
                const uint8_t* cb = vb + ((3 * r) >> 1) + 12 * wl;
                const uint32_t bits = (ld_u8(cb) | ld_u8(cb + 1) << 8) >> (4 * (r & 1));
                x[h][u][0] = dev::lds_u32(lut_lane + ((bits & 63u) << 7));
                x[h][u][1] = dev::lds_u32(lut_lane + (((bits >> 6) & 63u) << 7));
                sign_frag<Q::kSignLut>(ld_u8(vb + 48 + (r >> 1) + 4 * wl), 4 * (r & 1), slut_lane, z[h][u][0],
                                       z[h][u][1]);
              } else {
                uint32_t word;
                if constexpr (C::kValueBits == 4) {
                  word = ld_u16(vb + 16 * wl);
                } else {  // qs byte r + 8w; turbo3: sign nibble (r & 1) of byte r/2 + 4w (vb: + r), turbo2: none
                  const uint8_t* sg = vb - r + 32 + (r >> 1) + 4 * wl;
                  word = turbo_pairs(ld_u8(vb + 8 * wl), C::kValueBits == 3 ? ld_u8(sg) >> (4 * (r & 1)) & 15u : 0u);
                }
                key_frag<C, false>({word, word}, 0, lut_lane, x[h][u][0], x[h][u][1]);
              }
            }
          // pair e of the four tokens' halves v[h][u][e] → the A registers of m-tile 2w + e
          auto pair_a = [&](const uint32_t (&v)[2][4][2], int e, uint32_t (&af)[2][4]) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              af[h][0] = __byte_perm(v[h][0][e], v[h][1][e], 0x5410);
              af[h][1] = __byte_perm(v[h][0][e], v[h][1][e], 0x7632);
              af[h][2] = __byte_perm(v[h][2][e], v[h][3][e], 0x5410);
              af[h][3] = __byte_perm(v[h][2][e], v[h][3][e], 0x7632);
            }
          };
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            uint32_t af[2][4];
            pair_a(x, e, af);
            fold(pb[w / 4], acc[2 * w + e], af[0], af[1]);
            if constexpr (Q::kQjl) {
              pair_a(z, e, af);
              fold(pq[w / 4], acc2[2 * w + e], af[0], af[1]);
            }
          }
        }
      } else if constexpr (kVPar) {
        // k-step j: the words of k slots p, p + 4 (rows of row set j & 1 in half j >> 1); m-tile i takes
        // word i >> 1, nibbles 2(i & 1) (row r: c·2^-24) and 2(i & 1) + 1 (row r + 8: c·2^-20), each with
        // nibble + 4 beside it (e = 1) — masked in place, exact
        uint32_t x[4][2][2];  // [k-step][slot u][word]
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const uint8_t* vb = hb[j >> 1] + v_off[u] + 8 * (j & 1) * rm.cst;
            x[j][u][0] = ld_u32(vb);
            x[j][u][1] = ld_u32(vb + 32);
          }
        // the warp's codes 2 bytes into a word: row 7's second words take codes 0, 1 from the word before
        // the codes (predicated: a warp-uniform branch around it made the body 17 instructions longer)
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int u = 0; u < 2; ++u)
            if (vw) {
              const uint8_t* vb = hb[j >> 1] + v_off[u] + 8 * (j & 1) * rm.cst;
              x[j][u][1] = __byte_perm(x[j][u][1], ld_u32(vb - 32), 0x7610u);  // codes 62, 63 | 0, 1
            }
#pragma unroll
        for (int j = 0; j < 4; ++j)
#pragma unroll
          for (int i = 0; i < NACC; ++i) {
            auto nib = [&](uint32_t w, int row8) {
              return ((i & 1) ? w >> 8 : w) & (row8 ? 0x00f000f0u : 0x000f000fu);
            };
            const uint32_t af[4] = {nib(x[j][0][i >> 1], 0), nib(x[j][0][i >> 1], 1), nib(x[j][1][i >> 1], 0),
                                    nib(x[j][1][i >> 1], 1)};
            dev::mma_16816(acc[i], af, pbv[j][0], pbv[j][1]);
          }
      } else if constexpr (C::kValueBits == 4) {
        // Unit slot w: 4 dims of each token → m-tiles 2w, 2w+1. wab / wcd: the slot's 16 bits of the
        // tokens of k-slots 2p, 2p+1 / 2p+8, 2p+9 (low / high half), one PRMT each. u16 words: lane row
        // r reads byte 2r + 16w of each token's codes (WS = 16 bytes between a row's words; rows
        // QCfg::kVRowBytes = 2 apart). Aligned words (kVWords): lane row r reads words r + 8k + v_s
        // (k < NV2), slot w is half w & 1 of word w >> 1; where v_s = 1 (codes 2 bytes past a word)
        // the last slot of row 7 is unit 0, the high half of the word 32 bytes back, read by that row
        // alone.
        constexpr int NV2 = kVWords ? Q::kVChunk / 4 : 1;
        [[maybe_unused]] constexpr int WS = 16;
        [[maybe_unused]] uint32_t xw[2][4][NV2];
        if constexpr (kVWords) {
#pragma unroll
          for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
              for (int k = 0; k < NV2; ++k) xw[h][u][k] = ld_u32(vp[h][u] + 32 * k);
        }
#pragma unroll
        for (int w = 0; w < Q::kVChunk / 2; ++w) {
          uint32_t wab[2], wcd[2];
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if constexpr (kVWords) {
              const uint32_t sel = w & 1 ? 0x7632u : 0x5410u;
              wab[h] = __byte_perm(xw[h][0][w >> 1], xw[h][1][w >> 1], sel);
              wcd[h] = __byte_perm(xw[h][2][w >> 1], xw[h][3][w >> 1], sel);
              if (w == 2 * NV2 - 1 && vw) {
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
            fold(pb[0], acc[2 * w + m], af[0], af[1]);
          }
        }
      } else {
        // 3-bit codes: lane row r's chunk of NB = 3·d/64 bytes (code j of the chunk at bit 3j),
        // A = the code masked in place, the fp16 subnormal c·2^(k − 24), k = value_code_bit(j)
        // (exact; undone at the write-out). m-tile i: row r code 2i, row r + 8 code 2i + 1.
        constexpr int NB = Q::kVChunk;
        // code(h, t, j): the A register of code j for half h's token pair t (tokens 2p, 2p+1 or
        // 2p+8, 2p+9 in its low / high half)
        auto fold_codes = [&](auto&& code) {
#pragma unroll
          for (int i = 0; i < D / 16; ++i) {
            const uint32_t a0[4] = {code(0, 0, 2 * i), code(0, 0, 2 * i + 1), code(0, 1, 2 * i), code(0, 1, 2 * i + 1)};
            const uint32_t a1[4] = {code(1, 0, 2 * i), code(1, 0, 2 * i + 1), code(1, 1, 2 * i), code(1, 1, 2 * i + 1)};
            fold(pb[0], acc[i], a0, a1);
          }
        };
        if constexpr (NB % 2 == 0) {
          // d ≥ 128 (even chunks at even offsets): e[h][t][m] = bytes 2m, 2m+1 of token pair t's
          // two tokens (low half: tokens 2p / 2p+8, high half: 2p+1 / 2p+9). Code j lies in the
          // byte window b = 3j / 8 (bytes b, b+1) at bit k = 3j % 8 ≤ 7 of each half: window 2m is
          // e[m], window 2m+1 one PRMT of e[m] and e[m+1], the last (codes in byte NB − 1 alone)
          // e[m] >> 8. Per token pair 16 LOP3 and ≤ 6 PRMT/SHF for 32 codes, from NB/2 u16 loads
          // per token.
          static_assert(Q::kSlot % 2 == 0 && C::kKeyBytes % 2 == 0, "u16 loads of the value chunks");
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
              unsigned __int128 v = 0;
#pragma unroll
              for (int i = 0; i < NH; ++i) v |= (unsigned __int128)ld_u16(q + 2 * i) << (16 * i);
              xs[h][u] = v >> (8 * odd);
            }
          fold_codes([&](int h, int t, int j) {
            const uint32_t lo = uint32_t(xs[h][2 * t] >> (3 * j)) & 7u, hi = uint32_t(xs[h][2 * t + 1] >> (3 * j)) & 7u;
            return lo | (hi << 16);
          });
        }
      }
    };
    using RunTime = std::integral_constant<int, -1>;
    if (nvalid == kSub) {
      if constexpr (kKeyOff) {
        if (key_mod == 0)
          tile_body(std::true_type{}, std::integral_constant<int, 0>{});
        else if (key_mod == 2)
          tile_body(std::true_type{}, std::integral_constant<int, 2>{});
        else  // never (slots are even); without this branch ptxas scheduled both bodies differently
          tile_body(std::false_type{}, RunTime{});  // (cuobjdump), which was not timed
      } else {
        tile_body(std::true_type{}, RunTime{});
      }
    } else if (nvalid > 0) {
      tile_body(std::false_type{}, RunTime{});
    }
    // Every lane releases its own reads of the stage (the empty barrier counts all the CTA's
    // threads). Lane 0 alone arriving after __syncwarp left compute-sanitizer racecheck 16 hazards
    // (the refill's bulk copy against the other lanes' reads); this is clean, and timed within
    // ±2% of it except k3v4_nc at 2 kv heads, 32K (+5%: ptxas spills).
    dev::mbar_arrive(empty0 + 8u * s);
    sp = s;
    php = ph;
    if (++s == S) {
      s = 0;
      ph ^= 1u;
    }
  }

  // The merge kernel (a programmatic dependent launch) may start launching now: its CTAs
  // wait in griddepcontrol.wait until this grid has finished and its writes are visible,
  // so its launch overlaps the write-out instead of following the last CTA's exit.
  // (Signalled at the start of stage 1 instead, the waiting merge CTAs take SM slots
  // during the main loop and both decodes get slower.)
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  // ---- write this warp's part: O = (Σ c·P' (scaled back) + Σ p·zero) / Σ p ----
  if constexpr (PK && !kVPar) {  // add the lo columns (lanes p + 2) to the hi columns
#pragma unroll
    for (int i = 0; i < D / 16; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] += __shfl_xor_sync(dev::kFull, acc[i][j], 2);
    if constexpr (Q::kQjl) {
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
  auto part_row = [&](int qh_idx) { return (int64_t(qh_idx) * a.items + row_item) * wph + ws; };
  auto out_row = [&](int qh_idx) { return a.out + int64_t(blockIdx.x) * a.o_sb + int64_t(qh_idx) * a.o_sh; };
  // per-lane partials over the lane's tokens (packed: one half; lane p ^ 2 holds the other)
  auto total = [&](float v) {
    if constexpr (PK) v += __shfl_xor_sync(dev::kFull, v, 2);
    return dev::sum_over_token_lanes(v);
  };
  if constexpr (Q::kTurbo) {
    // (no value zero: the Σ p·zero terms, read from the value qs, are dead here)
    // acc: Σ p·norm·α·c in the rotated domain (row dims: out_dim). One query head at a
    // time through this warp's q buffer: x̂ = s1 · H(s2 · acc) · rot_scale / (α · Σp) per
    // block of 128, the first C::kD values (TurboCodec::decode, linear, so once per part).
    float inv[2], lse[2];
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l = total(sm.l[c]);
      inv[c] = l > 0.f ? 1.f / l : 0.f;
      lse[c] = l > 0.f ? sm.m[c] + __log2f(l) : -INFINITY;
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
      if constexpr (Q::kQjl) {  // + α · R⁻¹(acc2 / Σp), R⁻¹ = qs1 · H(qs2 ·) / √128 per block (s2: as y)
        float y2[D / 32];
        gather(acc2, t.qs2, y2);
        block_fwht<Q::kTB>(y2, lane);
        const float ka = t.lut_scale * t.rot_scale;
#pragma unroll
        for (int k = 0; k < D / 32; ++k) y[k] = fmaf(((t.s2[k & 3] ^ t.qs1[k & 3]) >> lane) & 1u ? -ka : ka, y2[k], y[k]);
      }
      block_fwht<Q::kTB>(y, lane);
      const float lse_g = __shfl_sync(dev::kFull, c ? lse[1] : lse[0], g >> 1);
      const int qh_idx = dev::query_head<(H < 0)>(a, kvh, g0 + g);
      const int64_t row = part_row(qh_idx);
#pragma unroll
      for (int k = 0; k < D / 32; ++k) {
        const int j = lane + 32 * k;
        if (j >= C::kD) continue;
        const float v = y[k] * ((t.s1[k & 3] >> lane) & 1u ? -osc : osc);
        if (a.parts == 1)
          out_row(qh_idx)[j] = __float2half_rn(v);
        else
          a.o_part[row * C::kD + j] = v;
      }
      if (a.parts > 1 && lane == 0) a.lse_part[row] = lse_g;
    }
  } else {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const float l = total(sm.l[c]);
      const float z = total(zs[c]);
      // kVPar: every lane, head 2(p & 1) + c, columns e = p >> 1
      const int g = kVPar ? 2 * (p & 1) + c : 2 * p + c;
      if (g >= group() || (PK && !kVPar && !hi_lane)) continue;
      const int qh_idx = dev::query_head<(H < 0)>(a, kvh, g0 + g);
      const float inv = l > 0.f ? 1.f / l : 0.f;
      // m-tile i: 4-bit values, acc rows r hold Σ c·P'·2^-24, rows r+8 Σ c·P'·2^-20; 3-bit values,
      // rows r / r+8 Σ c·P'·2^(k − 24) for codes 2i / 2i+1 (value_code_bit): exact scalings.
      auto val = [&](float v, int i, bool row8) {
        if constexpr (C::kValueBits == 4) return (v * (row8 ? 1048576.f : 16777216.f) + z) * inv;
        return (v * float(1 << (24 - value_code_bit<Q::kVChunk>(2 * i + row8))) + z) * inv;
      };
      // output dim of acc row r of m-tile i (row r + 8: the next): kVWords, 4 · the unit of slot w = i >> 1
      // (2r + v_s + 16·(w >> 1) + (w & 1), mod D/4) + 2·(i & 1); else QCfg::out_dim
      // kVPar: word i >> 1's nibble 2(i & 1) + 4e (e = p >> 1) of this lane's words, (64(i >> 1) + 8r + 4v_s
      // + 2(i & 1) + 4e) mod 128
      auto vdim = [&](int i) {
        if constexpr (kVPar) return (64 * (i >> 1) + 8 * r + 4 * v_s + 2 * (i & 1) + 4 * (p >> 1)) & (D - 1);
        if constexpr (kVWords) return 4 * ((2 * r + v_s + 16 * (i >> 2) + ((i >> 1) & 1)) & (D / 4 - 1)) + 2 * (i & 1);
        return Q::out_dim(r, i);
      };
      if (a.parts == 1) {
        __half* o = out_row(qh_idx);
#pragma unroll
        for (int i = 0; i < NACC; ++i)
          *reinterpret_cast<__half2*>(o + vdim(i)) =
              __floats2half2_rn(val(acc[i][c], i, false), val(acc[i][c + 2], i, true));
      } else {
        const int64_t row = part_row(qh_idx);
        float* o = a.o_part + row * D;
#pragma unroll
        for (int i = 0; i < NACC; ++i)
          *reinterpret_cast<float2*>(o + vdim(i)) =
              make_float2(val(acc[i][c], i, false), val(acc[i][c + 2], i, true));
        if (r == 0 && (!kVPar || p < 2)) a.lse_part[row] = l > 0.f ? sm.m[c] + __log2f(l) : -INFINITY;
      }
    }
  }
}

template <class C>
constexpr int decode_min_ctas() {
  return QCfg<C>::kWide || QCfg<C>::kQjl || C::kD >= 256 ? 1 : 2;
}
template <class C, bool P, bool PK, int H>
__global__ void __launch_bounds__(32 * QCfg<C>::kCtaWarps, decode_min_ctas<C>())
    decode_kernel(DecodeArgs a, TablesFor<C> t, const uint8_t* __restrict__ cache) {
  decode_body<C, P, PK, H, false>(a, t, cache);
}
// The TM variant: the map is read by address, so the parameter is __grid_constant__ (on every
// kernel's tables, that moved ptxas's schedules in 212 of them).
template <class C, bool PK>
__global__ void __launch_bounds__(32 * QCfg<C>::kCtaWarps, decode_min_ctas<C>())
    decode_kernel_tm(DecodeArgs a, const __grid_constant__ DecodeTablesTm t, const uint8_t* __restrict__ cache) {
  decode_body<C, false, PK, 8, true>(a, t, cache);
}

// The kernel for a layout and group size: planes only for the formats
// planes_support accepts (checked by decode_can_implement before we get here);
// packed hi/lo query columns for G ≤ 4; for the wide-LUT formats, heads per CTA known at
// compile time (HS: 8, 4, 16 and 2 — their plans use all 16 warps, so warps per head too) where
// the plan has one of them, else at run time (HR). With run-time heads the G > 4 kernels spill
// and every row offset is computed: at 4 kv heads 10% slower (G 7) and 4% (G 4) than the
// 4-head kernel, at 8 kv heads 4–12%.
template <class C, int HR, int... HS, class Fn>
void pick_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  static_assert(!QCfg<C>::kWide || tm_rows<C>(8),
                "decode_heads_per_cta gives the wide-LUT formats CTAs of 8 heads above 16 kv heads: their rows must take boxes");
  auto packed_or_not = [&](auto p, auto h, auto tm) {
    constexpr bool P = decltype(p)::value, TM = decltype(tm)::value;
    constexpr int H = decltype(h)::value;
    if constexpr (TM) {
      static_assert(H == 8 && !P);
      return sel.group <= 4 ? fn(decode_kernel_tm<C, true>) : fn(decode_kernel_tm<C, false>);
    } else if constexpr (dual_slices(H)) {  // group = G > 8
      return fn(decode_kernel<C, P, false, H>);
    } else {
      return sel.group <= 4 ? fn(decode_kernel<C, P, true, H>) : fn(decode_kernel<C, P, false, H>);
    }
  };
  using No = std::false_type;
  using Runtime = std::integral_constant<int, HR>;
  if constexpr (QCfg<C>::kMse && C::kValueBits == 4 && !dual_slices(HR)) {
    if (sel.planes) return packed_or_not(std::true_type{}, Runtime{}, No{});
  }
  if (sel.planes) throw_error("paged_decode: no plane-layout kernel for this format (internal)");
  if constexpr (QCfg<C>::kWide) {
    bool done = false;
    auto try_heads = [&](auto h) {
      constexpr int H = decltype(h)::value, heads = compile_heads(H), slices = dual_slices(H) ? 2 : 1;
      if (done || sel.hpc != heads || sel.wph != QCfg<C>::kCtaWarps / (slices * heads)) return;
      constexpr bool kTmVariant = H == 8 && tm_rows<C>(heads);  // (tm_copies' kernels)
      if (sel.tmap && !kTmVariant) return;                       // refused below
      done = true;
      if constexpr (kTmVariant)
        if (sel.tmap) return packed_or_not(No{}, h, std::true_type{});
      packed_or_not(No{}, h, No{});
    };
    (try_heads(std::integral_constant<int, HS>{}), ...);
    if (done) return;
  }
  if (sel.tmap) throw_error("paged_decode: no tensor-map kernel for these heads per CTA (internal)");
  packed_or_not(No{}, Runtime{}, No{});
}
// sel.sliced: one slice of ≤ 8 query columns of G > 8 (for_each_query_slice); sel.slices 2: both
// slices in one launch (DecodePlan::query_slices)
template <class C, class Fn>
void with_kernel(const DecodeKernelSel& sel, Fn&& fn) {
  if (sel.slices == 2) return pick_kernel<C, kDual, kDual8>(sel, fn);
  if (sel.sliced) return pick_kernel<C, kSliced, kSliced8>(sel, fn);
  pick_kernel<C, 0, 8, 4, 16, 2>(sel, fn);
}

}  // namespace

template <class C>
int decode_kernel_occupancy(const DecodeKernelSel& sel, int threads, int smem_bytes) {
  int occ = 0;
  with_kernel<C>(sel, [&](auto kern) {
    TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    TQ_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, threads, smem_bytes));
  });
  return occ;
}

// The tables parameter a kernel of type K takes (K: its function pointer type).
template <class K>
struct KernelTables;
template <class T>
struct KernelTables<void (*)(DecodeArgs, T, const uint8_t*)> {
  using type = T;
};

// map: the cache's tensor map (sel.tmap; else unused).
template <class C>
void decode_kernel_launch(const DecodeKernelSel& sel, const DecodeArgs& a, const DecodeTablesQjl& t,
                          const uint8_t* cache, const CUtensorMap* map, dim3 grid, int threads, int smem_bytes,
                          cudaStream_t stream) {
  with_kernel<C>(sel, [&](auto kern) {
    TQ_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
    if constexpr (std::is_same_v<typename KernelTables<decltype(kern)>::type, DecodeTablesTm>) {
      DecodeTablesTm tt{};
      static_cast<DecodeTables&>(tt) = t;
      tt.map = *map;
      kern<<<grid, threads, smem_bytes, stream>>>(a, tt, cache);
    } else {
      kern<<<grid, threads, smem_bytes, stream>>>(a, static_cast<const TablesFor<C>&>(t), cache);
    }
    TQ_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace tq::cuda

// Explicit instantiations for one format at head dims 64, 128 and 256 (the cases of
// dispatch_head_dim); every format dispatch_decode_format names has one decode_<format>.cu.
#define TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, D)                                                          \
  template int tq::cuda::decode_kernel_occupancy<tq::cuda::FormatCfg<KK, KB, VK, VB, D>>(                  \
      const tq::cuda::DecodeKernelSel&, int, int);                                                          \
  template void tq::cuda::decode_kernel_launch<tq::cuda::FormatCfg<KK, KB, VK, VB, D>>(                    \
      const tq::cuda::DecodeKernelSel&, const tq::cuda::DecodeArgs&, const tq::cuda::DecodeTablesQjl&,     \
      const uint8_t*, const CUtensorMap*, dim3, int, int, cudaStream_t);
#define TQ_DECODE_INSTANTIATE(KK, KB, VK, VB)   \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 64)  \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 128) \
  TQ_DECODE_INSTANTIATE_D(KK, KB, VK, VB, 256)
