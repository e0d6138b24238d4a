#include "tq/simd.h"

#include "tq/bitpack.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TQ_X86 1
#endif

namespace tq {

namespace detail {

void fwht_scalar(float* x, int n) {
  for (int h = 1; h < n; h <<= 1)
    for (int i = 0; i < n; i += h << 1)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
}

void bucketize_scalar(const float* y, int n, const float* mids, int nm, uint8_t* idx) {
  for (int j = 0; j < n; ++j) {
    int c = 0;
    for (int i = 0; i < nm; ++i) c += y[j] >= mids[i];
    idx[j] = uint8_t(c);
  }
}

void pack_nibbles_scalar(const uint8_t* codes, size_t n, uint8_t* out) {
  for (size_t j = 0; j + 1 < n; j += 2) out[j / 2] = uint8_t((codes[j] & 15) | (codes[j + 1] << 4));
}

}  // namespace detail

#ifdef TQ_X86
namespace {

// Lane i of the result: bit h of i clear → x_i + x_{i+h}; set → x_{i−h} − x_i,
// exactly the scalar butterfly (a + b, a − b) for the pair.
__attribute__((target("avx2"))) inline __m256 butterfly_in_register(__m256 v, __m256i perm, __m256 hi_lanes) {
  const __m256 s = _mm256_permutevar8x32_ps(v, perm);
  return _mm256_blendv_ps(_mm256_add_ps(v, s), _mm256_sub_ps(s, v), hi_lanes);
}

// 64 values = 8 vectors in registers through stages h = 1 … 32 (8 data +
// 6 constant registers: no spills).
__attribute__((target("avx2"))) void fwht64_avx2(float* x) {
  const __m256i p1 = _mm256_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6), p2 = _mm256_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5),
                p4 = _mm256_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3);
  const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
  const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
  const __m256 m4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
  __m256 v[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    v[i] = butterfly_in_register(v[i], p1, m1);
    v[i] = butterfly_in_register(v[i], p2, m2);
    v[i] = butterfly_in_register(v[i], p4, m4);
  }
#define TQ_BF(j, h)                                      \
  do {                                                   \
    const __m256 a = v[j], b = v[j + h];                 \
    v[j] = _mm256_add_ps(a, b);                          \
    v[j + h] = _mm256_sub_ps(a, b);                      \
  } while (0)
  TQ_BF(0, 1); TQ_BF(2, 1); TQ_BF(4, 1); TQ_BF(6, 1);    // h = 8
  TQ_BF(0, 2); TQ_BF(1, 2); TQ_BF(4, 2); TQ_BF(5, 2);    // h = 16
  TQ_BF(0, 4); TQ_BF(1, 4); TQ_BF(2, 4); TQ_BF(3, 4);    // h = 32
#undef TQ_BF
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(x + 8 * i, v[i]);
}

__attribute__((target("avx2"))) void fwht_avx2(float* x, int n) {
  if (n >= 64) {  // stages h < 64 block by block in registers, then the wide stages
    for (int i = 0; i < n; i += 64) fwht64_avx2(x + i);
    for (int h = 64; h < n; h <<= 1)
      for (int i = 0; i < n; i += h << 1)
        for (int j = i; j < i + h; j += 8) {
          const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
          _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
          _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
        }
    return;
  }
  const __m256i p1 = _mm256_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6), p2 = _mm256_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5),
                p4 = _mm256_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3);
  const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, -1, 0, -1, 0, -1, 0, -1));
  const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, -1, -1, 0, 0, -1, -1));
  const __m256 m4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, -1, -1, -1, -1));
  for (int i = 0; i < n; i += 8) {  // stages h = 1, 2, 4 inside each group of 8
    __m256 v = _mm256_loadu_ps(x + i);
    v = butterfly_in_register(v, p1, m1);
    v = butterfly_in_register(v, p2, m2);
    v = butterfly_in_register(v, p4, m4);
    _mm256_storeu_ps(x + i, v);
  }
  for (int h = 8; h < n; h <<= 1)
    for (int i = 0; i < n; i += h << 1)
      for (int j = i; j < i + h; j += 8) {
        const __m256 a = _mm256_loadu_ps(x + j), b = _mm256_loadu_ps(x + j + h);
        _mm256_storeu_ps(x + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(x + j + h, _mm256_sub_ps(a, b));
      }
}

// Branch-free binary search for nm = 2^b − 1 midpoints (b ≤ 4, the Lloyd-Max
// codebooks): at level l the candidate is m[idx + 2^l − 1], looked up with one
// permute from a table of ≤ 8 entries. Every step is the exact comparison
// y ≥ m, so the count equals the scalar one. Other sizes compare against
// every midpoint and count.
__attribute__((target("avx2"))) inline void store8(__m256i c, uint8_t* out) {
  const __m256i p16 = _mm256_packus_epi32(c, c);  // per 128-bit lane
  const __m256i p8 = _mm256_packus_epi16(p16, p16);
  const uint32_t lo = uint32_t(_mm256_extract_epi32(p8, 0)), hi = uint32_t(_mm256_extract_epi32(p8, 4));
  std::memcpy(out, &lo, 4);
  std::memcpy(out + 4, &hi, 4);
}

template <int kLevels>
__attribute__((target("avx2"))) int bucketize_tree_avx2(const float* y, int n, const float (*tables)[8], uint8_t* idx) {
  __m256 table[kLevels];
#pragma GCC unroll 4
  for (int l = 0; l < kLevels; ++l) table[l] = _mm256_load_ps(tables[l]);
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(y + j);
    __m256i c = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int l = kLevels - 1; l >= 0; --l) {
      const __m256 cand = _mm256_permutevar8x32_ps(table[l], _mm256_srli_epi32(c, l + 1));
      const __m256i ge = _mm256_castps_si256(_mm256_cmp_ps(v, cand, _CMP_GE_OQ));
      c = _mm256_add_epi32(c, _mm256_and_si256(ge, _mm256_set1_epi32(1 << l)));
    }
    store8(c, idx + j);
  }
  return j;
}

__attribute__((target("avx2"))) void bucketize_avx2(const float* y, int n, const float* mids, int nm, int levels,
                                                    const float (*tables)[8], uint8_t* idx) {
  int j = 0;
  switch (levels) {
    case 4: j = bucketize_tree_avx2<4>(y, n, tables, idx); break;
    case 3: j = bucketize_tree_avx2<3>(y, n, tables, idx); break;
    case 2: j = bucketize_tree_avx2<2>(y, n, tables, idx); break;
    case 1: j = bucketize_tree_avx2<1>(y, n, tables, idx); break;
    default:
      for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(y + j);
        __m256i c = _mm256_setzero_si256();
        for (int i = 0; i < nm; ++i) {
          const __m256 ge = _mm256_cmp_ps(v, _mm256_set1_ps(mids[i]), _CMP_GE_OQ);
          c = _mm256_sub_epi32(c, _mm256_castps_si256(ge));  // mask is −1 where y ≥ m
        }
        store8(c, idx + j);
      }
  }
  detail::bucketize_scalar(y + j, n - j, mids, nm, idx + j);
}

// byte i = codes[2i] | codes[2i+1] << 4: maddubs adds c0·1 + c1·16 per pair
// (codes masked to 4 bits first, so the sum fits a byte like the scalar one).
__attribute__((target("avx2"))) void pack_nibbles_avx2(const uint8_t* codes, size_t n, uint8_t* out) {
  size_t j = 0;
  const __m256i w = _mm256_set1_epi16(0x1001), lo = _mm256_set1_epi8(15);
  for (; j + 32 <= n; j += 32) {
    const __m256i c = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + j)), lo);
    const __m256i pairs = _mm256_maddubs_epi16(c, w);                      // 16 × int16
    const __m256i packed = _mm256_packus_epi16(pairs, pairs);              // bytes per lane
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);        // lanes 0, 2 → low 128
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j / 2), _mm256_castsi256_si128(ordered));
  }
  detail::pack_nibbles_scalar(codes + j, n - j, out + j / 2);
}

__attribute__((target("avx2"))) bool all_within_avx2(const float* x, size_t n, float limit) {
  const __m256 lim = _mm256_set1_ps(limit), sign = _mm256_set1_ps(-0.0f);
  __m256 ok = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(a, lim, _CMP_LE_OQ));  // false for NaN
  }
  bool good = _mm256_movemask_ps(ok) == 0xff;
  for (; i < n; ++i) good = good && std::fabs(x[i]) <= limit;
  return good;
}

__attribute__((target("avx2"))) void scale2_avx2(float* x, int n, float a, float b) {
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  int j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j), va), vb));
  for (; j < n; ++j) x[j] = (x[j] * a) * b;
}

// s_i = x_i² + x_{i+h}² (h = n/2), then s_i += s_{i+h'} for h' = n/4 … 1: the
// vertical levels on 8-lane vectors, the last three inside one register
// (lane i += lane i+4, += lane i+2, += lane i+1) — each element sees the same
// additions in the same order as the scalar tree.
__attribute__((target("avx2"))) float tree_sum_squares_pow2_avx2(const float* x, int n) {
  alignas(32) float buf[2048];
  const int h = n / 2;
  for (int i = 0; i < h; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + h);
    _mm256_store_ps(buf + i, _mm256_add_ps(_mm256_mul_ps(a, a), _mm256_mul_ps(b, b)));
  }
  for (int w = h / 2; w >= 8; w /= 2)
    for (int i = 0; i < w; i += 8)
      _mm256_store_ps(buf + i, _mm256_add_ps(_mm256_load_ps(buf + i), _mm256_load_ps(buf + i + w)));
  __m256 v = _mm256_load_ps(buf);
  v = _mm256_add_ps(v, _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(4, 5, 6, 7, 4, 5, 6, 7)));
  v = _mm256_add_ps(v, _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(2, 3, 2, 3, 2, 3, 2, 3)));
  v = _mm256_add_ps(v, _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1)));
  return _mm256_cvtss_f32(v);
}

#define TQ_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
// Helpers are always inlined: a helper left out of line and reached by a tail
// call returns with dirty upper registers (GCC puts no vzeroupper there), which
// slows down the SSE code that follows several-fold.
#define TQ_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline
// GCC 12.2's AVX-512 intrinsics seed their unused merge operand with a
// self-initialized _mm512_undefined_*(), which -Wuninitialized flags (PR 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// Stages h = 1, 2, 4, 8 of one 16-lane register. s holds each lane's partner
// (lane i ^ h); lanes with bit h clear get v + s = x_i + x_{i+h}, the others
// s − v = x_{i−h} − x_i: the scalar butterfly with its operand order. The
// partner swaps are in-lane (h = 1, 2) or 128-bit block shuffles (h = 4, 8).
TQ_AVX512_INLINE __m512 fwht16_avx512(__m512 v) {
  __m512 s = _mm512_permute_ps(v, 0xB1);
  v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xAAAA, s, v);
  s = _mm512_permute_ps(v, 0x4E);
  v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xCCCC, s, v);
  s = _mm512_shuffle_f32x4(v, v, 0xB1);
  v = _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xF0F0, s, v);
  s = _mm512_shuffle_f32x4(v, v, 0x4E);
  return _mm512_mask_sub_ps(_mm512_add_ps(v, s), 0xFF00, s, v);
}

// 16·R values in R registers (R ≤ 8: 128 floats, no spills) through every
// stage h < 16·R, then optionally · a then · b; loads all before storing, so
// y may be x.
template <int R, bool kScale>
TQ_AVX512_INLINE void fwht_block_avx512(const float* x, float* y, __m512 a, __m512 b) {
  __m512 v[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) v[i] = fwht16_avx512(_mm512_loadu_ps(x + 16 * i));
#pragma GCC unroll 4
  for (int h = 1; h < R; h <<= 1)
#pragma GCC unroll 8
    for (int k = 0; k < R / 2; ++k) {  // k-th pair of the stage: j = (k / h)·2h + k % h
      const int j = (k / h) * 2 * h + k % h;
      const __m512 p = v[j], q = v[j + h];
      v[j] = _mm512_add_ps(p, q);
      v[j + h] = _mm512_sub_ps(p, q);
    }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    if (kScale) v[i] = _mm512_mul_ps(_mm512_mul_ps(v[i], a), b);
    _mm512_storeu_ps(y + 16 * i, v[i]);
  }
}

// n ≥ 16: blocks of up to 128 in registers, then the wide stages through
// memory (the last one scaling when asked).
template <bool kScale>
TQ_AVX512 void fwht_avx512(const float* x, float* y, int n, float a, float b) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  switch (n) {
    case 16: fwht_block_avx512<1, kScale>(x, y, va, vb); return;
    case 32: fwht_block_avx512<2, kScale>(x, y, va, vb); return;
    case 64: fwht_block_avx512<4, kScale>(x, y, va, vb); return;
    case 128: fwht_block_avx512<8, kScale>(x, y, va, vb); return;
    default: break;
  }
  for (int i = 0; i < n; i += 128) fwht_block_avx512<8, false>(x + i, y + i, va, vb);
  for (int h = 128; h < n; h <<= 1) {
    const bool scale = kScale && 2 * h == n;
    for (int i = 0; i < n; i += h << 1)
      for (int j = i; j < i + h; j += 16) {
        const __m512 p = _mm512_loadu_ps(y + j), q = _mm512_loadu_ps(y + j + h);
        __m512 s = _mm512_add_ps(p, q), t = _mm512_sub_ps(p, q);
        if (scale) {
          s = _mm512_mul_ps(_mm512_mul_ps(s, va), vb);
          t = _mm512_mul_ps(_mm512_mul_ps(t, va), vb);
        }
        _mm512_storeu_ps(y + j, s);
        _mm512_storeu_ps(y + j + h, t);
      }
  }
}

// The binary search of bucketize_tree_avx2 on 16 lanes with the count c as
// the permute index: lut[l][c] = m[c + 2^l − 1] (permutes read the low 4 bits,
// c < 16). Per level: permute, compare into a mask, add 2^l where it is set.
template <int kLevels>
TQ_AVX512_INLINE __m512i bucket16_avx512(__m512 v, __m512 top, const __m512* t) {
  __m512i c = _mm512_maskz_mov_epi32(_mm512_cmp_ps_mask(v, top, _CMP_GE_OQ), _mm512_set1_epi32(1 << (kLevels - 1)));
#pragma GCC unroll 4
  for (int l = kLevels - 2; l >= 0; --l) {
    const __mmask16 ge = _mm512_cmp_ps_mask(v, _mm512_permutexvar_ps(c, t[l]), _CMP_GE_OQ);
    c = _mm512_add_epi32(c, _mm512_maskz_mov_epi32(ge, _mm512_set1_epi32(1 << l)));
  }
  return c;
}

// Full vectors, then one masked load and store for the tail.
template <int kLevels>
TQ_AVX512 void bucketize_tree_avx512(const float* y, int n, const float (*lut)[16], uint8_t* idx) {
  __m512 t[kLevels];
#pragma GCC unroll 4
  for (int l = 0; l < kLevels; ++l) t[l] = _mm512_loadu_ps(lut[l]);
  const __m512 top = _mm512_set1_ps(lut[kLevels - 1][0]);
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(idx + j),
                     _mm512_cvtepi32_epi8(bucket16_avx512<kLevels>(_mm512_loadu_ps(y + j), top, t)));
  if (j < n) {
    const __mmask16 live = __mmask16((1u << (n - j)) - 1);
    const __m512i c = bucket16_avx512<kLevels>(_mm512_maskz_loadu_ps(live, y + j), top, t);
    _mm512_mask_cvtepi32_storeu_epi8(idx + j, live, c);
  }
}

TQ_AVX512 void bucketize_avx512(const float* y, int n, const float* mids, int nm, int levels,
                                const float (*lut)[16], uint8_t* idx) {
  switch (levels) {
    case 4: bucketize_tree_avx512<4>(y, n, lut, idx); return;
    case 3: bucketize_tree_avx512<3>(y, n, lut, idx); return;
    case 2: bucketize_tree_avx512<2>(y, n, lut, idx); return;
    case 1: bucketize_tree_avx512<1>(y, n, lut, idx); return;
    default: break;
  }
  for (int j = 0; j < n; j += 16) {  // count the midpoints ≤ y (counts ≤ 255 fit a byte)
    const __mmask16 live = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(live, y + j);
    __m512i c = _mm512_setzero_si512();
    for (int i = 0; i < nm; ++i)
      c = _mm512_mask_add_epi32(c, _mm512_cmp_ps_mask(v, _mm512_set1_ps(mids[i]), _CMP_GE_OQ), c,
                                _mm512_set1_epi32(1));
    _mm512_mask_cvtepi32_storeu_epi8(idx + j, live, c);
  }
}

// 64 codes per step: maddubs pairs as in the AVX2 path, vpmovwb narrows the
// 32 words (each ≤ 255) to bytes; the tail uses byte masks.
TQ_AVX512 void pack_nibbles_avx512(const uint8_t* codes, size_t n, uint8_t* out) {
  const __m512i w = _mm512_set1_epi16(0x1001), lo = _mm512_set1_epi8(15);
  for (size_t j = 0; j + 1 < n; j += 64) {
    const size_t pairs = (n - j) / 2 >= 32 ? 32 : (n - j) / 2;
    const __mmask64 in = pairs == 32 ? ~__mmask64(0) : (__mmask64(1) << (2 * pairs)) - 1;
    const __mmask32 outm = pairs == 32 ? ~__mmask32(0) : (__mmask32(1) << pairs) - 1;
    const __m512i c = _mm512_and_si512(_mm512_maskz_loadu_epi8(in, codes + j), lo);
    _mm512_mask_cvtepi16_storeu_epi8(out + j / 2, outm, _mm512_maddubs_epi16(c, w));
  }
}

// |x| ≤ limit as integers: for limit in [+0, +inf] the bits of |x| order like
// the values, and NaN bits exceed those of +inf. A running unsigned max of the
// bits, compared once at the end. Negative, −0 or NaN limits take the AVX2 path.
TQ_AVX512 bool all_within_avx512(const float* x, size_t n, float limit) {
  uint32_t lim_bits;
  std::memcpy(&lim_bits, &limit, 4);
  if (lim_bits > 0x7f800000u) return all_within_avx2(x, n, limit);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  __m512i m0 = _mm512_setzero_si512(), m1 = m0, m2 = m0, m3 = m0;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(x + i), abs_mask));
    m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(x + i + 16), abs_mask));
    m2 = _mm512_max_epu32(m2, _mm512_and_si512(_mm512_loadu_si512(x + i + 32), abs_mask));
    m3 = _mm512_max_epu32(m3, _mm512_and_si512(_mm512_loadu_si512(x + i + 48), abs_mask));
  }
  __m512i m = _mm512_max_epu32(_mm512_max_epu32(m0, m1), _mm512_max_epu32(m2, m3));
  for (; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
    m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_maskz_loadu_epi32(live, x + i), abs_mask));
  }
  return _mm512_cmpgt_epu32_mask(m, _mm512_set1_epi32(int(lim_bits))) == 0;
}

TQ_AVX512 void scale2_avx512(float* x, int n, float a, float b) {
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (int j = 0; j < n; j += 16) {
    const __mmask16 live = n - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - j)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(live, x + j);
    _mm512_mask_storeu_ps(x + j, live, _mm512_mul_ps(_mm512_mul_ps(v, va), vb));
  }
}

// The last four levels of the tree in one register: lane i += lane i+8, then
// +4, +2, +1, narrowing as the live lanes halve (first operand the low lane).
TQ_AVX512_INLINE float tree16_avx512(__m512 v) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
  return _mm_cvtss_f32(_mm_add_ss(c, _mm_movehdup_ps(c)));
}

// n = 32·H in registers: s_r = x_r² + x_{r+H}² per 16-lane register r < H,
// the vertical levels s_r += s_{r+w} for w = H/2 … 1, then tree16.
template <int H>
TQ_AVX512_INLINE float tree_sum_squares_regs_avx512(const float* x) {
  __m512 s[H];
#pragma GCC unroll 8
  for (int r = 0; r < H; ++r) {
    const __m512 a = _mm512_loadu_ps(x + 16 * r), b = _mm512_loadu_ps(x + 16 * (r + H));
    s[r] = _mm512_add_ps(_mm512_mul_ps(a, a), _mm512_mul_ps(b, b));
  }
#pragma GCC unroll 4
  for (int w = H / 2; w >= 1; w /= 2)
#pragma GCC unroll 8
    for (int r = 0; r < w; ++r) s[r] = _mm512_add_ps(s[r], s[r + w]);
  return tree16_avx512(s[0]);
}

// 32 ≤ n ≤ 4096, a power of two.
TQ_AVX512 float tree_sum_squares_pow2_avx512(const float* x, int n) {
  switch (n) {
    case 32: return tree_sum_squares_regs_avx512<1>(x);
    case 64: return tree_sum_squares_regs_avx512<2>(x);
    case 128: return tree_sum_squares_regs_avx512<4>(x);
    case 256: return tree_sum_squares_regs_avx512<8>(x);
    default: break;
  }
  alignas(64) float buf[2048];
  const int h = n / 2;
  for (int i = 0; i < h; i += 16) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + h);
    _mm512_store_ps(buf + i, _mm512_add_ps(_mm512_mul_ps(a, a), _mm512_mul_ps(b, b)));
  }
  for (int w = h / 2; w >= 16; w /= 2)
    for (int i = 0; i < w; i += 16)
      _mm512_store_ps(buf + i, _mm512_add_ps(_mm512_load_ps(buf + i), _mm512_load_ps(buf + i + w)));
  return tree16_avx512(_mm512_load_ps(buf));
}

#pragma GCC diagnostic pop
#undef TQ_AVX512_INLINE
#undef TQ_AVX512

enum class Isa { scalar, avx2, avx512 };

Isa isa() {
  static const Isa v = [] {
    const bool avx2 = __builtin_cpu_supports("avx2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    const char* f = std::getenv("TQ_SIMD");
    if (f && std::strcmp(f, "scalar") == 0) return Isa::scalar;
    if (f && std::strcmp(f, "avx2") == 0) return avx2 ? Isa::avx2 : Isa::scalar;
    return avx512 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::scalar;
  }();
  return v;
}

}  // namespace
#endif

void fwht(float* x, int n) {
#ifdef TQ_X86
  if (n >= 16 && isa() == Isa::avx512) { fwht_avx512<false>(x, x, n, 1.0f, 1.0f); return; }
  if (n >= 8 && isa() >= Isa::avx2) { fwht_avx2(x, n); return; }
#endif
  detail::fwht_scalar(x, n);
}

void fwht_scale2(const float* x, float* y, int n, float a, float b) {
#ifdef TQ_X86
  if (n >= 16 && isa() == Isa::avx512) { fwht_avx512<true>(x, y, n, a, b); return; }
#endif
  if (y != x) std::memcpy(y, x, sizeof(float) * size_t(n));
  fwht(y, n);
  scale2_inplace(y, n, a, b);
}

void bucketize(const float* y, int n, const float* mids, int nm, uint8_t* idx) { Bucketizer(mids, nm)(y, n, idx); }

Bucketizer::Bucketizer(const float* mids, int nm) : mids_(mids, mids + nm) {
  int b = 0;
  while ((1 << b) - 1 < nm) ++b;
  levels_ = ((1 << b) - 1 == nm && b <= 4) ? b : 0;
  for (int l = 0; l < levels_; ++l)
    for (int k = 0; k < (1 << (levels_ - l - 1)); ++k) table_[l][k] = mids[(k << (l + 1)) + (1 << l) - 1];
  for (int l = 0; l < levels_; ++l)
    for (int c = 0; c < (1 << levels_); ++c) lut_[l][c] = table_[l][c >> (l + 1)];
}

void Bucketizer::operator()(const float* y, int n, uint8_t* idx) const {
#ifdef TQ_X86
  if (isa() == Isa::avx512) { bucketize_avx512(y, n, mids_.data(), int(mids_.size()), levels_, lut_, idx); return; }
  if (isa() == Isa::avx2) { bucketize_avx2(y, n, mids_.data(), int(mids_.size()), levels_, table_, idx); return; }
#endif
  detail::bucketize_scalar(y, n, mids_.data(), int(mids_.size()), idx);
}

void pack_nibbles(const uint8_t* codes, size_t n, uint8_t* out) {
#ifdef TQ_X86
  if (isa() == Isa::avx512) { pack_nibbles_avx512(codes, n, out); return; }
  if (isa() == Isa::avx2) { pack_nibbles_avx2(codes, n, out); return; }
#endif
  detail::pack_nibbles_scalar(codes, n, out);
}

bool all_within(const float* x, size_t n, float limit) {
#ifdef TQ_X86
  if (isa() == Isa::avx512) return all_within_avx512(x, n, limit);
  if (isa() == Isa::avx2) return all_within_avx2(x, n, limit);
#endif
  bool good = true;
  for (size_t i = 0; i < n; ++i) good = good && std::fabs(x[i]) <= limit;
  return good;
}

void scale2_inplace(float* x, int n, float a, float b) {
#ifdef TQ_X86
  if (isa() == Isa::avx512) { scale2_avx512(x, n, a, b); return; }
  if (isa() == Isa::avx2) { scale2_avx2(x, n, a, b); return; }
#endif
  for (int j = 0; j < n; ++j) x[j] = (x[j] * a) * b;
}

float tree_sum_squares_pow2(const float* x, int n) {
#ifdef TQ_X86
  if (n >= 32 && n <= 4096 && isa() == Isa::avx512) return tree_sum_squares_pow2_avx512(x, n);
  if (n >= 16 && n <= 4096 && isa() >= Isa::avx2) return tree_sum_squares_pow2_avx2(x, n);
#endif
  return tree_sum_squares(x, n);
}

const char* simd_path() {
#ifdef TQ_X86
  switch (isa()) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::scalar: break;
  }
#endif
  return "scalar";
}

}  // namespace tq
