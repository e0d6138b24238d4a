// Perplexity/KLD statistics against a naive float64 computation on synthetic
// logits (no model needed).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tq/error.h"
#include "tq/perplexity.h"
#include "tq/rng.h"

using namespace tq;

namespace {

// Naive reference: log-probabilities straight from the definition (logits are
// small enough that exp needs no shifting in double).
std::vector<double> log_softmax(const float* x, int n) {
  double z = 0;
  for (int i = 0; i < n; ++i) z += std::exp(double(x[i]));
  std::vector<double> lp(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) lp[size_t(i)] = double(x[i]) - std::log(z);
  return lp;
}

double pct(std::vector<double> v, double q) {  // order statistic at rank q·(n−1), linear interpolation
  std::sort(v.begin(), v.end());
  const double r = q * double(v.size() - 1);
  const size_t lo = size_t(r);
  const size_t hi = lo + 1 < v.size() ? lo + 1 : lo;
  return v[lo] * (1 - (r - double(lo))) + v[hi] * (r - double(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / double(v.size());
}

// Sample standard error of the mean with the population variance over n − 1.
double sem(const std::vector<double>& v) {
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()) / double(v.size() - 1));
}

#define CHECK_REL(a, b) CHECK(std::fabs(double(a) - double(b)) <= 1e-9 * std::max(1.0, std::fabs(double(b))))

}  // namespace

TEST_CASE("perplexity: statistics match a naive float64 computation", "[perplexity]") {
  constexpr int V = 40, kChunks = 3, kRows = 110;
  Rng rng(99);
  FormatAccumulator base("base", true), test("test", false);
  std::vector<double> nll, nll_b, kld, dp;
  int same = 0;
  for (int c = 0; c < kChunks; ++c) {
    std::vector<float> b(size_t(kRows) * V), t(size_t(kRows) * V);
    std::vector<int32_t> tg(static_cast<size_t>(kRows));
    for (int r = 0; r < kRows; ++r) {
      const double scale = r % 7 == 0 ? 9.0 : 2.0;  // some rows push log p_base below −16
      for (int i = 0; i < V; ++i) {
        b[size_t(r) * V + i] = float(scale * rng.gaussian());
        t[size_t(r) * V + i] = b[size_t(r) * V + i] + float(0.4 * rng.gaussian());
      }
      tg[size_t(r)] = int32_t(rng.below(V));
    }
    base.add(b.data(), b.data(), tg.data(), kRows, V);
    test.add(t.data(), b.data(), tg.data(), kRows, V);
    base.end_chunk();
    test.end_chunk();
    for (int r = 0; r < kRows; ++r) {
      const auto lb = log_softmax(&b[size_t(r) * V], V);
      const auto lt = log_softmax(&t[size_t(r) * V], V);
      const int y = tg[size_t(r)];
      nll.push_back(-lt[size_t(y)]);
      nll_b.push_back(-lb[size_t(y)]);
      double k = 0;
      for (int i = 0; i < V; ++i)
        if (lb[size_t(i)] > -16) k += std::exp(lb[size_t(i)]) * (lb[size_t(i)] - lt[size_t(i)]);
      kld.push_back(k);
      dp.push_back(std::exp(lt[size_t(y)]) - std::exp(lb[size_t(y)]));
      same += std::max_element(lb.begin(), lb.end()) - lb.begin() == std::max_element(lt.begin(), lt.end()) - lt.begin();
    }
  }
  const int n = kChunks * kRows;
  const FormatResult rb = base.result(), rt = test.result();
  CHECK(rb.is_base);
  CHECK(rb.n_tokens == n);
  CHECK(rb.n_chunks == kChunks);
  CHECK_REL(rb.nll_mean, mean(nll_b));
  CHECK_REL(rb.ppl, std::exp(mean(nll_b)));
  CHECK_REL(rb.ppl_err, std::exp(mean(nll_b)) * sem(nll_b));
  CHECK(rb.kld_mean == 0);

  CHECK_FALSE(rt.is_base);
  CHECK_REL(rt.nll_mean, mean(nll));
  CHECK_REL(rt.nll_err, sem(nll));
  CHECK_REL(rt.ppl, std::exp(mean(nll)));
  CHECK_REL(rt.ppl_err, std::exp(mean(nll)) * sem(nll));
  std::vector<double> d(nll.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = nll[i] - nll_b[i];
  CHECK_REL(rt.ln_ppl_ratio, mean(d));
  CHECK_REL(rt.ln_ppl_ratio_err, sem(d));
  CHECK_REL(rt.ppl_ratio, std::exp(mean(d)));
  CHECK_REL(rt.delta_ppl, std::exp(mean(nll)) - std::exp(mean(nll_b)));
  {
    // ΔPPL error by the delta method with the covariance of the two means.
    const double mq = mean(nll), mb = mean(nll_b);
    double vq = 0, vb = 0, cv = 0;
    for (size_t i = 0; i < nll.size(); ++i) {
      vq += (nll[i] - mq) * (nll[i] - mq);
      vb += (nll_b[i] - mb) * (nll_b[i] - mb);
      cv += (nll[i] - mq) * (nll_b[i] - mb);
    }
    vq /= n, vb /= n, cv /= n;
    const double eq = std::exp(mq), eb = std::exp(mb);
    CHECK_REL(rt.delta_ppl_err, std::sqrt((eq * eq * vq + eb * eb * vb - 2 * eq * eb * cv) / (n - 1)));
    CHECK_REL(rt.nll_correlation, cv / std::sqrt(vq * vb));
  }
  CHECK_REL(rt.kld_mean, mean(kld));
  CHECK_REL(rt.kld_err, sem(kld));
  CHECK_REL(rt.kld.max, *std::max_element(kld.begin(), kld.end()));
  CHECK_REL(rt.kld.min, *std::min_element(kld.begin(), kld.end()));
  CHECK_REL(rt.kld.median, pct(kld, 0.5));
  CHECK_REL(rt.kld.p99_9, pct(kld, 0.999));
  CHECK_REL(rt.kld.p99, pct(kld, 0.99));
  CHECK_REL(rt.kld.p95, pct(kld, 0.95));
  CHECK_REL(rt.kld.p90, pct(kld, 0.90));
  CHECK_REL(rt.kld.p10, pct(kld, 0.10));
  CHECK_REL(rt.kld.p5, pct(kld, 0.05));
  CHECK_REL(rt.kld.p1, pct(kld, 0.01));
  CHECK_REL(rt.kld.p0_1, pct(kld, 0.001));
  CHECK(rt.kld.min >= -1e-12);  // KLD ≥ 0 up to the −16 cutoff
  const double st = double(same) / n;
  CHECK_REL(rt.same_top, st);
  CHECK_REL(rt.same_top_err, std::sqrt(st * (1 - st) / (n - 1)));
  CHECK(st > 0.5);
  CHECK(st < 1.0);
  CHECK_REL(rt.dp_mean, mean(dp));
  CHECK_REL(rt.dp_mean_err, sem(dp));
  std::vector<double> dp2(dp.size());
  for (size_t i = 0; i < dp.size(); ++i) dp2[i] = dp[i] * dp[i];
  CHECK_REL(rt.dp_rms, std::sqrt(mean(dp2)));
  CHECK_REL(rt.dp_rms_err, sem(dp2) / (2 * std::sqrt(mean(dp2))));
  CHECK_REL(rt.dp.p95, pct(dp, 0.95));
  CHECK_REL(rt.dp.p5, pct(dp, 0.05));

  const Json j = rt;
  CHECK(j.at("format").get<std::string>() == "test");
  CHECK(j.at("kld").at("99%").get<double>() == rt.kld.p99);
  // The reference compared with itself: exact zero divergence, same top token always.
  const Json jb = rb;
  CHECK(jb.at("kld_mean").get<double>() == 0.0);
  CHECK(jb.at("same_top").get<double>() == 1.0);
  CHECK(jb.at("dp_rms").get<double>() == 0.0);
  CHECK_THAT(perplexity_report({rb, rt}), Catch::Contains("test") && Catch::Contains("(reference)"));
}

TEST_CASE("perplexity: identical logits give zero divergence", "[perplexity]") {
  constexpr int V = 16, R = 120;
  Rng rng(5);
  std::vector<float> b(size_t(R) * V);
  for (auto& x : b) x = float(3 * rng.gaussian());
  std::vector<float> copy = b;
  std::vector<int32_t> tg(static_cast<size_t>(R), 3);
  FormatAccumulator a("same", false);
  a.add(copy.data(), b.data(), tg.data(), R, V);
  const FormatResult r = a.result();
  CHECK(r.kld_mean == 0);
  CHECK(r.kld.max == 0);
  CHECK(r.same_top == 1);
  CHECK(r.same_top_err == 0);
  CHECK(r.delta_ppl == 0);
  CHECK(r.dp_rms == 0);
  CHECK(r.ppl_ratio == 1);
}

TEST_CASE("perplexity: refuses fewer than 100 tokens and non-finite logits", "[perplexity]") {
  constexpr int V = 8;
  std::vector<float> b(size_t(99) * V, 0.5f);
  std::vector<int32_t> tg(99, 1);
  FormatAccumulator a("few", false);
  a.add(b.data(), b.data(), tg.data(), 99, V);
  CHECK_THROWS_WITH(a.result(), Catch::Contains("only 99 scored tokens"));
  b[17] = NAN;
  FormatAccumulator n("nan", false);
  CHECK_THROWS_AS(n.add(b.data(), b.data(), tg.data(), 99, V), Error);
  tg[0] = V;
  FormatAccumulator t("target", false);
  b[17] = 0;
  CHECK_THROWS_AS(t.add(b.data(), b.data(), tg.data(), 99, V), Error);
}

TEST_CASE("perplexity: percentiles interpolate between order statistics", "[perplexity]") {
  std::vector<double> v;
  for (int i = 100; i >= 0; --i) v.push_back(i);
  const Percentiles p = Percentiles::of(v);
  CHECK(p.max == 100);
  CHECK(p.min == 0);
  CHECK(p.median == 50);
  CHECK(p.p99 == Approx(99));
  CHECK(p.p99_9 == Approx(99.9));
  CHECK(p.p0_1 == Approx(0.1));
  CHECK(p.p5 == Approx(5));
  CHECK_THROWS_AS(Percentiles::of({}), Error);
}
