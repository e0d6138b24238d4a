#include "gemm_int8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "tq/error.h"
#include "tq/gguf.h"
#include "tq/parallel.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TQ_GEMM_X86 1
#endif

namespace tq::detail {

namespace {

std::atomic<bool> g_force_portable{false};

constexpr int64_t kTile = Int8Rows::kTile, kPanel = Int8Matrix::kPanel;
// k-slice: each output's float sum runs over the groups of a slice, and the
// slices' partial sums are added in order, so the bits depend on it (and on
// nothing else). 512 codes × 16 rows = 8 KB of a panel stay in L1 across the row tiles.
constexpr int64_t kKC = 512;

#ifdef TQ_GEMM_X86
#define TQ_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

// The micro-kernel's width in 16-row W panels: 6 rows × 2 panels keep 12 float
// and 12 int32 accumulators, 2 code vectors and a broadcast in 27 of the 32
// zmm registers; per 4 k values 12 vpdpbusd against 8 loads.
constexpr int kNP = 2;

// Rows [0, R) × ncols of a tile from R rows of X (tile t) and NP panels from
// group g0 to g1; G/4 vpdpbusd per group and accumulator, then the group's
// float epilogue: acc += (float(dot)·S)·ax, acc += O·(ax·Σq).
template <int G, int NP>
TQ_VNNI void micro(int64_t g0, int64_t g1, const int32_t* xw, const float* ax, const float* as, const uint8_t* const* w,
                   const float* const* S, const float* const* O, float* y, int64_t ldy, int rows, int ncols,
                   bool accumulate) {
  constexpr int R = int(kTile), U = G / 4;  // 32-bit words per group
  __m512 acc[R][NP];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_ps();
  for (int64_t g = g0; g < g1; ++g) {
    __m512i dot[R][NP];
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int q = 0; q < NP; ++q) dot[r][q] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const int64_t word = g * U + u;
      __m512i c[NP];
#pragma GCC unroll 2
      for (int q = 0; q < NP; ++q) c[q] = _mm512_loadu_si512(w[q] + word * 64);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m512i x = _mm512_set1_epi32(xw[word * R + r]);
#pragma GCC unroll 2
        for (int q = 0; q < NP; ++q) dot[r][q] = _mm512_dpbusd_epi32(dot[r][q], c[q], x);
      }
    }
#pragma GCC unroll 2
    for (int q = 0; q < NP; ++q) {
      const __m512 s = _mm512_loadu_ps(S[q] + g * kPanel), o = _mm512_loadu_ps(O[q] + g * kPanel);
#pragma GCC unroll 6
      for (int r = 0; r < R; ++r) {
        const __m512 f = _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(0xFFFF, dot[r][q]), s);  // (maskz: no undefined source)
        acc[r][q] = _mm512_fmadd_ps(f, _mm512_set1_ps(ax[g * R + r]), acc[r][q]);
        acc[r][q] = _mm512_fmadd_ps(o, _mm512_set1_ps(as[g * R + r]), acc[r][q]);
      }
    }
  }
#pragma GCC unroll 2
  for (int q = 0; q < NP; ++q) {
    const int nq = ncols - 16 * q;
    const __mmask16 m = nq >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nq) - 1u);
    for (int r = 0; r < rows; ++r) {
      float* out = y + r * ldy + 16 * q;
      __m512 v = acc[r][q];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, out));
      _mm512_mask_storeu_ps(out, m, v);
    }
  }
}

using MicroFn = void (*)(int64_t, int64_t, const int32_t*, const float*, const float*, const uint8_t* const*,
                        const float* const*, const float* const*, float*, int64_t, int, int, bool);

bool cpu_has_vnni() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
  }();
  return ok;
}
#endif

bool use_kernel() {
#ifdef TQ_GEMM_X86
  return cpu_has_vnni() && !g_force_portable.load(std::memory_order_relaxed);
#else
  return false;
#endif
}

// The portable loops: the kernel's arithmetic in its order (exact integer dots,
// then the same float multiply and fused multiply-adds), so the same bits.
void tile_portable(int G, int64_t g0, int64_t g1, const int32_t* xw, const float* ax, const float* as,
                   const uint8_t* w, const float* S, const float* O, float* y, int64_t ldy, int rows, int ncols,
                   bool accumulate) {
  const int U = G / 4;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < ncols; ++c) {
      float acc = 0;
      for (int64_t g = g0; g < g1; ++g) {
        int32_t dot = 0;
        for (int u = 0; u < U; ++u) {
          int32_t x;
          std::memcpy(&x, xw + (g * U + u) * kTile + r, 4);
          for (int b = 0; b < 4; ++b)
            dot += int32_t(w[(g * U + u) * 64 + 4 * c + b]) * int32_t(int8_t(uint32_t(x) >> (8 * b)));
        }
        const float f = float(dot) * S[g * kPanel + c];
        acc = std::fma(f, ax[g * kTile + r], acc);
        acc = std::fma(O[g * kPanel + c], as[g * kTile + r], acc);
      }
      float& out = y[r * ldy + c];
      out = accumulate ? out + acc : acc;
    }
}

}  // namespace

const char* gemm_int8_path() { return use_kernel() ? "avx512-vnni" : "portable"; }
void gemm_int8_force_portable(bool on) { g_force_portable.store(on); }

Int8Matrix::Int8Matrix(int64_t m, int64_t k) : m_(m), k_(k) {
  TQ_CHECK(m > 0 && k > 0 && k % 32 == 0, "Int8Matrix: {} × {} (k must be a positive multiple of 32)", m, k);
  const int64_t panels = (m + kPanel - 1) / kPanel;
  codes_.reset(new uint8_t[size_t(panels * k * kPanel)]());
  s_.reset(new float[size_t(panels * (k / 16) * kPanel)]());
  o_.reset(new float[size_t(panels * (k / 16) * kPanel)]());
}

void Int8Matrix::set_rows(int64_t r0, int64_t n, uint32_t type, const uint8_t* src, int64_t row_bytes) {
  TQ_ASSERT(r0 >= 0 && r0 + n <= m_ && group_ == 16);
  std::vector<uint8_t> c(static_cast<size_t>(k_));
  std::vector<float> s(static_cast<size_t>(k_ / 16)), o(static_cast<size_t>(k_ / 16));
  for (int64_t r = r0; r < r0 + n; ++r) {
    const CodeMap map = unpack_codes(type, src + (r - r0) * row_bytes, k_, c.data(), s.data(), o.data());
    const int64_t q = r / kPanel, l = r % kPanel;
    uint8_t* dst = codes_.get() + q * k_ * kPanel;
    for (int64_t p = 0; p < k_; ++p) dst[((p / 4) * kPanel + l) * 4 + p % 4] = c[size_t(p)];
    for (int64_t g = 0; g < k_ / 16; ++g) {  // w = S·(c − zero) + offset = S·c + (offset − zero·S)
      s_[size_t((q * (k_ / 16) + g) * kPanel + l)] = s[size_t(g)];
      o_[size_t((q * (k_ / 16) + g) * kPanel + l)] = o[size_t(g)] - float(map.zero) * s[size_t(g)];
    }
  }
}

void Int8Matrix::finish() {
  TQ_ASSERT(group_ == 16);
  const int64_t panels = (m_ + kPanel - 1) / kPanel, n16 = panels * (k_ / 16);
  bool pairs = true;
  for (int64_t i = 0; i < n16 && pairs; i += 2)  // groups 2h and 2h + 1 of a panel
    for (int64_t l = 0; l < kPanel && pairs; ++l)
      pairs = s_[size_t(i * kPanel + l)] == s_[size_t((i + 1) * kPanel + l)] &&
              o_[size_t(i * kPanel + l)] == o_[size_t((i + 1) * kPanel + l)];
  if (!pairs) return;
  for (int64_t i = 0; i < n16 / 2; ++i)
    for (int64_t l = 0; l < kPanel; ++l) {
      s_[size_t(i * kPanel + l)] = s_[size_t(2 * i * kPanel + l)];
      o_[size_t(i * kPanel + l)] = o_[size_t(2 * i * kPanel + l)];
    }
  group_ = 32;
}

Int8Rows::Int8Rows(int64_t n, const float* X, int64_t ldx, int64_t k, int group, int n_threads)
    : n_(n), k_(k), tiles_((n + kTile - 1) / kTile), group_(group) {
  TQ_ASSERT((group == 16 || group == 32) && k % group == 0);
  const int64_t groups = k / group;
  q_.reset(new int32_t[size_t(tiles_ * (k / 4) * kTile)]());
  ax_.reset(new float[size_t(tiles_ * groups * kTile)]());
  as_.reset(new float[size_t(tiles_ * groups * kTile)]());
  parallel_for(n_threads, n, [&](int64_t i) {
    const int64_t t = i / kTile, r = i % kTile;
    auto* bytes = reinterpret_cast<int8_t*>(q_.get() + t * (k / 4) * kTile);
    for (int64_t g = 0; g < groups; ++g) {
      const float* x = X + i * ldx + g * group;
      float amax = 0;
      bool finite = true;
      for (int j = 0; j < group; ++j) {
        finite = finite && std::isfinite(x[j]);
        amax = std::max(amax, std::fabs(x[j]));
      }
      const float a = finite ? amax / 127.0f : NAN;
      const float inv = finite && amax > 0 ? 127.0f / amax : 0.0f;
      int32_t sum = 0;
      for (int j = 0; j < group; ++j) {
        const int64_t p = g * group + j;
        const int v = int(std::nearbyint(x[j] * inv));  // |v| ≤ 127
        bytes[((p / 4) * kTile + r) * 4 + p % 4] = int8_t(v);
        sum += v;
      }
      ax_[size_t((t * groups + g) * kTile + r)] = a;
      as_[size_t((t * groups + g) * kTile + r)] = a * float(sum);
    }
  });
}

// Blocked as gemm_packed: an NC-column block of W, k-slices of kKC, MC-row
// blocks of X, and innermost kNP panels meeting every 6-row tile of the block.
void gemm_int8(const Int8Rows& X, const Int8Matrix& W, int64_t j0, int64_t j1, float* Y, int64_t ldy) {
  if (X.rows() <= 0 || j1 <= j0) return;
  TQ_ASSERT(X.cols() == W.cols() && X.group() == W.group() && j0 % kPanel == 0 && j1 <= W.rows());
  constexpr int64_t NC = 4096, MC = 96;
  const int64_t k = X.cols(), n = X.rows(), G = W.group(), groups = k / G;
  const bool kernel = use_kernel();
  for (int64_t c0 = j0; c0 < j1; c0 += NC) {
    const int64_t c1 = std::min(j1, c0 + NC);
    for (int64_t p0 = 0; p0 < k; p0 += kKC) {
      const int64_t g0 = p0 / G, g1 = std::min(groups, (p0 + kKC) / G);
      for (int64_t i0 = 0; i0 < n; i0 += MC) {
        const int64_t i1 = std::min(n, i0 + MC);
        for (int64_t c = c0; c < c1; c += kNP * kPanel) {
          const int ncols = int(std::min<int64_t>(kNP * kPanel, c1 - c));
          const int np = (ncols + int(kPanel) - 1) / int(kPanel);
          const uint8_t* w[kNP];
          const float* S[kNP];
          const float* O[kNP];
          for (int q = 0; q < kNP; ++q) {
            const int64_t panel = c / kPanel + std::min(q, np - 1);
            w[q] = W.codes(panel), S[q] = W.scale(panel), O[q] = W.offset(panel);
          }
#ifdef TQ_GEMM_X86
          const MicroFn f = !kernel  ? nullptr
                            : G == 32 ? (np == 2 ? micro<32, 2> : micro<32, 1>)
                                      : (np == 2 ? micro<16, 2> : micro<16, 1>);
#endif
          for (int64_t i = i0; i < i1; i += kTile) {
            const int64_t t = i / kTile;
            const int rows = int(std::min(kTile, n - i));
            float* y = Y + i * ldy + (c - j0);
            const bool acc = p0 > 0;
#ifdef TQ_GEMM_X86
            if (f) {
              f(g0, g1, X.words(t), X.ax(t), X.ax_sum(t), w, S, O, y, ldy, rows, ncols, acc);
              continue;
            }
#endif
            for (int q = 0; q < np; ++q)
              tile_portable(int(G), g0, g1, X.words(t), X.ax(t), X.ax_sum(t), w[q], S[q], O[q], y + 16 * q, ldy,
                            rows, std::min(16, ncols - 16 * q), acc);
          }
        }
      }
    }
  }
  (void)kernel;  // used by the kernel path only
}

}  // namespace tq::detail
