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

// Causal softmax of scaled logits for rows i ≥ eval_from (float64 accumulation).
// P row i holds probabilities for keys [first_key, i]; other entries zero.
void softmax_rows(const Mat& logits, float scale, int window, int64_t eval_from, Mat& p) {
  const int64_t T = logits.rows();
  p.setZero(T, T);
  for (int64_t i = eval_from; i < T; ++i) {
    const int64_t lo = first_key(i, window, eval_from);
    double mx = -INFINITY;
    for (int64_t j = lo; j <= i; ++j) mx = std::max(mx, double(logits(i, j)) * scale);
    double z = 0;
    for (int64_t j = lo; j <= i; ++j) z += std::exp(double(logits(i, j)) * scale - mx);
    for (int64_t j = lo; j <= i; ++j) p(i, j) = float(std::exp(double(logits(i, j)) * scale - mx) / z);
  }
}

struct Reference {  // one query head's unquantized attention
  Mat q, logits, p, o;
};

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
  const int64_t T = L.T;
  const int d = L.head_dim, G = L.n_heads / L.n_kv_heads;
  const int64_t t0 = opt.eval_from;
  std::vector<HeadMetrics> out(formats.size() * size_t(L.n_kv_heads));

  for (int h = 0; h < L.n_kv_heads; ++h) {
    const Mat K = head_rows(L.k, T, L.n_kv_heads, h, d), V = head_rows(L.v, T, L.n_kv_heads, h, d);
    // Unquantized attention of the group's query heads: once, for all formats.
    std::vector<Reference> ref(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      Reference& r = ref[size_t(g)];
      r.q = head_rows(L.q, T, L.n_heads, h * G + g, d);
      r.logits.noalias() = r.q * K.transpose();
      softmax_rows(r.logits, L.attn_scale, L.sliding_window, t0, r.p);
      r.o.noalias() = r.p * V;
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
      const Mat Ks = K.bottomRows(T - t0), Khs = Kh.bottomRows(T - t0);
      m.key_nmse = nmse_sum(Ks, Khs, &den) / std::max(den, 1e-300);
      m.value_nmse = nmse_sum(V.bottomRows(T - t0), Vh.bottomRows(T - t0), &den) / std::max(den, 1e-300);
      // Per-key error energy, prefix sums for the predicted variance.
      std::vector<double> ek(static_cast<size_t>(T)), pre(size_t(T) + 1, 0.0);
      for (int64_t j = 0; j < T; ++j) {
        ek[size_t(j)] = (K.row(j) - Kh.row(j)).cast<double>().squaredNorm();
        pre[size_t(j) + 1] = pre[size_t(j)] + (j >= t0 ? ek[size_t(j)] : 0.0);
      }
      double s1 = 0, s2 = 0, pred = 0, lsq = 0, kl = 0, top1 = 0, topk = 0, oerr = 0, onorm = 0;
      int64_t pairs = 0, queries = 0;
      Mat logits_hat, p_hat, o_hat;
      for (int g = 0; g < G; ++g) {
        const Reference& r = ref[size_t(g)];
        logits_hat.noalias() = r.q * Kh.transpose();
        softmax_rows(logits_hat, L.attn_scale, L.sliding_window, t0, p_hat);
        o_hat.noalias() = p_hat * Vh;
        std::vector<int64_t> idx_a, idx_b;
        for (int64_t i = t0; i < T; ++i) {
          const int64_t lo = first_key(i, L.sliding_window, t0);
          const int64_t n = i - lo + 1;
          double kli = 0;
          int64_t am = lo, bm = lo;
          for (int64_t j = lo; j <= i; ++j) {
            const double e = double(logits_hat(i, j)) - double(r.logits(i, j));
            s1 += e;
            s2 += e * e;
            const double p = r.p(i, j), ph = p_hat(i, j);
            if (p > 0) kli += p * (std::log(p) - std::log(std::max(ph, 1e-300)));
            if (r.p(i, j) > r.p(i, am)) am = j;
            if (p_hat(i, j) > p_hat(i, bm)) bm = j;
          }
          pairs += n;
          pred += qn2[size_t(g) * size_t(T) + size_t(i)] * (pre[size_t(i) + 1] - pre[size_t(lo)]) / d;
          kl += std::max(0.0, kli);
          top1 += am == bm;
          const int64_t k = std::min<int64_t>(opt.topk, n);
          idx_a.resize(size_t(n));
          idx_b.resize(size_t(n));
          std::iota(idx_a.begin(), idx_a.end(), lo);
          std::iota(idx_b.begin(), idx_b.end(), lo);
          auto by = [&](const Mat& P) { return [&P, i](int64_t a, int64_t b) { return P(i, a) > P(i, b) || (P(i, a) == P(i, b) && a < b); }; };
          std::partial_sort(idx_a.begin(), idx_a.begin() + k, idx_a.end(), by(r.p));
          std::partial_sort(idx_b.begin(), idx_b.begin() + k, idx_b.end(), by(p_hat));
          std::sort(idx_a.begin(), idx_a.begin() + k);
          std::sort(idx_b.begin(), idx_b.begin() + k);
          std::vector<int64_t> common;
          std::set_intersection(idx_a.begin(), idx_a.begin() + k, idx_b.begin(), idx_b.begin() + k, std::back_inserter(common));
          topk += double(common.size()) / double(k);
          oerr += (r.o.row(i) - o_hat.row(i)).cast<double>().squaredNorm();
          onorm += r.o.row(i).cast<double>().squaredNorm();
          ++queries;
        }
      }
      m.n_pairs = pairs;
      m.n_queries = queries;
      m.ip_bias = s1 / double(pairs);
      m.ip_var = s2 / double(pairs) - m.ip_bias * m.ip_bias;
      m.ip_var_pred = pred / double(pairs);
      m.ip_var_ratio = m.ip_var_pred > 0 ? (s2 / double(pairs)) / m.ip_var_pred : 0.0;
      lsq = s2 / double(pairs);
      m.logit_rmse = std::sqrt(lsq) * std::fabs(L.attn_scale);
      m.kl = kl / double(queries);
      m.top1 = top1 / double(queries);
      m.topk = topk / double(queries);
      m.out_rel_err = std::sqrt(oerr / std::max(onorm, 1e-300));
    }
  }
  return out;
}

std::string metrics_csv_header() {
  return "dump,format,study,layer,kv_head,head_dim,key_nmse,value_nmse,ip_bias,ip_var,ip_var_pred,ip_var_ratio,logit_rmse,"
         "kl,top1,topk,out_rel_err,n_queries,n_pairs";
}

std::string metrics_csv_row(const HeadMetrics& m) {
  return fmt::format("{},\"{}\",{},{},{},{},{:.6e},{:.6e},{:.6e},{:.6e},{:.6e},{:.6f},{:.6e},{:.6e},{:.6f},{:.6f},{:.6e},{},{}",
                     m.dump, m.format, m.study, m.layer, m.kv_head, m.head_dim, m.key_nmse, m.value_nmse, m.ip_bias, m.ip_var,
                     m.ip_var_pred, m.ip_var_ratio, m.logit_rmse, m.kl, m.top1, m.topk, m.out_rel_err, m.n_queries,
                     m.n_pairs);
}

}  // namespace tq
