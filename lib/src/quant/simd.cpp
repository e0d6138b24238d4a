#include "tq/simd.h"

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

__attribute__((target("avx2"))) void fwht_avx2(float* x, int n) {
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

// Midpoint counts for ascending midpoints. For nm = 2^b − 1 (b ≤ 4, the
// Lloyd-Max codebooks) a branch-free binary search: at level l the candidate
// is m[idx + 2^l − 1], looked up with one permute from a table of ≤ 8 entries.
// Each step is the exact comparison y ≥ m, so the count equals the scalar one.
// Other sizes: compare against every midpoint and count.
__attribute__((target("avx2"))) void bucketize_avx2(const float* y, int n, const float* mids, int nm, uint8_t* idx) {
  int b = 0;
  while ((1 << b) - 1 < nm) ++b;
  const bool tree = (1 << b) - 1 == nm && b <= 4;
  __m256 table[4];
  if (tree)
    for (int l = 0; l < b; ++l) {
      alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int k = 0; k < (1 << (b - l - 1)); ++k) t[k] = mids[(k << (l + 1)) + (1 << l) - 1];
      table[l] = _mm256_load_ps(t);
    }
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(y + j);
    __m256i c = _mm256_setzero_si256();
    if (tree) {
      for (int l = b - 1; l >= 0; --l) {
        const __m256 cand = _mm256_permutevar8x32_ps(table[l], _mm256_srli_epi32(c, l + 1));
        const __m256i ge = _mm256_castps_si256(_mm256_cmp_ps(v, cand, _CMP_GE_OQ));
        c = _mm256_add_epi32(c, _mm256_and_si256(ge, _mm256_set1_epi32(1 << l)));
      }
    } else {
      for (int i = 0; i < nm; ++i) {
        const __m256 ge = _mm256_cmp_ps(v, _mm256_set1_ps(mids[i]), _CMP_GE_OQ);
        c = _mm256_sub_epi32(c, _mm256_castps_si256(ge));  // mask is −1 where y ≥ m
      }
    }
    // 8 × int32 → 8 bytes
    const __m256i p16 = _mm256_packus_epi32(c, c);          // per 128-bit lane
    const __m256i p8 = _mm256_packus_epi16(p16, p16);
    const uint32_t lo = uint32_t(_mm256_extract_epi32(p8, 0)), hi = uint32_t(_mm256_extract_epi32(p8, 4));
    std::memcpy(idx + j, &lo, 4);
    std::memcpy(idx + j + 4, &hi, 4);
  }
  detail::bucketize_scalar(y + j, n - j, mids, nm, idx + j);
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

void bucketize(const float* y, int n, const float* mids, int nm, uint8_t* idx) {
#ifdef TQ_X86
  if (use_avx2()) { bucketize_avx2(y, n, mids, nm, idx); return; }
#endif
  detail::bucketize_scalar(y, n, mids, nm, idx);
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
