// TurboQuant_prod's QJL estimator: unbiased inner products (paper Thm. 2),
// against the biased MSE-only quantizer, with variance of the bound's order.
#include <catch2/catch.hpp>

#include <cmath>

#include <fmt/format.h>

#include "tq/format.h"
#include "tq/rng.h"

using namespace tq;

namespace {
struct Stats {
  double mean, sd, se, var;
};
// Inner-product error q·x̂ − q·x over `seeds` independent draws of the
// rotation (and S), for one fixed x and q.
Stats ip_error(const std::string& codec, const std::vector<float>& x, const std::vector<float>& q, int seeds) {
  const int d = int(x.size());
  double qx = 0;
  for (int j = 0; j < d; ++j) qx += double(q[size_t(j)]) * x[size_t(j)];
  double s1 = 0, s2 = 0;
  for (int s = 1; s <= seeds; ++s) {
    const std::string spec = codec.rfind("prod", 0) == 0
                                 ? fmt::format("k={},rot=rht:{},qjl=gauss:{}", codec, s, s + 100000)
                                 : fmt::format("k={},rot=rht:{}", codec, s);
    const KvFormat f = make_format(spec, d);
    const auto rec = f.key->encode(x);
    std::vector<float> p(f.key->prepared_size());
    float sc;
    f.key->prepare_query(q.data(), p.data());
    f.key->score(p.data(), rec.data(), 1, &sc);
    const double e = sc - qx;
    s1 += e;
    s2 += e * e;
  }
  Stats st;
  st.mean = s1 / seeds;
  st.var = s2 / seeds - st.mean * st.mean;
  st.sd = std::sqrt(st.var);
  st.se = st.sd / std::sqrt(double(seeds));
  return st;
}
}  // namespace

TEST_CASE("qjl: prod estimates inner products without bias; mse alone is biased", "[qjl]") {
  const int d = 128, seeds = 1500;
  Rng r(21);
  std::vector<float> x(d), q(d);
  double xn = 0;
  for (auto& v : x) { v = float(r.gaussian()); xn += double(v) * v; }
  for (auto& v : x) v = float(v / std::sqrt(xn));  // unit x
  for (int j = 0; j < d; ++j) q[size_t(j)] = float(3.0 * x[size_t(j)] + 0.5 * r.gaussian());  // aligned query
  double qn2 = 0;
  for (float v : q) qn2 += double(v) * v;
  for (int b : {2, 3}) {
    const Stats prod = ip_error(fmt::format("prod{}", b), x, q, seeds);
    const Stats mse = ip_error(fmt::format("mse{}", b), x, q, seeds);
    INFO("bits " << b << ": prod mean " << prod.mean << " ± " << prod.se << ", mse mean " << mse.mean << " ± " << mse.se);
    REQUIRE(std::fabs(prod.mean) < 4 * prod.se);  // unbiased: within the CI of zero
    REQUIRE(mse.mean < -8 * mse.se);              // shrinkage: q·x̂ systematically below q·x
    // Variance: of the order of the paper's bound π/(2d)·‖q‖²·E[γ²] with
    // E[γ²] = D_{b-1} (the residual energy of a unit vector).
    const double d_mse = b == 2 ? 0.3634 : 0.1175;
    const double bound = 3.14159265358979 / (2.0 * d) * qn2 * d_mse;
    INFO("prod variance " << prod.var << " bound " << bound);
    REQUIRE(prod.var < 1.25 * bound);
    REQUIRE(prod.var > 0.2 * bound);
  }
}
