#include "tq/kv_store_basic.h"

#include <algorithm>
#include <cstring>

#include "tq/error.h"
#include "tq/float_formats.h"
#include "tq/format.h"
#include "tq/format_store.h"

namespace tq {

void F32Store::roundtrip(int, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                         float* v_out) {
  const size_t count = size_t(n) * size_t(n_kv_heads) * size_t(head_dim);
  if (k_out != k) std::memmove(k_out, k, count * sizeof(float));
  if (v_out != v) std::memmove(v_out, v, count * sizeof(float));
}

void F16Store::roundtrip(int, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v, float* k_out,
                         float* v_out) {
  const size_t count = size_t(n) * size_t(n_kv_heads) * size_t(head_dim);
  for (size_t i = 0; i < count; ++i) {
    k_out[i] = round_half(k[i]);
    v_out[i] = round_half(v[i]);
  }
}

std::unique_ptr<KvStore> make_kv_store(const std::string& name, const KvStoreOptions& opt) {
  if (name == "f32") return std::make_unique<F32Store>();
  if (name == "f16") return std::make_unique<F16Store>();
  // Any registered format or spec: quantize on store, dequantize on read.
  if (opt.head_dim <= 0) (void)make_format(name, 128);  // an unknown name is the error to report first
  TQ_CHECK(opt.head_dim > 0 && opt.n_layers > 0, "KV format '{}': the store needs the model's head_dim and layer count",
           name);
  return std::make_unique<FormatStore>(make_format(name, opt.head_dim), quantized_layers(opt.skip_layers, opt.n_layers),
                                       opt.center_keys);
}

}  // namespace tq
