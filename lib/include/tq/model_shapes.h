// Attention shapes of well-known models (tq-bench --model): query / kv heads, head_dim,
// layers and sliding-window layers, from each model's published configuration.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace tq {

struct ModelShape {
  std::string_view name;    // tq-bench --model NAME (lower case)
  std::string_view source;  // the model's published id (its config.json)
  int q_heads, kv_heads, head_dim, layers;
  int sliding_layers = 0;  // layers with a sliding window of `window` tokens
  int window = 0;
};

// Every known model, in list order.
std::span<const ModelShape> model_shapes();

// By name (case-insensitive). Throws tq::Error naming the unknown model and listing the known ones.
const ModelShape& find_model_shape(std::string_view name);

// Tokens one sequence of n_tokens keeps in the KV cache over all layers: a sliding-window
// layer keeps min(n_tokens, window), the others n_tokens.
int64_t cached_tokens_all_layers(const ModelShape& m, int64_t n_tokens);

// "q 32 / kv 8 heads, head_dim 128, 32 layers" (+ ", 21 with a 4096-token window").
std::string describe(const ModelShape& m);

}  // namespace tq
