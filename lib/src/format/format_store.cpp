#include "tq/format_store.h"


#include "tq/error.h"
#include "tq/float_formats.h"
#include "tq/layer_list.h"

namespace tq {

FormatStore::FormatStore(KvFormat format, std::vector<bool> quantized_layers, bool center_keys)
    : format_(std::move(format)), quantized_(std::move(quantized_layers)), center_keys_(center_keys) {}

void FormatStore::roundtrip(int layer, int64_t n, int n_kv_heads, int head_dim, const float* k, const float* v,
                            float* k_out, float* v_out) {
  TQ_CHECK(head_dim == format_.head_dim, "format '{}' was built for head_dim {}, layer {} has {}", format_.name,
           format_.head_dim, layer, head_dim);
  const size_t d = size_t(head_dim), H = size_t(n_kv_heads);
  if (layer >= 0 && size_t(layer) < quantized_.size() && !quantized_[size_t(layer)]) {
    for (size_t i = 0; i < size_t(n) * H * d; ++i) {
      k_out[i] = round_half(k[i]);
      v_out[i] = round_half(v[i]);
    }
    return;
  }
  std::vector<float> rows(size_t(n) * d), back(size_t(n) * d), mu(d, 0.0f);
  std::vector<uint8_t> rec;
  for (int side = 0; side < 2; ++side) {
    const Codec& codec = side == 0 ? *format_.key : *format_.value;
    const float* src = side == 0 ? k : v;
    float* dst = side == 0 ? k_out : v_out;
    rec.resize(codec.encoded_bytes(n));
    for (size_t h = 0; h < H; ++h) {
      for (int64_t t = 0; t < n; ++t)
        for (size_t j = 0; j < d; ++j) rows[size_t(t) * d + j] = src[(size_t(t) * H + h) * d + j];
      const bool center = side == 0 && center_keys_;
      if (center) {
        for (size_t j = 0; j < d; ++j) {
          double sum = 0;
          for (int64_t t = 0; t < n; ++t) sum += rows[size_t(t) * d + j];
          mu[j] = round_half(float(sum / double(n)));
        }
        for (int64_t t = 0; t < n; ++t)
          for (size_t j = 0; j < d; ++j) rows[size_t(t) * d + j] -= mu[j];
      }
      try {
        codec.encode(rows.data(), n, rec.data());
      } catch (const Error& e) {
        TQ_THROW("layer {} {} head {}: {}", layer, side == 0 ? "key" : "value", h, e.what());
      }
      codec.decode(rec.data(), n, back.data());
      if (center)
        for (int64_t t = 0; t < n; ++t)
          for (size_t j = 0; j < d; ++j) back[size_t(t) * d + j] += mu[j];
      for (int64_t t = 0; t < n; ++t)
        for (size_t j = 0; j < d; ++j) dst[(size_t(t) * H + h) * d + j] = back[size_t(t) * d + j];
    }
  }
}

std::vector<bool> quantized_layers(const std::string& spec, int n_layers) {
  std::vector<bool> q(size_t(std::max(0, n_layers)), true);
  if (spec.empty() || spec == "none") return q;
  for (int l : parse_layer_list(spec, n_layers, "--skip-layers")) q[size_t(l)] = false;
  return q;
}

}  // namespace tq
