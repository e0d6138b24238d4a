#include "tq/ablation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <Eigen/Core>
#include <fmt/format.h>

#include "tq/error.h"

namespace tq {

namespace {

using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Rows of one head: [T, d] from an interleaved [T, H, d] tensor.
Mat head_rows(const float* x, int64_t T, int H, int h, int d) {
  Mat m(T, d);
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(x + (size_t(t) * H + h) * d, d, m.row(t).data());
  return m;
}

// First key a query at position i may attend to.
int64_t first_key(int64_t i, int window, int64_t eval_from) {
  int64_t lo = eval_from;
  if (window > 0) lo = std::max<int64_t>(lo, i - window + 1);
  return lo;
}

struct Reference {  // one query head's unquantized attention, shared by all formats
  Mat q, logits, p, o;
  std::vector<double> lse;                // log Σ_j exp(scale·l_ij) per query
  std::vector<int64_t> top1;              // argmax_j per query
  std::vector<std::vector<int64_t>> topk;  // sorted top-k key indices per query
};

// Indices of the k largest entries of x[0..n) (ties: lower index first), in
// descending order of value (so out[0] is the argmax).
void top_indices(const float* x, int64_t n, int64_t k, int64_t offset, std::vector<int64_t>& out) {
  // Small insertion-sorted buffer (k ≤ a few dozen): one pass, few branches.
  std::vector<std::pair<float, int64_t>> best;
  best.reserve(size_t(k) + 1);
  for (int64_t j = 0; j < n; ++j) {
    if (int64_t(best.size()) == k && !(x[j] > best.back().first)) continue;
    auto it = best.begin();
    while (it != best.end() && (it->first > x[j] || (it->first == x[j] && it->second < j))) ++it;
    best.insert(it, {x[j], j});
    if (int64_t(best.size()) > k) best.pop_back();
  }
  out.clear();
  for (const auto& b : best) out.push_back(b.second + offset);
}

// Row i of P (zeros outside [lo, i]) from scaled logits; returns log Σ exp.
double softmax_row(const float* l, int64_t lo, int64_t hi, float scale, float* p) {
  const int64_t n = hi - lo + 1;
  Eigen::Map<const Eigen::ArrayXf> x(l + lo, n);
  const float mx = x.maxCoeff() * scale;
  Eigen::Map<Eigen::ArrayXf> out(p + lo, n);
  out = (x * scale - mx).exp();
  const double z = out.cast<double>().sum();
  out *= float(1.0 / z);
  return double(mx) + std::log(z);
}

double nmse_sum(const Mat& a, const Mat& b, double* den) {
  *den = double(a.cast<double>().squaredNorm());
  return double((a - b).cast<double>().squaredNorm());
}

}  // namespace

std::vector<HeadMetrics> ablate_layer(const AblationLayer& L, const std::vector<KvFormat>& formats,
                                      const AblationOptions& opt) {
  TQ_CHECK(L.T >= 1 && L.n_kv_heads >= 1 && L.n_heads % L.n_kv_heads == 0, "layer {}: bad shape (T={}, heads {}/{})",
           L.layer, L.T, L.n_heads, L.n_kv_heads);
  TQ_CHECK(opt.eval_from >= 0 && opt.eval_from < L.T, "layer {}: eval_from {} outside [0, {})", L.layer, opt.eval_from, L.T);
  TQ_CHECK(opt.topk >= 1, "topk {} must be ≥ 1", opt.topk);
  const int64_t T = L.T;
  const int d = L.head_dim, G = L.n_heads / L.n_kv_heads;
  const int64_t t0 = opt.eval_from;
  const float scale = L.attn_scale;
  std::vector<HeadMetrics> out(formats.size() * size_t(L.n_kv_heads));
  Mat logits_hat(T, T), p_hat = Mat::Zero(T, T), o_hat(T, d);

  for (int h = 0; h < L.n_kv_heads; ++h) {
    const Mat K = head_rows(L.k, T, L.n_kv_heads, h, d), V = head_rows(L.v, T, L.n_kv_heads, h, d);
    // Unquantized attention of the group's query heads: once, for all formats.
    std::vector<Reference> ref(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      Reference& r = ref[size_t(g)];
      r.q = head_rows(L.q, T, L.n_heads, h * G + g, d);
      r.logits.setZero(T, T);
      r.logits.triangularView<Eigen::Lower>() = r.q * K.transpose();
      r.p.setZero(T, T);
      r.lse.assign(size_t(T), 0.0);
      r.top1.assign(size_t(T), 0);
      r.topk.assign(size_t(T), {});
      for (int64_t i = t0; i < T; ++i) {
        const int64_t lo = first_key(i, L.sliding_window, t0), n = i - lo + 1;
        r.lse[size_t(i)] = softmax_row(r.logits.row(i).data(), lo, i, scale, r.p.row(i).data());
        auto& top = r.topk[size_t(i)];
        top_indices(r.logits.row(i).data() + lo, n, std::min<int64_t>(opt.topk, n), lo, top);
        r.top1[size_t(i)] = top[0];
        std::sort(top.begin(), top.end());
      }
      r.o.noalias() = r.p.triangularView<Eigen::Lower>() * V;
    }
    std::vector<double> qn2(size_t(T) * size_t(G));
    for (int g = 0; g < G; ++g)
      for (int64_t i = 0; i < T; ++i) qn2[size_t(g) * size_t(T) + size_t(i)] = ref[size_t(g)].q.row(i).cast<double>().squaredNorm();

    for (size_t f = 0; f < formats.size(); ++f) {
      const KvFormat& fmt = formats[f];
      TQ_CHECK(fmt.head_dim == d, "format '{}' built for head_dim {}, layer has {}", fmt.name, fmt.head_dim, d);
      Mat Kh(T, d), Vh(T, d);
      {
        std::vector<uint8_t> rec(fmt.key->encoded_bytes(T));
        fmt.key->encode(K.data(), T, rec.data());
        fmt.key->decode(rec.data(), T, Kh.data());
        rec.assign(fmt.value->encoded_bytes(T), 0);
        fmt.value->encode(V.data(), T, rec.data());
        fmt.value->decode(rec.data(), T, Vh.data());
      }
      HeadMetrics& m = out[f * size_t(L.n_kv_heads) + size_t(h)];
      m.format = fmt.name;
      m.layer = L.layer;
      m.kv_head = h;
      m.head_dim = d;
      double den = 0;
      m.key_nmse = nmse_sum(K.bottomRows(T - t0), Kh.bottomRows(T - t0), &den) / std::max(den, 1e-300);
      m.value_nmse = nmse_sum(V.bottomRows(T - t0), Vh.bottomRows(T - t0), &den) / std::max(den, 1e-300);
      // Per-key error energy, prefix sums for the predicted variance.
      std::vector<double> pre(size_t(T) + 1, 0.0);
      for (int64_t j = 0; j < T; ++j)
        pre[size_t(j) + 1] = pre[size_t(j)] + (j >= t0 ? double((K.row(j) - Kh.row(j)).cast<double>().squaredNorm()) : 0.0);
      double s1 = 0, s2 = 0, sll = 0, slh = 0, pred = 0, kl = 0, top1 = 0, topk = 0, oerr = 0, onorm = 0;
      int64_t pairs = 0, queries = 0;
      std::vector<int64_t> hat_top;
      for (int g = 0; g < G; ++g) {
        const Reference& r = ref[size_t(g)];
        logits_hat.triangularView<Eigen::Lower>() = r.q * Kh.transpose();
        for (int64_t i = t0; i < T; ++i) {
          const int64_t lo = first_key(i, L.sliding_window, t0), n = i - lo + 1;
          const Eigen::Map<const Eigen::ArrayXf> l(r.logits.row(i).data() + lo, n), lh(logits_hat.row(i).data() + lo, n),
              p(r.p.row(i).data() + lo, n);
          const Eigen::ArrayXd diff = (lh - l).cast<double>();
          s1 += diff.sum();
          s2 += diff.square().sum();
          sll += l.cast<double>().square().sum();
          slh += (l.cast<double>() * lh.cast<double>()).sum();
          // KL(p‖p̂) = Σ p (log p − log p̂) = LSE(l̂) − LSE(l) − scale·Σ p (l̂ − l): no per-pair log.
          const double lse_hat = softmax_row(logits_hat.row(i).data(), lo, i, scale, p_hat.row(i).data());
          kl += std::max(0.0, lse_hat - r.lse[size_t(i)] - double(scale) * (p.cast<double>() * diff).sum());
          pairs += n;
          pred += qn2[size_t(g) * size_t(T) + size_t(i)] * (pre[size_t(i) + 1] - pre[size_t(lo)]) / d;
          const int64_t k = std::min<int64_t>(opt.topk, n);
          top_indices(logits_hat.row(i).data() + lo, n, k, lo, hat_top);
          top1 += hat_top[0] == r.top1[size_t(i)];
          std::sort(hat_top.begin(), hat_top.end());
          std::vector<int64_t> common;
          std::set_intersection(r.topk[size_t(i)].begin(), r.topk[size_t(i)].end(), hat_top.begin(), hat_top.end(),
                                std::back_inserter(common));
          topk += double(common.size()) / double(k);
          ++queries;
        }
        o_hat.noalias() = p_hat.triangularView<Eigen::Lower>() * Vh;
        oerr += (r.o.bottomRows(T - t0) - o_hat.bottomRows(T - t0)).cast<double>().squaredNorm();
        onorm += r.o.bottomRows(T - t0).cast<double>().squaredNorm();
      }
      m.n_pairs = pairs;
      m.n_queries = queries;
      m.ip_bias = s1 / double(pairs);
      m.ip_var = s2 / double(pairs) - m.ip_bias * m.ip_bias;
      m.ip_var_pred = pred / double(pairs);
      m.ip_slope = sll > 0 ? slh / sll : 0.0;
      m.ip_var_ratio = m.ip_var_pred > 0 ? (s2 / double(pairs)) / m.ip_var_pred : 0.0;
      m.logit_rmse = std::sqrt(s2 / double(pairs)) * std::fabs(double(scale));
      m.kl = kl / double(queries);
      m.top1 = top1 / double(queries);
      m.topk = topk / double(queries);
      m.out_rel_err = std::sqrt(oerr / std::max(onorm, 1e-300));
    }
  }
  return out;
}

std::string metrics_csv_header() {
  return "dump,format,study,layer,kv_head,head_dim,key_nmse,value_nmse,ip_bias,ip_slope,ip_var,ip_var_pred,ip_var_ratio,logit_rmse,"
         "kl,top1,topk,out_rel_err,n_queries,n_pairs";
}

std::string metrics_csv_row(const HeadMetrics& m) {
  return fmt::format("{},\"{}\",{},{},{},{},{:.6e},{:.6e},{:.6e},{:.6f},{:.6e},{:.6e},{:.6f},{:.6e},{:.6e},{:.6f},{:.6f},{:.6e},{},{}",
                     m.dump, m.format, m.study, m.layer, m.kv_head, m.head_dim, m.key_nmse, m.value_nmse, m.ip_bias, m.ip_slope, m.ip_var,
                     m.ip_var_pred, m.ip_var_ratio, m.logit_rmse, m.kl, m.top1, m.topk, m.out_rel_err, m.n_queries,
                     m.n_pairs);
}

}  // namespace tq
