// A KvStore backed by a registered KV format: the model's K/V of a layer are
// encoded (quantize on store) and decoded (dequantize on read) per KV head, so
// attention sees exactly what a cache in that format holds. Layers chosen by
// skip_layers stay unquantized at fp16, as vLLM keeps the first/last layers.
// Inputs are the model's float32 activations.
//
// center_keys: each KV head's keys are quantized as k − μ, μ the per-channel
// mean over the chunk's tokens rounded to fp16, and μ is added back on read.
// Attention is invariant to it in exact arithmetic (q·μ is the same for every
// key of a query, and softmax ignores a constant), but a per-token codec no
// longer spends its range on channels that are nearly constant across tokens,
// as Qwen2's K bias makes them. The mean over the whole chunk uses later
// tokens: this is a diagnostic (what a per-head offset calibrated offline, or
// kept per sequence, could recover), not a causal cache.
#pragma once

#include <string>
#include <vector>

#include "tq/format.h"
#include "tq/kv_store.h"

namespace tq {

class FormatStore final : public KvStore {
 public:
  FormatStore(KvFormat format, std::vector<bool> quantized_layers, bool center_keys = false);
  void roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                 float* v_out) override;
  const KvFormat& format() const { return format_; }

 private:
  KvFormat format_;
  std::vector<bool> quantized_;
  bool center_keys_;
};

// "first2,last2", "first1", "0,1,28-29", "none" or "" → per-layer flags: true =
// quantized (not skipped). Throws tq::Error naming the bad item.
std::vector<bool> quantized_layers(const std::string& skip_spec, int n_layers);

}  // namespace tq
