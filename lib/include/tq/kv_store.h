// How a model's attention reads its K/V: the pluggable cache used by the
// forward passes (tq-eval, tq-dump).
//
// The forward passes process one chunk of positions [0, n) with a fresh cache
// (the llama-perplexity method), so "quantize on store, dequantize on read" is
// exactly a round trip of the chunk's K and V through the format before the
// attention uses them. Implementations: F32Store (no change), F16Store (fp16
// round trip, the reference), and FormatStore (any registered KV format, with
// chosen layers kept unquantized).
#pragma once

#include <cstdint>

namespace tq {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // k, v: [n, n_kv_heads, head_dim] float32, post-RoPE K and V of one layer.
  // Writes what attention reads back into k_out, v_out (same layout; may alias k, v).
  virtual void roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v,
                         float* k_out, float* v_out) = 0;
};

}  // namespace tq
