#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <vector>

#include "tq/error.h"
#include "tq/rng.h"
#include "tq/rotation.h"

using namespace tq;

namespace {
std::vector<float> random_vec(Rng& r, int d, double scale = 1.0) {
  std::vector<float> x(d);
  for (auto& v : x) v = float(r.gaussian() * scale);
  return x;
}
double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * b[i];
  return s;
}
void check_orthogonal(const Rotation& rot, double tol) {
  const int d = rot.dim();
  const auto m = rot.matrix();
  for (int i = 0; i < d; ++i)
    for (int j = 0; j < d; ++j) {
      double s = 0;
      for (int k = 0; k < d; ++k) s += double(m[size_t(i) * d + k]) * m[size_t(j) * d + k];
      REQUIRE(std::fabs(s - (i == j ? 1.0 : 0.0)) < tol);
    }
}
}  // namespace

TEST_CASE("hadamard: equals the naive Sylvester matrix / sqrt(d)", "[rotation]") {
  for (int d : {2, 4, 8, 64, 128, 256}) {
    HadamardRotation h(d);
    const auto m = h.matrix();
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j) {
        const double expect = ((std::popcount(unsigned(i & j)) & 1) ? -1.0 : 1.0) / std::sqrt(double(d));
        REQUIRE(std::fabs(m[size_t(i) * d + j] - expect) < 1e-7);
      }
  }
}

TEST_CASE("rotations: orthogonal, invertible, preserve norms and inner products", "[rotation]") {
  Rng r(1);
  for (int d : {16, 64, 80, 96, 128, 160, 192, 256, 320}) {
    std::vector<std::string> specs = {"none", "auto", "haar:7"};
    if (is_power_of_two(d)) specs.insert(specs.end(), {"hadamard", "rht:3"});
    for (const auto& spec : specs) {
      INFO("d=" << d << " rot=" << spec);
      auto rot = make_rotation(spec, d);
      if (d <= 128) check_orthogonal(*rot, 2e-6);
      for (int t = 0; t < 20; ++t) {
        auto x = random_vec(r, d), y = random_vec(r, d);
        auto rx = x, ry = y;
        rot->apply(rx.data());
        rot->apply(ry.data());
        REQUIRE(dot(rx, rx) == Approx(dot(x, x)).epsilon(1e-5));
        REQUIRE(dot(rx, ry) == Approx(dot(x, y)).margin(1e-4 * std::sqrt(dot(x, x) * dot(y, y))));
        rot->apply_inverse(rx.data());
        for (int i = 0; i < d; ++i) REQUIRE(rx[i] == Approx(x[i]).margin(1e-5));
      }
    }
  }
}

TEST_CASE("rotations: seeded and deterministic", "[rotation]") {
  for (const char* spec : {"rht:11", "haar:11"}) {
    auto a = make_rotation(spec, 64)->matrix(), b = make_rotation(spec, 64)->matrix();
    REQUIRE(a == b);
    const std::string sp(spec);
    auto c = make_rotation(sp.substr(0, sp.find(':') + 1) + "12", 64)->matrix();
    REQUIRE(a != c);
  }
}

TEST_CASE("rotations: rotated coordinates of random unit vectors have variance 1/d", "[rotation]") {
  Rng r(2);
  for (const char* spec : {"hadamard", "rht:5", "haar:5"}) {
    const int d = 64, n = 20000;
    auto rot = make_rotation(spec, d);
    // Structured inputs (one-hot-ish: energy on a few coordinates) make the test
    // depend on the rotation spreading energy, not on the input being random.
    std::vector<double> var(d, 0.0);
    for (int t = 0; t < n; ++t) {
      std::vector<float> x(d, 0.f);
      for (int k = 0; k < 4; ++k) x[r.below(d)] += float(r.gaussian());
      double nn = std::sqrt(dot(x, x));
      if (nn == 0) { --t; continue; }
      for (auto& v : x) v = float(v / nn);
      if (std::string(spec) == "hadamard") {
        // The fixed Hadamard needs a random input direction: apply a random sign flip.
        for (auto& v : x) v = r.coin() ? -v : v;
      }
      rot->apply(x.data());
      for (int i = 0; i < d; ++i) var[i] += double(x[i]) * x[i];
    }
    double mean = 0;
    for (auto v : var) mean += v / n / d;
    INFO(spec);
    REQUIRE(mean == Approx(1.0 / d).epsilon(1e-4));  // exact: norm preserved
    for (auto v : var) REQUIRE(v / n == Approx(1.0 / d).epsilon(0.1));
  }
}

TEST_CASE("rotations: bad specs and head_dims are refused by name", "[rotation]") {
  REQUIRE_THROWS_WITH(make_rotation("hadamard", 96), Catch::Contains("96") && Catch::Contains("power of two"));
  REQUIRE_THROWS_WITH(make_rotation("rht:1", 80), Catch::Contains("80"));
  REQUIRE_THROWS_WITH(make_rotation("spin", 64), Catch::Contains("unknown rotation 'spin'"));
  REQUIRE_THROWS_WITH(make_rotation("haar:x", 64), Catch::Contains("seed"));
  REQUIRE(make_rotation("auto", 96)->name() == "haar:0");
  REQUIRE(make_rotation("auto", 128)->name() == "hadamard");
}
