#include "tq/codebook.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tq/error.h"

namespace tq {

const char* to_string(Distribution dist) { return dist == Distribution::gauss ? "gauss" : "sphere"; }

Distribution parse_distribution(const std::string& s) {
  if (s == "gauss") return Distribution::gauss;
  if (s == "sphere") return Distribution::sphere;
  TQ_THROW("unknown distribution '{}' (expected gauss or sphere)", s);
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;
constexpr double kRelTol = 1e-12;       // convergence of centroids (relative)
constexpr long kMaxIterations = 20000000;  // safety net only; hitting it is an error

void check_args(const char* who, int d, int bits) {
  TQ_CHECK(d >= 2, "{}: d = {} must be ≥ 2", who, d);
  TQ_CHECK(bits >= 1 && bits <= 8, "{}: bits = {} must be in 1..8", who, bits);
}

struct CellStats {
  double mass = 0, m1 = 0, m2 = 0;  // ∫f, ∫x f, ∫x² f over the cell
};

// ---- N(0, σ²), σ = 1/√d --------------------------------------------------
double phi(double z) { return std::isinf(z) ? 0.0 : std::exp(-0.5 * z * z) / std::sqrt(2 * kPi); }
double upper_tail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }  // P(Z > z)

CellStats gauss_cell(double a, double b, double sigma) {
  const double za = a / sigma, zb = b / sigma;
  CellStats s;
  // Φ(zb) − Φ(za) without cancellation in either tail.
  if (za >= 0) s.mass = upper_tail(za) - upper_tail(zb);
  else if (zb <= 0) s.mass = upper_tail(-zb) - upper_tail(-za);
  else s.mass = 1.0 - upper_tail(zb) - upper_tail(-za);
  const double pa = phi(za), pb = phi(zb);
  s.m1 = (pa - pb) * sigma;
  const double tail_a = std::isinf(za) ? 0.0 : za * pa, tail_b = std::isinf(zb) ? 0.0 : zb * pb;
  s.m2 = (s.mass + tail_a - tail_b) * sigma * sigma;
  return s;
}

// ---- sphere marginal on [−1, 1] -------------------------------------------
// With t = sin θ: f(t) dt ∝ cos^(d−2) θ dθ, smooth on [−π/2, π/2] for every d ≥ 2.
struct GaussLegendre {
  std::vector<double> x, w;  // on [−1, 1]
  explicit GaussLegendre(int n) : x(n), w(n) {
    for (int i = 0; i < n; ++i) {
      double z = std::cos(kPi * (i + 0.75) / (n + 0.5)), dp = 0;
      for (int it = 0; it < 100; ++it) {
        double p0 = 1, p1 = z;
        for (int k = 2; k <= n; ++k) {
          const double p2 = ((2 * k - 1) * z * p1 - (k - 1) * p0) / k;
          p0 = p1;
          p1 = p2;
        }
        dp = n * (z * p1 - p0) / (z * z - 1);
        const double dz = p1 / dp;
        z -= dz;
        if (std::fabs(dz) < 1e-17) break;
      }
      x[i] = z;
      w[i] = 2 / ((1 - z * z) * dp * dp);
    }
  }
};

const GaussLegendre& gl20() {
  static const GaussLegendre g(20);
  return g;
}

struct SphereModel {
  int d;
  double log_z;  // log ∫ cos^(d−2) θ dθ over [−π/2, π/2] = log(√π Γ((d−1)/2) / Γ(d/2))
  explicit SphereModel(int d_) : d(d_) {
    log_z = 0.5 * std::log(kPi) + std::lgamma((d - 1) / 2.0) - std::lgamma(d / 2.0);
  }
  CellStats rule(double ta, double tb) const {  // GL20 on [ta, tb] in θ
    const auto& g = gl20();
    const double h = 0.5 * (tb - ta), c = 0.5 * (tb + ta);
    CellStats s;
    for (size_t i = 0; i < g.x.size(); ++i) {
      const double th = c + h * g.x[i];
      const double f = std::exp((d - 2) * std::log(std::cos(th)) - log_z) * g.w[i] * h;
      const double t = std::sin(th);
      s.mass += f;
      s.m1 += t * f;
      s.m2 += t * t * f;
    }
    return s;
  }
  // Adaptive bisection: accept a panel when GL20 on it agrees with GL20 on its
  // two halves to `tol` (absolute, fixed at the top level from the cell's
  // magnitude); the refined value's error is then far below tol.
  CellStats adaptive(double ta, double tb, const CellStats& whole, const CellStats& tol, int depth) const {
    const double tm = 0.5 * (ta + tb);
    const CellStats l = rule(ta, tm), r = rule(tm, tb);
    const CellStats sum{l.mass + r.mass, l.m1 + r.m1, l.m2 + r.m2};
    const bool ok = std::fabs(sum.mass - whole.mass) <= tol.mass && std::fabs(sum.m1 - whole.m1) <= tol.m1 &&
                    std::fabs(sum.m2 - whole.m2) <= tol.m2;
    if (ok || depth >= 24) return sum;
    const CellStats a = adaptive(ta, tm, l, tol, depth + 1), b = adaptive(tm, tb, r, tol, depth + 1);
    return {a.mass + b.mass, a.m1 + b.m1, a.m2 + b.m2};
  }
  CellStats cell(double a, double b) const {
    const double ta = std::asin(std::clamp(a, -1.0, 1.0)), tb = std::asin(std::clamp(b, -1.0, 1.0));
    if (tb <= ta) return {};
    const CellStats whole = rule(ta, tb);
    const double rel = 1e-14;
    const CellStats tol{rel * std::fabs(whole.mass) + 1e-300, rel * std::sqrt(whole.mass * whole.m2) + 1e-300,
                        rel * std::fabs(whole.m2) + 1e-300};
    return adaptive(ta, tb, whole, tol, 0);
  }
};

// A distribution on the line, as the solvers need it.
struct Model {
  Distribution dist;
  int d;
  double sigma;
  SphereModel sphere;
  Model(Distribution dist_, int d_) : dist(dist_), d(d_), sigma(1.0 / std::sqrt(double(d_))), sphere(d_) {}
  double lo() const { return dist == Distribution::gauss ? -kInf : -1.0; }
  double hi() const { return dist == Distribution::gauss ? kInf : 1.0; }
  CellStats cell(double a, double b) const {
    return dist == Distribution::gauss ? gauss_cell(a, b, sigma) : sphere.cell(a, b);
  }
};

// Inverse standard normal CDF by Newton on Φ (initial guess from a logistic approx).
double normal_quantile(double p) {
  double z = std::log(p / (1 - p)) / 1.702;
  for (int i = 0; i < 100; ++i) {
    const double cdf = z >= 0 ? 1 - upper_tail(z) : upper_tail(-z);
    const double step = (cdf - p) / std::max(phi(z), 1e-300);
    z -= step;
    if (std::fabs(step) < 1e-15 * std::max(1.0, std::fabs(z))) break;
  }
  return z;
}

// Lloyd-Max on a symmetric model: iterate the positive half only, mirror.
Codebook lloyd_max_symmetric(const Model& m, int bits, const char* source) {
  const int K = 1 << bits, H = K / 2;
  std::vector<double> c(H);  // positive centroids, ascending
  for (int i = 0; i < H; ++i) {
    double v = normal_quantile((H + i + 0.5) / K) * m.sigma;
    if (m.dist == Distribution::sphere) v = std::min(v, 1.0 - (H - i) * 1e-3);
    c[i] = v;
  }
  std::vector<double> next(H);
  long it = 0;
  for (;; ++it) {
    TQ_CHECK(it < kMaxIterations, "lloyd_max {} d={} bits={}: no convergence after {} iterations", source, m.d, bits, it);
    double change = 0;
    for (int i = 0; i < H; ++i) {
      const double a = i == 0 ? 0.0 : 0.5 * (c[i - 1] + c[i]);
      const double b = i == H - 1 ? m.hi() : 0.5 * (c[i] + c[i + 1]);
      const CellStats s = m.cell(a, b);
      next[i] = s.mass > 0 ? s.m1 / s.mass : c[i];
      change = std::max(change, std::fabs(next[i] - c[i]) / std::fabs(next[i]));
    }
    c.swap(next);
    if (change < kRelTol) break;
  }
  Codebook cb;
  cb.source = source;
  cb.d = m.d;
  cb.bits = bits;
  cb.centroids.resize(K);
  for (int i = 0; i < H; ++i) {
    cb.centroids[H + i] = c[i];
    cb.centroids[H - 1 - i] = -c[i];
  }
  cb.midpoints = midpoints_of(cb.centroids);
  cb.iterations = int(std::min<long>(it + 1, std::numeric_limits<int>::max()));
  evaluate_codebook(cb, m.dist);
  return cb;
}

}  // namespace

std::vector<double> midpoints_of(const std::vector<double>& c) {
  std::vector<double> m(c.size() > 0 ? c.size() - 1 : 0);
  for (size_t i = 0; i + 1 < c.size(); ++i) m[i] = 0.5 * (c[i] + c[i + 1]);
  return m;
}

void evaluate_codebook(Codebook& cb, Distribution dist) {
  const Model m(dist, cb.d);
  const size_t K = cb.centroids.size();
  double dist_sum = 0, entropy = 0;
  for (size_t i = 0; i < K; ++i) {
    const double a = i == 0 ? m.lo() : cb.midpoints[i - 1];
    const double b = i + 1 == K ? m.hi() : cb.midpoints[i];
    const CellStats s = m.cell(a, b);
    const double c = cb.centroids[i];
    dist_sum += s.m2 - 2 * c * s.m1 + c * c * s.mass;
    if (s.mass > 0) entropy -= s.mass * std::log2(s.mass);
  }
  cb.distortion = cb.d * dist_sum;
  cb.entropy_bits = entropy;
}

Codebook lloyd_max_gaussian(int d, int bits) {
  check_args("lloyd_max_gaussian", d, bits);
  return lloyd_max_symmetric(Model(Distribution::gauss, d), bits, "gauss");
}

Codebook lloyd_max_sphere(int d, int bits) {
  check_args("lloyd_max_sphere", d, bits);
  return lloyd_max_symmetric(Model(Distribution::sphere, d), bits, "sphere");
}

Codebook lloyd_max_empirical(std::vector<double> x, int d, int bits) {
  check_args("lloyd_max_empirical", d, bits);
  const size_t K = size_t(1) << bits;
  for (size_t i = 0; i < x.size(); ++i)
    TQ_CHECK(std::isfinite(x[i]), "lloyd_max_empirical: sample {} is {}", i, x[i]);
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  size_t distinct = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) distinct += x[i] != x[i - 1];
  TQ_CHECK(distinct >= K, "lloyd_max_empirical: {} distinct samples, need at least 2^{} = {}", distinct, bits, K);
  std::vector<double> s1(n + 1, 0.0), s2(n + 1, 0.0);  // prefix sums
  for (size_t i = 0; i < n; ++i) {
    s1[i + 1] = s1[i] + x[i];
    s2[i + 1] = s2[i] + x[i] * x[i];
  }
  std::vector<double> c(K);
  for (size_t k = 0; k < K; ++k) c[k] = x[std::min(n - 1, size_t((k + 0.5) / K * n))];
  std::vector<size_t> cut(K + 1), prev_cut;
  int it = 0;
  for (;; ++it) {
    TQ_CHECK(it < kMaxIterations, "lloyd_max_empirical: no convergence");
    cut[0] = 0;
    cut[K] = n;
    for (size_t k = 1; k < K; ++k) {  // first sample ≥ midpoint goes up
      const double mid = 0.5 * (c[k - 1] + c[k]);
      cut[k] = size_t(std::lower_bound(x.begin(), x.end(), mid) - x.begin());
    }
    if (cut == prev_cut) break;
    prev_cut = cut;
    for (size_t k = 0; k < K; ++k)
      if (cut[k + 1] > cut[k]) c[k] = (s1[cut[k + 1]] - s1[cut[k]]) / double(cut[k + 1] - cut[k]);
    std::sort(c.begin(), c.end());
  }
  Codebook cb;
  cb.source = "empirical";
  cb.d = d;
  cb.bits = bits;
  cb.centroids = c;
  cb.midpoints = midpoints_of(c);
  cb.iterations = it;
  double sse = 0, entropy = 0;
  for (size_t k = 0; k < K; ++k) {
    const double cnt = double(cut[k + 1] - cut[k]);
    if (cnt == 0) continue;
    const double sum = s1[cut[k + 1]] - s1[cut[k]], sq = s2[cut[k + 1]] - s2[cut[k]];
    sse += sq - 2 * c[k] * sum + c[k] * c[k] * cnt;
    const double p = cnt / double(n);
    entropy -= p * std::log2(p);
  }
  cb.distortion = d * sse / double(n);
  cb.entropy_bits = entropy;
  return cb;
}

double empirical_distortion(const Codebook& cb, const std::vector<double>& samples) {
  double sse = 0;
  for (double v : samples) {
    const size_t k = size_t(std::upper_bound(cb.midpoints.begin(), cb.midpoints.end(), v) - cb.midpoints.begin());
    const double e = v - cb.centroids[k];
    sse += e * e;
  }
  return samples.empty() ? 0.0 : cb.d * sse / double(samples.size());
}

Codebook uniform_codebook(Distribution dist, int d, int bits) {
  check_args("uniform_codebook", d, bits);
  const int K = 1 << bits;
  auto make = [&](double delta) {
    Codebook cb;
    cb.source = "uniform";
    cb.d = d;
    cb.bits = bits;
    cb.centroids.resize(K);
    for (int i = 0; i < K; ++i) cb.centroids[i] = (i - (K - 1) / 2.0) * delta;
    cb.midpoints = midpoints_of(cb.centroids);
    evaluate_codebook(cb, dist);
    return cb;
  };
  // Golden-section search on the step; the distortion is unimodal in Δ.
  const double sigma = 1.0 / std::sqrt(double(d));
  double lo = 1e-3 * sigma, hi = dist == Distribution::sphere ? 2.0 / (K - 1) : 8.0 * sigma;
  const double g = (std::sqrt(5.0) - 1) / 2;
  double x1 = hi - g * (hi - lo), x2 = lo + g * (hi - lo);
  double f1 = make(x1).distortion, f2 = make(x2).distortion;
  int it = 0;
  while (hi - lo > 1e-13 * hi && it < 400) {
    ++it;
    if (f1 < f2) { hi = x2; x2 = x1; f2 = f1; x1 = hi - g * (hi - lo); f1 = make(x1).distortion; }
    else { lo = x1; x1 = x2; f1 = f2; x2 = lo + g * (hi - lo); f2 = make(x2).distortion; }
  }
  Codebook cb = make(0.5 * (lo + hi));
  cb.iterations = it;
  return cb;
}

Codebook closed_form_codebook(Distribution dist, int d, int bits) {
  check_args("closed_form_codebook", d, bits);
  TQ_CHECK(bits <= 2, "closed_form_codebook: closed forms exist for 1 and 2 bits, not {}", bits);
  Codebook cb;
  cb.source = "closed-form";
  cb.d = d;
  cb.bits = bits;
  const double s = 1.0 / std::sqrt(double(d));
  if (bits == 1) {
    const double c = dist == Distribution::gauss
                         ? std::sqrt(2.0 / kPi) * s
                         : std::exp(std::lgamma(d / 2.0) - std::lgamma((d + 1) / 2.0)) / std::sqrt(kPi);
    cb.centroids = {-c, c};
  } else {
    TQ_CHECK(dist == Distribution::gauss, "closed_form_codebook: the 2-bit closed form is the paper's Gaussian one");
    cb.centroids = {-1.51 * s, -0.453 * s, 0.453 * s, 1.51 * s};
  }
  cb.midpoints = midpoints_of(cb.centroids);
  evaluate_codebook(cb, dist);
  return cb;
}

Codebook codebook_from_table(const std::vector<double>& table, Distribution dist, int d, int bits) {
  check_args("codebook_from_table", d, bits);
  const size_t K = size_t(1) << bits;
  TQ_CHECK(table.size() == K || table.size() == K / 2,
           "table has {} values; {} bits need {} (full) or {} (positive half of a symmetric table)",
           table.size(), bits, K, K / 2);
  for (size_t i = 0; i < table.size(); ++i) {
    TQ_CHECK(std::isfinite(table[i]), "table value {} (position {}) is not finite", table[i], i + 1);
    if (i > 0)
      TQ_CHECK(table[i] > table[i - 1], "table is not strictly ascending at position {} ({} after {})", i + 1,
               table[i], table[i - 1]);
  }
  Codebook cb;
  cb.source = "table";
  cb.d = d;
  cb.bits = bits;
  if (table.size() == K) {
    cb.centroids = table;
  } else {
    TQ_CHECK(table[0] > 0,
             "a half table lists the positive centroids; first value {} is not > 0", table[0]);
    cb.centroids.resize(K);
    for (size_t i = 0; i < K / 2; ++i) {
      cb.centroids[K / 2 + i] = table[i];
      cb.centroids[K / 2 - 1 - i] = -table[i];
    }
  }
  cb.midpoints = midpoints_of(cb.centroids);
  evaluate_codebook(cb, dist);
  return cb;
}

}  // namespace tq

namespace tq {

// vLLM's solve_lloyd_max (vllm/model_executor/layers/quantization/turboquant/
// centroids.py), re-implemented to give the same fp32 values: N(0, 1/d); start
// at the midpoints of 2^b equal cells on ±3.5σ; each cell [a, b] (outer edges
// ±10.5σ) integrated with its own 200-interval trapezoid rule in float64; stop
// when no centroid moves by ≥ 1e-10 (keeping the previous iterate) or after
// 200 iterations; cast to fp32. Midpoints are recomputed in fp32 from the fp32
// centroids, as vLLM's attention backend does.
Codebook vllm_codebook(int d, int bits) {
  check_args("vllm_codebook", d, bits);
  const int n_levels = 1 << bits;
  const double sigma2 = 1.0 / d, sigma = std::sqrt(sigma2);
  const double norm = 1.0 / std::sqrt(2 * kPi * sigma2);
  auto pdf = [&](double x) { return norm * std::exp(-x * x / (2 * sigma2)); };
  auto trapz = [](auto&& f, double a, double b) {
    const int n = 200;
    const double h = (b - a) / n;
    double r = 0.5 * (f(a) + f(b));
    for (int i = 1; i < n; ++i) r += f(a + i * h);
    return r * h;
  };
  const double lo = -3.5 * sigma, hi = 3.5 * sigma;
  std::vector<double> c(n_levels), next(n_levels), edges(n_levels + 1);
  for (int i = 0; i < n_levels; ++i) c[i] = lo + (hi - lo) * (i + 0.5) / n_levels;
  int it = 0;
  for (; it < 200; ++it) {
    edges[0] = lo * 3;
    edges[n_levels] = hi * 3;
    for (int i = 0; i + 1 < n_levels; ++i) edges[i + 1] = (c[i] + c[i + 1]) / 2.0;
    double change = 0;
    for (int i = 0; i < n_levels; ++i) {
      const double a = edges[i], b = edges[i + 1];
      const double num = trapz([&](double x) { return x * pdf(x); }, a, b);
      const double den = trapz(pdf, a, b);
      next[i] = den > 1e-15 ? num / den : c[i];
      change = std::max(change, std::fabs(next[i] - c[i]));
    }
    if (change < 1e-10) break;
    c.swap(next);
  }
  Codebook cb;
  cb.source = "vllm";
  cb.d = d;
  cb.bits = bits;
  cb.iterations = it;
  cb.centroids.resize(n_levels);
  for (int i = 0; i < n_levels; ++i) cb.centroids[i] = double(float(c[i]));
  cb.midpoints.resize(n_levels - 1);
  for (int i = 0; i + 1 < n_levels; ++i)
    cb.midpoints[i] = double((float(cb.centroids[i]) + float(cb.centroids[i + 1])) / 2.0f);
  evaluate_codebook(cb, Distribution::gauss);
  return cb;
}

}  // namespace tq
