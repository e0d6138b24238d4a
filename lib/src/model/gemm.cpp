#include "gemm.h"

#include "tq/error.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TQ_GEMM_X86 1
#endif

namespace tq::detail {

namespace {

std::atomic<bool> g_force_portable{false}, g_force_avx2{false};

#ifdef TQ_GEMM_X86
// Everything below has internal linkage and is compiled for AVX2+FMA only
// through function attributes, so no AVX2 code can be picked by the linker
// for another translation unit; it is entered only after the CPU check.
#define TQ_AVX2 __attribute__((target("avx2,fma")))

// Stores (or adds) 16 floats of one output row.
TQ_AVX2 inline void put16(float* out, __m256 lo, __m256 hi, bool accumulate) {
  if (accumulate) {
    lo = _mm256_add_ps(lo, _mm256_loadu_ps(out));
    hi = _mm256_add_ps(hi, _mm256_loadu_ps(out + 8));
  }
  _mm256_storeu_ps(out, lo);
  _mm256_storeu_ps(out + 8, hi);
}

// Outer-product micro-kernel (GotoBLAS style): R ≤ 6 rows of X times one
// packed panel of 16 W rows: per k step two 8-wide loads of the panel, R
// broadcasts of X and 2R FMAs into 2R accumulators (12 + 2 + 1 of the 16 ymm
// registers). Each output is one FMA chain over p in order, so the result does
// not depend on the blocking except for the k-slice partial sums.
// PS is the distance between consecutive p of one X row: 1 for row-major X,
// 6 for an X tile packed as [p][6] (one stream of broadcasts instead of six).
template <int R, int PS = 1>
TQ_AVX2 void micro(int64_t kc, const float* x, int64_t ldx, const float* wp, float* y, int64_t ldy, int ncols,
                   bool accumulate) {
  // Named accumulators (not arrays): GCC keeps them in registers only so.
  __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0, b4 = a0,
         a5 = a0, b5 = a0;
  const float* x0 = x;
  const float* x1 = x + ldx * (R > 1);
  const float* x2 = x + 2 * ldx * (R > 2);
  const float* x3 = x + 3 * ldx * (R > 3);
  const float* x4 = x + 4 * ldx * (R > 4);
  const float* x5 = x + 5 * ldx * (R > 5);
  for (int64_t p = 0; p < kc; ++p) {
    const __m256 w0 = _mm256_loadu_ps(wp + 16 * p), w1 = _mm256_loadu_ps(wp + 16 * p + 8);
    __m256 v = _mm256_broadcast_ss(x0 + p * PS);
    a0 = _mm256_fmadd_ps(v, w0, a0);
    b0 = _mm256_fmadd_ps(v, w1, b0);
    if constexpr (R > 1) {
      v = _mm256_broadcast_ss(x1 + p * PS);
      a1 = _mm256_fmadd_ps(v, w0, a1);
      b1 = _mm256_fmadd_ps(v, w1, b1);
    }
    if constexpr (R > 2) {
      v = _mm256_broadcast_ss(x2 + p * PS);
      a2 = _mm256_fmadd_ps(v, w0, a2);
      b2 = _mm256_fmadd_ps(v, w1, b2);
    }
    if constexpr (R > 3) {
      v = _mm256_broadcast_ss(x3 + p * PS);
      a3 = _mm256_fmadd_ps(v, w0, a3);
      b3 = _mm256_fmadd_ps(v, w1, b3);
    }
    if constexpr (R > 4) {
      v = _mm256_broadcast_ss(x4 + p * PS);
      a4 = _mm256_fmadd_ps(v, w0, a4);
      b4 = _mm256_fmadd_ps(v, w1, b4);
    }
    if constexpr (R > 5) {
      v = _mm256_broadcast_ss(x5 + p * PS);
      a5 = _mm256_fmadd_ps(v, w0, a5);
      b5 = _mm256_fmadd_ps(v, w1, b5);
    }
  }
  if (ncols == 16) {  // full tile: straight to Y
    put16(y, a0, b0, accumulate);
    if constexpr (R > 1) put16(y + ldy, a1, b1, accumulate);
    if constexpr (R > 2) put16(y + 2 * ldy, a2, b2, accumulate);
    if constexpr (R > 3) put16(y + 3 * ldy, a3, b3, accumulate);
    if constexpr (R > 4) put16(y + 4 * ldy, a4, b4, accumulate);
    if constexpr (R > 5) put16(y + 5 * ldy, a5, b5, accumulate);
    return;
  }
  alignas(32) float tmp[6][16];
  _mm256_store_ps(tmp[0], a0), _mm256_store_ps(tmp[0] + 8, b0);
  _mm256_store_ps(tmp[1], a1), _mm256_store_ps(tmp[1] + 8, b1);
  _mm256_store_ps(tmp[2], a2), _mm256_store_ps(tmp[2] + 8, b2);
  _mm256_store_ps(tmp[3], a3), _mm256_store_ps(tmp[3] + 8, b3);
  _mm256_store_ps(tmp[4], a4), _mm256_store_ps(tmp[4] + 8, b4);
  _mm256_store_ps(tmp[5], a5), _mm256_store_ps(tmp[5] + 8, b5);
  for (int r = 0; r < R; ++r) {
    float* out = y + r * ldy;
    if (accumulate)
      for (int j = 0; j < ncols; ++j) out[j] += tmp[r][j];
    else
      for (int j = 0; j < ncols; ++j) out[j] = tmp[r][j];
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, int, bool);
constexpr int MR = 6, NR = 16;
const MicroFn kMicroPacked[MR] = {micro<1, MR>, micro<2, MR>, micro<3, MR>, micro<4, MR>, micro<5, MR>, micro<6, MR>};

// k-slice length of every kernel: each output is one FMA chain over p within a slice and the
// slices' partial sums are added in order, so the kernels' bits depend on it (and on nothing else).
constexpr int64_t kKC = 256;
static_assert(PackedRows::kSlice == kKC);

// The loops of gemm_packed (both kernels) over pre-packed W panels and X tiles, blocked as
// GotoBLAS/BLIS: an NC-column block of W (KC·NC floats, 2 MB, in L3) and a k-slice of KC; MC-row
// blocks of X (KC·MC floats, 96 KB, in L2); innermost nw / 16 panels of W (KC·16 floats each, 16 KB)
// meet every tile of the X block: tile(kc, x_tile, rows, i, panels, j, cols, accumulate).
// A block of Y (n × NC) is finished before the next: the 151936-wide logits of 256 rows (155 MB of
// Y) ran at 54 GFLOP/s with k-slices outermost. NC 2048-4096 and MC 96-120 were within the
// run-to-run noise of this 2-core VM (±15%).
template <class Tile>
void packed_blocks(const PackedRows& X, const PackedMatrix& W, int64_t j0, int64_t j1, int64_t pb, int64_t nw,
                   Tile&& tile) {
  constexpr int64_t KC = kKC, NC = 2048, MC = 96;
  static_assert(PackedRows::kTile == MR && MC % MR == 0);
  const int64_t k = X.cols(), n = X.rows();
  for (int64_t c0 = j0; c0 < j1; c0 += NC) {
    const int64_t c1 = j1 - c0 < NC ? j1 : c0 + NC;
    for (int64_t p0 = 0; p0 < k; p0 += KC) {
      const int64_t kc = k - p0 < KC ? k - p0 : KC;
      for (int64_t i0 = 0; i0 < n; i0 += MC) {
        const int64_t i1 = n - i0 < MC ? n : i0 + MC;
        for (int64_t c = c0; c < c1; c += nw) {
          const int cols = int(c1 - c < nw ? c1 - c : nw);
          for (int64_t i = i0; i < i1; i += MR) {
            const int rb = int(i1 - i < MR ? i1 - i : MR);
            tile(kc, X.tile(p0 / KC, i / MR), rb, i, W.panel(c / NR) + (pb + p0) * NR, c, cols, p0 > 0);
          }
        }
      }
    }
  }
}

// The AVX2 kernel: one 16-row panel per micro-kernel call. About 175 GFLOP/s on 2 threads for
// the Qwen2.5-1.5B shapes at n 512 with the weights in huge pages (OpenBLAS 0.3.21 sgemm in the
// same run: 152; Eigen 3.4 in this baseline x86-64 build gets SSE2 only, about 25 per core). A
// first dot-product form (4×3 tile, horizontal sums) reached only 44 GFLOP/s on one core, and 44
// too while GCC spilled array accumulators: named registers fixed that.
void gemm_packed_avx2(const PackedRows& X, const PackedMatrix& W, int64_t j0, int64_t j1, int64_t pb, float* Y,
                      int64_t ldy) {
  packed_blocks(X, W, j0, j1, pb, NR,
                [&](int64_t kc, const float* xt, int rb, int64_t i, const float* wp, int64_t c, int cols, bool acc) {
                  kMicroPacked[rb - 1](kc, xt, 1, wp, Y + i * ldy + (c - j0), ldy, cols, acc);
                });
}

// AVX-512 (runtime dispatch, as AVX2): the same blocking over the same packed
// operands, with a 6-row × 64-column micro-kernel (four 16-row panels, one zmm
// per row and panel). Every output is still one FMA chain over p in order
// within each k-slice, so the results equal the AVX2 kernel's bit for bit
// (test_gemm.cpp checks it). On the 2-core Xeon build machine: AVX-512 FMAs
// run at 203 GFLOP/s per core against 110 for AVX2 (register-only loop); on
// the Qwen2.5-1.5B shapes, 2 threads, 250–280 GFLOP/s against 155–175; 64
// columns measured 10–15% faster than 32, and 12 rows × 32 columns slower
// (spills). tests/bench/bench_prefill prints the two kernels' prefill speeds.
#define TQ_AVX512 __attribute__((target("avx512f,avx2,fma")))

// The micro-kernel's width in 16-row W panels (see gemm_packed_avx512).
constexpr int kNP512 = 4;

// Y rows [0, R) × columns [0, ncols) (ncols ≤ 16·NP) from accumulators acc[6·q + r] (panel q,
// columns 16q … 16q + 15), masked at the tail.
template <int R, int NP>
TQ_AVX512 inline void put_rows512(const __m512 (&acc)[6 * kNP512], float* y, int64_t ldy, int ncols, bool accumulate) {
#pragma GCC unroll 4
  for (int q = 0; q < NP; ++q) {
    const int nq = ncols - 16 * q;
    const __mmask16 m = nq >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << nq) - 1u);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      float* out = y + r * ldy + 16 * q;
      __m512 v = acc[6 * q + r];
      if (accumulate) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, out));
      _mm512_mask_storeu_ps(out, m, v);
    }
  }
}

// R ≤ 6 rows of a packed X tile ([p][6]) times NP ≤ kNP512 consecutive W panels (wp + q·pstride).
// The accumulator array is indexed only by constants after unrolling, so GCC keeps it in zmm
// registers (6 × 4 accumulators, 4 panel loads and a broadcast: 29 of the 32).
template <int R, int NP>
TQ_AVX512 void micro512(int64_t kc, const float* x, const float* wp, int64_t pstride, float* y, int64_t ldy,
                        int ncols, bool accumulate) {
  __m512 acc[6 * kNP512];
#pragma GCC unroll 24
  for (int i = 0; i < 6 * kNP512; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m512 w[kNP512];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) w[q] = _mm512_loadu_ps(wp + q * pstride + 16 * p);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 v = _mm512_set1_ps(x[p * MR + r]);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) acc[6 * q + r] = _mm512_fmadd_ps(v, w[q], acc[6 * q + r]);
    }
  }
  put_rows512<R, NP>(acc, y, ldy, ncols, accumulate);
}

using Micro512Fn = void (*)(int64_t, const float*, const float*, int64_t, float*, int64_t, int, bool);
template <int NP>
constexpr Micro512Fn kRows512[MR] = {micro512<1, NP>, micro512<2, NP>, micro512<3, NP>,
                                     micro512<4, NP>, micro512<5, NP>, micro512<6, NP>};
const Micro512Fn* const kMicro512[kNP512] = {kRows512<1>, kRows512<2>, kRows512<3>, kRows512<4>};  // [panels − 1][rows − 1]

// The AVX-512 kernel: the same loops, four panels per micro-kernel call (the same bits).
void gemm_packed_avx512(const PackedRows& X, const PackedMatrix& W, int64_t j0, int64_t j1, int64_t pb, float* Y,
                        int64_t ldy) {
  const int64_t pstride = W.cols() * NR;
  packed_blocks(X, W, j0, j1, pb, kNP512 * NR,
                [&](int64_t kc, const float* xt, int rb, int64_t i, const float* wp, int64_t c, int cols, bool acc) {
                  kMicro512[(cols - 1) / NR][rb - 1](kc, xt, wp, pstride, Y + i * ldy + (c - j0), ldy, cols, acc);
                });
}

bool cpu_has_avx512() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}

bool cpu_has_avx2() {
  static const bool ok = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return ok;
}
#endif

// The kernel gemm_packed takes on this CPU, after the test switches.
enum class Kernel { avx512, avx2, portable };
Kernel packed_kernel() {
#ifdef TQ_GEMM_X86
  if (!g_force_portable.load(std::memory_order_relaxed)) {
    if (cpu_has_avx512() && !g_force_avx2.load(std::memory_order_relaxed)) return Kernel::avx512;
    if (cpu_has_avx2()) return Kernel::avx2;
  }
#endif
  return Kernel::portable;
}

}  // namespace

const char* gemm_packed_path() {
  switch (packed_kernel()) {
    case Kernel::avx512: return "avx512";
    case Kernel::avx2: return "avx2-fma";
    default: return "portable";
  }
}

void gemm_force_portable(bool on) { g_force_portable.store(on); }
void gemm_force_avx2(bool on) { g_force_avx2.store(on); }

void PackedMatrix::Free::operator()(float* p) const { std::free(p); }

PackedMatrix::PackedMatrix(int64_t m, int64_t k) : m_(m), k_(k) {
  const int64_t panels = (m + kPanel - 1) / kPanel;
  const size_t bytes = size_t(panels * k * kPanel) * sizeof(float);
  // 2 MB-aligned and marked for transparent huge pages: the kernel walks 128
  // panels 96 KB apart (k = 1536) per column block, 512 pages of 4 KB.
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t alloc = (bytes + kHuge - 1) / kHuge * kHuge;
  float* p = static_cast<float*>(std::aligned_alloc(kHuge, alloc));
  if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, alloc, MADV_HUGEPAGE);
#endif
  std::memset(p, 0, bytes);
  data_.reset(p);
}

void PackedMatrix::set_rows(int64_t r0, int64_t n, const float* src, int64_t lds) {
  for (int64_t r = r0; r < r0 + n; ++r) {
    float* dst = data_.get() + (r / kPanel) * k_ * kPanel + r % kPanel;
    const float* s = src + (r - r0) * lds;
    for (int64_t p = 0; p < k_; ++p) dst[p * kPanel] = s[p];
  }
}

void PackedMatrix::get_row(int64_t r, float* out) const {
  const float* s = data_.get() + (r / kPanel) * k_ * kPanel + r % kPanel;
  for (int64_t p = 0; p < k_; ++p) out[p] = s[p * kPanel];
}

PackedRows::PackedRows(int64_t n, const float* X, int64_t ldx, int64_t k)
    : n_(n), k_(k), tiles_((n + kTile - 1) / kTile) {
  const int64_t slices = (k + kSlice - 1) / kSlice;
  data_.reset(new float[size_t(slices * tiles_ * kSlice * kTile)]());
  for (int64_t s = 0; s < slices; ++s) {
    const int64_t p0 = s * kSlice, kc = std::min(kSlice, k - p0);
    for (int64_t t = 0; t < tiles_; ++t) {
      float* dst = data_.get() + (s * tiles_ + t) * kSlice * kTile;
      for (int64_t r = 0; r < kTile && t * kTile + r < n; ++r) {
        const float* src = X + (t * kTile + r) * ldx + p0;
        for (int64_t p = 0; p < kc; ++p) dst[p * kTile + r] = src[p];
      }
    }
  }
}

void gemm_packed(const PackedRows& X, const PackedMatrix& W, int64_t j0, int64_t j1, float* Y, int64_t ldy,
                 int64_t p_begin) {
  if (X.rows() <= 0 || j1 <= j0) return;
  TQ_ASSERT(p_begin >= 0 && p_begin + X.cols() <= W.cols() && j0 % PackedMatrix::kPanel == 0 && j1 <= W.rows());
#ifdef TQ_GEMM_X86
  switch (packed_kernel()) {
    case Kernel::avx512: return gemm_packed_avx512(X, W, j0, j1, p_begin, Y, ldy);
    case Kernel::avx2: return gemm_packed_avx2(X, W, j0, j1, p_begin, Y, ldy);
    default: break;
  }
#endif
  // Portable path: plain loops over the panels (the compiler vectorises the
  // 16 lanes); sums in p order like the kernel, without fused multiply-adds.
  const int64_t k = X.cols();
  for (int64_t c = j0; c < j1; c += PackedMatrix::kPanel) {
    const float* wp = W.panel(c / PackedMatrix::kPanel) + p_begin * PackedMatrix::kPanel;
    const int64_t cols = std::min<int64_t>(PackedMatrix::kPanel, j1 - c);
    for (int64_t i = 0; i < X.rows(); ++i) {
      float acc[PackedMatrix::kPanel] = {};
      for (int64_t p = 0; p < k; ++p) {
        const float x = X.at(i, p);
        for (int64_t l = 0; l < PackedMatrix::kPanel; ++l) acc[l] += x * wp[p * PackedMatrix::kPanel + l];
      }
      for (int64_t l = 0; l < cols; ++l) Y[i * ldy + (c - j0) + l] = acc[l];
    }
  }
}

void gemm_packed(int64_t n, const float* X, int64_t ldx, const PackedMatrix& W, int64_t j0, int64_t j1, float* Y,
                 int64_t ldy) {
  if (n <= 0 || j1 <= j0) return;
  gemm_packed(PackedRows(n, X, ldx, W.cols()), W, j0, j1, Y, ldy);
}

}  // namespace tq::detail
