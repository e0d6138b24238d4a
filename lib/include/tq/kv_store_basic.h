// The unquantized KV stores and the factory every tool uses to turn a
// --format name into a KvStore.
//   F32Store: attention reads K/V exactly as computed (float32).
//   F16Store: K/V rounded to IEEE half (round to nearest even), what an fp16
//             KV cache holds — the reference the quantized formats compare to.
#pragma once

#include <memory>
#include <string>

#include "tq/kv_store.h"

namespace tq {

class F32Store : public KvStore {
 public:
  void roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                 float* v_out) override;
};

class F16Store : public KvStore {
 public:
  void roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                 float* v_out) override;
};

// Options a format may need to build its store.
struct KvStoreOptions {
  int n_layers = 0;   // of the model the store will serve
  int head_dim = 0;
  std::string skip_layers;  // layers kept unquantized (fp16), e.g. "first2,last2" or "0,1,28-29"
  bool center_keys = false;  // FormatStore: quantize k − mean_t(k) per head, add the fp16 mean back (see there)
};

// A KvStore for a format name: "f32" and "f16" (unquantized), or any
// registered format / spec of tq/format.h through a FormatStore (layers in
// skip_layers stay at fp16). Unknown names and unsupported head_dims throw
// tq::Error naming the format.
std::unique_ptr<KvStore> make_kv_store(const std::string& name, const KvStoreOptions& opt = {});

}  // namespace tq
