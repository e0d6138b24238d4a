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

// byte i = codes[2i] | codes[2i+1] << 4: maddubs adds c0·1 + c1·16 per pair.
__attribute__((target("avx2"))) void pack_nibbles_avx2(const uint8_t* codes, size_t n, uint8_t* out) {
  size_t j = 0;
  const __m256i w = _mm256_set1_epi16(0x1001);
  for (; j + 32 <= n; j += 32) {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + j));
    const __m256i pairs = _mm256_maddubs_epi16(c, w);                      // 16 × int16
    const __m256i packed = _mm256_packus_epi16(pairs, pairs);              // bytes per lane
    const __m256i ordered = _mm256_permute4x64_epi64(packed, 0x08);        // lanes 0, 2 → low 128
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j / 2), _mm256_castsi256_si128(ordered));
  }
  for (; j + 1 < n; j += 2) out[j / 2] = uint8_t((codes[j] & 15) | (codes[j + 1] << 4));
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

bool use_avx2() {
  static const bool v = [] {
    const char* f = std::getenv("TQ_SIMD");
    if (f && std::strcmp(f, "scalar") == 0) return false;
    return bool(__builtin_cpu_supports("avx2"));
  }();
  return v;
}

}  // namespace
#endif

void fwht(float* x, int n) {
#ifdef TQ_X86
  if (n >= 8 && use_avx2()) { fwht_avx2(x, n); return; }
#endif
  detail::fwht_scalar(x, n);
}

void bucketize(const float* y, int n, const float* mids, int nm, uint8_t* idx) { Bucketizer(mids, nm)(y, n, idx); }

Bucketizer::Bucketizer(const float* mids, int nm) : mids_(mids, mids + nm) {
  int b = 0;
  while ((1 << b) - 1 < nm) ++b;
  levels_ = ((1 << b) - 1 == nm && b <= 4) ? b : 0;
  for (int l = 0; l < levels_; ++l)
    for (int k = 0; k < (1 << (levels_ - l - 1)); ++k) table_[l][k] = mids[(k << (l + 1)) + (1 << l) - 1];
}

void Bucketizer::operator()(const float* y, int n, uint8_t* idx) const {
#ifdef TQ_X86
  if (use_avx2()) { bucketize_avx2(y, n, mids_.data(), int(mids_.size()), levels_, table_, idx); return; }
#endif
  detail::bucketize_scalar(y, n, mids_.data(), int(mids_.size()), idx);
}

void pack_nibbles(const uint8_t* codes, size_t n, uint8_t* out) {
#ifdef TQ_X86
  if (use_avx2()) { pack_nibbles_avx2(codes, n, out); return; }
#endif
  for (size_t j = 0; j + 1 < n; j += 2) out[j / 2] = uint8_t((codes[j] & 15) | (codes[j + 1] << 4));
}

bool all_within(const float* x, size_t n, float limit) {
#ifdef TQ_X86
  if (use_avx2()) return all_within_avx2(x, n, limit);
#endif
  bool good = true;
  for (size_t i = 0; i < n; ++i) good = good && std::fabs(x[i]) <= limit;
  return good;
}

void scale2_inplace(float* x, int n, float a, float b) {
#ifdef TQ_X86
  if (use_avx2()) { scale2_avx2(x, n, a, b); return; }
#endif
  for (int j = 0; j < n; ++j) x[j] = (x[j] * a) * b;
}

float tree_sum_squares_pow2(const float* x, int n) {
#ifdef TQ_X86
  if (n >= 16 && n <= 4096 && use_avx2()) return tree_sum_squares_pow2_avx2(x, n);
#endif
  return tree_sum_squares(x, n);
}

void scale_inplace(float* x, int n, float s) {
  for (int j = 0; j < n; ++j) x[j] *= s;
}

const char* simd_path() {
#ifdef TQ_X86
  if (use_avx2()) return "avx2";
#endif
  return "scalar";
}

}  // namespace tq
