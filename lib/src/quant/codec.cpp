#include "tq/codec.h"

#include <cmath>
#include <cstring>

#include "tq/error.h"
#include "tq/simd.h"

namespace tq {

void Codec::prepare_query(const float* q, float* prepared) const { std::memcpy(prepared, q, sizeof(float) * size_t(d_)); }

void Codec::score(const float* prepared, const uint8_t* in, int64_t n, float* out) const {
  std::vector<float> rows(size_t(n) * size_t(d_));
  decode(in, n, rows.data());
  for (int64_t i = 0; i < n; ++i) {
    const float* r = &rows[size_t(i) * size_t(d_)];
    float s = 0.f;
    for (int j = 0; j < d_; ++j) s += prepared[j] * r[j];
    out[i] = s;
  }
}

std::vector<uint8_t> Codec::encode(const std::vector<float>& x) const {
  TQ_CHECK(x.size() % size_t(d_) == 0, "{}: input of {} floats is not a whole number of rows of {}", name_, x.size(), d_);
  const int64_t n = int64_t(x.size() / size_t(d_));
  std::vector<uint8_t> out(encoded_bytes(n));
  encode(x.data(), n, out.data());
  return out;
}

std::vector<float> Codec::decode(const std::vector<uint8_t>& r, int64_t n) const {
  TQ_CHECK(r.size() == encoded_bytes(n), "{}: {} bytes do not hold {} rows ({} bytes expected)", name_, r.size(), n,
           encoded_bytes(n));
  std::vector<float> out(size_t(n) * size_t(d_));
  decode(r.data(), n, out.data());
  return out;
}

double Codec::gaussian_max_envelope(int m) { return std::sqrt(2.0 * std::log(2.0 * m)) + 0.5; }

void Codec::check_rows(const float* x, int64_t n) const {
  const size_t total = size_t(n) * size_t(d_);
  if (all_within(x, total, kFp16Max)) return;  // the loop below only names the culprit
  for (size_t i = 0; i < total; ++i) {
    const float v = x[i];
    if (!(std::fabs(v) <= kFp16Max))
      TQ_THROW("{}: input row {} column {} is {} ({})", name_, int64_t(i / size_t(d_)), int(i % size_t(d_)), v,
               std::isfinite(v) ? "beyond the fp16 range ±65504" : "not finite");
  }
}

}  // namespace tq
