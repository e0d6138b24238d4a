#include "tq/perplexity.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "tq/error.h"
#include "tq/model.h"

namespace tq {

namespace {

struct Moments {
  double mean = 0, var = 0, err = 0;  // var: population variance; err: sqrt(var/(n−1))
};

Moments moments(const std::vector<double>& x) {
  Moments m;
  const double n = double(x.size());
  if (x.empty()) return m;
  double s = 0, s2 = 0;
  for (double v : x) {
    s += v;
    s2 += v * v;
  }
  m.mean = s / n;
  m.var = std::max(0.0, s2 / n - m.mean * m.mean);
  m.err = x.size() > 1 ? std::sqrt(m.var / (n - 1)) : 0.0;
  return m;
}

double covariance(const std::vector<double>& a, const std::vector<double>& b, double ma, double mb) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s / double(a.size()) - ma * mb;
}

// Row statistics of logits x[0..n): the max, its first index, and log Σ exp.
struct RowLse {
  double lse;
  int64_t argmax;
};

RowLse row_lse(const float* x, int64_t n) {
  int64_t am = 0;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > mx) {
      mx = x[i];
      am = i;
    }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(double(x[i]) - double(mx));
  return {double(mx) + std::log(s), am};
}

}  // namespace

Percentiles Percentiles::of(std::vector<double> v) {
  TQ_CHECK(!v.empty(), "percentiles of an empty set");
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double r = p * double(v.size() - 1);
    const size_t lo = size_t(std::floor(r)), hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (v[hi] - v[lo]) * (r - double(lo));
  };
  Percentiles p;
  p.max = v.back();
  p.p99_9 = q(0.999);
  p.p99 = q(0.99);
  p.p95 = q(0.95);
  p.p90 = q(0.90);
  p.median = q(0.5);
  p.p10 = q(0.10);
  p.p5 = q(0.05);
  p.p1 = q(0.01);
  p.p0_1 = q(0.001);
  p.min = v.front();
  return p;
}

void to_json(Json& j, const Percentiles& p) {
  j = Json{{"max", p.max}, {"99.9%", p.p99_9}, {"99%", p.p99}, {"95%", p.p95}, {"90%", p.p90}, {"median", p.median},
           {"10%", p.p10}, {"5%", p.p5}, {"1%", p.p1}, {"0.1%", p.p0_1}, {"min", p.min}};
}

void FormatAccumulator::add(const float* logits, const float* base_logits, const int32_t* targets, int64_t rows,
                            int64_t n_vocab) {
  TQ_CHECK(n_vocab > 0 && rows >= 0, "{}: bad logits shape [{}, {}]", name_, rows, n_vocab);
  const bool self = logits == base_logits;
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits + r * n_vocab;
    const float* b = base_logits + r * n_vocab;
    const int32_t t = targets[r];
    TQ_CHECK(t >= 0 && t < n_vocab, "{}: target token {} outside the vocabulary ({})", name_, t, n_vocab);
    for (int64_t i = 0; i < n_vocab; ++i)
      TQ_CHECK(std::isfinite(x[i]), "{}: non-finite logit {} (row {}, token {})", name_, x[i], r, i);
    const RowLse lt = row_lse(x, n_vocab);
    const double nll = lt.lse - double(x[t]);
    nll_.push_back(nll);
    if (self) {
      nll_base_.push_back(nll);
      kld_.push_back(0.0);
      dp_.push_back(0.0);
      ++same_top_;
      continue;
    }
    const RowLse lb = row_lse(b, n_vocab);
    const double nll_b = lb.lse - double(b[t]);
    nll_base_.push_back(nll_b);
    double kld = 0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      const double lpb = double(b[i]) - lb.lse;
      if (lpb > kMinLogProb) kld += std::exp(lpb) * (lpb - (double(x[i]) - lt.lse));
    }
    kld_.push_back(kld);
    dp_.push_back(std::exp(-nll) - std::exp(-nll_b));
    if (lt.argmax == lb.argmax) ++same_top_;
  }
}

FormatResult FormatAccumulator::result() const {
  const int64_t n = n_tokens();
  TQ_CHECK(n >= kMinTokens, "{}: only {} scored tokens; at least {} are needed for a summary", name_, n, kMinTokens);
  FormatResult r;
  r.name = name_;
  r.is_base = is_base_;
  r.n_tokens = n;
  r.n_chunks = chunks_;
  const double nm1 = double(n - 1);
  const Moments q = moments(nll_);
  r.nll_mean = q.mean;
  r.nll_err = q.err;
  r.ppl = std::exp(q.mean);
  r.ppl_err = r.ppl * q.err;
  if (is_base_) return r;

  const Moments b = moments(nll_base_);
  std::vector<double> d(nll_.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = nll_[i] - nll_base_[i];
  const Moments dm = moments(d);
  r.ln_ppl_ratio = dm.mean;
  r.ln_ppl_ratio_err = dm.err;
  r.ppl_ratio = std::exp(dm.mean);
  r.ppl_ratio_err = r.ppl_ratio * dm.err;
  const double cov = covariance(nll_, nll_base_, q.mean, b.mean);
  r.nll_correlation = (q.var > 0 && b.var > 0) ? cov / std::sqrt(q.var * b.var) : 1.0;
  const double eq = std::exp(q.mean), eb = std::exp(b.mean);
  r.delta_ppl = eq - eb;
  r.delta_ppl_err = std::sqrt(std::max(0.0, (eq * eq * q.var + eb * eb * b.var - 2 * eq * eb * cov) / nm1));

  const Moments k = moments(kld_);
  r.kld_mean = k.mean;
  r.kld_err = k.err;
  r.kld = Percentiles::of(kld_);
  r.same_top = double(same_top_) / double(n);
  r.same_top_err = std::sqrt(r.same_top * (1 - r.same_top) / nm1);
  const Moments p = moments(dp_);
  r.dp_mean = p.mean;
  r.dp_mean_err = p.err;
  std::vector<double> sq(dp_.size());
  for (size_t i = 0; i < sq.size(); ++i) sq[i] = dp_[i] * dp_[i];
  const Moments s = moments(sq);
  r.dp_rms = std::sqrt(s.mean);
  r.dp_rms_err = r.dp_rms > 0 ? s.err / (2 * r.dp_rms) : 0.0;
  r.dp = Percentiles::of(dp_);
  return r;
}

void to_json(Json& j, const FormatResult& r) {
  j = Json{{"format", r.name}, {"is_base", r.is_base}, {"n_tokens", r.n_tokens}, {"n_chunks", r.n_chunks},
           {"ppl", r.ppl}, {"ppl_err", r.ppl_err}, {"nll_mean", r.nll_mean}, {"nll_err", r.nll_err}};
  if (!r.is_base) {
    j["delta_ppl"] = r.delta_ppl;
    j["delta_ppl_err"] = r.delta_ppl_err;
    j["ppl_ratio"] = r.ppl_ratio;
    j["ppl_ratio_err"] = r.ppl_ratio_err;
    j["ln_ppl_ratio"] = r.ln_ppl_ratio;
    j["ln_ppl_ratio_err"] = r.ln_ppl_ratio_err;
    j["nll_correlation"] = r.nll_correlation;
    j["kld_mean"] = r.kld_mean;
    j["kld_err"] = r.kld_err;
    j["kld"] = r.kld;
    j["same_top"] = r.same_top;
    j["same_top_err"] = r.same_top_err;
    j["dp_mean"] = r.dp_mean;
    j["dp_mean_err"] = r.dp_mean_err;
    j["dp_rms"] = r.dp_rms;
    j["dp_rms_err"] = r.dp_rms_err;
    j["dp"] = r.dp;
  } else {  // the reference against itself: the comparison fields are exact
    j["delta_ppl"] = 0.0;
    j["kld_mean"] = 0.0;
    j["kld_err"] = 0.0;
    j["same_top"] = 1.0;
    j["dp_rms"] = 0.0;
  }
}

std::vector<int32_t> perplexity_tokens(const Model& model, const std::string& text) {
  std::string t = text;
  if (!t.empty() && t.back() == '\n') t.pop_back();
  return model.tokenizer().encode(t);
}

std::vector<FormatResult> evaluate_perplexity(const Model& model, const std::string& text, KvStore* base,
                                              const std::vector<std::pair<std::string, KvStore*>>& formats,
                                              const EvalOptions& opt, const EvalProgress& progress) {
  const int n_ctx = opt.n_ctx;
  TQ_CHECK(n_ctx >= 8, "perplexity: n_ctx {} is too small (at least 8)", n_ctx);
  const int n_ctx_train = model.config().n_ctx_train;
  TQ_CHECK(n_ctx_train == 0 || n_ctx <= n_ctx_train, "perplexity: n_ctx {} is beyond the {} tokens {} was trained on",
           n_ctx, n_ctx_train, model.config().name);
  const std::vector<int32_t> tokens = perplexity_tokens(model, text);
  TQ_CHECK(tokens.size() >= size_t(2) * size_t(n_ctx),
           "perplexity: the text has {} tokens; n_ctx {} needs at least {} (2·n_ctx)", tokens.size(), n_ctx,
           2 * n_ctx);
  int n_chunks = int(tokens.size() / size_t(n_ctx));
  if (opt.max_chunks > 0) n_chunks = std::min(n_chunks, opt.max_chunks);
  const int first = n_ctx / 2;
  const int64_t rows = n_ctx - 1 - first;  // positions first .. n_ctx−2
  TQ_CHECK(int64_t(n_chunks) * rows >= FormatAccumulator::kMinTokens,
           "perplexity: {} chunk(s) of n_ctx {} score {} tokens; at least {} are needed", n_chunks, n_ctx,
           int64_t(n_chunks) * rows, FormatAccumulator::kMinTokens);
  const int32_t bos = model.tokenizer().add_bos() ? model.tokenizer().bos_id() : -1;
  const int64_t n_vocab = model.config().n_vocab;

  std::vector<FormatAccumulator> acc;
  acc.emplace_back(opt.base_name, true);
  for (const auto& f : formats) acc.emplace_back(f.first, false);
  ForwardOptions fo;
  fo.n_threads = opt.n_threads;
  std::vector<int32_t> chunk(static_cast<size_t>(n_ctx)), targets(static_cast<size_t>(rows));
  for (int c = 0; c < n_chunks; ++c) {
    std::copy(tokens.begin() + int64_t(c) * n_ctx, tokens.begin() + int64_t(c + 1) * n_ctx, chunk.begin());
    if (bos >= 0) chunk[0] = bos;
    for (int64_t j = 0; j < rows; ++j) targets[size_t(j)] = chunk[size_t(first + j + 1)];
    const RowMatrix base_logits = model.forward(chunk, base, first, nullptr, fo);
    acc[0].add(base_logits.data(), base_logits.data(), targets.data(), rows, n_vocab);
    acc[0].end_chunk();
    for (size_t f = 0; f < formats.size(); ++f) {
      const RowMatrix logits = model.forward(chunk, formats[f].second, first, nullptr, fo);
      acc[f + 1].add(logits.data(), base_logits.data(), targets.data(), rows, n_vocab);
      acc[f + 1].end_chunk();
    }
    if (progress) progress(c + 1, n_chunks);
  }
  std::vector<FormatResult> out;
  for (const auto& a : acc) out.push_back(a.result());
  return out;
}

std::string perplexity_report(const std::vector<FormatResult>& results) {
  std::string s;
  if (results.empty()) return s;
  s += fmt::format("{} scored tokens in {} chunk(s)\n\n", results[0].n_tokens, results[0].n_chunks);
  s += fmt::format("{:<24} {:>19} {:>19} {:>21} {:>10} {:>15} {:>14}\n", "format", "PPL", "ΔPPL", "mean KLD",
                   "KLD 99%", "same top %", "RMS Δp %");
  for (const FormatResult& r : results) {
    if (r.is_base) {
      s += fmt::format("{:<24} {:>10.4f} ± {:<6.4f} {:>19} {:>21} {:>10} {:>15} {:>14}\n", r.name, r.ppl, r.ppl_err,
                       "(reference)", "", "", "", "");
      continue;
    }
    s += fmt::format("{:<24} {:>10.4f} ± {:<6.4f} {:>+9.4f} ± {:<7.4f} {:>10.6f} ± {:<8.6f} {:>10.6f} {:>7.3f} ± {:<5.3f} "
                     "{:>6.3f} ± {:<5.3f}\n",
                     r.name, r.ppl, r.ppl_err, r.delta_ppl, r.delta_ppl_err, r.kld_mean, r.kld_err, r.kld.p99,
                     100 * r.same_top, 100 * r.same_top_err, 100 * r.dp_rms, 100 * r.dp_rms_err);
  }
  for (const FormatResult& r : results) {
    if (r.is_base) continue;
    s += fmt::format("\n{}: KLD max {:.6f}, 99.9% {:.6f}, 99% {:.6f}, 95% {:.6f}, 90% {:.6f}, median {:.6f}, "
                     "10% {:.6f}, 5% {:.6f}, 1% {:.6f}, 0.1% {:.6f}, min {:.6f}\n",
                     r.name, r.kld.max, r.kld.p99_9, r.kld.p99, r.kld.p95, r.kld.p90, r.kld.median, r.kld.p10,
                     r.kld.p5, r.kld.p1, r.kld.p0_1, r.kld.min);
    s += fmt::format("{}: Δp mean {:+.4f}% ± {:.4f}%, max {:+.4f}%, 99.9% {:+.4f}%, 99% {:+.4f}%, 95% {:+.4f}%, "
                     "median {:+.4f}%, 5% {:+.4f}%, 1% {:+.4f}%, 0.1% {:+.4f}%, min {:+.4f}%\n",
                     r.name, 100 * r.dp_mean, 100 * r.dp_mean_err, 100 * r.dp.max, 100 * r.dp.p99_9, 100 * r.dp.p99,
                     100 * r.dp.p95, 100 * r.dp.median, 100 * r.dp.p5, 100 * r.dp.p1, 100 * r.dp.p0_1,
                     100 * r.dp.min);
    s += fmt::format("{}: PPL ratio {:.5f} ± {:.5f}, ln ratio {:+.6f} ± {:.6f}, corr(nll, nll_base) {:.4f}\n", r.name,
                     r.ppl_ratio, r.ppl_ratio_err, r.ln_ppl_ratio, r.ln_ppl_ratio_err, r.nll_correlation);
  }
  return s;
}

}  // namespace tq
