#include "tq/formats/int_per_token.h"

#include <algorithm>
#include <cmath>

#include "bytes.h"
#include "tq/error.h"

namespace tq {

IntCodec::IntCodec(int bits, int d) : Codec(fmt::format("int{}", bits), d), bits_(bits) {
  TQ_CHECK(bits == 8 || bits == 4, "int{}: bits must be 8 or 4", bits);
  TQ_CHECK(d >= 1 && (bits == 8 || d % 2 == 0), "int{}: head_dim {} not supported (int4 needs an even head_dim)", bits, d);
}

size_t IntCodec::row_bytes() const { return size_t(bits_ == 8 ? dim() : dim() / 2) + 2; }

double IntCodec::gaussian_nmse_bound() const {
  const double step = gaussian_max_envelope(dim()) / (bits_ == 8 ? 127.0 : 7.0);
  return 1.2 * step * step / 12;
}

void IntCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const int d = dim(), qmax = bits_ == 8 ? 127 : 7;
  const size_t cb = row_bytes() - 2;
  for (int64_t r = 0; r < n; ++r) {
    const float* v = x + size_t(r) * size_t(d);
    uint8_t* rec = out + size_t(r) * row_bytes();
    float amax = 0.f;
    for (int j = 0; j < d; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float scale = amax / float(qmax), id = scale != 0.f ? 1.0f / scale : 0.0f;
    for (int j = 0; j < d; ++j) {
      const int q = std::clamp(int(std::round(v[j] * id)), -qmax, qmax);
      if (bits_ == 8) rec[j] = uint8_t(int8_t(q));
      else if (j & 1) rec[j >> 1] = uint8_t(rec[j >> 1] | ((q + 8) << 4));
      else rec[j >> 1] = uint8_t(q + 8);
    }
    detail::put_f16(rec + cb, scale);
  }
}

void IntCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  const size_t cb = row_bytes() - 2;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = in + size_t(r) * row_bytes();
    const float s = detail::get_f16(rec + cb);
    float* o = out + size_t(r) * size_t(d);
    for (int j = 0; j < d; ++j) {
      const int q = bits_ == 8 ? int(int8_t(rec[j])) : int((rec[j >> 1] >> ((j & 1) * 4)) & 15) - 8;
      o[j] = float(q) * s;
    }
  }
}

}  // namespace tq
