#include "tq/formats/plain.h"

#include "bytes.h"
#include "tq/error.h"
#include "tq/formats/layouts.h"

namespace tq {

namespace {
const char* plain_name(PlainKind k) {
  switch (k) {
    case PlainKind::f32: return "f32";
    case PlainKind::f16: return "f16";
    case PlainKind::fp8_e4m3: return "fp8";
    case PlainKind::fp8_e4b15: return "fp8e4b15";
  }
  return "?";
}
}  // namespace

PlainCodec::PlainCodec(PlainKind kind, int d) : Codec(plain_name(kind), d), kind_(kind) {
  TQ_CHECK(d >= 1, "{}: head_dim {} must be positive", name(), d);
}

size_t PlainCodec::row_bytes() const {
  const size_t d = size_t(dim());
  switch (kind_) {
    case PlainKind::f32: return 4 * d;
    case PlainKind::f16: return 2 * d;
    default: return size_t(layout::fp8_record_bytes(int(d)));  // fp8 E4M3 / E4B15
  }
}

double PlainCodec::gaussian_nmse_bound() const {
  switch (kind_) {
    case PlainKind::f32: return 1e-12;
    case PlainKind::f16: return 0x1p-22;
    case PlainKind::fp8_e4m3: return 0x1p-8;
    case PlainKind::fp8_e4b15: return 0x1p-8 + 0.0235;
  }
  return 0;
}

void PlainCodec::encode(const float* x, int64_t n, uint8_t* out) const {
  check_rows(x, n);
  const size_t total = size_t(n) * size_t(dim());
  for (size_t i = 0; i < total; ++i) {
    switch (kind_) {
      case PlainKind::f32: detail::put_f32(out + 4 * i, x[i]); break;
      case PlainKind::f16: detail::put_f16(out + 2 * i, x[i]); break;
      case PlainKind::fp8_e4m3: out[i] = float_to_fp8_e4m3(x[i]); break;
      case PlainKind::fp8_e4b15: out[i] = float_to_fp8_e4b15(x[i]); break;
    }
  }
}

void PlainCodec::decode(const uint8_t* in, int64_t n, float* out) const {
  const size_t total = size_t(n) * size_t(dim());
  for (size_t i = 0; i < total; ++i) {
    switch (kind_) {
      case PlainKind::f32: out[i] = detail::get_f32(in + 4 * i); break;
      case PlainKind::f16: out[i] = detail::get_f16(in + 2 * i); break;
      case PlainKind::fp8_e4m3: out[i] = fp8_e4m3_to_float(in[i]); break;
      case PlainKind::fp8_e4b15: out[i] = fp8_e4b15_to_float(in[i]); break;
    }
  }
}

void PlainCodec::score(const float* q, const uint8_t* in, int64_t n, float* out) const {
  const int d = dim();
  float row[kMaxHeadDim];
  std::vector<float> big;
  float* r = row;
  if (d > kMaxHeadDim) { big.resize(size_t(d)); r = big.data(); }
  for (int64_t i = 0; i < n; ++i) {
    decode(in + size_t(i) * row_bytes(), 1, r);
    float s = 0.f;
    for (int j = 0; j < d; ++j) s += q[j] * r[j];
    out[i] = s;
  }
}

}  // namespace tq
