// Per-layer, per-KV-head quality of KV formats on real Q/K/V (tq-ablate).
//
// For one layer of a dump and a list of formats, with the dump's own queries
// and causal attention (each query over its past keys; keys with i − j ≥ window
// masked on sliding-window layers), per KV head (its query group pooled):
//   key_nmse, value_nmse     Σ‖k − k̂‖²/Σ‖k‖² (and v) over the head's tokens
//   ip_bias, ip_var          mean and variance of q·k̂ − q·k over causal pairs
//   ip_slope                 Σ (q·k̂)(q·k) / Σ (q·k)²: the multiplicative bias
//                            (MSE quantizers shrink inner products, < 1; the
//                            QJL estimator is unbiased over S, ≈ 1)
//   ip_var_pred, ip_var_ratio  the variance predicted from the key error,
//                            mean ‖q_i‖²‖k_j − k̂_j‖²/d ("Var(Δlogit) ∝ MSE/d"),
//                            and measured E[(q·k̂ − q·k)²] / predicted
//   logit_rmse               RMS of attn_scale·(q·k̂ − q·k)
//   kl                       mean over queries of KL(p ‖ p̂) (nats)
//   top1, topk               agreement of argmax / overlap of the top-k keys
//   out_rel_err              sqrt(Σ‖o − ô‖² / Σ‖o‖²), o = softmax·V
// q·k̂ is computed as q·decode(k̂) with one GEMM per head: the codecs' score()
// equals it to 1e-5 (tested), and a GEMM is what makes 2048² pairs cheap. The
// unquantized logits, probabilities and outputs are computed once per layer
// and head and shared by every format.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tq/format.h"

namespace tq {

struct AblationLayer {
  int layer = 0;
  int64_t T = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int sliding_window = 0;  // 0 = global
  float attn_scale = 1.0f;
  const float* q = nullptr;  // [T, n_heads, head_dim]
  const float* k = nullptr;  // [T, n_kv_heads, head_dim]
  const float* v = nullptr;
};

struct AblationOptions {
  int topk = 8;
  int64_t eval_from = 0;  // only tokens ≥ eval_from (queries and keys) are scored
};

struct HeadMetrics {
  std::string dump, format, study;
  int layer = 0, kv_head = 0, head_dim = 0;
  double key_nmse = 0, value_nmse = 0;
  double ip_bias = 0, ip_var = 0, ip_var_pred = 0, ip_var_ratio = 0, ip_slope = 0;
  double logit_rmse = 0, kl = 0, top1 = 0, topk = 0, out_rel_err = 0;
  int64_t n_queries = 0, n_pairs = 0;
};

// Metrics of every format on one layer: result[f * n_kv_heads + h].
std::vector<HeadMetrics> ablate_layer(const AblationLayer& layer, const std::vector<KvFormat>& formats,
                                      const AblationOptions& opt = {});

// The CSV columns and one row (metrics.csv).
std::string metrics_csv_header();
std::string metrics_csv_row(const HeadMetrics& m);

}  // namespace tq
