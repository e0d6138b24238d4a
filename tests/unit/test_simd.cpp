// The dispatched SIMD paths give the same bits as the scalar reference. ctest
// runs these cases once per path: the default (best the CPU has, AVX-512 on
// the CI machines), TQ_SIMD=avx2 (unit_avx2_path) and TQ_SIMD=scalar
// (unit_scalar_path).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "tq/rng.h"
#include "tq/bitpack.h"
#include "tq/simd.h"

using namespace tq;

namespace {

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, sizeof(float) * n) == 0; }

// Finite values over a wide range of scales, with zeros of both signs and
// subnormals mixed in (sign of zero and subnormal results must match too).
float edgy(Rng& r) {
  switch (r.below(16)) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return float(r.uniform(-1, 1)) * std::numeric_limits<float>::denorm_min() * 1000.0f;
    default: return float(r.gaussian() * std::ldexp(1.0, int(r.below(40)) - 20));
  }
}

// The halving tree written out directly (the definition in tq/bitpack.h).
float reference_tree_sum_squares(const float* x, int n) {
  std::vector<float> s(static_cast<size_t>(n / 2));
  int h = n / 2;
  for (int i = 0; i < h; ++i) s[size_t(i)] = x[i] * x[i] + x[i + h] * x[i + h];
  for (h /= 2; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) s[size_t(i)] += s[size_t(i + h)];
  return s[0];
}

}  // namespace

TEST_CASE("simd: the path follows TQ_SIMD", "[simd]") {
  const std::string path = simd_path();
  INFO("path " << path);
  REQUIRE((path == "avx512" || path == "avx2" || path == "scalar"));
  const char* f = std::getenv("TQ_SIMD");
  if (f && std::string(f) == "scalar") REQUIRE(path == "scalar");
  if (f && std::string(f) == "avx2") REQUIRE(path != "avx512");
}

TEST_CASE("simd: fwht is bit-identical to the scalar butterflies", "[simd]") {
  Rng r(31);
  for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}) {
    for (int t = 0; t < 50; ++t) {
      std::vector<float> a(static_cast<size_t>(n)), b;
      for (auto& v : a) v = t % 2 ? edgy(r) : float(r.gaussian() * std::ldexp(1.0, int(r.below(40)) - 20));
      b = a;
      fwht(a.data(), n);
      detail::fwht_scalar(b.data(), n);
      REQUIRE(same_bits(a.data(), b.data(), size_t(n)));
    }
  }
}

TEST_CASE("simd: fwht_scale2 equals copy, scalar fwht, then (y·a)·b", "[simd]") {
  Rng r(34);
  for (int n : {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096}) {
    for (int t = 0; t < 20; ++t) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = edgy(r);
      const float a = float(r.uniform(0.01, 2)), b = t == 0 ? 1.0f / 3.0f : float(r.uniform(0.01, 2));
      std::vector<float> ref = x;
      detail::fwht_scalar(ref.data(), n);
      for (auto& v : ref) v = (v * a) * b;
      std::vector<float> y(static_cast<size_t>(n), 7.0f);
      fwht_scale2(x.data(), y.data(), n, a, b);
      REQUIRE(same_bits(y.data(), ref.data(), size_t(n)));
      fwht_scale2(x.data(), x.data(), n, a, b);  // in place
      REQUIRE(same_bits(x.data(), ref.data(), size_t(n)));
    }
  }
}

TEST_CASE("simd: bucketize equals counting midpoints, ties go up", "[simd]") {
  Rng r(32);
  for (int nm : {1, 2, 3, 5, 7, 15, 16, 31, 255}) {
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

TEST_CASE("simd: Bucketizer matches the scalar count for every length, ties, ±0, inf and NaN", "[simd]") {
  Rng r(35);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int nm : {1, 3, 7, 15, 6, 9}) {
    // Symmetric midpoints (as in the Lloyd-Max codebooks): an odd count has 0 in the middle.
    std::vector<float> mids(static_cast<size_t>(nm));
    for (int i = 0; i < nm; ++i) mids[size_t(i)] = float(i - (nm - 1) / 2.0) * 0.125f;
    const Bucketizer bk(mids.data(), nm);
    for (int n = 0; n <= 70; ++n) {
      for (int t = 0; t < 4; ++t) {
        std::vector<float> y(static_cast<size_t>(n) + 1, 1e30f);  // guard element beyond n
        for (int j = 0; j < n; ++j) {
          switch (r.below(8)) {
            case 0: y[size_t(j)] = mids[r.below(uint64_t(nm))]; break;  // exactly a midpoint
            case 1: y[size_t(j)] = std::nextafter(mids[r.below(uint64_t(nm))], -inf); break;
            case 2: y[size_t(j)] = r.coin() ? 0.0f : -0.0f; break;
            case 3: { const float s[] = {inf, -inf, nan, -nan}; y[size_t(j)] = s[r.below(4)]; break; }
            default: y[size_t(j)] = float(r.uniform(-1.5, 1.5));
          }
        }
        std::vector<uint8_t> a(static_cast<size_t>(n) + 8, 0xee), b(static_cast<size_t>(n) + 8, 0xee);
        bk(y.data(), n, a.data());
        detail::bucketize_scalar(y.data(), n, mids.data(), nm, b.data());
        REQUIRE(a == b);  // including the untouched 0xee bytes past n
      }
    }
  }
}

TEST_CASE("simd: power-of-two tree sums and two-step scaling match the scalar definitions", "[simd]") {
  Rng r(33);
  for (int n : {16, 32, 64, 128, 256, 512, 1024, 2048, 4096}) {
    for (int t = 0; t < 20; ++t) {
      std::vector<float> x(static_cast<size_t>(n));
      for (auto& v : x) v = t % 2 ? edgy(r) : float(r.gaussian() * std::ldexp(1.0, int(r.below(20)) - 10));
      const float s = tree_sum_squares_pow2(x.data(), n), ref = reference_tree_sum_squares(x.data(), n);
      REQUIRE(same_bits(&s, &ref, 1));
      REQUIRE(tree_sum_squares_pow2(x.data(), n) == tree_sum_squares(x.data(), n));
      const float a = float(r.uniform(0.01, 2)), b = float(r.uniform(0.01, 2));
      std::vector<float> y = x;
      scale2_inplace(y.data(), n, a, b);
      for (int j = 0; j < n; ++j) REQUIRE(y[size_t(j)] == (x[size_t(j)] * a) * b);
    }
  }
}

TEST_CASE("simd: two-step scaling for lengths that are not a multiple of the vector width", "[simd]") {
  Rng r(36);
  for (int n = 0; n <= 70; ++n) {
    std::vector<float> x(static_cast<size_t>(n) + 1);
    for (auto& v : x) v = edgy(r);
    const float a = float(r.uniform(0.01, 2)), b = float(r.uniform(0.01, 2));
    std::vector<float> y = x, ref = x;
    for (int j = 0; j < n; ++j) ref[size_t(j)] = (x[size_t(j)] * a) * b;
    scale2_inplace(y.data(), n, a, b);
    REQUIRE(same_bits(y.data(), ref.data(), x.size()));  // element n untouched
  }
}

TEST_CASE("simd: pack_nibbles equals the scalar packing for any bytes and lengths", "[simd]") {
  Rng r(37);
  for (size_t n = 0; n <= 300; ++n) {
    std::vector<uint8_t> codes(n);
    for (auto& c : codes) c = uint8_t(n % 3 == 0 ? r.below(256) : r.below(16));  // out-of-range codes too
    std::vector<uint8_t> a(n / 2 + 4, 0xa5), b(n / 2 + 4, 0xa5);
    pack_nibbles(codes.data(), n, a.data());
    detail::pack_nibbles_scalar(codes.data(), n, b.data());
    REQUIRE(a == b);  // the bytes after n/2 stay untouched
  }
}

TEST_CASE("simd: all_within equals the scalar |x| ≤ limit test", "[simd]") {
  Rng r(38);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const auto scalar = [](const std::vector<float>& x, size_t n, float limit) {
    bool good = true;
    for (size_t i = 0; i < n; ++i) good = good && std::fabs(x[i]) <= limit;
    return good;
  };
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(15), size_t(16), size_t(17), size_t(63), size_t(64),
                   size_t(65), size_t(200), size_t(1000)}) {
    for (int t = 0; t < 40; ++t) {
      std::vector<float> x(n + 1, nan);  // NaN guard beyond n
      for (size_t i = 0; i < n; ++i) x[i] = float(r.uniform(-2, 2));
      if (n && t % 4 != 0) {  // one bad or borderline value somewhere, often in the tail
        const size_t at = t % 2 ? n - 1 - r.below(std::min<size_t>(n, 17)) : r.below(n);
        const float s[] = {nan, -nan, inf, -inf, 2.0f, -2.0f, 65504.0f, std::nextafter(2.0f, inf), -0.0f};
        x[at] = s[r.below(9)];
      }
      for (float limit : {2.0f, 0.0f, -0.0f, -1.0f, inf, nan, 65504.0f, std::nextafter(2.0f, 0.0f)}) {
        INFO("n " << n << " limit " << limit);
        REQUIRE(all_within(x.data(), n, limit) == scalar(x, n, limit));
      }
    }
  }
}
