// The dispatched SIMD paths give the same bits as the scalar reference.
#include <catch2/catch.hpp>

#include <cstring>

#include "tq/rng.h"
#include "tq/bitpack.h"
#include "tq/simd.h"

using namespace tq;

TEST_CASE("simd: fwht is bit-identical to the scalar butterflies", "[simd]") {
  Rng r(31);
  for (int n : {1, 2, 4, 8, 16, 64, 128, 256, 512, 4096}) {
    for (int t = 0; t < 50; ++t) {
      std::vector<float> a(static_cast<size_t>(n)), b;
      for (auto& v : a) v = float(r.gaussian() * std::ldexp(1.0, int(r.below(40)) - 20));
      b = a;
      fwht(a.data(), n);
      detail::fwht_scalar(b.data(), n);
      REQUIRE(std::memcmp(a.data(), b.data(), sizeof(float) * size_t(n)) == 0);
    }
  }
}

TEST_CASE("simd: bucketize equals counting midpoints, ties go up", "[simd]") {
  Rng r(32);
  for (int nm : {1, 3, 5, 7, 15, 31, 255}) {
    std::vector<float> mids(static_cast<size_t>(nm));
    float acc = -1.0f;
    for (auto& m : mids) { acc += float(0.01 + r.uniform() * 0.2); m = acc; }
    std::vector<float> y(1000);
    for (size_t j = 0; j < y.size(); ++j)
      y[j] = j % 5 == 0 ? mids[r.below(uint64_t(nm))] : float(r.uniform(-1.5, mids.back() + 0.5));  // exact ties too
    std::vector<uint8_t> a(y.size()), b(y.size());
    bucketize(y.data(), int(y.size()), mids.data(), nm, a.data());
    detail::bucketize_scalar(y.data(), int(y.size()), mids.data(), nm, b.data());
    REQUIRE(a == b);
    for (size_t j = 0; j < y.size(); ++j) {
      int c = 0;
      for (float m : mids) c += y[j] >= m;
      REQUIRE(a[j] == c);
    }
  }
  INFO("path " << simd_path());
  SUCCEED();
}

TEST_CASE("simd: power-of-two tree sums and two-step scaling match the scalar definitions", "[simd]") {
  Rng r(33);
  for (int n : {16, 32, 64, 128, 256, 1024, 4096}) {
    for (int t = 0; t < 20; ++t) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = float(r.gaussian() * std::ldexp(1.0, int(r.below(20)) - 10));
      REQUIRE(tree_sum_squares_pow2(x.data(), n) == tree_sum_squares(x.data(), n));
      const float a = float(r.uniform(0.01, 2)), b = float(r.uniform(0.01, 2));
      std::vector<float> y = x;
      scale2_inplace(y.data(), n, a, b);
      for (int j = 0; j < n; ++j) REQUIRE(y[size_t(j)] == (x[size_t(j)] * a) * b);
    }
  }
}
