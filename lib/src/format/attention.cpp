#include "tq/attention.h"

#include <cmath>
#include <vector>

#include "tq/error.h"

namespace tq {

void decode_attention(const KvFormat& f, const float* q, int g, const uint8_t* slots, int64_t n, float scale,
                      float* out) {
  TQ_CHECK(f.key->group_rows() == 1 && f.value->group_rows() == 1, "decode_attention: format '{}' has group codecs",
           f.name);
  TQ_CHECK(n >= 1 && g >= 1, "decode_attention: need ≥ 1 token and ≥ 1 query (got {}, {})", n, g);
  const int d = f.head_dim;
  const size_t sb = f.slot_bytes(), kb = f.key_bytes();
  std::vector<float> prepared(f.key->prepared_size()), s(static_cast<size_t>(n)), v(static_cast<size_t>(d));
  std::vector<double> acc(static_cast<size_t>(d));
  for (int i = 0; i < g; ++i) {
    f.key->prepare_query(q + size_t(i) * d, prepared.data());
    double mx = -INFINITY;
    for (int64_t t = 0; t < n; ++t) {
      f.key->score(prepared.data(), slots + size_t(t) * sb, 1, &s[size_t(t)]);
      mx = std::max(mx, double(s[size_t(t)]) * scale);
    }
    std::fill(acc.begin(), acc.end(), 0.0);
    double z = 0;
    for (int64_t t = 0; t < n; ++t) {
      const double p = std::exp(double(s[size_t(t)]) * scale - mx);
      z += p;
      f.value->decode(slots + size_t(t) * sb + kb, 1, v.data());
      for (int j = 0; j < d; ++j) acc[size_t(j)] += p * v[size_t(j)];
    }
    for (int j = 0; j < d; ++j) out[size_t(i) * d + j] = float(acc[size_t(j)] / z);
  }
}

}  // namespace tq
