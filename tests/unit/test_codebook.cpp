#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "tq/codebook.h"
#include "tq/codebook_io.h"
#include "tq/error.h"
#include "tq/json.h"
#include "tq/rng.h"

using namespace tq;

namespace {
constexpr double kPi = 3.14159265358979323846;

// Deliberately naive float64 oracle: N(0,1) Lloyd-Max, each cell integrated
// with its own composite Simpson rule on [max(a,-12), min(b,12)] (no erf, no
// closed forms).
std::vector<double> naive_normal_lloyd(int bits) {
  const int K = 1 << bits, n = 4000;
  auto pdf = [](double x) { return std::exp(-x * x / 2) / std::sqrt(2 * kPi); };
  std::vector<double> c(K);
  for (int i = 0; i < K; ++i) c[i] = -3 + 6 * (i + 0.5) / K;
  for (int it = 0; it < 100000; ++it) {
    double change = 0;
    std::vector<double> next(K);
    for (int j = 0; j < K; ++j) {
      const double a = j == 0 ? -12.0 : 0.5 * (c[j - 1] + c[j]);
      const double b = j + 1 == K ? 12.0 : 0.5 * (c[j] + c[j + 1]);
      const double h = (b - a) / n;
      double s0 = 0, s1 = 0;
      for (int i = 0; i <= n; ++i) {
        const double x = a + i * h, w = (i == 0 || i == n) ? 1 : (i % 2 ? 4 : 2);
        s0 += w * pdf(x);
        s1 += w * x * pdf(x);
      }
      next[j] = s1 / s0;
      change = std::max(change, std::fabs(next[j] - c[j]));
    }
    c = next;
    if (change < 1e-14) break;
  }
  return c;
}
}  // namespace

TEST_CASE("gauss: published per-vector distortions for 1..4 bits", "[codebook]") {
  const double expect[] = {0.3634, 0.1175, 0.03455, 0.009500};
  for (int b = 1; b <= 4; ++b) {
    const auto cb = lloyd_max_gaussian(128, b);
    REQUIRE(std::fabs(cb.distortion - expect[b - 1]) < 1e-4);
    REQUIRE(cb.distortion < paper_upper_bound(b));
    REQUIRE(cb.distortion > paper_lower_bound(b));
  }
  REQUIRE(lloyd_max_gaussian(64, 1).distortion == Approx(1 - 2 / kPi).epsilon(1e-12));
}

TEST_CASE("gauss: d=128 centroids are the N(0,1) Lloyd-Max levels / sqrt(128)", "[codebook]") {
  // Max (1960) published levels, positive half, 4 significant digits.
  const std::vector<std::vector<double>> max1960 = {
      {0.7979}, {0.4528, 1.510}, {0.2451, 0.7560, 1.344, 2.152},
      {0.1284, 0.3881, 0.6568, 0.9424, 1.256, 1.618, 2.069, 2.733}};
  for (int b = 1; b <= 4; ++b) {
    const auto cb = lloyd_max_gaussian(128, b);
    const auto naive = naive_normal_lloyd(b);
    const int K = 1 << b;
    for (int i = 0; i < K; ++i) {
      INFO("bits " << b << " level " << i);
      REQUIRE(std::fabs(cb.centroids[i] - naive[i] / std::sqrt(128.0)) < 1e-6);
      REQUIRE(std::fabs(cb.centroids[i] * std::sqrt(128.0) - naive[i]) < 1e-8);
      if (i >= K / 2) REQUIRE(std::fabs(cb.centroids[i] * std::sqrt(128.0) - max1960[b - 1][i - K / 2]) < 1.5e-3);
    }
    REQUIRE(cb.iterations > 0);
  }
}

TEST_CASE("gauss: converged — every centroid is its cell's conditional mean", "[codebook]") {
  const auto cb = lloyd_max_gaussian(2, 5);  // coordinates scaled by 1/sqrt(2)
  const double h = 1e-4;
  for (size_t i = 0; i < cb.centroids.size(); ++i) {
    const double s = std::sqrt(2.0);
    const double a = i == 0 ? -14.0 : cb.midpoints[i - 1] * s, b = i + 1 == cb.centroids.size() ? 14.0 : cb.midpoints[i] * s;
    double s0 = 0, s1 = 0;
    const int n = int((b - a) / h) + 2;
    const double hh = (b - a) / n;
    for (int k = 0; k < n; ++k) {  // midpoint rule, naive
      const double x = a + (k + 0.5) * hh, f = std::exp(-x * x / 2);
      s0 += f;
      s1 += x * f;
    }
    REQUIRE(cb.centroids[i] * s == Approx(s1 / s0).epsilon(1e-7));
  }
}

TEST_CASE("sphere: d=3 is uniform on [-1,1], so the optimum is the uniform grid", "[codebook]") {
  for (int b = 1; b <= 5; ++b) {
    const auto cb = lloyd_max_sphere(3, b);
    const int K = 1 << b;
    for (int i = 0; i < K; ++i) REQUIRE(cb.centroids[i] == Approx((2.0 * i + 1) / K - 1).margin(1e-11));
    REQUIRE(cb.distortion == Approx(1.0 / (double(K) * K)).epsilon(1e-10));
    REQUIRE(cb.entropy_bits == Approx(double(b)).epsilon(1e-12));
  }
}

TEST_CASE("sphere: quadrature to 1e-12 against closed forms", "[codebook]") {
  // 1-bit table ±c: D = d(E t² − 2c E|t| + c²), E t² = 1/d,
  // E|t| = Γ(d/2) / (√π Γ((d+1)/2)).
  for (int d : {2, 4, 5, 16, 64, 128, 256, 1024}) {
    const double et = std::exp(std::lgamma(d / 2.0) - std::lgamma((d + 1) / 2.0)) / std::sqrt(kPi);
    for (double c : {0.01, 0.1, 0.3}) {
      Codebook cb = codebook_from_table({c}, Distribution::sphere, d, 1);
      const double expect = d * (1.0 / d - 2 * c * et + c * c);
      INFO("d=" << d << " c=" << c);
      REQUIRE(std::fabs(cb.distortion - expect) < 1e-12 * std::max(1.0, expect));
    }
    REQUIRE(lloyd_max_sphere(d, 1).centroids[1] == Approx(et).epsilon(1e-12));
  }
  // d=4: f ∝ sqrt(1−t²), CDF(t) = 1/2 + (t√(1−t²) + asin t)/π: mass of a cell → entropy.
  const auto cdf = [](double t) { return 0.5 + (t * std::sqrt(1 - t * t) + std::asin(t)) / kPi; };
  Codebook cb = codebook_from_table({-0.6, -0.1, 0.2, 0.7}, Distribution::sphere, 4, 2);
  const double m[] = {-0.35, 0.05, 0.45};
  double h = 0, prev = 0;
  for (int i = 0; i <= 3; ++i) {
    const double cur = i == 3 ? 1.0 : cdf(m[i]);
    h -= (cur - prev) * std::log2(cur - prev);
    prev = cur;
  }
  REQUIRE(cb.entropy_bits == Approx(h).epsilon(1e-12));
}

TEST_CASE("sphere: differs from gauss at small d and converges to it", "[codebook]") {
  double prev_gap = 1e9;
  for (int d : {16, 64, 128, 256, 1024}) {
    const auto s = lloyd_max_sphere(d, 3), g = lloyd_max_gaussian(d, 3);
    const double gap = std::fabs(s.centroids.back() - g.centroids.back()) / g.centroids.back();
    INFO("d=" << d << " gap " << gap);
    REQUIRE(gap < prev_gap);
    prev_gap = gap;
    REQUIRE(s.distortion < g.distortion);  // bounded support: easier than the Gaussian
  }
  REQUIRE(std::fabs(lloyd_max_sphere(16, 3).centroids.back() / lloyd_max_gaussian(16, 3).centroids.back() - 1) > 0.05);
  REQUIRE(std::fabs(lloyd_max_sphere(1024, 3).centroids.back() / lloyd_max_gaussian(1024, 3).centroids.back() - 1) < 0.005);
}

TEST_CASE("closed forms and uniform grids", "[codebook]") {
  for (auto dist : {Distribution::gauss, Distribution::sphere}) {
    const auto cf = closed_form_codebook(dist, 64, 1);
    const auto lm = dist == Distribution::gauss ? lloyd_max_gaussian(64, 1) : lloyd_max_sphere(64, 1);
    REQUIRE(cf.centroids[1] == Approx(lm.centroids[1]).epsilon(1e-12));
    REQUIRE(uniform_codebook(dist, 64, 1).distortion == Approx(lm.distortion).epsilon(1e-9));
  }
  // Paper's 2-bit constants are the Lloyd-Max levels to 3 digits.
  const auto c2 = closed_form_codebook(Distribution::gauss, 128, 2), l2 = lloyd_max_gaussian(128, 2);
  REQUIRE(c2.distortion == Approx(l2.distortion).epsilon(1e-4));
  // Max (1960): optimum uniform 16-level quantizer of N(0,1): step 0.3352, MSE 0.01154.
  const auto u4 = uniform_codebook(Distribution::gauss, 128, 4);
  REQUIRE((u4.centroids[1] - u4.centroids[0]) * std::sqrt(128.0) == Approx(0.3352).margin(2e-4));
  REQUIRE(u4.distortion == Approx(0.01154).margin(2e-5));
  REQUIRE(u4.distortion > lloyd_max_gaussian(128, 4).distortion);
}

TEST_CASE("empirical Lloyd: exact small case, deterministic, approaches the Gaussian", "[codebook]") {
  const auto e = lloyd_max_empirical({0, 0, 0, 1, 1, 1, 0.5}, 2, 1);
  // Partition {0,0,0} | {0.5,1,1,1}: centroids 0 and 0.875.
  REQUIRE(e.centroids[0] == 0.0);
  REQUIRE(e.centroids[1] == 0.875);
  Rng r(3);
  std::vector<double> xs(1000000);
  for (auto& x : xs) x = r.gaussian() / std::sqrt(128.0);
  const auto a = lloyd_max_empirical(xs, 128, 3), b = lloyd_max_empirical(xs, 128, 3);
  REQUIRE(a.centroids == b.centroids);
  // Lloyd fixed points are ill-conditioned (flat optimum): centroids to 2% of
  // sigma, distortion (robust) to 1%.
  const auto g = lloyd_max_gaussian(128, 3);
  for (size_t i = 0; i < 8; ++i) REQUIRE(a.centroids[i] == Approx(g.centroids[i]).margin(0.02 / std::sqrt(128.0)));
  REQUIRE(a.distortion == Approx(g.distortion).epsilon(0.01));
  REQUIRE(a.distortion == Approx(empirical_distortion(a, xs)).epsilon(1e-9));
  REQUIRE_THROWS_WITH(lloyd_max_empirical({1, 1, 1}, 2, 2), Catch::Contains("distinct"));
}

TEST_CASE("vllm codebook: bit-exact with the centroids vLLM computed", "[codebook]") {
  const std::string path = std::string(TQ_SHARED_VECTORS) + "/vllm_turboquant_vectors.json";
  const Json v = parse_json(read_text_file(path), path);
  int checked = 0;
  for (const auto& c : v.at("cases")) {
    const int d = c.at("head_dim").get<int>();
    const int bits = c.at("preset").get<std::string>() == "turboquant_4bit_nc" ? 4 : 3;
    const auto cb = vllm_codebook(d, bits);
    for (size_t i = 0; i < cb.centroids.size(); ++i) {
      const float f = float(cb.centroids[i]);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      REQUIRE(u == c.at("centroids_f32_bits").at(i).get<uint32_t>());
    }
    for (size_t i = 0; i < cb.midpoints.size(); ++i) {
      const float f = float(cb.midpoints[i]);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      REQUIRE(u == c.at("midpoints_f32_bits").at(i).get<uint32_t>());
    }
    ++checked;
  }
  REQUIRE(checked == 9);
  // The 4-bit vLLM table stops at its iteration cap: close to, not at, the optimum.
  const auto vl = vllm_codebook(128, 4), opt = lloyd_max_gaussian(128, 4);
  REQUIRE(vl.iterations == 200);
  REQUIRE(vl.distortion > opt.distortion);
  REQUIRE(vl.distortion / opt.distortion < 1.001);
}

TEST_CASE("codebook input errors name what is wrong", "[codebook]") {
  REQUIRE_THROWS_WITH(lloyd_max_gaussian(128, 0), Catch::Contains("bits = 0"));
  REQUIRE_THROWS_WITH(lloyd_max_gaussian(128, 9), Catch::Contains("bits = 9"));
  REQUIRE_THROWS_WITH(lloyd_max_sphere(1, 2), Catch::Contains("d = 1"));
  REQUIRE_THROWS_WITH(codebook_from_table({0.1, 0.05}, Distribution::gauss, 128, 2), Catch::Contains("ascending"));
  REQUIRE_THROWS_WITH(codebook_from_table({0.1, 0.2, 0.3}, Distribution::gauss, 128, 2), Catch::Contains("3 values"));
  REQUIRE_THROWS_WITH(codebook_from_table({NAN, 0.2}, Distribution::gauss, 128, 2), Catch::Contains("not finite"));
  REQUIRE_THROWS_WITH(parse_number_list("0.1,abc", "--table"), Catch::Contains("'abc' (position 2)"));
  REQUIRE_THROWS_WITH(parse_number_list("0.1,nan", "--table"), Catch::Contains("not finite"));
  REQUIRE_THROWS_WITH(solve_codebook("laplace", 64, 2), Catch::Contains("unknown distribution 'laplace'"));
}
