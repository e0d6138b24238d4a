// A KvStore backed by a registered KV format: the model's K/V of a layer are
// encoded (quantize on store) and decoded (dequantize on read) per KV head, so
// attention sees exactly what a cache in that format holds. Layers chosen by
// skip_layers stay unquantized at fp16, as vLLM keeps the first/last layers.
// Inputs are the model's float32 activations.
#pragma once

#include <string>
#include <vector>

#include "tq/format.h"
#include "tq/kv_store.h"

namespace tq {

class FormatStore final : public KvStore {
 public:
  FormatStore(KvFormat format, std::vector<bool> quantized_layers);
  void roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                 float* v_out) override;
  const KvFormat& format() const { return format_; }

 private:
  KvFormat format_;
  std::vector<bool> quantized_;
};

// "first2,last2", "first1", "0,1,28-29", "none" or "" → per-layer flags: true =
// quantized (not skipped). Throws tq::Error naming the bad item.
std::vector<bool> quantized_layers(const std::string& skip_spec, int n_layers);

}  // namespace tq
