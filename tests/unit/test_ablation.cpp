// tq-ablate's metrics against a naive float64 computation written here
// independently (loops, no Eigen), on a tiny synthetic dump.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "tq/ablation.h"
#include "tq/rng.h"

using namespace tq;

namespace {
struct Naive {
  double key_nmse, value_nmse, bias, slope, var, pred, ratio, logit_rmse, kl, top1, topk, out;
};

Naive naive(const AblationLayer& L, const KvFormat& f, int h, int topk, int64_t t0) {
  const int d = L.head_dim, G = L.n_heads / L.n_kv_heads;
  const int64_t T = L.T;
  auto kat = [&](const float* x, int64_t t, int H, int hh, int j) { return double(x[(size_t(t) * H + hh) * d + j]); };
  std::vector<float> K(size_t(T) * d), V(size_t(T) * d), Kh(size_t(T) * d), Vh(size_t(T) * d);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < d; ++j) {
      K[size_t(t) * d + j] = float(kat(L.k, t, L.n_kv_heads, h, j));
      V[size_t(t) * d + j] = float(kat(L.v, t, L.n_kv_heads, h, j));
    }
  Kh = f.key->decode(f.key->encode(K), T);
  Vh = f.value->decode(f.value->encode(V), T);
  Naive r{};
  double ke = 0, kn = 0, ve = 0, vn = 0;
  for (int64_t t = t0; t < T; ++t)
    for (int j = 0; j < d; ++j) {
      const size_t a = size_t(t) * d + j;
      ke += (double(K[a]) - Kh[a]) * (double(K[a]) - Kh[a]);
      kn += double(K[a]) * K[a];
      ve += (double(V[a]) - Vh[a]) * (double(V[a]) - Vh[a]);
      vn += double(V[a]) * V[a];
    }
  r.key_nmse = ke / kn;
  r.value_nmse = ve / vn;
  double s1 = 0, s2 = 0, sll = 0, slh = 0, pred = 0, kl = 0, top1 = 0, tk = 0, oe = 0, on = 0;
  int64_t pairs = 0, queries = 0;
  for (int g = 0; g < G; ++g) {
    const int qh = h * G + g;
    for (int64_t i = t0; i < T; ++i) {
      int64_t lo = t0;
      if (L.sliding_window > 0) lo = std::max(lo, i - L.sliding_window + 1);
      std::vector<double> l, lh;
      double qn = 0;
      for (int j = 0; j < d; ++j) qn += kat(L.q, i, L.n_heads, qh, j) * kat(L.q, i, L.n_heads, qh, j);
      for (int64_t t = lo; t <= i; ++t) {
        double a = 0, b = 0, e2 = 0;
        for (int j = 0; j < d; ++j) {
          const double q = kat(L.q, i, L.n_heads, qh, j);
          a += q * K[size_t(t) * d + j];
          b += q * Kh[size_t(t) * d + j];
          e2 += (double(K[size_t(t) * d + j]) - Kh[size_t(t) * d + j]) * (double(K[size_t(t) * d + j]) - Kh[size_t(t) * d + j]);
        }
        l.push_back(a);
        lh.push_back(b);
        s1 += b - a;
        s2 += (b - a) * (b - a);
        sll += a * a;
        slh += a * b;
        pred += qn * e2 / d;
        ++pairs;
      }
      auto softmax = [&](const std::vector<double>& x) {
        double mx = -INFINITY, z = 0;
        for (double v : x) mx = std::max(mx, v * L.attn_scale);
        std::vector<double> p;
        for (double v : x) z += std::exp(v * L.attn_scale - mx);
        for (double v : x) p.push_back(std::exp(v * L.attn_scale - mx) / z);
        return p;
      };
      const auto p = softmax(l), ph = softmax(lh);
      for (size_t t = 0; t < p.size(); ++t) kl += p[t] * std::log(p[t] / ph[t]);
      const size_t am = size_t(std::max_element(p.begin(), p.end()) - p.begin());
      const size_t bm = size_t(std::max_element(ph.begin(), ph.end()) - ph.begin());
      top1 += am == bm;
      std::vector<size_t> ia(p.size()), ib(p.size());
      for (size_t t = 0; t < p.size(); ++t) ia[t] = ib[t] = t;
      std::sort(ia.begin(), ia.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
      std::sort(ib.begin(), ib.end(), [&](size_t a, size_t b) { return ph[a] > ph[b]; });
      const size_t k = std::min<size_t>(size_t(topk), p.size());
      std::set<size_t> sa(ia.begin(), ia.begin() + long(k));
      size_t common = 0;
      for (size_t t = 0; t < k; ++t) common += sa.count(ib[t]);
      tk += double(common) / double(k);
      for (int j = 0; j < d; ++j) {
        double o = 0, o2 = 0;
        for (size_t t = 0; t < p.size(); ++t) {
          o += p[t] * V[(size_t(lo) + t) * d + j];
          o2 += ph[t] * Vh[(size_t(lo) + t) * d + j];
        }
        oe += (o - o2) * (o - o2);
        on += o * o;
      }
      ++queries;
    }
  }
  r.bias = s1 / double(pairs);
  r.slope = slh / sll;
  r.var = s2 / double(pairs) - r.bias * r.bias;
  r.pred = pred / double(pairs);
  r.ratio = (s2 / double(pairs)) / r.pred;
  r.logit_rmse = std::sqrt(s2 / double(pairs)) * L.attn_scale;
  r.kl = kl / double(queries);
  r.top1 = top1 / double(queries);
  r.topk = tk / double(queries);
  r.out = std::sqrt(oe / on);
  return r;
}
}  // namespace

TEST_CASE("ablation: every metric equals a naive float64 computation", "[ablation]") {
  const int64_t T = 48;
  const int H = 4, Hkv = 2, d = 64;
  Rng r(41);
  std::vector<float> q(size_t(T) * H * d), k(size_t(T) * Hkv * d), v(size_t(T) * Hkv * d);
  for (auto& x : q) x = float(r.gaussian());
  for (auto& x : k) x = float(r.gaussian() * 1.5);
  for (auto& x : v) x = float(r.gaussian());
  std::vector<KvFormat> formats = {make_format("turboquant_4bit_nc", d), make_format("q4_0", d),
                                   make_format("k=prod3,v=u2", d), make_format("kivi2", d)};
  for (int window : {0, 12})
    for (int64_t t0 : {int64_t(0), int64_t(20)}) {
      AblationLayer L;
      L.layer = 3;
      L.T = T;
      L.n_heads = H;
      L.n_kv_heads = Hkv;
      L.head_dim = d;
      L.sliding_window = window;
      L.attn_scale = 0.125f;
      L.q = q.data();
      L.k = k.data();
      L.v = v.data();
      AblationOptions opt;
      opt.topk = 5;
      opt.eval_from = t0;
      const auto got = ablate_layer(L, formats, opt);
      REQUIRE(got.size() == formats.size() * Hkv);
      for (size_t f = 0; f < formats.size(); ++f)
        for (int h = 0; h < Hkv; ++h) {
          const HeadMetrics& m = got[f * Hkv + size_t(h)];
          const Naive n = naive(L, formats[f], h, opt.topk, t0);
          INFO(formats[f].name << " head " << h << " window " << window << " eval_from " << t0);
          auto close = [](double a, double b) { return std::fabs(a - b) <= 1e-4 * std::fabs(b) + 1e-7; };
          CHECK(close(m.key_nmse, n.key_nmse));
          CHECK(close(m.value_nmse, n.value_nmse));
          CHECK(std::fabs(m.ip_bias - n.bias) <= 1e-4 * std::sqrt(n.var + n.bias * n.bias) + 1e-6);
          CHECK(close(m.ip_var, n.var));
          CHECK(close(m.ip_slope, n.slope));
          CHECK(close(m.ip_var_pred, n.pred));
          CHECK(close(m.ip_var_ratio, n.ratio));
          CHECK(close(m.logit_rmse, n.logit_rmse));
          CHECK(std::fabs(m.kl - n.kl) <= 1e-3 * n.kl + 1e-7);
          CHECK(m.top1 == Approx(n.top1));
          CHECK(m.topk == Approx(n.topk));
          CHECK(close(m.out_rel_err, n.out));
          CHECK(m.layer == 3);
        }
    }
}
