// The forward passes' matrix product (lib/src/model/gemm.h, internal): every
// path (AVX-512 and AVX2 kernels where the CPU has them, the portable loops)
// against a naive float64 product, over shapes with every edge case of the blocking (row tiles of 6,
// panels of 16, k-slices of 256) and with leading dimensions > the width.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "../../lib/src/model/gemm.h"
#include "tq/rng.h"

namespace {
struct Shape { int n, m, k; };

// Y (n × m, leading dimension ldy, padding 7.0f) against the float64 product of X and Wᵀ: every
// element within 1e-6 of Σ|x·w| (float accumulation over k ≤ 513), the padding untouched.
void check_float64(const Shape& s, const std::vector<float>& X, int ldx, const std::vector<float>& W, int ldw,
                   const std::vector<float>& Y, int ldy) {
  double worst = 0;
  for (int i = 0; i < s.n; ++i) {
    for (int j = 0; j < s.m; ++j) {
      double ref = 0, mag = 0;
      for (int p = 0; p < s.k; ++p) {
        ref += double(X[size_t(i) * ldx + p]) * double(W[size_t(j) * ldw + p]);
        mag += std::fabs(double(X[size_t(i) * ldx + p]) * double(W[size_t(j) * ldw + p]));
      }
      worst = std::max(worst, std::fabs(double(Y[size_t(i) * ldy + j]) - ref) / (mag + 1e-30));
    }
    for (int j = s.m; j < ldy; ++j) CHECK(Y[size_t(i) * ldy + j] == 7.0f);
  }
  CHECK(worst < 1e-6);
}

}  // namespace

TEST_CASE("gemm_packed: pre-packed weights give the naive float64 product on both paths", "[gemm]") {
  tq::Rng rng(9);
  const Shape shapes[] = {{1, 1, 1}, {7, 13, 37}, {6, 16, 256}, {13, 33, 300}, {64, 200, 64}, {5, 400, 513}};
  for (const bool portable : {false, true}) {
    tq::detail::gemm_force_portable(portable);
    for (const Shape& s : shapes) {
      INFO("portable " << portable << " n " << s.n << " m " << s.m << " k " << s.k);
      const int ldx = s.k + 3, ldw = s.k + 5, ldy = s.m + 2;
      std::vector<float> X(size_t(s.n) * ldx), W(size_t(s.m) * ldw), Y(size_t(s.n) * ldy, 7.0f), row(size_t(s.k));
      for (auto& x : X) x = float(rng.gaussian());
      for (auto& w : W) w = float(rng.gaussian());
      tq::detail::PackedMatrix P(s.m, s.k);
      // Two halves, as the loader writes blocks of rows.
      P.set_rows(0, s.m / 2, W.data(), ldw);
      P.set_rows(s.m / 2, s.m - s.m / 2, W.data() + size_t(s.m / 2) * ldw, ldw);
      for (int j = 0; j < s.m; ++j) {
        P.get_row(j, row.data());
        for (int p = 0; p < s.k; ++p) REQUIRE(row[size_t(p)] == W[size_t(j) * ldw + p]);
      }
      // Columns in two calls split at a panel boundary, as threads do.
      const int split = std::min(s.m, 16 * ((s.m / 16 + 1) / 2));
      tq::detail::gemm_packed(s.n, X.data(), ldx, P, 0, split, Y.data(), ldy);
      tq::detail::gemm_packed(s.n, X.data(), ldx, P, split, s.m, Y.data() + split, ldy);
      check_float64(s, X, ldx, W, ldw, Y, ldy);
    }
  }
  tq::detail::gemm_force_portable(false);
}

namespace {

}  // namespace

TEST_CASE("gemm_packed: the AVX-512 kernel gives the AVX2 kernel's bits", "[gemm]") {
  tq::detail::gemm_force_portable(false);
  tq::detail::gemm_force_avx2(false);
  if (std::string(tq::detail::gemm_packed_path()) != "avx512") {
    WARN("this CPU has no AVX-512 (path " << tq::detail::gemm_packed_path() << "): nothing to compare");
    return;
  }
  tq::Rng rng(10);
  // tails of every kind: rows (tiles of 6), columns (16-column panels in groups of 4, partial last
  // panel), k-slices of 256; the columns in two calls split at an odd panel, as threads split them
  const Shape shapes[] = {{1, 1, 1}, {7, 13, 37}, {6, 32, 256}, {13, 48, 300}, {97, 200, 64}, {5, 400, 513},
                          {12, 1536, 1536}};
  for (const Shape& s : shapes) {
    INFO("n " << s.n << " m " << s.m << " k " << s.k);
    const int ldx = s.k + 3, ldw = s.k + 5, ldy = s.m + 2;
    std::vector<float> X(size_t(s.n) * ldx), W(size_t(s.m) * ldw);
    for (auto& x : X) x = float(rng.gaussian());
    for (auto& w : W) w = float(rng.gaussian());
    tq::detail::PackedMatrix P(s.m, s.k);
    P.set_rows(0, s.m, W.data(), ldw);
    const int split = std::min(s.m, 16 * ((s.m / 16 + 1) / 2));
    std::vector<float> y512(size_t(s.n) * ldy, 7.0f), y2 = y512;
    for (const bool avx2 : {false, true}) {
      tq::detail::gemm_force_avx2(avx2);
      float* Y = avx2 ? y2.data() : y512.data();
      tq::detail::gemm_packed(s.n, X.data(), ldx, P, 0, split, Y, ldy);
      tq::detail::gemm_packed(s.n, X.data(), ldx, P, split, s.m, Y + split, ldy);
    }
    tq::detail::gemm_force_avx2(false);
    CHECK(std::memcmp(y512.data(), y2.data(), y512.size() * sizeof(float)) == 0);
  }
}
